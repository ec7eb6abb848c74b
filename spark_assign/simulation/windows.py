"""A classic group's rebalances on the clock (:mod:`.timing`): when each one begins and when
its join phase ends, from the events alone.

A classic rebalance is not instant. It begins with an event that calls for one, its join
phase ends when every member has rejoined (or its initial delay when the group was empty),
and every event in between joins it: one generation for all of them. This module finds
those join phases, per group, as one fold over the group's steps (a SQL ``aggregate``,
over every group at once), and turns them into the events the step loop runs:

* ``sync`` at the end of each join phase plus ``join_sync``: the rebalance, with the
  members of that moment (the only classic step that rebalances);
* ``revoke`` half a heartbeat interval after it began, or at its end if sooner: EAGER members
  have given up what they own (:func:`.phases._step_stats` counts it unassigned until the ``sync``);
* ``metadata``, half of ``metadata.max.age.ms`` after a topic grew: the leader's
  metadata refresh notices the new partitions, and that begins a rebalance.

A KIP-848 group's epoch bumps need no join phase, but its coordinator computes a new target
at most once per ``assignment_interval`` (:func:`target_phases`): its ``target`` events are
the steps at which it rebalances.

>>> join_phases(steps, away).show()  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..frames import GROUP as _G

#: the events this module adds (none of them is in the events' contract)
PHASE_KINDS = ("sync", "revoke", "metadata", "target")

_STEP = ("struct<at:bigint,opens:boolean,joins:boolean,expires:boolean,empty_before:boolean,away_end:bigint>")
_WINDOW = "struct<began:bigint,ends:bigint>"

# the fold: the current join phase (opened, ends, initial) and the finished ones. Every member
# heartbeats on the interval since the last sync, so they all learn of a rebalance at the same
# tick: the phase ends at the next one, half an interval after the event on average (``_hb2``),
# or, opened by a session's expiry, at the others' first tick after it (``_ew``: the expired
# member's session ran from a tick of that same interval). Inside a phase, a join during an initial
# delay's last wait extends it by one more wait (tryCompleteInitialRebalanceElseSchedule), up to
# the rebalance timeout; a member that goes away before it has rejoined makes the phase wait for
# its session's expiry (removeMemberAndUpdateClassicGroup), also up to the rebalance timeout.
# After the last phase's sync, up to the members' first heartbeat, the next tick is known, not an
# average: the members reset their heartbeat timers when their JoinGroup is answered, at the end
# of the phase (AbstractCoordinator: the heartbeat thread is enabled on the way to
# COMPLETING_REBALANCE), so they all beat one interval after it (``_AFTER_SYNC``); a cooperative
# follow-up round's rejoins end there too.
_AFTER_SYNC = "acc.ends IS NOT NULL AND s.at > acc.ends + _js AND s.at <= acc.ends + _hb"
_TICK = f"CASE WHEN {_AFTER_SYNC} THEN acc.ends + _hb ELSE s.at + _hb2 END"
_EXPIRY_TICK = f"CASE WHEN {_AFTER_SYNC} THEN acc.ends + _hb WHEN s.expires THEN s.at + _ew ELSE s.at + _hb2 END"
_FOLD = f"""
aggregate(
  array_sort(_steps),
  named_struct('opened', CAST(NULL AS BIGINT), 'ends', CAST(NULL AS BIGINT), 'initial', false,
               'done', CAST(array() AS array<{_WINDOW}>)),
  (acc, s) -> CASE
    WHEN acc.ends IS NOT NULL AND s.at <= acc.ends THEN named_struct(
      'opened', acc.opened,
      'ends', CASE
        WHEN acc.initial AND s.joins AND s.at > acc.ends - _init THEN
          least(acc.ends + _init, acc.opened + greatest(_init, _rt))
        WHEN NOT acc.initial AND s.at < acc.opened + _hb2 AND s.away_end IS NOT NULL THEN
          greatest(acc.ends, least(s.away_end, acc.opened + _rt))
        ELSE acc.ends END,
      'initial', acc.initial, 'done', acc.done)
    WHEN s.opens THEN named_struct(
      'opened', s.at,
      'ends', CASE WHEN s.empty_before THEN s.at + _init
                   WHEN s.away_end IS NULL THEN {_EXPIRY_TICK}
                   ELSE greatest({_TICK}, least(s.away_end, s.at + _rt)) END,
      'initial', s.empty_before,
      'done', CASE WHEN acc.ends IS NULL THEN acc.done
                   ELSE concat(acc.done, array(named_struct('began', acc.opened, 'ends', acc.ends))) END)
    ELSE acc END,
  acc -> CASE WHEN acc.ends IS NULL THEN acc.done
              ELSE concat(acc.done, array(named_struct('began', acc.opened, 'ends', acc.ends))) END)
