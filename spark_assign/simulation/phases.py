"""The phases of a replay step (:mod:`.replay`), and the state they hand on.

Each phase is a DataFrame transformation over every group of the step at once:

1. :func:`_update_metadata`: topics grow, lags change;
2. :func:`_carry_ownership`: owners no longer in the group depart (a static member's
   replacement inherits), and under deferred resolution the departed partitions are held
   until the group's timer expires;
3. :func:`_rebalance_flags`: which groups rebalance (their events call for it: a classic
   group's sync, a consumer group's target; or a deferred resolution's released partitions);
4. :func:`_rebalance_step`: one :func:`~spark_assign.rebalance.rebalance` over those
   groups (topics scoped by group, so that every group has its own metadata), whose
   rounds become the step's generations.

The step loop (:func:`.replay.replay`) and the batched replay (:mod:`.batched`) run them.

>>> scoped = scoped_partitions(state.meta)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from ..execution import (
    in_small_call,
    join_small,
    materialize_state,
    one_partition,
    partitioned_by,
    per_group,
    union_all,
)
from ..frames import GROUP as _G
from ..frames import sql_name
from ..inputs import owned_or_empty
from ..protocol import canonical_assignors, member_protocol
from ..rebalance import rebalance_rounds
from ..strategies.registry import EAGER

#: separates the group from the topic in group-scoped topic names
SCOPE = "\u001f"


def scope(topic: str = "topic") -> str:
    """``group_id`` + :data:`SCOPE` + the topic: one group's own copy of a topic (SQL text
    over ``topic``, a SQL expression).

    >>> scope()
    'concat(group_id, chr(31), topic)'
    """
    return f"concat(group_id, chr({ord(SCOPE)}), {topic})"


def scoped_partitions(meta: DataFrame) -> DataFrame:
    """Every partition of ``meta`` (``group_id, topic, partitions``) as ``topic, partition``,
    the topic group-scoped (:func:`scope`): the metadata of a rebalance over those groups."""
    return meta.selectExpr(_G, "topic", "explode(sequence(0, partitions - 1)) AS partition").where(
        "partition >= 0").selectExpr(f"{scope()} AS topic", "CAST(partition AS INT) AS partition")


def unscope(topic: str = "topic") -> str:
    """The topic of a group-scoped topic name (SQL text over ``topic``, a SQL expression)."""
    return f"substring_index({topic}, chr({ord(SCOPE)}), -1)"


@dataclass
class ReplayState:
    """What one step hands to the next, each part materialized:

    * ``meta``: ``group_id, topic, partitions, seen`` (each group's topics, their sizes, and
      the sizes its rebalances assign: :func:`_update_metadata`);
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
    #: per step, how many partitions each consumer group's members held before its target
    #: (``group_id, step, held_before``: :func:`_rebalance_step`)
    held: list[DataFrame] = field(default_factory=list)
    #: per list, how many of its last frames are lazy plans (a small replay's, :func:`_add_step_output`)
    lazy: dict[str, int] = field(default_factory=dict)


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


