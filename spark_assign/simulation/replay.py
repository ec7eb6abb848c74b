"""The replay behind ``simulate()`` and ``what_if()``: events through rebalances, step by step.

Step *k* is the k-th distinct event time of every group (:mod:`.events`). Each step is
one distributed computation over every group with an event at that step, in phases:

1. :func:`_update_metadata`: topics grow, lags change;
2. :func:`_carry_ownership`: owners no longer in the group depart (a static member's
   replacement inherits), and under delayed resolution returning members take their
   partitions back while expired deadlines release them;
3. :func:`_rebalance_flags`: which groups rebalance (their events call for it, or
   departures and released partitions do);
4. :func:`_rebalance_step`: one :func:`~spark_assign.rebalance.rebalance` over those
   groups (topics scoped by group, so that every group has its own metadata), whose
   rounds become the step's generations.

The driver loops over steps, never over groups; :class:`ReplayState` is what one step
hands to the next, each part materialized so that its plan stays small. When no step
depends on the one before (stateless assignors, every step a rebalance by its events),
the same phases run once over all steps instead (:mod:`.batched`).

>>> result, rows = replay(events, partitions, strategy=None, protocol_rule="static",
...                       session_timeout_ms=45_000, scheduled_rebalance_max_delay_ms=0,
...                       lags=None, keep_rows=False, max_rounds=5, validate=True)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from ..assign import group_protocol_of, strategy_name
from ..frames import GROUP as _G
from ..frames import empty, one_row, per_group, union_all
from ..inputs import OWNED_TYPE, normalize_partitions
from ..lineage import decide_small_call, in_small_call, materialize_state, small_call_scope
from ..options import strategy_options
from ..rebalance import rebalance
from .analytics import SIMULATION_SCHEMA
from .events import (
    check_rosters_agree,
    departure_kinds,
    latest_events,
    member_timeline,
    normalize_events,
    ordered,
    rosters,
    steps_of,
    synthetic_events,
    validate_events,
    with_config,
)

log = logging.getLogger(__name__)
#: separates the group from the topic in group-scoped topic names
SCOPE = "\u001f"
#: the per-group settings columns a replay carries (``what_if`` sets them per variant)
CONFIG_COLUMNS = ("_strategy", "_rule", "_timeout", "_delay", "_gp", "_hb")


def scope(col: Column | str = "topic") -> Column:
    """``group_id`` + :data:`SCOPE` + the topic: one group's own copy of a topic."""
    c = F.col(col) if isinstance(col, str) else col
    return F.concat(F.col(_G), F.lit(SCOPE), c)


def scoped_partitions(meta: DataFrame) -> DataFrame:
    """Every partition of ``meta`` (``group_id, topic, partitions``) as ``topic, partition``,
    the topic group-scoped (:func:`scope`): the metadata of a rebalance over those groups."""
    return meta.select(
        _G, "topic", F.explode(F.sequence(F.lit(0), F.col("partitions") - 1)).alias("partition")
    ).where(F.col("partition") >= 0).select(scope("topic").alias("topic"), F.col("partition").cast("int"))


def unscope(col: Column | str = "topic") -> Column:
    """The topic of a group-scoped topic name."""
    c = F.col(col) if isinstance(col, str) else col
    return F.substring_index(c, SCOPE, -1)


@dataclass
class SimulationResult:
    """What :func:`~spark_assign.simulate` returns (DataFrames):

    * ``generations``: per group per recorded generation (one per rebalance
      round): ``group_id, generation, round, step, at, event_kinds, strategy,
      protocol, members, assigned, unassigned, moved, revoked, lost``;
    * ``steps``: per group per step: ``group_id, step, at, kinds, rebalanced,
      partitions, unassigned, idle`` (after the step; ``idle``: owned by members
      that crashed or left statically and have not expired yet);
    * ``assignment``: each group's final assignment;
    * ``revocations``: every revoked / lost partition with its generation;
    * ``lags``: each partition's lag at the end (``group_id, topic, partition,
      lag``: the initial lags with every ``lag_change`` applied), or ``None``
      when the simulation had no lags.
    """

    generations: DataFrame
    steps: DataFrame
    assignment: DataFrame
    revocations: DataFrame
    lags: DataFrame | None = None