"""


def join_phases(steps: DataFrame, away: DataFrame, live: DataFrame) -> DataFrame:
    """Per classic group, its rebalances: ``group_id, began, ends`` (the join phase's end),
    ``learned`` (when the members learn of it, and EAGER members revoke),
    ``opened_after_sync`` (it opened after the last phase's sync, by the members' first heartbeat)
    and ``_gp`` (``classic``). A group that converts to a consumer group (``_converted``) has
    none that ends after it.

    ``steps``: the steps with their settings columns (``group_id, at, kinds, triggers,
    _gp, _hb, _timeout, _rt, _init``); ``away``: :func:`.events.away_episodes`; ``live``: each
    member's stay in the group, ``group_id, _from, _until`` (null: to the end)."""
    st = steps.where(F.col("_gp") == "classic").select(
        _G, "at", "triggers", "kinds", F.floor(F.col("_hb") / 2).alias("_hb2"), "_hb", "_js", "_rt", "_init",
        "_converted",
        # after an expiry, the others' next tick: a whole number of heartbeats in the session
        # puts one at the expiry itself, a race the broker decides either way (half an interval)
        F.expr("CASE WHEN _hb = 0 THEN 0 WHEN _timeout % _hb = 0 THEN floor(_hb / 2) "
               "ELSE _hb - _timeout % _hb END").alias("_ew"))
    # a member away at the step, or going away before it would have rejoined, is awaited
    # until it is back, or until its session expires: the coordinator then removes it and, the
    # others having rejoined, completes the join at once (removeMemberAndUpdateClassicGroup
    # calls maybeCompleteJoinPhase)
    ends = away.select(
        _G, "_left", F.when(F.col("_back") < F.col("_deadline"), F.col("_back"))
        .otherwise(F.col("_deadline")).alias("_end"))
    awaited = (
        st.select(_G, "at", "_hb2").join(ends, _G)
        .where((F.col("_left") < F.col("at") + F.col("_hb2")) & (F.col("_end") > F.col("at")))
        .groupBy(_G, "at").agg(F.max("_end").alias("away_end"))
    )
    present = (
        st.select(_G, "at").join(live, _G)
        .where((F.col("_from") < F.col("at")) & (F.col("_until").isNull() | (F.col("_until") > F.col("at"))))
        .select(_G, "at").distinct().withColumn("_present", F.lit(True))
    )
    has = lambda kind: F.array_contains(F.split("kinds", ","), kind)  # noqa: E731
    rows = (
        st.join(awaited, [_G, "at"], "left").join(present, [_G, "at"], "left")
        .select(_G, "_hb2", "_hb", "_js", "_ew", "_rt", "_init", "_converted", F.struct(
            F.col("at").cast("bigint").alias("at"), F.col("triggers").alias("opens"), has("join").alias("joins"),
            has("expire").alias("expires"),
            F.col("_present").isNull().alias("empty_before"),
            F.col("away_end").cast("bigint").alias("away_end")).cast(_STEP).alias("_s"))
    )
    folded = rows.groupBy(_G, "_hb2", "_hb", "_js", "_ew", "_rt", "_init", "_converted").agg(
        F.collect_list("_s").alias("_steps")).select(
        _G, "_hb", "_js", "_converted", F.explode(F.expr(_FOLD)).alias("_w"))
    # a join phase still open when the group converts never completes: the coordinator answers
    # its JoinGroup and SyncGroup requests REBALANCE_IN_PROGRESS (convertToConsumerGroup), and
    # the consumer group's first target answers its events (:mod:`.migration`)
    folded = folded.where(F.col("_converted").isNull() | (F.col("_w.ends") + F.col("_js") < F.col("_converted")))
    # when the members learn of it: the first tick after the last sync (``_AFTER_SYNC``), else
    # half a heartbeat after it began on average; at its end at the latest
    before = F.lag("_w.ends").over(Window.partitionBy(_G).orderBy("_w.began"))
    began, end = F.col("_w.began"), F.col("_w.ends")
    after_sync = F.coalesce((began > before + F.col("_js")) & (began <= before + F.col("_hb")), F.lit(False))
    learned = F.least(F.when(after_sync, before + F.col("_hb")).otherwise(began + F.floor(F.col("_hb") / 2)), end)
    return folded.select(_G, began.alias("began"), end.alias("ends"), learned.cast("bigint").alias("learned"),
                         after_sync.alias("opened_after_sync"), F.lit("classic").alias("_gp"))


# a KIP-848 group's targets: an epoch bump computes one at once, unless the last one is less
# than ``_ai`` old; then once it is (canComputeNextTargetAssignment), for every bump meanwhile
_TARGET_FOLD = f"""
aggregate(
  array_sort(_steps),
  named_struct('opened', CAST(NULL AS BIGINT), 'ends', CAST(NULL AS BIGINT), 'done', CAST(array() AS array<{_WINDOW}>)),
  (acc, s) -> CASE
    WHEN NOT s.opens OR (acc.ends IS NOT NULL AND s.at <= acc.ends) THEN acc
    ELSE named_struct(
      'opened', s.at,
      'ends', CASE WHEN acc.ends IS NULL THEN s.at ELSE greatest(s.at, acc.ends + _ai) END,
      'done', CASE WHEN acc.ends IS NULL THEN acc.done
                   ELSE concat(acc.done, array(named_struct('began', acc.opened, 'ends', acc.ends))) END) END,
  acc -> CASE WHEN acc.ends IS NULL THEN acc.done
              ELSE concat(acc.done, array(named_struct('began', acc.opened, 'ends', acc.ends))) END)
"""


def target_phases(steps: DataFrame) -> DataFrame:
    """Per KIP-848 group, when it computes each new target: ``group_id, began, ends`` (the
    first epoch bump it answers, and when it is computed); ``steps`` as for :func:`join_phases`
    with ``_ai``, the assignment interval. An epoch bump within ``_ai`` of the last target waits
    for the interval to pass (``GroupMetadataManager.maybeUpdateTargetAssignment``): the bumps
    meanwhile share one target."""
    st = steps.where(F.col("_gp") == "consumer").select(_G, "_ai", F.struct(
        F.col("at").cast("bigint").alias("at"), F.col("triggers").alias("opens")).alias("_s"))
    folded = st.groupBy(_G, "_ai").agg(F.collect_list("_s").alias("_steps")).select(
        _G, F.explode(F.expr(_TARGET_FOLD)).alias("_w"))
    return folded.select(_G, F.col("_w.began").alias("began"), F.col("_w.ends").alias("ends"),
                         F.col("_w.ends").alias("learned"), F.lit(False).alias("opened_after_sync"),
                         F.lit("consumer").alias("_gp"))


def live_intervals(timeline: DataFrame) -> DataFrame:
    """Each member's stay in the group (``group_id, _from, _until``): from its join to its
    leave, or to its session's expiry after a crash or a static leave (null: to the end)."""
    w = Window.partitionBy(_G, "member_id").orderBy("_order")
    nxt = timeline.select(_G, "member_id", "kind", "at", "_order", "_status", "_deadline").withColumn(
        "_next", F.lead(F.struct("kind", "at", "_status", "_deadline")).over(w))
    return nxt.where(F.col("kind") == "join").select(
        _G, F.col("at").alias("_from"),
        F.when(F.col("_next._status") == "gone", F.col("_next.at"))
        .when(F.col("_next._status") == "away", F.col("_next._deadline")).alias("_until"))


def metadata_events(e: DataFrame) -> DataFrame:
    """``metadata`` events: a classic group's leader notices a grown topic on its next metadata
    refresh, half of ``metadata.max.age.ms`` after it grew on average (``group_id, at, kind,
    member_id``; ``e``: the events with their settings columns)."""
    grown = e.where((F.col("kind") == "partitions_added") & (F.col("_gp") == "classic") & (F.col("_mma") > 0))
    return grown.select(
        _G, (F.col("at") + F.floor(F.col("_mma") / 2)).cast("long").alias("at"), F.lit("metadata").alias("kind"),
        F.lit(None).cast("string").alias("member_id")).distinct()


def phase_events(phases: DataFrame, cfg: DataFrame) -> DataFrame:
    """The ``sync`` and ``revoke`` events of :func:`join_phases`, the ``target`` events of
    :func:`target_phases` (``group_id, at, kind, member_id``; ``cfg``: the groups' settings at
    the start, their classic timers)."""
    p = phases.join(cfg.select(_G, "_hb", "_js"), _G)
    none = F.lit(None).cast("string").alias("member_id")
    classic = F.col("_gp") == "classic"
    sync = p.select(_G, F.when(classic, F.col("ends") + F.col("_js")).otherwise(F.col("ends")).alias("at"),
                    F.when(classic, F.lit("sync")).otherwise(F.lit("target")).alias("kind"), none)
    revoke = p.where(classic & (F.col("_hb") > 0)).select(
        _G, F.col("learned").alias("at"), F.lit("revoke").alias("kind"), none)
    return sync.unionByName(revoke).select(_G, F.col("at").cast("long").alias("at"), "kind", "member_id")


#: a step's own event kinds: its events', without the ``sync``, ``revoke`` and ``target`` of this module
_OWN = "filter(split(kinds, ','), k -> k NOT IN ('sync', 'revoke', 'target'))"


def in_phase(steps: DataFrame, phases: DataFrame) -> DataFrame:
    """``steps`` with ``_began``: when the join phase that the step is in (up to its ``sync``)
    began, or null (a consumer group's steps, a classic group's steps between rebalances);
    ``_cause``: the events the step's generation answers, those of its join phase so
    far (a ``sync`` step's are the events that began the phase and joined it); and ``_merge``:
    the step is a sync after which the next phase opens by the members' first heartbeat, so that a
    cooperative follow-up round of its rebalance joins that phase (Kafka's group is
    ``PreparingRebalance`` from the revoking members' rejoin at the sync: an event then joins
    that rebalance)."""
    # a phase that opens after the sync of the one before and by its first heartbeat takes in
    # that one's cooperative follow-up round, if it has one (``_merge`` on the sync step: the
    # rebalance there stops after its first round, and the revoked partitions go out at the next sync)
    nxt = F.lead("opened_after_sync").over(Window.partitionBy(_G).orderBy("began"))
    ph = phases.select(F.col(_G).alias("_pg"), F.col("began").alias("_began"), F.col("ends").alias("_ends"),
                       F.col("learned").alias("_learned"), F.coalesce(nxt, F.lit(False)).alias("_follow"))
    inside = (F.col(_G) == F.col("_pg")) & (F.col("at") >= F.col("_began")) & (F.col("at") <= F.col("_ends") + F.col("_js"))
    latest = Window.partitionBy(_G, "at")
    so_far = Window.partitionBy(_G, "_began").orderBy("at").rowsBetween(Window.unboundedPreceding, 0)
    own = F.expr(_OWN)
    phase_kinds = F.array_sort(F.flatten(F.collect_list(own).over(so_far)))
    cause = F.when(F.col("_began").isNull(), own).otherwise(phase_kinds)
    return (
        steps.join(ph, inside, "left")
        .withColumn("_last", F.max("_began").over(latest))
        .where(F.col("_began").isNull() | (F.col("_began") == F.col("_last")))
        # EAGER members revoke everything when they learn of the rebalance (:func:`join_phases`)
        .withColumnRenamed("_learned", "_revoke")
        .withColumn("_merge", F.coalesce(F.col("_follow") & (F.col("at") == F.col("_ends") + F.col("_js")),
                                         F.lit(False)))
        .drop("_pg", "_ends", "_last", "_follow")
        .withColumn("_cause", cause)
        .withColumn("_cause", F.when(F.size("_cause") > 0, F.array_join("_cause", ",")).otherwise(F.col("kinds")))
    )


def held_until(steps: DataFrame, synthetic: DataFrame) -> DataFrame:
    """``steps`` with ``_hold_until``: the deadline of the deferred resolution's timer that runs
    at the step (null: none runs); a partition that departs at the step is held out until then
    (``synthetic``: :func:`.events.synthetic_events`, whose ``delay_expire`` rows are the timers)."""
    timers = synthetic.where(F.col("kind") == "delay_expire").select(
        F.col(_G).alias("_tg"), "_set_at", F.col("at").alias("_hold_until"))
    running = (F.col(_G) == F.col("_tg")) & (F.col("at") >= F.col("_set_at")) & (F.col("at") < F.col("_hold_until"))
    return steps.join(F.broadcast(timers), running, "left").drop("_tg", "_set_at")
