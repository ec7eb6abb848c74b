"""The replay behind ``simulate()`` and ``what_if()``: events through rebalances, step by step.

Step *k* is the k-th distinct event time of every group (:mod:`.events`). Each step is
one distributed computation over every group with an event at that step, in the phases
of :mod:`.phases`: metadata changes, ownership carried over (departures, delayed
resolution), which groups rebalance, and one :func:`~spark_assign.rebalance.rebalance`
over those groups, whose rounds become the step's generations.

The driver loops over steps, never over groups; :class:`~.phases.ReplayState` is what one step
hands to the next, each part materialized so that its plan stays small. When no step
depends on the one before (stateless assignors, every step a rebalance by its events),
the same phases run once over all steps instead (:mod:`.batched`).

>>> result, rows = replay(events, partitions, strategy=None, protocol_rule="static",
...                       timing=Timing(), scheduled_rebalance_max_delay_ms=0,
...                       lags=None, keep_rows=False, max_rounds=5, validate=True, options={})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..execution import (
    decide_small_call,
    entry_point,
    has_rows,
    in_small_call,
    materialize_state,
    one_partition,
    per_group,
    relation_of,
    rows_within,
    small_call_rows,
    union_all,
)
from ..frames import GROUP as _G
from ..frames import empty, one_row
from ..inputs import normalize_partitions
from ..strategies.registry import group_protocol_of, strategy_name, strategy_options
from .analytics import SIMULATION_SCHEMA
from .batched import batchable, replay_batched, stateless_column
from .events import (
    away_episodes,
    check_rosters_agree,
    departure_kinds,
    latest_events,
    member_timeline,
    normalize_events,
    ordered,
    quiet_rejoins,
    rosters,
    steps_of,
    synthetic_events,
    validate_events,
    with_config,
)
from .migration import protocol_at, with_conversions
from .phases import (
    ReplayOutputs,
    ReplayState,
    Step,
    _add_step_output,
    _carry_ownership,
    _rebalance_flags,
    _rebalance_step,
    _step_stats,
    _store_lazy_outputs,
    _update_metadata,
)
from .timing import TIMING_COLUMNS, Timing
from .windows import held_until, in_phase, join_phases, live_intervals, metadata_events, phase_events, target_phases

log = logging.getLogger(__name__)
#: the per-group settings columns a replay carries (``what_if`` sets them per variant)
CONFIG_COLUMNS = ("_strategy", "_rule", "_delay", "_gp", *TIMING_COLUMNS)


@dataclass
class SimulationResult:
    """What :func:`~spark_assign.simulate` returns (DataFrames):

    * ``generations``: per group per recorded generation (one per rebalance
      round): ``group_id, generation, round, step, at, event_kinds, strategy,
      protocol, members, assigned, unassigned, moved, revoked, lost``;
    * ``steps``: per group per step: ``group_id, step, at, kinds, rebalanced,
      partitions, unassigned, idle`` (after the step; ``idle``: owned by members
      that crashed or left statically and have not expired yet), ``held_before`` (a
      consumer group's target step: the partitions its members held before the target, all
      that is consumed until their next heartbeat; else null);
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