def protocol_of(strategy: str | None, group_protocol: str | None) -> str:
    """The group protocol a replay runs (checked against ``strategy`` when one is forced;
    without one, a consumer group runs the broker's default, ``uniform``)."""
    if strategy is None:
        return group_protocol_of("uniform" if group_protocol == "consumer" else "range", group_protocol)
    return group_protocol_of(strategy, group_protocol)


def all_options(strategy: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` checked against the strategies a replay can run (every client
    strategy when groups select theirs), parsed; InvalidOptionError otherwise."""
    parsed: dict[str, Any] = {}
    for per in strategy_options(strategy, options).values():
        parsed.update(per)
    return parsed


@dataclass
class ReplayState:
    """What one step hands to the next, each part materialized:

    * ``meta``: ``group_id, topic, partitions`` (each group's topics and their sizes);
    * ``lags``: ``group_id, topic, partition, lag``, or None without lags;
    * ``owned``: ``group_id, member_id, group_instance_id, topic, partition``;
    * ``held``: partitions of departed members held out until ``deadline`` (delayed resolution);
    * ``groups``: ``group_id, generation, protocol`` of each group's last rebalance.
    """

    meta: DataFrame
    lags: DataFrame | None
    owned: DataFrame
    held: DataFrame
    groups: DataFrame


@dataclass
class Step:
    """Step ``k``: its per-step flags (any group growing a topic, changing lags, called to
    rebalance by its events, every group called to; None without such groups), the
    groups with an event at it (``groups``: one row per group, with its time and
    settings), their events and rosters."""

    k: int
    flags: Row | None
    groups: DataFrame
    events: DataFrame
    roster: DataFrame


@dataclass
class ReplayOutputs:
    """Per step, what the replay returns: generations, step stats, revocations and (to
    record) the rounds' assignment rows."""

    generations: list[DataFrame] = field(default_factory=list)
    steps: list[DataFrame] = field(default_factory=list)
    revocations: list[DataFrame] = field(default_factory=list)
    rows: list[DataFrame] = field(default_factory=list)
    #: per list, how many of its last frames are lazy plans (a small replay's, :func:`_add_step_output`)
    lazy: dict[str, int] = field(default_factory=dict)


@small_call_scope
def replay(events: DataFrame, partitions: DataFrame, *, strategy, protocol_rule, session_timeout_ms,
           scheduled_rebalance_max_delay_ms, lags, keep_rows: bool, max_rounds: int, validate: bool,
           group_protocol: str = "classic", heartbeat_interval_ms: int = 5_000, batch: bool = True,
           **options: Any) -> tuple[SimulationResult, DataFrame | None]:
    """:func:`~spark_assign.simulate` without the recording: the result, and (``keep_rows``)
    every recorded generation's assignment rows with their lags (None when nothing rebalanced).
    ``batch=False``: the step loop even where all steps could run at once (:mod:`.batched`)."""
    from .batched import batchable, replay_batched, stateless_column  # it runs this module's phases

    options = all_options(strategy, options)  # an unknown option fails before the replay starts
    spark = events.sparkSession
    e = normalize_events(events)
    extra_cfg = [c for c in CONFIG_COLUMNS if c in events.columns]
    if extra_cfg:
        e = e.join(events.select(_G, *extra_cfg).distinct(), _G, "left")
    forced = strategy_name(strategy) if strategy is not None else None  # Kafka's class names as short ones
    e = with_config(e, strategy=forced, protocol_rule=protocol_rule, session_timeout_ms=session_timeout_ms,
                    delay_ms=scheduled_rebalance_max_delay_ms, group_protocol=group_protocol,
                    heartbeat_ms=heartbeat_interval_ms)
    p0 = normalize_partitions(partitions)
    # ordered and stored first: the validation's checks read the events a dozen times
    e = materialize_state(ordered(e))
    if validate:
        validate_events(e, p0)
    timeline = materialize_state(member_timeline(e))
    cfg = e.select(_G, *CONFIG_COLUMNS).distinct()
    steps = materialize_state(steps_of(e, synthetic_events(e, timeline)).join(cfg, _G))
    # each member's latest event before each step: read by the rosters and the departures
    latest = materialize_state(latest_events(timeline, steps))
    roster_rows = rosters(latest).join(cfg, _G).withColumn(
        "assignors", F.when(F.col("_strategy").isNotNull(), F.array(F.col("_strategy"))).otherwise(F.col("assignors")))
    roster_rows = materialize_state(roster_rows)
    dep_kinds = departure_kinds(latest)  # a projection of stored rows
    # per step, over all groups: whether some group grows a topic, changes lags, is
    # called to rebalance by its events, or delays the resolution of departures (one row
    # per step, bounded by the events per group)
    has = lambda kind: F.array_contains(F.split("kinds", ","), kind)  # noqa: E731
    per_step = {r.step: r for r in steps.groupBy("step").agg(
        F.bool_or(has("partitions_added")).alias("grow"), F.bool_or(has("lag_change")).alias("lag"),
        F.bool_or("triggers").alias("triggers"), F.bool_and(F.coalesce("triggers", F.lit(False))).alias("all_trigger"),
        F.bool_or(F.col("_delay") > 0).alias("delay"), F.bool_and(stateless_column()).alias("stateless"),
        F.collect_set("_strategy").alias("strategies"), F.bool_and(F.col("_strategy").isNotNull()).alias("forced"),
        F.count("*").alias("groups")).collect()}
    if validate and not all(r.forced for r in per_step.values()):  # a forced assignor is every member's only one
        check_rosters_agree(roster_rows.where(F.col("_strategy").isNull()), steps)
    # without delayed resolution anywhere nothing is ever held: the held state stays empty
    any_delay = any(r.delay for r in per_step.values())
    # range and roundrobin, every step called for by its events: all steps at once
    at_once = batch and batchable(per_step)
    # the frames above span every step (the rosters grow with steps x members): stored
    # by the session's policy. A step's state is bounded by its groups' partitions: a
    # small replay keeps it, and its rebalances' intermediates, as local relations
    pairs = sum(r.groups for r in per_step.values()) if at_once else None
    if decide_small_call(spark, lambda: _bound_rows(e, p0, pairs)):
        log.info("simulate: a small replay, its state kept as local relations")
    state = _initial_state(e, p0, lags)
    out = ReplayOutputs()
    if at_once:
        log.info("simulate: all %d steps at once (a stateless assignor, every step a rebalance)", max(per_step))
        strategies = sorted({name for r in per_step.values() for name in r.strategies})
        final, out = replay_batched(state, steps, roster_rows, dep_kinds, strategies=strategies,
                                    protocol_rule=protocol_rule,
                                    max_rounds=max_rounds, keep_rows=keep_rows, options=options)
        state.owned = final
        per_step = {}  # nothing left for the step loop
    for k in range(1, max(per_step, default=0) + 1):
        log.info("simulate: step %d of %d", k, max(per_step))
        sk = steps.where(F.col("step") == k)
        step = Step(k, per_step.get(k), sk, e.join(per_group(sk.select(_G, "at")), [_G, "at"], "left_semi"),
                    roster_rows.where(F.col("step") == k))
        _update_metadata(state, step)
        owned_now, departed, released = _carry_ownership(state, step, dep_kinds, any_delay)
        flags = _rebalance_flags(step, departed, released)
        rb_groups = per_group(flags.where("rebalanced").select(_G))
        new_owned = owned_now.join(rb_groups, _G, "left_anti")
        # a step whose events call for a rebalance has groups to rebalance; otherwise only
        # departures or released partitions may call for one (that action stores the flags)
        if (step.flags is not None and step.flags.triggers) or one_row(flags.agg(F.bool_or("rebalanced")))[0]:
            new_owned = new_owned.unionByName(_rebalance_step(
                state, step, flags, rb_groups, owned_now, departed, out, protocol_rule=protocol_rule,
                max_rounds=max_rounds, keep_rows=keep_rows, options=options))
        state.owned = materialize_state(state.owned.join(per_group(sk.select(_G)), _G, "left_anti").unionByName(new_owned))
        _add_step_output(out, "steps", _step_stats(flags, step.roster, state.meta, state.owned))

    _store_lazy_outputs(out, "generations")
    _store_lazy_outputs(out, "steps")
    gens = union_all(out.generations) if out.generations else empty(spark, SIMULATION_SCHEMA)
    revs = union_all(out.revocations) if out.revocations else empty(
        spark, "group_id string, generation int, round int, member_id string, topic string, partition int, kind string")
    st = union_all(out.steps) if out.steps else empty(
        spark, "group_id string, step int, at long, kinds string, rebalanced boolean, partitions long, unassigned long, idle long")
    result = SimulationResult(generations=gens, steps=st, assignment=state.owned.drop("group_instance_id"),
                              revocations=revs, lags=state.lags)
    return result, (union_all(out.rows) if out.rows else None)


#: a small replay stores its per-step outputs this many steps at a time (one action each time)
STEPS_PER_STORE = 10


def _add_step_output(out: ReplayOutputs, name: str, df: DataFrame) -> None:
    """Append a step's row per group (its generations, its stats) to ``out.<name>``: stored
    now, or in a small replay left a lazy plan over the step's stored state, stored
    :data:`STEPS_PER_STORE` steps at a time by one action (each stored step was a Spark
    job; a step's plan reads only stored frames, so it never grows with the steps, and
    the lazy ones keep at most that many steps' state alive)."""
    frames = getattr(out, name)
    if not in_small_call():
        frames.append(materialize_state(df))
        return
    frames.append(df)
    out.lazy[name] = out.lazy.get(name, 0) + 1
    if out.lazy[name] >= STEPS_PER_STORE:
        _store_lazy_outputs(out, name)


def _store_lazy_outputs(out: ReplayOutputs, name: str) -> None:
    """``out.<name>``'s lazy frames (:func:`_add_step_output`) stored as one."""
    frames, n = getattr(out, name), out.lazy.get(name, 0)
    if n:
        frames[-n:] = [materialize_state(union_all(frames[-n:]))]
        out.lazy[name] = 0


def _bound_rows(e: DataFrame, p0: DataFrame, pairs: int | None = None) -> int:
    """The events plus the groups times the partitions: a step's state (each group owns
    at most every partition of its topics, grown topics apart) and its rosters (each
    member joined by an event) are no larger. With ``pairs`` (the groups' steps, all run
    at once) those times the partitions instead. One action."""
    n = one_row(e.agg(F.count("*").alias("events"), F.count_distinct(_G).alias("groups")).crossJoin(
        p0.agg(F.count("*").alias("partitions"))))
    return int(n["events"]) + (int(n["groups"]) if pairs is None else pairs) * int(n["partitions"])


def _initial_state(e: DataFrame, p0: DataFrame, lags: DataFrame | None) -> ReplayState:
    """Each group's topics (the ones its members subscribe to or its events name) with
    their initial sizes and lags; nobody owns anything yet."""
    spark = e.sparkSession
    group_topics = (
        e.select(_G, F.explode(F.coalesce("topics", F.array().cast("array<string>"))).alias("topic"))
        .unionByName(e.where(F.col("topic").isNotNull()).select(_G, "topic")).distinct()
    )
    sizes = p0.groupBy("topic").agg(F.count("*").cast("int").alias("partitions"))
    meta = materialize_state(group_topics.join(sizes, "topic").select(_G, "topic", "partitions"))
    lag_state = None
    if lags is not None:
        lg = lags.select(*([_G] if _G in lags.columns else []), "topic", F.col("partition").cast("int"),
                         F.col("lag").cast("long"))
        lag_state = materialize_state(
            lg if _G in lg.columns else group_topics.join(lg, "topic").select(_G, "topic", "partition", "lag"))
    return ReplayState(
        meta=meta, lags=lag_state,
        owned=empty(spark, "group_id string, member_id string, group_instance_id string, topic string, partition int"),
        held=empty(spark, "group_id string, member_id string, group_instance_id string, topic string, partition int, "
                   "deadline long"),
        groups=empty(spark, "group_id string, generation int, protocol string"),
    )


def _update_metadata(state: ReplayState, step: Step) -> None:
    """Phase 1: topics grow (``partitions_added``) and lags change (``lag_change``)."""
    if step.flags is not None and step.flags.grow:
        grown = step.events.where(F.col("kind") == "partitions_added").groupBy(_G, "topic").agg(
            F.max("partitions").alias("_new"))
        state.meta = materialize_state(
            state.meta.join(grown, [_G, "topic"], "full_outer")
            .select(_G, "topic", F.greatest(F.coalesce("partitions", F.lit(0)), F.coalesce("_new", F.lit(0)))
                    .cast("int").alias("partitions")))
    if step.flags is not None and step.flags.lag:
        expanded = _lag_rows(step.events.where(F.col("kind") == "lag_change"), state.meta)
        base = state.lags if state.lags is not None else expanded.limit(0)
        state.lags = materialize_state(
            base.join(expanded.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
            .unionByName(expanded))


def _carry_ownership(state: ReplayState, step: Step, dep_kinds: DataFrame,
                     any_delay: bool) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Phase 2: owners no longer in the group depart (a static member's replacement
    inherits); under delayed resolution, returning members take their partitions back,
    the departed ones are held until their deadline, and expired deadlines release them.
    Returns ``(owned now, departed, released)``, lazy plans over the stored state (the
    departed partitions stored by their first reader)."""
    sk, roster = step.groups, step.roster
    ok = state.owned.join(per_group(sk.select(_G)), _G, "left_semi")
    in_roster = roster.select(_G, "member_id")
    stay = ok.join(in_roster, [_G, "member_id"], "left_semi")
    gone = ok.join(in_roster, [_G, "member_id"], "left_anti")
    heirs = roster.where(F.col("group_instance_id").isNotNull()).select(
        _G, F.col("member_id").alias("_heir"), F.col("group_instance_id").alias("_hiid"))
    inherited = gone.join(heirs, [_G]).where(F.col("group_instance_id") == F.col("_hiid")).select(
        _G, F.col("_heir").alias("member_id"), F.col("_hiid").alias("group_instance_id"), "topic", "partition")
    departed = gone.join(inherited.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
    departed = departed.join(dep_kinds.where(F.col("step") == step.k).drop("step"), [_G, "member_id"], "left")
    # read by the held state, the flags and the rebalance: stored by the first of them
    departed = materialize_state(departed, eager=False)
    # delayed resolution: returns take their partitions back, deadlines release them
    at_delay = per_group(sk.select(_G, "at", "_delay"))
    hk = state.held.join(at_delay, _G)
    back = hk.join(roster.select(_G, F.col("member_id").alias("_rm"), F.col("group_instance_id").alias("_riid")),
                   [_G]).where((F.col("_rm") == F.col("member_id")) | (F.col("_riid") == F.col("group_instance_id")))
    back = back.select(_G, F.col("_rm").alias("member_id"), F.col("_riid").alias("group_instance_id"),
                       "topic", "partition").dropDuplicates([_G, "topic", "partition"])
    hk_rest = hk.join(back.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
    released = hk_rest.where(F.col("deadline") <= F.col("at"))
    if any_delay:
        new_held = (
            hk_rest.where(F.col("deadline") > F.col("at")).select(state.held.columns)
            .unionByName(departed.join(at_delay, _G).where(F.col("_delay") > 0).select(
                _G, "member_id", "group_instance_id", "topic", "partition",
                (F.col("at") + F.col("_delay")).alias("deadline")))
        )
        state.held = materialize_state(state.held.join(per_group(sk.select(_G)), _G, "left_anti").unionByName(new_held))
    # a lazy plan over stored state, read by the rebalance's members and by the stored owned state
    return stay.unionByName(inherited).unionByName(back), departed, released


def _rebalance_flags(step: Step, departed: DataFrame, released: DataFrame) -> DataFrame:
    """Phase 3: per group of the step, whether it rebalances: its events call for it, or
    partitions were released or departed (stored by the first action that reads it). When
    the events of every group of the step call for one, the step's groups (a plan over
    stored rows, nothing to look up)."""
    columns = (_G, "at", "step", "kinds", "rebalanced", "_rule", "_gp", "_hb", "_strategy")
    if step.flags is not None and step.flags.all_trigger:  # nothing to look up
        return step.groups.withColumn("rebalanced", F.lit(True)).select(*columns)
    rel = released.select(_G).distinct().withColumn("_rel", F.lit(True))
    dep = departed.select(_G).distinct().withColumn("_dep", F.lit(True))
    flags = step.groups.join(per_group(rel), _G, "left").join(per_group(dep), _G, "left").withColumn(
        "rebalanced", F.col("triggers") | F.col("_rel").isNotNull() | F.col("_dep").isNotNull())
    return materialize_state(flags.select(*columns), eager=False)


def _rebalance_step(state: ReplayState, step: Step, flags: DataFrame, rb_groups: DataFrame, owned_now: DataFrame,
                    departed: DataFrame, out: ReplayOutputs, *, protocol_rule: str, max_rounds: int,
                    keep_rows: bool, options: dict[str, Any], strategy: str | None = None) -> DataFrame:
    """Phase 4: one rebalance over the step's rebalancing groups, topics scoped by group.
    Appends the rounds to ``out``, updates ``state.groups``; returns the groups' new
    owned rows (``group_id, member_id, group_instance_id, topic, partition``).
    ``strategy``: the one assignor every group runs, when the caller knows it."""
    members = _members_for(step.roster.join(rb_groups, _G, "left_semi"), owned_now, state.groups, flags)
    scoped_meta = state.meta.join(rb_groups, _G, "left_semi")
    scoped_parts = scoped_partitions(scoped_meta)
    unavailable = state.held.join(rb_groups, _G, "left_semi").select(scope("topic").alias("topic"), "partition")
    scoped_lags = (state.lags.join(rb_groups, _G, "left_semi").select(_G, scope("topic").alias("topic"),
                                                                      "partition", "lag")
                   if state.lags is not None else None)
    dep_rows = departed.join(rb_groups, _G, "left_semi").select(
        _G, "member_id", scope("topic").alias("topic"), "partition", "kind")
    r = rebalance(members, scoped_parts, lags=scoped_lags, protocol_rule=protocol_rule, max_rounds=max_rounds,
                  unavailable=unavailable, departed=dep_rows, validate=False, strategy=strategy, **options)
    last = r.summary.groupBy(_G).agg(F.max_by(F.struct("generation", "protocol"), "round").alias("_l"))
    state.groups = materialize_state(state.groups.join(per_group(last.select(_G)), _G, "left_anti").unionByName(
        last.select(_G, F.col("_l.generation").alias("generation"), F.col("_l.protocol").alias("protocol"))))
    # a consumer group's hand-over comes one heartbeat after its group epoch
    at = F.col("at") + F.when(F.col("_gp") == "consumer", (F.col("round") - 1) * F.col("_hb")).otherwise(0)
    _add_step_output(out, "generations", r.summary.join(
        per_group(flags.select(_G, "at", "step", "kinds", "_gp", "_hb")), _G).select(
        _G, "generation", "round", "step", F.timestamp_millis(at).alias("at"),
        F.col("kinds").alias("event_kinds"), F.col("assignor").alias("strategy"), "protocol", "members",
        "assigned", (F.col("pending") + F.col("unavailable")).alias("unassigned"), "moved", "revoked", "lost"))
    # a step's revocations and rows grow with its partitions: stored by the session's policy
    # even in a small replay, so that the driver never holds every step's (the generations
    # and step stats above are a row per group and round)
    out.revocations.append(materialize_state(r.revocations.withColumn("topic", unscope("topic")), accumulates=True))
    if keep_rows:  # the rounds' rows with the lags of the step, recorded at the end
        rows = r.assignments.select(_G, "generation", "member_id", "topic", "partition")
        if scoped_lags is not None:
            rows = rows.join(scoped_lags, [_G, "topic", "partition"], "left")
        else:
            rows = rows.withColumn("lag", F.lit(None).cast("long"))
        out.rows.append(materialize_state(rows.withColumn("topic", unscope("topic")), accumulates=True))
    return r.final.join(step.roster.select(_G, "member_id", "group_instance_id"), [_G, "member_id"]).select(
        _G, "member_id", "group_instance_id", unscope("topic").alias("topic"), "partition")


def _lag_rows(lag_ev: DataFrame, meta: DataFrame) -> DataFrame:
    """lag_change events as ``group_id, topic, partition, lag`` (a null partition: all)."""
    j = lag_ev.select(_G, "topic", "partition", "lag").join(meta, [_G, "topic"], "left")
    return j.select(
        _G, "topic",
        F.explode(F.when(F.col("partition").isNotNull(), F.array(F.col("partition")))
                  .otherwise(F.sequence(F.lit(0), F.greatest(F.col("partitions") - 1, F.lit(0))))).alias("partition"),
        "lag",
    ).select(_G, "topic", F.col("partition").cast("int"), F.col("lag").cast("long")).dropDuplicates([_G, "topic", "partition"])


def _members_for(roster: DataFrame, owned: DataFrame, group_state: DataFrame, flags: DataFrame) -> DataFrame:
    """The members of a rebalance, in the input contract, with group-scoped topics."""
    o = owned.groupBy(_G, "member_id").agg(F.array_sort(F.collect_list(
        F.struct(scope("topic").alias("topic"), F.col("partition").cast("int").alias("partition")))).alias("_o"))
    return (
        roster.join(o, [_G, "member_id"], "left").join(per_group(group_state), _G, "left")
        .join(per_group(flags.select(_G, F.col("_rule").alias("protocol_rule"), F.col("_gp").alias("group_protocol"),
                           F.when(F.col("_gp") == "consumer", F.col("_strategy")).alias("remote_assignor"))), _G)
        .select(
            _G, "member_id", "group_instance_id", "rack",
            F.transform(F.coalesce("topics", F.array().cast("array<string>")),
                        lambda t: F.concat(F.col(_G), F.lit(SCOPE), t)).alias("topics"),
            F.coalesce("_o", F.array().cast(OWNED_TYPE)).cast(OWNED_TYPE).alias("owned"),
            # the group's last generation, whoever owns what: the rebalance numbers its
            # rounds on from it (a group that emptied, or whose members own nothing, too)
            F.col("generation").cast("int").alias("generation"),
            "assignors",
            F.when(F.col("_o").isNotNull(), F.col("protocol")).alias("protocol"),
            "protocol_rule", "group_protocol", "remote_assignor",
        )
    )


def _step_stats(flags: DataFrame, roster: DataFrame, meta: DataFrame, owned: DataFrame) -> DataFrame:
    """Per group of the step: its partitions, the unassigned ones and the idle ones
    (owned by members away: crashed, or left statically, not yet expired)."""
    subs = roster.select(_G, F.explode("topics").alias("topic")).distinct().join(meta, [_G, "topic"])
    total = subs.groupBy(_G).agg(F.sum("partitions").alias("_total"))
    o = owned.join(per_group(flags.select(_G)), _G, "left_semi").join(subs.select(_G, "topic"), [_G, "topic"], "left_semi")
    away = roster.where(F.col("status") == "away").select(_G, "member_id")
    cnt = o.groupBy(_G).agg(F.count("*").alias("_owned"))
    idle = o.join(away, [_G, "member_id"], "left_semi").groupBy(_G).agg(F.count("*").alias("_idle"))
    return flags.join(total, _G, "left").join(cnt, _G, "left").join(idle, _G, "left").select(
        _G, "step", "at", "kinds", "rebalanced",
        F.coalesce("_total", F.lit(0)).cast("long").alias("partitions"),
        (F.coalesce("_total", F.lit(0)) - F.coalesce("_owned", F.lit(0))).cast("long").alias("unassigned"),
        F.coalesce("_idle", F.lit(0)).cast("long").alias("idle"),
    )
