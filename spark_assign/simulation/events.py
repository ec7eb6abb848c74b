"""Membership events: their contract, their checks, and the steps and rosters of a replay.

(Past 400 lines: the events' contract table below is the reference the checks and the
replay's steps follow, and they read best beside it.)

**Events** (one row each; columns other than the first four are per kind):

=================== ============================================ ==================================
column              type                                         used by
=================== ============================================ ==================================
group_id            string                                       all
at                  long (ms) or timestamp                       all
kind                string: join, leave, crash, subscribe,       all
                    unsubscribe, partitions_added, lag_change,
                    config_change
member_id           string                                       member events
group_instance_id   string (static membership)                   join
rack                string                                       join
topics              array<string>                                join (subscription), subscribe
                                                                 (added), unsubscribe (removed)
assignors           array<string> (preference order)             join, config_change (null: as
                                                                 before)
group_protocol      string: classic or consumer (the member's    join, config_change (null: the
                    ``group.protocol``)                          group's protocol at the start)
topic               string                                       partitions_added, lag_change
partitions          int: the topic's new partition count         partitions_added
partition           int (null: every partition of the topic)     lag_change
lag                 long                                         lag_change
seq                 long, optional: the order of the events      all
=================== ============================================ ==================================

Semantics (Kafka's classic protocol; when each rebalance happens on the clock is
:mod:`spark_assign.simulation.windows`'s, with the timers of :mod:`spark_assign.simulation.timing`):

* ``join``: the member joins -> rebalance. A static member (``group_instance_id``)
  returning within its session timeout of its leave or crash takes its
  partitions back with no rebalance (:func:`quiet_rejoins`: in a classic group a rebalance
  only if the group's selected assignor changes, in a consumer group only if the
  subscription did).
* ``leave``: a dynamic member sends LeaveGroup -> rebalance now, its partitions
  recorded ``revoked``. A static member does not (KIP-345): the group waits for
  the session timeout, then rebalances.
* ``crash``: no LeaveGroup: the member stays in the group, its partitions idle,
  until its session times out; then a rebalance, the partitions recorded
  ``lost``.
* ``subscribe`` / ``unsubscribe``: the member rejoins with the new subscription -> rebalance.
* ``config_change``: a restart with the new assignor list (``partition.assignment.strategy`` is
  fixed when a consumer is built) -> rebalance. A dynamic member closes, revoking what it owns,
  and joins again as a new member owning nothing; a static one comes back with its
  ``group.instance.id`` and keeps what it owned, with no rebalance unless the group's selected
  assignor changes (none in a consumer group, whose broker ignores the lists). With
  ``group_protocol`` ``consumer`` in a classic group, the first such restart or join converts
  the group to a consumer group (:mod:`spark_assign.simulation.migration`).
* ``partitions_added``: the topic grows to ``partitions`` -> rebalance.
  ``lag_change``: new lags (no rebalance; lag-aware reads them next time).
* Deferred resolution (``scheduled_rebalance_max_delay_ms`` > 0: Connect's
  ``scheduled.rebalance.max.delay.ms``, incremental cooperative rebalancing's Design II, not a
  consumer setting): the partitions of a departed member stay unassigned until the group's
  timer expires, even when the member returns meanwhile; the first loss sets the timer, later
  ones wait for the same deadline (:func:`deferral_timers`), and the rebalance at the deadline
  hands them out.

The replay turns the events into **steps**: the k-th distinct event time of every
group is step k (:func:`steps_of`), with the members of every group at every step
(:func:`rosters`); :mod:`spark_assign.simulation.replay` runs them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import InvalidEventsError, NoCommonAssignorError, raise_if_rows
from ..execution import union_all
from ..frames import GROUP as _G
from ..inputs import conform_columns
from ..protocol import disagreements, select_assignor
from .migration import member_types, protocol_at
from .timing import Timing

KINDS = ("join", "leave", "crash", "subscribe", "unsubscribe", "partitions_added", "lag_change", "config_change")
MEMBER_KINDS = ("join", "leave", "crash", "subscribe", "unsubscribe", "config_change")
#: synthetic events the replay adds
SYNTHETIC_KINDS = ("expire", "delay_expire")

EVENT_COLUMNS: dict[str, T.DataType] = {
    "group_id": T.StringType(),
    "at": T.LongType(),
    "kind": T.StringType(),
    "member_id": T.StringType(),
    "group_instance_id": T.StringType(),
    "rack": T.StringType(),
    "topics": T.ArrayType(T.StringType()),
    "assignors": T.ArrayType(T.StringType()),
    "topic": T.StringType(),
    "partitions": T.IntegerType(),
    "partition": T.IntegerType(),
    "lag": T.LongType(),
    "seq": T.LongType(),
    "group_protocol": T.StringType(),
}


def normalize_events(events: DataFrame) -> DataFrame:
    """Events with every column of the contract, typed; ``at`` in epoch ms."""
    if "at" in events.columns and isinstance(events.schema["at"].dataType, (T.TimestampType, T.TimestampNTZType)):
        events = events.withColumn("at", F.unix_millis(F.col("at").cast("timestamp")))
    return conform_columns(events, EVENT_COLUMNS, ("group_id", "at", "kind"), "events", InvalidEventsError)


def ordered(events: DataFrame) -> DataFrame:
    """Add ``_order`` (per group, 1-based): by ``seq`` when given, else by ``at``
    then kind and member (a full, data-only order)."""
    w = Window.partitionBy(_G).orderBy(
        F.col("seq").asc_nulls_last(), "at", "kind", F.col("member_id").asc_nulls_first(),
        F.col("topic").asc_nulls_first(), F.col("partition").asc_nulls_first())
    return events.withColumn("_order", F.row_number().over(w))


def validate_events(events: DataFrame, partitions: DataFrame) -> DataFrame:
    """Check normalized events; raise InvalidEventsError naming the bad events
    (one Spark job), else return them. Problems: null group/at/kind, an unknown
    kind, events out of order (``seq`` against ``at``), a member event without
    member_id, two events of one member at the same time, a join of a member
    already present (or of a static member whose group.instance.id is in use), a
    leave/crash/subscribe/unsubscribe/config_change of a member not present,
    a partitions_added or lag_change without its topic / count / lag.
    """
    e = events if "_order" in events.columns else ordered(events)  # the replay orders them first
    shape = lambda df, problem: df.select(  # noqa: E731
        F.lit(problem).alias("problem"), _G, "at", "kind", "member_id", "_order")
    bad = [
        shape(e.where(F.col(_G).isNull() | F.col("at").isNull() | F.col("kind").isNull()),
              "null group_id, at or kind"),
        shape(e.where(~F.col("kind").isin(*KINDS)), f"unknown kind (expected one of {', '.join(KINDS)})"),
        shape(e.where(F.col("kind").isin(*MEMBER_KINDS) & F.col("member_id").isNull()),
              "member event without member_id"),
        shape(e.where((F.col("kind") == "join") & F.col("topics").isNull()), "join without topics"),
        shape(e.where(F.expr("exists(topics, t -> t IS NULL)")), "null topic in topics (expected topic names)"),
        shape(e.where((F.col("kind") == "partitions_added") & (F.col("topic").isNull() | F.col("partitions").isNull())),
              "partitions_added needs topic and partitions (the new count)"),
        shape(e.where((F.col("kind") == "lag_change") & (F.col("topic").isNull() | F.col("lag").isNull() | (F.col("lag") < 0))),
              "lag_change needs topic and a non-negative lag"),
        shape(e.where(F.col("group_protocol").isNotNull() & ~F.col("group_protocol").isin("classic", "consumer")),
              "unknown group_protocol (expected classic or consumer)"),
    ]
    w = Window.partitionBy(_G).orderBy("_order")
    prev_at = F.lag("at").over(w)
    bad.append(shape(e.withColumn("_prev", prev_at).where(F.col("_prev") > F.col("at")),
                     "out of order: earlier than the event before it"))
    mev = e.where(F.col("kind").isin(*MEMBER_KINDS) & F.col("member_id").isNotNull())
    dup = mev.withColumn("_n", F.count("*").over(Window.partitionBy(_G, "member_id", "at"))).where("_n > 1")
    bad.append(shape(dup, "two events of one member at the same time"))
    # presence: +1 join, -1 leave/crash, before each event of the member
    delta = F.when(F.col("kind") == "join", 1).when(F.col("kind").isin("leave", "crash"), -1).otherwise(0)
    wm = Window.partitionBy(_G, "member_id").orderBy("_order").rowsBetween(Window.unboundedPreceding, -1)
    pres = mev.withColumn("_before", F.coalesce(F.sum(delta).over(wm), F.lit(0)))
    bad.append(shape(pres.where((F.col("kind") == "join") & (F.col("_before") != 0)),
                     "join of a member already present"))
    bad.append(shape(pres.where((F.col("kind") != "join") & (F.col("_before") != 1)),
                     "event for a member not present in the group (unknown member)"))
    # a static member's group.instance.id used by two present members
    inst = mev.join(
        mev.where(F.col("kind") == "join").select(_G, "member_id", F.col("group_instance_id").alias("_iid"))
        .where(F.col("_iid").isNotNull()).dropDuplicates([_G, "member_id", "_iid"]),
        [_G, "member_id"])
    wi = Window.partitionBy(_G, "_iid").orderBy("_order").rowsBetween(Window.unboundedPreceding, -1)
    ipres = inst.withColumn("_before", F.coalesce(F.sum(delta).over(wi), F.lit(0)))
    bad.append(shape(ipres.where((F.col("kind") == "join") & (F.col("_before") != 0)),
                     "join with a group.instance.id already in use"))
    problems = bad[0]
    for b in bad[1:]:
        problems = problems.unionByName(b)
    raise_if_rows(problems.orderBy(_G, "_order", "problem").withColumnRenamed("_order", "event_number"),
                  InvalidEventsError, "invalid events")
    return events


# --------------------------------------------------------------------------- preparation


def with_config(events: DataFrame, *, strategy, protocol_rule, timing: Timing, delay_ms,
                group_protocol="classic") -> DataFrame:
    """Per-group settings as columns (``what_if`` sets them per variant): the strategy,
    the protocol rule, the deferred resolution's delay, the group protocol and its timers
    (:meth:`~.timing.Timing.settings_of`)."""
    defaults = {
        "_strategy": F.lit(strategy).cast("string"),
        "_rule": F.lit(protocol_rule).cast("string"),
        "_delay": F.lit(int(delay_ms or 0)).cast("long"),
        "_gp": F.lit(group_protocol).cast("string"),
        **{c: F.lit(v).cast("long") for c, v in timing.settings_of(group_protocol).items()},
    }
    for c, v in defaults.items():
        events = events.withColumn(c, F.coalesce(F.col(c), v) if c in events.columns else v)
    return events


def member_timeline(e: DataFrame) -> DataFrame:
    """Every member event with the member's state after it: current topics,
    assignors, instance id, rack, type (``_member_type``: the protocol its client speaks,
    :func:`.migration.member_types`), status (present / away / gone) and, for away
    members, the session-timeout deadline."""
    me = e.where(F.col("kind").isin(*MEMBER_KINDS))
    w = Window.partitionBy(_G, "member_id").orderBy("_order").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    hist = F.collect_list(F.struct("_order", "kind", "topics", "assignors", "group_protocol")).over(w)
    history = F.col("_h")  # the member's events so far, in order (sorted once, read by each fold below)
    topics = F.aggregate(
        history, F.array().cast("array<string>"),
        lambda acc, x: F.when(x["kind"] == "join", F.coalesce(x["topics"], F.array().cast("array<string>")))
        .when(x["kind"] == "subscribe", F.array_union(acc, F.coalesce(x["topics"], F.array().cast("array<string>"))))
        .when(x["kind"] == "unsubscribe", F.array_except(acc, F.coalesce(x["topics"], F.array().cast("array<string>"))))
        .otherwise(acc),
    )
    assignors = F.aggregate(
        history, F.lit(None).cast("array<string>"),
        lambda acc, x: F.when(x["kind"] == "join", x["assignors"])
        .when(x["kind"] == "config_change", F.coalesce(x["assignors"], acc)).otherwise(acc),
    )
    joined = F.last(F.when(F.col("kind") == "join", F.struct("group_instance_id", "rack")), ignorenulls=True).over(w)
    t = (
        me.withColumn("_h", F.array_sort(hist))
        .withColumn("_topics", topics).withColumn("_assignors", assignors).withColumn("_j", joined)
        .withColumn("_member_type", F.expr(member_types("_h"))).drop("_h")
        .withColumn("_iid", F.col("_j.group_instance_id")).withColumn("_rack", F.col("_j.rack"))
    )
    status = (
        F.when(F.col("kind") == "crash", F.lit("away"))
        .when((F.col("kind") == "leave") & F.col("_iid").isNotNull(), F.lit("away"))
        .when(F.col("kind") == "leave", F.lit("gone"))
        .otherwise(F.lit("present"))
    )
    # the session runs from the member's last heartbeat: half an interval before it went, on average
    return t.withColumn("_status", status).withColumn(
        "_deadline", F.when(F.col("_status") == "away",
                            F.col("at") + F.greatest(F.col("_timeout") - F.floor(F.col("_hb") / 2), F.lit(0))))


def away_episodes(timeline: DataFrame) -> DataFrame:
    """Every time a member went away (a crash, or a static member's leave): ``group_id,
    member_id, _iid, _left, _deadline`` (its session's expiry) and ``_back`` (the first
    join after it of the member or of its group.instance.id, or null)."""
    away = timeline.where(F.col("_status") == "away").select(
        _G, "member_id", "_iid", F.col("at").alias("_left"), "_deadline", "_order",
        "_strategy", "_rule", "_timeout", "_delay")
    joins = timeline.where(F.col("kind") == "join").select(
        F.col(_G).alias("_jg"), F.col("member_id").alias("_jm"), F.col("_iid").alias("_jiid"),
        F.col("at").alias("_jat"), F.col("_order").alias("_jorder"))
    return (
        away.join(joins, (F.col(_G) == F.col("_jg")) & (F.col("_jorder") > F.col("_order"))
                  & ((F.col("_jm") == F.col("member_id")) | (F.col("_jiid") == F.col("_iid"))), "left")
        .groupBy(_G, "member_id", "_iid", "_left", "_deadline", "_order", "_strategy", "_rule", "_timeout", "_delay")
        .agg(F.min("_jat").alias("_back"))
    )


def synthetic_events(e: DataFrame, timeline: DataFrame, back: DataFrame) -> DataFrame:
    """Session-timeout expiries of away members that do not return in time (``back``:
    :func:`away_episodes`), and the deadlines of the deferred resolution's timers (delay > 0,
    :func:`deferral_timers`; ``_set_at``: when the deadline's timer was set)."""
    expire = back.where(F.col("_back").isNull() | (F.col("_back") >= F.col("_deadline"))).select(
        _G, F.col("_deadline").alias("at"), F.lit("expire").alias("kind"), "member_id",
        "_strategy", "_rule", "_timeout", "_delay")
    departures = (
        timeline.where(F.col("_status") == "gone").select(_G, "at", "_strategy", "_rule", "_timeout", "_delay")
        .unionByName(expire.select(_G, "at", "_strategy", "_rule", "_timeout", "_delay"))
    )
    delayed = deferral_timers(departures.where(F.col("_delay") > 0)).select(
        _G, F.col("_hold_until").alias("at"), F.lit("delay_expire").alias("kind"),
        F.lit(None).cast("string").alias("member_id"), "_strategy", "_rule", "_timeout", "_delay", "_set_at")
    return expire.withColumn("_set_at", F.lit(None).cast("long")).unionByName(delayed)


#: one group-wide timer at a time: set at a departure when none runs, never extended
_TIMERS = """
aggregate(array_sort(_departed), CAST(array() AS array<struct<set_at:bigint,until:bigint>>),
  (acc, s) -> CASE WHEN size(acc) = 0 OR s > element_at(acc, -1).until
                   THEN concat(acc, array(named_struct('set_at', s, 'until', s + _delay)))
                   ELSE acc END)
"""


def deferral_timers(departures: DataFrame) -> DataFrame:
    """The deferred resolution's timers: ``group_id, _set_at, _hold_until`` (with the group's
    settings columns). Connect's leader keeps one timer per group
    (``IncrementalCooperativeAssignor.handleLostAssignments``): the first loss sets it to
    ``scheduled.rebalance.max.delay.ms`` ahead, later losses wait for the same deadline, and
    the rebalance at the deadline hands every lost partition out and resets it; a loss after
    that sets a new one. ``departures``: ``group_id, at`` and the settings columns."""
    keys = [_G, "_strategy", "_rule", "_timeout", "_delay"]
    return departures.groupBy(*keys).agg(F.collect_list(F.col("at").cast("bigint")).alias("_departed")).select(
        *keys, F.explode(F.expr(_TIMERS)).alias("_t")).select(
        *keys, F.col("_t.set_at").alias("_set_at"), F.col("_t.until").alias("_hold_until"))


def quiet_rejoins(timeline: DataFrame) -> DataFrame:
    """The static members' joins and restarts that call for no rebalance (``group_id,
    member_id, at, _quiet``): a static member back within its session timeout (KIP-345), or
    restarted with a new assignor list (a ``config_change``), while the group stays as it was.

    A classic broker checks only whether the group's selected protocol changes
    (``GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin``:
    ``ClassicGroup.selectProtocol`` with the member's new list in place of its old one), so a
    topic the member subscribed to meanwhile waits for some other rebalance, and a restart that
    leaves the selected assignor as it was is none; a forced strategy is every member's only
    assignor. A consumer group's coordinator ignores the lists and bumps the group epoch only
    when the subscription changed."""
    w_i = Window.partitionBy(_G, "_iid").orderBy("_order")
    j = timeline.where(F.col("_iid").isNotNull() & F.col("kind").isin("join", "leave", "crash", "config_change")) \
        .withColumn("_prev", F.lag(F.struct("kind", "at", "_topics", "_assignors")).over(w_i))
    back = ((F.col("kind") == "join") & F.col("_prev.kind").isin("leave", "crash")
            & (F.col("at") - F.col("_prev.at") < F.col("_timeout")))
    cand = j.where(back | (F.col("kind") == "config_change"))
    same_topics = F.sort_array("_topics") == F.sort_array(F.col("_prev._topics"))
    consumer = cand.where((F.col("_gp") == "consumer") & same_topics)
    forced = cand.where((F.col("_gp") == "classic") & F.col("_strategy").isNotNull())
    kept = _selection_kept(timeline, cand.where((F.col("_gp") == "classic") & F.col("_strategy").isNull()))
    return union_all([x.select(_G, "member_id", "at") for x in (consumer, forced, kept)]).withColumn(
        "_quiet", F.lit(True))


def _selection_kept(timeline: DataFrame, rejoins: DataFrame) -> DataFrame:
    """Of classic static ``rejoins`` (timeline rows with ``_prev``, the member's event
    before), those after which the coordinator selects the assignor it selected before: the
    selection (:func:`~spark_assign.protocol.select_assignor`) over the members in the group
    then (present, or away and not yet expired), with the member's old list, and with its new one."""
    c = rejoins.select(_G, "member_id", "at", "_order", F.col("_iid").alias("_ciid"),
                       F.concat_ws("|", _G, "member_id", F.col("at").cast("string")).alias("_key"),
                       F.col("_prev._assignors").alias("_before"), F.col("_assignors").alias("_after"))
    t = timeline.select(F.col(_G).alias("_g"), F.col("member_id").alias("_m"), F.col("_order").alias("_o"),
                        F.col("_iid").alias("_oiid"), "_status", F.col("_assignors").alias("_a"))
    latest = Window.partitionBy("_key", "_m").orderBy(F.col("_o").desc())
    others = (
        c.join(t, (F.col(_G) == F.col("_g")) & (F.col("_o") < F.col("_order")) & (F.col("_m") != F.col("member_id"))
               & (F.col("_oiid").isNull() | (F.col("_oiid") != F.col("_ciid"))))
        .withColumn("_r", F.row_number().over(latest))
        .where((F.col("_r") == 1) & F.col("_status").isin("present", "away"))
        .select("_key", F.col("_m").alias("member_id"), F.col("_a").alias("assignors"))
    )

    def selected(side: str) -> DataFrame:
        members = others.unionByName(c.select("_key", "member_id", F.col(side).alias("assignors")))
        chosen = select_assignor(members.select(
            F.col("_key").alias(_G), "member_id", F.array().cast("array<string>").alias("topics"), "assignors"),
            validate=False)
        return chosen.select(F.col(_G).alias("_key"), F.col("assignor").alias(side))

    kept = selected("_before").join(selected("_after"), "_key").where(F.col("_before") == F.col("_after"))
    return c.join(kept.select("_key"), "_key", "left_semi")


def steps_of(e: DataFrame, synthetic: DataFrame, quiet: DataFrame, cfg: DataFrame, *, phased: bool) -> DataFrame:
    """One row per group per distinct event time: ``group_id, at, step, kinds,
    triggers`` (whether the events alone call for a rebalance), and the group's settings
    (``cfg``, at the step's time: :func:`.migration.protocol_at`; ``quiet``:
    :func:`quiet_rejoins`). A classic group's rebalance begins at an
    event that calls for one (its leader's ``metadata`` refresh for a grown topic, a deferred
    resolution's deadline too); once ``phased`` (:mod:`.windows` added its ``sync`` and
    ``target`` events), only those rebalance."""
    allev = e.select(_G, "at", "kind", "member_id", "group_instance_id", "topics", "assignors", "_order").unionByName(
        synthetic.select(_G, "at", "kind", "member_id").withColumn("group_instance_id", F.lit(None).cast("string"))
        .withColumn("topics", F.lit(None).cast("array<string>")).withColumn("assignors", F.lit(None).cast("array<string>"))
        .withColumn("_order", F.lit(None).cast("int")),
        allowMissingColumns=False)
    flagged = allev.join(quiet, [_G, "member_id", "at"], "left").withColumn(
        "_trigger",
        (F.col("kind").isin("join", "config_change") & F.col("_quiet").isNull())
        | F.col("kind").isin("subscribe", "unsubscribe", "partitions_added", "expire")
        | ((F.col("kind") == "leave") & F.col("member_id").isNotNull()),
    )
    # a static leave does not trigger: find it (the leaving member has an instance id)
    static_leave = e.where(F.col("kind") == "leave").join(
        e.where((F.col("kind") == "join") & F.col("group_instance_id").isNotNull()).select(_G, "member_id").distinct(),
        [_G, "member_id"], "left_semi").select(_G, "member_id", "at", F.lit(True).alias("_static_leave"))
    flagged = flagged.join(static_leave, [_G, "member_id", "at"], "left").withColumn(
        "_trigger", F.col("_trigger") & ~((F.col("kind") == "leave") & F.col("_static_leave").isNotNull()))
    classic = F.col("_gp") == "classic"
    if phased:  # a classic group's join phase ends in its sync, a consumer group's in its target
        trigger = F.col("kind").isin("sync", "target")
    else:
        trigger = (F.when(classic & (F.col("kind") == "partitions_added") & (F.col("_mma") > 0), False)
                   .when(classic & F.col("kind").isin("metadata", "delay_expire"), True)
                   .otherwise(F.col("_trigger")))
    # each event under the group's protocol at its time (:func:`.migration.protocol_at`)
    flagged = protocol_at(flagged.join(cfg.select(_G, "_gp", "_mma", "_converted"), _G)).withColumn(
        "_trigger", F.coalesce(trigger, F.lit(False)))
    steps = flagged.groupBy(_G, "at").agg(
        F.array_join(F.array_sort(F.collect_list("kind")), ",").alias("kinds"),
        F.max(F.col("_trigger").cast("int")).alias("_t"),
    )
    return steps.withColumn("step", F.dense_rank().over(Window.partitionBy(_G).orderBy("at")).cast("int")).select(
        _G, "at", "step", "kinds", (F.col("_t") == 1).alias("triggers")).join(cfg, _G).transform(protocol_at)


def latest_events(timeline: DataFrame, steps: DataFrame) -> DataFrame:
    """Per group, step and member: the member's latest event at or before the step's
    time, with what it says of the member (the rows :func:`rosters` and
    :func:`departure_kinds` read; one join and one window for both)."""
    t = timeline.select(
        _G, "member_id", F.col("at").alias("_eat"), "_order", "kind", "_topics", "_assignors", "_iid", "_rack",
        "_status", "_deadline", "_member_type")
    latest_first = Window.partitionBy(_G, "step", "member_id").orderBy(F.col("_order").desc())
    return (
        steps.select(_G, "at", "step").join(t, _G).where(F.col("_eat") <= F.col("at"))
        .withColumn("_r", F.row_number().over(latest_first)).where("_r = 1").drop("_r")
    )


def rosters(latest: DataFrame) -> DataFrame:
    """The members of every group at every step (from :func:`latest_events`): each
    member's latest event at or before the step's time, kept while present, or away
    before its deadline and not replaced by a member with its group.instance.id."""
    live = latest.where(
        (F.col("_status") == "present") | ((F.col("_status") == "away") & (F.col("at") < F.col("_deadline"))))
    present_iids = live.where((F.col("_status") == "present") & F.col("_iid").isNotNull()).select(
        F.col(_G).alias("_pg"), F.col("step").alias("_ps"), F.col("_iid").alias("_piid"),
        F.col("member_id").alias("_pm"))
    replaced = live.where(F.col("_status") == "away").join(
        present_iids, (F.col(_G) == F.col("_pg")) & (F.col("step") == F.col("_ps"))
        & (F.col("_iid") == F.col("_piid")) & (F.col("member_id") != F.col("_pm")), "left_semi")
    roster = live.join(replaced.select(_G, "step", "member_id"), [_G, "step", "member_id"], "left_anti")
    return roster.select(
        _G, "step", "member_id", F.col("_iid").alias("group_instance_id"), F.col("_rack").alias("rack"),
        F.col("_topics").alias("topics"), F.col("_assignors").alias("assignors"), F.col("_status").alias("status"),
        F.col("kind").alias("last_kind"), F.col("_eat").alias("last_at"), F.col("_member_type").alias("member_type"))


def departure_kinds(latest: DataFrame) -> DataFrame:
    """``group_id, step, member_id, kind`` (from :func:`latest_events`): 'lost' for
    members whose last event before the step is a crash, else 'revoked'."""
    return latest.select(_G, "step", "member_id",
                         F.when(F.col("kind") == "crash", F.lit("lost")).otherwise(F.lit("revoked")).alias("kind"))


def check_rosters_agree(rosters: DataFrame, steps: DataFrame) -> None:
    """NoCommonAssignorError before anything is recorded: at every step of every
    group, the members present must share an assignor. Groups are reported as
    ``<group>@step<k>``."""
    m = rosters.join(steps.select(_G, "step", "at"), [_G, "step"]).select(
        F.concat(F.col(_G), F.lit(" at "), F.col("at").cast("string"), F.lit(" (step "),
                 F.col("step").cast("string"), F.lit(")")).alias(_G),
        "member_id", F.array(F.lit("t")).alias("topics"), "assignors")
    raise_if_rows(disagreements(m), NoCommonAssignorError,
                  "no assignor supported by every member of the group (member=[assignors in preference order])")