def all_options(strategy: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against the strategies a replay can run (every client
    strategy when groups select theirs), parsed; InvalidOptionError otherwise."""
    parsed: dict[str, Any] = {}
    for per in strategy_options(strategy, options).values():
        parsed.update(per)
    return parsed


@entry_point
def replay(events: DataFrame, partitions: DataFrame, *, strategy, protocol_rule, timing: Timing,
           scheduled_rebalance_max_delay_ms, lags, keep_rows: bool, max_rounds: int, validate: bool,
           group_protocol: str = "classic", batch: bool = True,
           options: Mapping[str, Any]) -> tuple[SimulationResult, DataFrame | None]:
    """:func:`~spark_assign.simulate` without the recording: the result, and (``keep_rows``)
    every recorded generation's assignment rows with their lags (None when nothing rebalanced).
    ``batch=False``: the step loop even where all steps could run at once (:mod:`.batched`)."""
    options = all_options(strategy, options)  # an unknown option fails before the replay starts
    spark = events.sparkSession
    e = normalize_events(events)
    extra_cfg = [c for c in CONFIG_COLUMNS if c in events.columns]
    if extra_cfg:
        e = e.join(events.select(_G, *extra_cfg).distinct(), _G, "left")
    forced = strategy_name(strategy) if strategy is not None else None  # Kafka's class names as short ones
    e = with_config(e, strategy=forced, protocol_rule=protocol_rule, timing=timing,
                    delay_ms=scheduled_rebalance_max_delay_ms, group_protocol=group_protocol)
    p0 = normalize_partitions(partitions)
    # ordered and stored first: the validation's checks read the events a dozen times
    e = materialize_state(ordered(with_conversions(e)))
    if validate:
        validate_events(e, p0)
    # the groups' settings at the start, and when a classic one converts to a consumer group
    cfg = e.select(_G, *CONFIG_COLUMNS, "_start_gp", "_converted").distinct()
    e = protocol_at(e)  # each event under its group's protocol at its time (a projection)
    timeline = materialize_state(member_timeline(e))
    # a classic group's rebalances take time: their join phases, found from the events
    # (:mod:`.windows`), give the steps at which they rebalance
    away = away_episodes(timeline)
    timed = materialize_state(synthetic_events(e, timeline, away), eager=False)
    synthetic = timed.select(_G, "at", "kind", "member_id").unionByName(metadata_events(e))
    quiet = materialize_state(quiet_rejoins(timeline), eager=False)  # read by both passes and the rosters
    opening = materialize_state(steps_of(e, synthetic, quiet, cfg, phased=False))
    # stored: both the steps' events and their phases read it (and over Spark Connect the plan
    # of the steps would nest it twice, past the protocol's depth)
    phases = materialize_state(join_phases(opening, away, live_intervals(timeline)).unionByName(target_phases(opening)))
    steps = materialize_state(held_until(in_phase(
        steps_of(e, synthetic.unionByName(phase_events(phases, cfg)), quiet, cfg, phased=True), phases), timed))
    # each member's latest event before each step: read by the rosters and the departures
    latest = materialize_state(latest_events(timeline, steps))
    # each step's members with their group's settings at the step (the steps carry them: one join)
    roster_rows = rosters(latest).join(steps.select(_G, "step", *CONFIG_COLUMNS), [_G, "step"]).withColumn(
        "assignors", F.when(F.col("_strategy").isNotNull(), F.array(F.col("_strategy"))).otherwise(F.col("assignors")))
    # a static member's restart that calls for no rebalance keeps what it owned (:func:`quiet_rejoins`)
    roster_rows = materialize_state(roster_rows.join(
        quiet.select(_G, "member_id", F.col("at").alias("last_at"), F.col("_quiet").alias("last_quiet")),
        [_G, "member_id", "last_at"], "left"))
    dep_kinds = departure_kinds(latest)  # a projection of stored rows
    # per step, over all groups: whether some group grows a topic, changes lags, is
    # called to rebalance by its events, or delays the resolution of departures (one row
    # per step, bounded by the events per group)
    has = lambda kind: F.array_contains(F.split("kinds", ","), kind)  # noqa: E731
    # and whether a consumer group has a member away (KIP-848: it keeps what it holds)
    away_steps = roster_rows.where("status = 'away' AND _gp = 'consumer'").select(_G, "step").distinct().withColumn(
        "_away", F.lit(True))
    per_step = {r.step: r for r in steps.join(away_steps, [_G, "step"], "left").groupBy("step").agg(
        F.bool_or(F.coalesce("_away", F.lit(False))).alias("away"), F.bool_or(has("config_change")).alias("restart"),
        F.bool_or(has("partitions_added")).alias("grow"), F.bool_or(has("lag_change")).alias("lag"),
        F.bool_or(has("metadata")).alias("refresh"),
        F.bool_or("triggers").alias("triggers"), F.bool_and(F.coalesce("triggers", F.lit(False))).alias("all_trigger"),
        F.bool_or(F.col("_delay") > 0).alias("delay"), F.bool_or(F.col("_hold_until").isNotNull()).alias("holding"),
        F.bool_or("_merge").alias("merge"), F.bool_or(F.col("_gp") == "consumer").alias("consumer"),
        F.bool_and(stateless_column()).alias("stateless"),
        F.collect_set("_strategy").alias("strategies"), F.bool_and(F.col("_strategy").isNotNull()).alias("forced"),
        F.count("*").alias("groups")).collect()}
    if validate and not all(r.forced for r in per_step.values()):  # a forced assignor is every member's only one
        check_rosters_agree(roster_rows.where(F.col("_strategy").isNull() & (F.col("_gp") == "classic")), steps)
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
    # a small replay reads the frames above once, and gives each step local relations of its rows
    by_step = _StepRows({"groups": steps, "events": e.join(steps.select(_G, "at", "step"), [_G, "at"]),
                         "roster": roster_rows, "departures": dep_kinds}) if per_step and in_small_call() else None
    for k in range(1, max(per_step, default=0) + 1):
        log.info("simulate: step %d of %d", k, max(per_step))
        if by_step is None:
            sk = steps.where(F.col("step") == k)
            step = Step(k, per_step.get(k), sk, e.join(per_group(sk.select(_G, "at")), [_G, "at"], "left_semi"),
                        roster_rows.where(F.col("step") == k))
            departures = dep_kinds
        else:
            sk = by_step.at("groups", k)
            step = Step(k, per_step.get(k), sk, by_step.at("events", k), by_step.at("roster", k))
            departures = by_step.at("departures", k)
        _update_metadata(state, step)
        owned_now, departed, released = _carry_ownership(state, step, departures, any_delay)
        flags = _rebalance_flags(step, released)
        rb_groups = per_group(flags.where("rebalanced").select(_G))
        # a classic group's departed members keep their partitions (idle) until the join
        # phase ends: the rebalance at its sync records them revoked or lost
        new_owned = owned_now.unionByName(departed.select(*owned_now.columns)).join(rb_groups, _G, "left_anti")
        # a step whose events call for a rebalance has groups to rebalance; otherwise only
        # released partitions may call for one (that action stores the flags;
        # a small replay reads them off the stored rows)
        if (step.flags is not None and step.flags.triggers) or has_rows(flags, true="rebalanced"):
            new_owned = new_owned.unionByName(_rebalance_step(
                state, step, flags, rb_groups, owned_now, departed, out, protocol_rule=protocol_rule,
                max_rounds=max_rounds, keep_rows=keep_rows, options=options))
        state.owned = materialize_state(state.owned.join(per_group(sk.select(_G)), _G, "left_anti").unionByName(new_owned))
        _add_step_output(out, "steps", _step_stats(flags, step.roster, state.meta, state.owned, state.groups))

    _store_lazy_outputs(out, "generations")
    _store_lazy_outputs(out, "steps")
    _store_lazy_outputs(out, "held")
    gens = union_all(out.generations) if out.generations else empty(spark, SIMULATION_SCHEMA)
    revs = union_all(out.revocations) if out.revocations else empty(
        spark, "group_id string, generation int, round int, member_id string, topic string, partition int, kind string")
    st = union_all(out.steps) if out.steps else empty(
        spark, "group_id string, step int, at long, kinds string, rebalanced boolean, partitions long, unassigned long, idle long")
    if out.held:
        st = st.join(union_all(out.held), [_G, "step"], "left")
    else:
        st = st.withColumn("held_before", F.lit(None).cast("long"))
    result = SimulationResult(generations=gens, steps=st, assignment=state.owned.drop("group_instance_id"),
                              revocations=revs, lags=state.lags)
    return result, (union_all(out.rows) if out.rows else None)


class _StepRows:
    """A small replay's frames that span every step (``step`` one of their columns), each
    read onto the driver once (one action each): a step's slice of one is a local relation
    of its own rows, a few rows in one partition, where a filter of the stored frames of
    every step is a plan Spark shuffles at each step. A frame of more rows than
    ``spark.assign.smallCallRows`` stays a filter."""

    def __init__(self, frames: dict[str, DataFrame]):
        self.frames = frames
        limit = small_call_rows(next(iter(frames.values())).sparkSession)
        self.rows = {name: rows for name, df in frames.items() if (rows := rows_within(df, limit)) is not None}

    def at(self, name: str, k: int) -> DataFrame:
        """Frame ``name``'s rows of step ``k``."""
        df, rows = self.frames[name], self.rows.get(name)
        if rows is None:
            return df.where(F.col("step") == k)
        # take, not filter: an empty filter result has no chunks, which Spark cannot read
        return relation_of(df, rows.take(pc.indices_nonzero(pc.equal(rows["step"], k))))


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
    # through one partition in a small call: the aggregations and the join shuffle nothing
    group_topics = union_all([
        e.select(_G, F.explode(F.coalesce("topics", F.array().cast("array<string>"))).alias("topic")),
        e.where(F.col("topic").isNotNull()).select(_G, "topic")]).distinct()
    sizes = one_partition(p0).groupBy("topic").agg(F.count("*").cast("int").alias("partitions"))
    meta = materialize_state(group_topics.join(sizes, "topic").select(_G, "topic", "partitions",
                                                                      F.col("partitions").alias("seen")))
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