def _update_metadata(state: ReplayState, step: Step) -> None:
    """Phase 1: topics grow (``partitions_added``) and lags change (``lag_change``).

    ``meta.partitions`` is the broker's metadata, ``meta.seen`` what a rebalance assigns. A
    classic group's leader assigns with its cached metadata
    (``ConsumerCoordinator.performAssignment`` on the metadata snapshot): it sees a grown
    topic at its next refresh (the ``metadata`` event of :mod:`.windows`), and a rebalance
    before that leaves the new partitions unassigned. A KIP-848 coordinator sees them at once."""
    if step.flags is not None and step.flags.grow:
        added = step.events.where(F.col("kind") == "partitions_added")
        cached = (F.col("_gp") == "classic") & (F.col("_mma") > 0)
        grown = added.groupBy(_G, "topic").agg(F.max("partitions").alias("_new"), F.bool_or(cached).alias("_cached"))
        now = F.greatest(F.coalesce("partitions", F.lit(0)), F.coalesce("_new", F.lit(0))).cast("int")
        # a topic that did not grow keeps what its group's rebalances see (its refresh may be pending)
        state.meta = materialize_state(
            state.meta.join(grown, [_G, "topic"], "full_outer")
            .select(_G, "topic", now.alias("partitions"),
                    F.when(F.col("_new").isNull(), F.col("seen"))
                    .when(F.coalesce("_cached", F.lit(False)), F.coalesce("seen", F.lit(0)))
                    .otherwise(now).cast("int").alias("seen")))
    if step.flags is not None and step.flags.refresh:
        refreshed = step.groups.where(F.array_contains(F.split("kinds", ","), "metadata")).select(_G).distinct() \
            .withColumn("_r", F.lit(True))
        state.meta = materialize_state(
            state.meta.join(refreshed, _G, "left")
            .select(_G, "topic", "partitions",
                    F.when(F.col("_r"), F.col("partitions")).otherwise(F.col("seen")).alias("seen")))
    if step.flags is not None and step.flags.lag:
        expanded = _lag_rows(step.events.where(F.col("kind") == "lag_change"), state.meta)
        base = state.lags if state.lags is not None else expanded.limit(0)
        state.lags = materialize_state(
            base.join(expanded.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
            .unionByName(expanded))


def _carry_ownership(state: ReplayState, step: Step, dep_kinds: DataFrame,
                     any_delay: bool) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Phase 2: owners no longer in the group depart (a static member's replacement
    inherits); under deferred resolution, the departed ones are held until the deadline of
    the group's timer, and an expired deadline releases them.
    Returns ``(owned now, departed, released)``, lazy plans over the stored state (the
    departed partitions stored by their first reader)."""
    sk, roster = step.groups, step.roster
    # one_partition: in a small replay, joins of joins shuffle nothing (execution.one_partition)
    ok = join_small(state.owned, sk.selectExpr(_G), _G, "left_semi")
    ok = _restarts(ok, step)
    in_roster = roster.selectExpr(_G, "member_id")
    # the roster's members are a few rows per group: broadcast, so that the owned rows are not
    # shuffled for them (adaptive execution broadcasts them anyway, after both shuffles ran)
    stay = join_small(ok, in_roster, [_G, "member_id"], "left_semi")
    gone = join_small(ok, in_roster, [_G, "member_id"], "left_anti")
    # a gone static member's partitions go to the roster's member of the same instance id (its
    # heir, broadcast); the others' depart: one join, no lookup of the inherited partitions
    heirs = roster.where("group_instance_id IS NOT NULL").selectExpr(
        _G, "member_id AS _heir", "group_instance_id AS _hiid")
    gone_heirs = join_small(gone.selectExpr("*", "group_instance_id AS _hiid"), heirs, [_G, "_hiid"], "left")
    inherited = gone_heirs.where("_heir IS NOT NULL").selectExpr(
        _G, "_heir AS member_id", "_hiid AS group_instance_id", "topic", "partition")
    departed = gone_heirs.where("_heir IS NULL").selectExpr(*map(sql_name, gone.columns))
    departed = join_small(departed, dep_kinds.where(f"step = {int(step.k)}").drop("step"), [_G, "member_id"], "left")
    # read by the held state, the flags and the rebalance: stored by the first of them
    departed = materialize_state(departed, eager=False)
    # deferred resolution: what departs while the group's timer runs is held until its
    # deadline, a member's return included (handleLostAssignments); the deadline releases it
    at_timer = per_group(sk.selectExpr(_G, "at", "_hold_until"))
    hk = one_partition(state.held.join(at_timer, _G))
    released = hk.where("deadline <= at")
    if any_delay:
        new_held = (
            hk.where("deadline > at").selectExpr(*map(sql_name, state.held.columns))
            .unionByName(departed.join(at_timer, _G).where("_hold_until IS NOT NULL").selectExpr(
                _G, "member_id", "group_instance_id", "topic", "partition", "_hold_until AS deadline"))
        )
        state.held = materialize_state(state.held.join(per_group(sk.selectExpr(_G)), _G, "left_anti").unionByName(
            new_held))
    # a lazy plan over stored state, read by the rebalance's members and by the stored owned state
    return stay.unionByName(inherited), departed, released


def _restarts(owned: DataFrame, step: Step) -> DataFrame:
    """``owned`` with a member's rows renamed to the incarnation it closed, where its
    ``config_change`` is at the step: a consumer's assignors are fixed when it is built, so it
    restarts. A dynamic member revokes what it owns and joins again under a new member id
    owning nothing; so does a static one whose restart begins a rebalance, or lands in a classic
    group's running one (its new process joins it with no ownedPartitions; a quiet one in a
    Stable group gets its assignment back, :func:`.events.quiet_rejoins`).
    The closed incarnation is no member of the roster, and has no instance id: its
    partitions depart as revoked."""
    if step.flags is not None and not step.flags.restart:
        return owned
    restarted = join_small(
        step.roster.where("last_kind = 'config_change'").selectExpr(
            _G, "member_id", "last_at", "group_instance_id IS NULL OR last_quiet IS NULL AS _rejoins"),
        step.groups.selectExpr(_G, "at", "_gp = 'classic' AND _began IS NOT NULL AS _running"), _G).where(
        "last_at = at AND (_rejoins OR _running)").selectExpr(_G, "member_id", "at AS _restart_at")
    tagged = join_small(owned, restarted, [_G, "member_id"], "left")
    # the closed incarnation's id: the member's, and when it restarted
    closed = "concat(member_id, ' (until its restart at ', _restart_at, ' ms)')"
    return tagged.selectExpr(
        _G, f"CASE WHEN _restart_at IS NULL THEN member_id ELSE {closed} END AS member_id",
        "CASE WHEN _restart_at IS NULL THEN group_instance_id END AS group_instance_id",
        *[c for c in owned.columns if c not in (_G, "member_id", "group_instance_id")])


def _rebalance_flags(step: Step, released: DataFrame) -> DataFrame:
    """Phase 3: per group of the step, whether it rebalances: its events call for it, or a
    consumer group's partitions were released (stored by the first action that reads it). When
    the events of every group of the step call for one, the step's groups (a plan over
    stored rows, nothing to look up)."""
    columns = (_G, "at", "step", "kinds", "_cause", "rebalanced", "_rule", "_gp", "_hb", "_js", "_began", "_revoke",
               "_merge", "_strategy")
    if step.flags is not None and step.flags.all_trigger:  # nothing to look up
        return step.groups.selectExpr(*[("true AS rebalanced" if c == "rebalanced" else c) for c in columns])
    rel = released.selectExpr(_G).distinct().selectExpr(_G, "true AS _rel")
    flags = step.groups.join(per_group(rel), _G, "left")
    # a classic group rebalances at its join phase's sync only, a consumer group at its targets
    # (:mod:`.windows`): what departs meanwhile is idle until then
    rebalanced = "triggers OR (_gp = 'consumer' AND _rel IS NOT NULL) AS rebalanced"
    return materialize_state(flags.selectExpr(*[(rebalanced if c == "rebalanced" else c) for c in columns]),
                             eager=False)


def _rebalance_step(state: ReplayState, step: Step, flags: DataFrame, rb_groups: DataFrame, owned_now: DataFrame,
                    departed: DataFrame, out: ReplayOutputs, *, protocol_rule: str, max_rounds: int,
                    keep_rows: bool, options: dict[str, Any], strategy: str | None = None) -> DataFrame:
    """Phase 4: one rebalance over the step's rebalancing groups, topics scoped by group.
    Appends the rounds to ``out``, updates ``state.groups``; returns the groups' new
    owned rows (``group_id, member_id, group_instance_id, topic, partition``).
    ``strategy``: the one assignor every group runs, when the caller knows it."""
    members = _members_for(step.roster.join(rb_groups, _G, "left_semi"), owned_now, state.groups, flags)
    scoped_meta = state.meta.join(rb_groups, _G, "left_semi").select(_G, "topic", F.col("seen").alias("partitions"))
    scoped_parts = scoped_partitions(scoped_meta)
    unavailable = state.held.join(rb_groups, _G, "left_semi").selectExpr(f"{scope()} AS topic", "partition")
    scoped_lags = (state.lags.join(rb_groups, _G, "left_semi").selectExpr(_G, f"{scope()} AS topic", "partition", "lag")
                   if state.lags is not None else None)
    dep_rows = departed.join(rb_groups, _G, "left_semi").selectExpr(
        _G, "member_id", f"{scope()} AS topic", "partition", "kind")
    # who owns what before the rebalance is known: each partition once, departures included
    owners = owned_now.join(rb_groups, _G, "left_semi").selectExpr(
        _G, "member_id", f"{scope()} AS topic", "partition").unionByName(dep_rows.drop("kind"))
    # a consumer group's members away (crashed, or static and left) keep what they hold
    away = (step.roster.join(rb_groups, _G, "left_semi").where("status = 'away'").selectExpr(_G, "member_id")
            if step.flags is not None and step.flags.away else None)
    # while a deferred resolution's timer runs, Connect revokes nothing to balance the members
    frozen = (step.groups.join(rb_groups, _G, "left_semi").where("_hold_until IS NOT NULL").select(_G)
              if step.flags is not None and step.flags.holding else None)
    # a classic group whose next join phase opens within a heartbeat of this sync: its
    # follow-up round, if any, is that phase's rebalance (:func:`.windows.in_phase`)
    single_round = (flags.join(rb_groups, _G, "left_semi").where("_merge").select(_G)
                    if step.flags is not None and step.flags.merge else None)
    r = rebalance_rounds(members, scoped_parts, lags=scoped_lags, protocol_rule=protocol_rule, max_rounds=max_rounds,
                         unavailable=unavailable, departed=dep_rows, validate=False, strategy=strategy, owners=owners,
                         away=away, frozen=frozen, single_round=single_round, options=options)
    last = r.summary.groupBy(_G).agg(F.expr(
        "max_by(named_struct('generation', generation, 'protocol', protocol), round) AS _l"))
    state.groups = materialize_state(state.groups.join(per_group(last.selectExpr(_G)), _G, "left_anti").unionByName(
        last.selectExpr(_G, "_l.generation AS generation", "_l.protocol AS protocol")))
    # a consumer group's members reconcile on their own heartbeats (CurrentAssignmentBuilder
    # runs in consumerGroupHeartbeat): each revokes what the target takes from it, and picks up
    # what it gets of the free partitions, at its next heartbeat, half an interval after the
    # target on average (round 1); a revoked partition reaches its new owner at that owner's
    # next heartbeat after the revocation, one interval after the target on average (round 2).
    # A classic follow-up round comes one heartbeat and one join/sync exchange after the round
    # before it
    at = ("at + CASE WHEN _gp = 'consumer' THEN floor(_hb / 2) + (round - 1) * (_hb - floor(_hb / 2)) "
          "ELSE (round - 1) * (_hb + _js) END")
    if step.flags is not None and step.flags.consumer:
        # until then what the members held before is all that is consumed (compare() counts
        # the rest unassigned up to the first round)
        consumer = flags.join(rb_groups, _G, "left_semi").where("_gp = 'consumer'").select(_G)
        held = owned_now.join(consumer, _G, "left_semi").selectExpr(_G, f"{scope()} AS topic", "partition").join(
            scoped_parts, ["topic", "partition"], "left_semi").groupBy(_G).count()
        _add_step_output(out, "held", consumer.join(held, _G, "left").selectExpr(
            _G, f"{step.k} AS step", "coalesce(count, 0) AS held_before"))
    _add_step_output(out, "generations", join_small(
        r.summary, flags.selectExpr(_G, "at", "step", "_cause", "_gp", "_hb", "_js"), _G).selectExpr(
        _G, "generation", "round", "step", f"timestamp_millis({at}) AS at", "_cause AS event_kinds",
        "assignor AS strategy", "protocol", "members", "assigned", "pending + unavailable AS unassigned", "moved",
        "revoked", "lost"))
    # a step's revocations and rows grow with its partitions: stored by the session's policy
    # even in a small replay, so that the driver never holds every step's (the generations
    # and step stats above are a row per group and round)
    out.revocations.append(materialize_state(r.revocations.withColumn("topic", F.expr(unscope())), accumulates=True))
    if keep_rows:  # the rounds' rows with the lags of the step, recorded at the end
        rows = r.assignments.selectExpr(_G, "generation", "member_id", "topic", "partition")
        if scoped_lags is not None:
            rows = rows.join(scoped_lags, [_G, "topic", "partition"], "left")
        else:
            rows = rows.selectExpr("*", "CAST(NULL AS BIGINT) AS lag")
        out.rows.append(materialize_state(rows.withColumn("topic", F.expr(unscope())), accumulates=True))
    return join_small(r.final, step.roster.selectExpr(_G, "member_id", "group_instance_id"), [_G, "member_id"]).selectExpr(
        _G, "member_id", "group_instance_id", f"{unscope()} AS topic", "partition")


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
    o = owned.groupBy(_G, "member_id").agg(F.expr(
        f"array_sort(collect_list(named_struct('topic', {scope()}, 'partition', CAST(partition AS INT)))) AS _o"))
    group_flags = flags.selectExpr(_G, "_rule AS protocol_rule", "_gp AS group_protocol",
                                   "CASE WHEN _gp = 'consumer' THEN _strategy END AS remote_assignor")
    return join_small(roster, o, [_G, "member_id"], "left").join(per_group(group_state), _G, "left").join(
        per_group(group_flags), _G).selectExpr(
        _G, "member_id", "group_instance_id", "rack",
        f"transform(coalesce(topics, CAST(array() AS array<string>)), t -> {scope('t')}) AS topics",
        f"{owned_or_empty('_o')} AS owned",
        # the group's last generation, whoever owns what: the rebalance numbers its
        # rounds on from it (a group that emptied, or whose members own nothing, too)
        "CAST(generation AS INT) AS generation",
        "assignors",
        "CASE WHEN _o IS NOT NULL THEN protocol END AS protocol",
        "protocol_rule", "group_protocol", "remote_assignor", "member_type",
    )


def _step_stats(flags: DataFrame, roster: DataFrame, meta: DataFrame, owned: DataFrame,
                groups: DataFrame | None = None) -> DataFrame:
    """Per group of the step: its partitions, the unassigned ones and the idle ones
    (owned by members away: crashed, or left statically, not yet expired; or departed while
    a classic join phase runs). ``groups`` (``group_id, protocol`` of the last rebalance):
    past a classic join phase's ``_revoke`` (:mod:`.windows`) its EAGER members have revoked
    what they own, so those partitions count unassigned until the phase's sync. A member is
    EAGER by its own assignor list (``ConsumerCoordinator``), or under KIP-726's dynamic rule
    when the group's last protocol was.

    Every row the counts read (the step's flags, the roster's subscriptions, the metadata and
    the owned partitions) in one frame partitioned by group: one shuffle, after which the
    windows (a topic's subscribers and partitions, a member's status) and the aggregation
    by group shuffle nothing more."""
    stalled = "false"
    if groups is not None and "_began" in flags.columns:
        stalled = "NOT rebalanced AND _began IS NOT NULL AND at >= _revoke AND _gp = 'classic'"
        flags = join_small(flags, groups.selectExpr(_G, "protocol AS _protocol"), _G, "left")
    # an EAGER member revokes what it owns: by its own list (Kafka's rule), or the group's
    # protocol under KIP-726's dynamic rule
    eager = f"CASE WHEN {member_protocol(canonical_assignors())} = '{EAGER}' THEN 1 END"
    rows = partitioned_by(union_all([
        flags.selectExpr(_G, "step", "at", "kinds", "rebalanced", "1 AS _flag", f"{stalled} AS _stalled",
                         *(("_rule = 'dynamic' AS _dynamic", f"_protocol = '{EAGER}' AS _group_eager")
                           if stalled != "false" else ("false AS _dynamic", "false AS _group_eager"))),
        roster.selectExpr(_G, "member_id", "explode_outer(topics) AS topic", "1 AS _sub",
                          "CASE WHEN status = 'away' THEN 1 END AS _away", f"{eager} AS _eager"),
        meta.selectExpr(_G, "topic", "partitions"),
        join_small(owned, flags.selectExpr(_G), _G, "left_semi").selectExpr(_G, "member_id", "topic", "1 AS _o"),
    ], allow_missing=True), _G)
    # a topic counts when some member of the roster subscribes to it and the metadata has it
    counted = ("max(_sub) OVER (PARTITION BY group_id, topic) = 1 "
               "AND max(partitions) OVER (PARTITION BY group_id, topic) IS NOT NULL")
    # idle: owned by a member away, or by one no longer in the roster (departed, awaiting the sync)
    idle_member = ("coalesce(max(_away) OVER (PARTITION BY group_id, member_id), "
                   "1 - max(_sub) OVER (PARTITION BY group_id, member_id), 1)")
    member_eager = "coalesce(max(_eager) OVER (PARTITION BY group_id, member_id), 0)"
    by_group = "coalesce(bool_or({}) OVER (PARTITION BY group_id), false)"
    rows = rows.selectExpr("*", f"{counted} AS _counted", f"{idle_member} AS _member_idle",
                           f"CASE WHEN {by_group.format('_dynamic')} THEN {by_group.format('_group_eager')} "
                           f"ELSE {member_eager} = 1 END AS _member_eager")
    per_group_counts = rows.groupBy(_G).agg(*map(F.expr, (
        "max(_flag) AS _flag", "max(step) AS step", "max(at) AS at", "max(kinds) AS kinds",
        "max(rebalanced) AS rebalanced", "bool_or(_stalled) AS _stalled",
        "sum(CASE WHEN _counted THEN partitions END) AS _total",
        "count(CASE WHEN _counted THEN _o END) AS _owned",
        "count(CASE WHEN _counted AND _member_idle = 1 THEN _o END) AS _idle",
        "count(CASE WHEN _counted AND _member_idle = 0 AND _member_eager THEN _o END) AS _revoked")))
    return per_group_counts.where("_flag = 1").selectExpr(
        _G, "step", "at", "kinds", "rebalanced",
        "CAST(coalesce(_total, 0) AS BIGINT) AS partitions",
        "CAST(coalesce(_total, 0) - _owned + CASE WHEN _stalled THEN _revoked ELSE 0 END AS BIGINT) AS unassigned",
        "CAST(_idle AS BIGINT) AS idle",
    )
