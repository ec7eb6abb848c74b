"""Replaying membership events through rebalances: ``simulate()`` and ``what_if()``.

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
assignors           array<string> (preference order)             join, config_change
topic               string                                       partitions_added, lag_change
partitions          int: the topic's new partition count         partitions_added
partition           int (null: every partition of the topic)     lag_change
lag                 long                                         lag_change
seq                 long, optional: the order of the events      all
=================== ============================================ ==================================

Semantics (Kafka's classic protocol):

* ``join``: the member joins -> rebalance. A static member (``group_instance_id``)
  returning within ``session_timeout_ms`` of its leave or crash takes its
  partitions back with no rebalance (a rebalance only if its subscription or
  assignors changed).
* ``leave``: a dynamic member sends LeaveGroup -> rebalance now, its partitions
  recorded ``revoked``. A static member does not (KIP-345): the group waits for
  the session timeout, then rebalances.
* ``crash``: no LeaveGroup: the member stays in the group, its partitions idle,
  until ``session_timeout_ms`` expires; then a rebalance, the partitions recorded
  ``lost``.
* ``subscribe`` / ``unsubscribe`` / ``config_change``: the member rejoins with
  the new subscription / assignor list -> rebalance.
* ``partitions_added``: the topic grows to ``partitions`` -> rebalance.
  ``lag_change``: new lags (no rebalance; lag-aware reads them next time).
* Delayed resolution (``scheduled_rebalance_max_delay_ms`` > 0, Connect's
  incremental cooperative rebalancing, Design II): the partitions of a departed
  member stay unassigned until the delay expires; if it (or a replacement with
  its ``group_instance_id``) returns in time it gets them back, otherwise the
  rebalance at the deadline spreads them.

The replay runs per **step**: the k-th distinct event time of every group is
step k; each step is one distributed computation over all groups with an
event at that step (never a loop over groups); the driver loops over steps
(bounded by the events per group) and cuts the lineage of the state each step.
Every rebalance round is recorded as a generation in ``history``; the
simulated time of each generation goes to the ``simulation`` table next to the
history (``group_id, generation, round, step, at, event_kinds, unassigned``).
The whole replay is recorded once it is done: one commit per table per
``simulate()`` call, atomic and idempotent like any record (a replay
interrupted midway records nothing).
"""

from __future__ import annotations

import importlib.resources
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .assign import group_protocol_of
from .errors import InvalidEventsError, InvalidOptionError, raise_if_rows
from .inputs import OWNED_TYPE, conform_columns, normalize_partitions
from .lineage import explains_lost_executors, materialize_state
from .options import strategy_options
from .protocol import canonical_assignors, disagreements
from .rebalance import rebalance

_G = "group_id"
_TP = ["topic", "partition"]
log = logging.getLogger(__name__)
#: separates the group from the topic in group-scoped topic names
SCOPE = "\u001f"

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
}

SIMULATION_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("step", T.IntegerType()),
    T.StructField("at", T.TimestampType()),
    T.StructField("event_kinds", T.StringType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("members", T.LongType()),
    T.StructField("assigned", T.LongType()),
    T.StructField("unassigned", T.LongType()),
    T.StructField("moved", T.LongType()),
    T.StructField("revoked", T.LongType()),
    T.StructField("lost", T.LongType()),
])


# --------------------------------------------------------------------------- events


def normalize_events(events: DataFrame) -> DataFrame:
    """Events with every column of the contract, typed; ``at`` in epoch ms."""
    if "at" in events.columns and isinstance(events.schema["at"].dataType, (T.TimestampType, T.TimestampNTZType)):
        events = events.withColumn("at", F.unix_millis(F.col("at").cast("timestamp")))
    return conform_columns(events, EVENT_COLUMNS, ("group_id", "at", "kind"), "events", InvalidEventsError)


def _ordered(events: DataFrame) -> DataFrame:
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
    e = _ordered(events)
    shape = lambda df, problem: df.select(  # noqa: E731
        F.lit(problem).alias("problem"), _G, "at", "kind", "member_id", "_order")
    bad = [
        shape(e.where(F.col(_G).isNull() | F.col("at").isNull() | F.col("kind").isNull()),
              "null group_id, at or kind"),
        shape(e.where(~F.col("kind").isin(*KINDS)), f"unknown kind (expected one of {', '.join(KINDS)})"),
        shape(e.where(F.col("kind").isin(*MEMBER_KINDS) & F.col("member_id").isNull()),
              "member event without member_id"),
        shape(e.where((F.col("kind") == "join") & F.col("topics").isNull()), "join without topics"),
        shape(e.where((F.col("kind") == "partitions_added") & (F.col("topic").isNull() | F.col("partitions").isNull())),
              "partitions_added needs topic and partitions (the new count)"),
        shape(e.where((F.col("kind") == "lag_change") & (F.col("topic").isNull() | F.col("lag").isNull() | (F.col("lag") < 0))),
              "lag_change needs topic and a non-negative lag"),
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


def _with_config(events: DataFrame, *, strategy, protocol_rule, session_timeout_ms, delay_ms,
                 group_protocol="classic", heartbeat_ms=5_000) -> DataFrame:
    """Per-group settings as columns (``what_if`` sets them per variant)."""
    defaults = {
        "_strategy": F.lit(strategy).cast("string"),
        "_rule": F.lit(protocol_rule).cast("string"),
        "_timeout": F.lit(int(session_timeout_ms)).cast("long"),
        "_delay": F.lit(int(delay_ms or 0)).cast("long"),
        "_gp": F.lit(group_protocol).cast("string"),
        "_hb": F.lit(int(heartbeat_ms)).cast("long"),
    }
    for c, v in defaults.items():
        events = events.withColumn(c, F.coalesce(F.col(c), v) if c in events.columns else v)
    return events


def _member_timeline(e: DataFrame) -> DataFrame:
    """Every member event with the member's state after it: current topics,
    assignors, instance id, rack, status (present / away / gone) and, for away
    members, the session-timeout deadline."""
    me = e.where(F.col("kind").isin(*MEMBER_KINDS))
    w = Window.partitionBy(_G, "member_id").orderBy("_order").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    hist = F.collect_list(F.struct("_order", "kind", "topics", "assignors")).over(w)
    topics = F.aggregate(
        F.array_sort(hist), F.array().cast("array<string>"),
        lambda acc, x: F.when(x["kind"] == "join", F.coalesce(x["topics"], F.array().cast("array<string>")))
        .when(x["kind"] == "subscribe", F.array_union(acc, F.coalesce(x["topics"], F.array().cast("array<string>"))))
        .when(x["kind"] == "unsubscribe", F.array_except(acc, F.coalesce(x["topics"], F.array().cast("array<string>"))))
        .otherwise(acc),
    )
    assignors = F.aggregate(
        F.array_sort(hist), F.lit(None).cast("array<string>"),
        lambda acc, x: F.when(x["kind"].isin("join", "config_change"), x["assignors"]).otherwise(acc),
    )
    joined = F.last(F.when(F.col("kind") == "join", F.struct("group_instance_id", "rack")), ignorenulls=True).over(w)
    t = (
        me.withColumn("_topics", topics).withColumn("_assignors", assignors).withColumn("_j", joined)
        .withColumn("_iid", F.col("_j.group_instance_id")).withColumn("_rack", F.col("_j.rack"))
    )
    status = (
        F.when(F.col("kind") == "crash", F.lit("away"))
        .when((F.col("kind") == "leave") & F.col("_iid").isNotNull(), F.lit("away"))
        .when(F.col("kind") == "leave", F.lit("gone"))
        .otherwise(F.lit("present"))
    )
    return t.withColumn("_status", status).withColumn(
        "_deadline", F.when(F.col("_status") == "away", F.col("at") + F.col("_timeout")))


def _synthetic(e: DataFrame, timeline: DataFrame) -> DataFrame:
    """Session-timeout expiries of away members that do not return in time, and
    the delayed-resolution deadlines of every departure (delay > 0)."""
    away = timeline.where(F.col("_status") == "away").select(
        _G, "member_id", "_iid", F.col("at").alias("_left"), "_deadline", "_order",
        "_strategy", "_rule", "_timeout", "_delay")
    joins = timeline.where(F.col("kind") == "join").select(
        F.col(_G).alias("_jg"), F.col("member_id").alias("_jm"), F.col("_iid").alias("_jiid"),
        F.col("at").alias("_jat"), F.col("_order").alias("_jorder"))
    back = (
        away.join(joins, (F.col(_G) == F.col("_jg")) & (F.col("_jorder") > F.col("_order"))
                  & ((F.col("_jm") == F.col("member_id")) | (F.col("_jiid") == F.col("_iid"))), "left")
        .groupBy(_G, "member_id", "_iid", "_left", "_deadline", "_order", "_strategy", "_rule", "_timeout", "_delay")
        .agg(F.min("_jat").alias("_back"))
    )
    expire = back.where(F.col("_back").isNull() | (F.col("_back") >= F.col("_deadline"))).select(
        _G, F.col("_deadline").alias("at"), F.lit("expire").alias("kind"), "member_id",
        "_strategy", "_rule", "_timeout", "_delay")
    departures = (
        timeline.where(F.col("_status") == "gone").select(_G, "at", "_strategy", "_rule", "_timeout", "_delay")
        .unionByName(expire.select(_G, "at", "_strategy", "_rule", "_timeout", "_delay"))
    )
    delayed = departures.where(F.col("_delay") > 0).select(
        _G, (F.col("at") + F.col("_delay")).alias("at"), F.lit("delay_expire").alias("kind"),
        F.lit(None).cast("string").alias("member_id"), "_strategy", "_rule", "_timeout", "_delay")
    return expire.unionByName(delayed)


def _steps(e: DataFrame, synthetic: DataFrame) -> DataFrame:
    """One row per group per distinct event time: ``group_id, at, step, kinds,
    triggers`` (whether the events alone call for a rebalance)."""
    allev = e.select(_G, "at", "kind", "member_id", "group_instance_id", "topics", "assignors", "_order").unionByName(
        synthetic.select(_G, "at", "kind", "member_id").withColumn("group_instance_id", F.lit(None).cast("string"))
        .withColumn("topics", F.lit(None).cast("array<string>")).withColumn("assignors", F.lit(None).cast("array<string>"))
        .withColumn("_order", F.lit(None).cast("int")),
        allowMissingColumns=False)
    # a static member returning within the session timeout with the same
    # subscription and assignors does not trigger a rebalance
    w_inst = Window.partitionBy(_G, "group_instance_id").orderBy("at", "_order")
    joins = (
        e.where(F.col("kind").isin("join", "leave", "crash"))
        .withColumn("_iid", F.last("group_instance_id", ignorenulls=True).over(
            Window.partitionBy(_G, "member_id").orderBy("_order").rowsBetween(Window.unboundedPreceding, 0)))
    )
    w_i = Window.partitionBy(_G, "_iid").orderBy("_order")
    joins = (
        joins.where(F.col("_iid").isNotNull())
        .withColumn("_prev_kind", F.lag("kind").over(w_i))
        .withColumn("_prev_at", F.lag("at").over(w_i))
        .withColumn("_prev_join", F.last(F.when(F.col("kind") == "join", F.struct("topics", "assignors")), ignorenulls=True)
                    .over(w_i.rowsBetween(Window.unboundedPreceding, -1)))
    )
    quiet = joins.where(
        (F.col("kind") == "join") & F.col("_prev_kind").isin("leave", "crash")
        & (F.col("at") - F.col("_prev_at") < F.col("_timeout"))
        & (F.sort_array("topics") == F.sort_array(F.col("_prev_join.topics")))
        & F.coalesce(canonical_assignors("assignors") == canonical_assignors(F.col("_prev_join.assignors")), F.lit(True))
    ).select(_G, "member_id", "at", F.lit(True).alias("_quiet"))
    del w_inst
    flagged = allev.join(quiet, [_G, "member_id", "at"], "left").withColumn(
        "_trigger",
        (F.col("kind").isin("join") & F.col("_quiet").isNull())
        | F.col("kind").isin("subscribe", "unsubscribe", "config_change", "partitions_added", "expire")
        | ((F.col("kind") == "leave") & F.col("member_id").isNotNull()),
    )
    # a static leave does not trigger: find it (the leaving member has an instance id)
    static_leave = e.where(F.col("kind") == "leave").join(
        e.where((F.col("kind") == "join") & F.col("group_instance_id").isNotNull()).select(_G, "member_id").distinct(),
        [_G, "member_id"], "left_semi").select(_G, "member_id", "at", F.lit(True).alias("_static_leave"))
    flagged = flagged.join(static_leave, [_G, "member_id", "at"], "left").withColumn(
        "_trigger", F.col("_trigger") & ~((F.col("kind") == "leave") & F.col("_static_leave").isNotNull()))
    steps = flagged.groupBy(_G, "at").agg(
        F.array_join(F.array_sort(F.collect_list("kind")), ",").alias("kinds"),
        F.max(F.col("_trigger").cast("int")).alias("_t"),
    )
    return steps.withColumn("step", F.dense_rank().over(Window.partitionBy(_G).orderBy("at")).cast("int")).select(
        _G, "at", "step", "kinds", (F.col("_t") == 1).alias("triggers"))


def _rosters(timeline: DataFrame, steps: DataFrame) -> DataFrame:
    """The members of every group at every step: each member's latest event at
    or before the step's time, kept while present, or away before its deadline
    and not replaced by a member with its group.instance.id."""
    t = timeline.select(
        _G, "member_id", F.col("at").alias("_eat"), "_order", "kind", "_topics", "_assignors", "_iid", "_rack",
        "_status", "_deadline")
    s = steps.select(_G, "at", "step")
    latest = (
        s.join(t, _G).where(F.col("_eat") <= F.col("at"))
        .withColumn("_r", F.row_number().over(Window.partitionBy(_G, "step", "member_id").orderBy(F.col("_order").desc())))
        .where("_r = 1").drop("_r")
    )
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
        F.col("kind").alias("last_kind"))


def _departure_kinds(timeline: DataFrame, steps: DataFrame) -> DataFrame:
    """``group_id, step, member_id, kind``: 'lost' for members whose last event
    before the step is a crash, else 'revoked'."""
    t = timeline.select(_G, "member_id", F.col("at").alias("_eat"), "_order", F.col("kind").alias("_k"))
    latest = (
        steps.select(_G, "at", "step").join(t, _G).where(F.col("_eat") <= F.col("at"))
        .withColumn("_r", F.row_number().over(Window.partitionBy(_G, "step", "member_id").orderBy(F.col("_order").desc())))
        .where("_r = 1")
    )
    return latest.select(_G, "step", "member_id",
                         F.when(F.col("_k") == "crash", F.lit("lost")).otherwise(F.lit("revoked")).alias("kind"))


# --------------------------------------------------------------------------- the replay


def _scope(col: Column | str = "topic") -> Column:
    c = F.col(col) if isinstance(col, str) else col
    return F.concat(F.col(_G), F.lit(SCOPE), c)


def _unscope(col: Column | str = "topic") -> Column:
    c = F.col(col) if isinstance(col, str) else col
    return F.substring_index(c, SCOPE, -1)


@dataclass
class SimulationResult:
    """What :func:`simulate` returns (DataFrames):

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


def _union(dfs: list[DataFrame]) -> DataFrame:
    """The rows of ``dfs`` (at least one frame) in one DataFrame."""
    out = dfs[0]
    for d in dfs[1:]:
        out = out.unionByName(d)
    return out


@explains_lost_executors
def simulate(
    events: DataFrame,
    partitions: DataFrame,
    *,
    strategy: str | None = None,
    protocol_rule: str = "static",
    session_timeout_ms: int = 45_000,
    scheduled_rebalance_max_delay_ms: int = 0,
    lags: DataFrame | None = None,
    history: Any = None,
    max_rounds: int = 5,
    validate: bool = True,
    group_protocol: str | None = None,
    heartbeat_interval_ms: int = 5_000,
    **options: Any,
) -> SimulationResult:
    """Replay ``events`` (see the module doc) for every group through rebalances.

    ``partitions``: the initial metadata (``topic, partition``), the same for
    every group. ``strategy``: force one assignor (default: Kafka's selection
    from the members' ``assignors``). ``lags``: initial lags (``topic,
    partition, lag``, optionally ``group_id``). ``history``: an
    :class:`~spark_assign.history.AssignmentHistory`; every rebalance round is
    recorded as a generation and the simulated times go to the ``simulation``
    table beside it (:func:`simulation_store`). All events are validated before
    anything is recorded.

    ``group_protocol="consumer"`` (implied by ``strategy="uniform"``) replays KIP-848's
    reconciliation instead of JoinGroup rounds: every membership or metadata change
    bumps the group epoch and the broker's assignor (``uniform``, or ``range``)
    computes a new target from the current assignment; the members revoke what they
    must give up (nothing is revoked from members that keep their partitions, no
    stop-the-world, no EAGER) and a revoked partition goes to its new owner on the
    next heartbeat, ``heartbeat_interval_ms`` later. The epoch is recorded as a
    generation, and the hand-over, when partitions change owner, as the next one
    at the heartbeat's time, so the partitions awaiting it count as unassigned for
    one heartbeat (the what-if's ``unassigned_partition_seconds``).

    >>> r = simulate(events, partitions, history=AssignmentHistory("out/history"))  # doctest: +SKIP
    >>> r.generations.orderBy("group_id", "generation").show()                      # doctest: +SKIP
    """
    group_protocol = _protocol_of(strategy, group_protocol)
    if group_protocol == "consumer" and strategy is None:  # the broker's default: the members' lists play no part
        strategy = "uniform"
    result, rows = _replay(
        events, partitions, strategy=strategy, protocol_rule=protocol_rule, session_timeout_ms=session_timeout_ms,
        group_protocol=group_protocol, heartbeat_interval_ms=heartbeat_interval_ms,
        scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms, lags=lags, keep_rows=history is not None,
        max_rounds=max_rounds, validate=validate, **options)
    if history is not None and rows is not None:
        _record(history, rows, result.generations, result.revocations, lags_known=result.lags is not None)
    return result


def _protocol_of(strategy: str | None, group_protocol: str | None) -> str:
    """The group protocol a replay runs (checked against ``strategy`` when one is forced;
    without one, a consumer group runs the broker's default, ``uniform``)."""
    if strategy is None:
        return group_protocol_of("uniform" if group_protocol == "consumer" else "range", group_protocol)
    return group_protocol_of(strategy, group_protocol)


def _all_options(strategy: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` checked against the strategies a replay can run (every client
    strategy when groups select theirs), parsed; InvalidOptionError otherwise."""
    parsed: dict[str, Any] = {}
    for per in strategy_options(strategy, options).values():
        parsed.update(per)
    return parsed


def _replay(events: DataFrame, partitions: DataFrame, *, strategy, protocol_rule, session_timeout_ms,
            scheduled_rebalance_max_delay_ms, lags, keep_rows: bool, max_rounds: int, validate: bool,
            group_protocol: str = "classic", heartbeat_interval_ms: int = 5_000,
            **options: Any) -> tuple[SimulationResult, DataFrame | None]:
    """:func:`simulate` without the recording: the result, and (``keep_rows``) every
    recorded generation's assignment rows with their lags (None when nothing rebalanced)."""
    options = _all_options(strategy, options)  # an unknown option fails before the replay starts
    spark = events.sparkSession
    e = normalize_events(events)
    extra_cfg = [c for c in ("_strategy", "_rule", "_timeout", "_delay", "_gp", "_hb") if c in events.columns]
    if extra_cfg:
        e = e.join(events.select(_G, *extra_cfg).distinct(), _G, "left")
    e = _with_config(e, strategy=strategy, protocol_rule=protocol_rule, session_timeout_ms=session_timeout_ms,
                     delay_ms=scheduled_rebalance_max_delay_ms, group_protocol=group_protocol,
                     heartbeat_ms=heartbeat_interval_ms)
    p0 = normalize_partitions(partitions)
    if validate:
        validate_events(e, p0)
    e = materialize_state(_ordered(e))
    timeline = materialize_state(_member_timeline(e))
    synthetic = _synthetic(e, timeline)
    cfg = e.select(_G, "_strategy", "_rule", "_timeout", "_delay", "_gp", "_hb").distinct()
    steps = materialize_state(_steps(e, synthetic).join(cfg, _G))
    rosters = _rosters(timeline, steps)
    rosters = rosters.join(cfg, _G).withColumn(
        "assignors", F.when(F.col("_strategy").isNotNull(), F.array(F.col("_strategy"))).otherwise(F.col("assignors")))
    rosters = materialize_state(rosters)
    if validate:
        _check_rosters_agree(rosters, steps)
    dep_kinds = materialize_state(_departure_kinds(timeline, steps))
    # per step, over all groups: whether some group grows a topic, changes lags, is
    # called to rebalance by its events, or delays the resolution of departures (one row
    # per step, bounded by the events per group)
    has = lambda kind: F.array_contains(F.split("kinds", ","), kind)  # noqa: E731
    per_step = {r.step: r for r in steps.groupBy("step").agg(
        F.bool_or(has("partitions_added")).alias("grow"), F.bool_or(has("lag_change")).alias("lag"),
        F.bool_or("triggers").alias("triggers"), F.bool_or(F.col("_delay") > 0).alias("delay")).collect()}
    n_steps = max(per_step, default=0)
    # without delayed resolution anywhere nothing is ever held: the held state stays empty
    any_delay = any(r.delay for r in per_step.values())

    # each group's topics: the ones its members subscribe to or its events name
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
        lag_state = materialize_state(lg if _G in lg.columns else group_topics.join(lg, "topic").select(_G, "topic", "partition", "lag"))
    owned_state = materialize_state(spark.createDataFrame(
        [], "group_id string, member_id string, group_instance_id string, topic string, partition int"))
    held = materialize_state(spark.createDataFrame(
        [], "group_id string, member_id string, group_instance_id string, topic string, partition int, deadline long"))
    group_state = materialize_state(spark.createDataFrame([], "group_id string, generation int, protocol string"))

    gens_out, steps_out, revs_out, rows_out = [], [], [], []
    for k in range(1, n_steps + 1):
        log.info("simulate: step %d of %d", k, n_steps)
        flags_k = per_step.get(k)
        sk = steps.where(F.col("step") == k)
        ev = e.join(sk.select(_G, "at"), [_G, "at"], "left_semi")
        roster = rosters.where(F.col("step") == k)
        # 1. metadata and lags
        if flags_k is not None and flags_k.grow:
            grown = ev.where(F.col("kind") == "partitions_added").groupBy(_G, "topic").agg(
                F.max("partitions").alias("_new"))
            meta = materialize_state(
                meta.join(grown, [_G, "topic"], "full_outer")
                .select(_G, "topic", F.greatest(F.coalesce("partitions", F.lit(0)), F.coalesce("_new", F.lit(0)))
                        .cast("int").alias("partitions")))
        lag_ev = ev.where(F.col("kind") == "lag_change")
        if flags_k is not None and flags_k.lag:
            expanded = _lag_rows(lag_ev, meta)
            base = lag_state if lag_state is not None else expanded.limit(0)
            lag_state = materialize_state(base.join(expanded.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
                            .unionByName(expanded))
        # 2. owners no longer in the group: a static member's replacement inherits, others depart
        ok = owned_state.join(sk.select(_G), _G, "left_semi")
        in_roster = roster.select(_G, "member_id")
        stay = ok.join(in_roster, [_G, "member_id"], "left_semi")
        gone = ok.join(in_roster, [_G, "member_id"], "left_anti")
        heirs = roster.where(F.col("group_instance_id").isNotNull()).select(
            _G, F.col("member_id").alias("_heir"), F.col("group_instance_id").alias("_hiid"))
        inherited = gone.join(heirs, [_G]).where(F.col("group_instance_id") == F.col("_hiid")).select(
            _G, F.col("_heir").alias("member_id"), F.col("_hiid").alias("group_instance_id"), "topic", "partition")
        departed = gone.join(inherited.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
        departed = departed.join(dep_kinds.where(F.col("step") == k).drop("step"), [_G, "member_id"], "left")
        # 3. delayed resolution: returns take their partitions back, deadlines release them
        hk = held.join(sk.select(_G, "at", "_delay"), _G)
        back = hk.join(roster.select(_G, F.col("member_id").alias("_rm"), F.col("group_instance_id").alias("_riid")),
                       [_G]).where(
            (F.col("_rm") == F.col("member_id")) | (F.col("_riid") == F.col("group_instance_id")))
        back = back.select(_G, F.col("_rm").alias("member_id"), F.col("_riid").alias("group_instance_id"),
                           "topic", "partition").dropDuplicates([_G, "topic", "partition"])
        hk_rest = hk.join(back.select(_G, "topic", "partition"), [_G, "topic", "partition"], "left_anti")
        released = hk_rest.where(F.col("deadline") <= F.col("at"))
        new_held = (
            hk_rest.where(F.col("deadline") > F.col("at")).select(held.columns)
            .unionByName(departed.join(sk.select(_G, "at", "_delay"), _G).where(F.col("_delay") > 0).select(
                _G, "member_id", "group_instance_id", "topic", "partition",
                (F.col("at") + F.col("_delay")).alias("deadline")))
        )
        # a lazy plan over stored state, read by the rebalance's members and by the stored owned state
        owned_now = stay.unionByName(inherited).unionByName(back)
        if any_delay:
            held = materialize_state(held.join(sk.select(_G), _G, "left_anti").unionByName(new_held))
        # 4. which groups rebalance: the events call for it, or partitions were released
        rel = released.select(_G).distinct().withColumn("_rel", F.lit(True))
        dep = departed.select(_G).distinct().withColumn("_dep", F.lit(True))
        flags = sk.join(rel, _G, "left").join(dep, _G, "left").withColumn(
            "rebalanced", F.col("triggers") | F.col("_rel").isNotNull() | F.col("_dep").isNotNull())
        flags = materialize_state(flags.select(_G, "at", "step", "kinds", "rebalanced", "_rule", "_gp", "_hb",
                                               "_strategy"), eager=False)
        rb_groups = flags.where("rebalanced").select(_G)
        new_owned = owned_now.join(rb_groups, _G, "left_anti")
        # a step whose events call for a rebalance has groups to rebalance; otherwise only
        # departures or released partitions may call for one (that action stores the flags)
        if (flags_k is not None and flags_k.triggers) or flags.agg(F.bool_or("rebalanced")).first()[0]:  # type: ignore[index]  # a global aggregate: one row
            # materialized by rebalance()
            members = _members_for(roster.join(rb_groups, _G, "left_semi"), owned_now, group_state, flags)
            scoped_meta = meta.join(rb_groups, _G, "left_semi")
            scoped_parts = scoped_meta.select(
                _G, "topic", F.explode(F.sequence(F.lit(0), F.col("partitions") - 1)).alias("partition")
            ).where(F.col("partition") >= 0).select(_scope("topic").alias("topic"), F.col("partition").cast("int"))
            unavailable = held.join(rb_groups, _G, "left_semi").select(_scope("topic").alias("topic"), "partition")
            scoped_lags = (lag_state.join(rb_groups, _G, "left_semi").select(_G, _scope("topic").alias("topic"),
                                                                             "partition", "lag")
                           if lag_state is not None else None)
            dep_rows = departed.join(rb_groups, _G, "left_semi").select(
                _G, "member_id", _scope("topic").alias("topic"), "partition", "kind")
            r = rebalance(
                members, scoped_parts, lags=scoped_lags, protocol_rule=protocol_rule,
                max_rounds=max_rounds, unavailable=unavailable, departed=dep_rows, validate=False, **options)
            final = r.final.join(roster.select(_G, "member_id", "group_instance_id"), [_G, "member_id"]).select(
                _G, "member_id", "group_instance_id", _unscope("topic").alias("topic"), "partition")
            new_owned = new_owned.unionByName(final)
            last = r.summary.groupBy(_G).agg(F.max_by(F.struct("generation", "protocol"), "round").alias("_l"))
            group_state = materialize_state(group_state.join(last.select(_G), _G, "left_anti").unionByName(
                last.select(_G, F.col("_l.generation").alias("generation"), F.col("_l.protocol").alias("protocol"))))
            # a consumer group's hand-over comes one heartbeat after its group epoch
            at = F.col("at") + F.when(F.col("_gp") == "consumer", (F.col("round") - 1) * F.col("_hb")).otherwise(0)
            gens_out.append(materialize_state(r.summary.join(flags.select(_G, "at", "step", "kinds", "_gp", "_hb"), _G).select(
                _G, "generation", "round", "step", F.timestamp_millis(at).alias("at"),
                F.col("kinds").alias("event_kinds"), F.col("assignor").alias("strategy"), "protocol", "members",
                "assigned", (F.col("pending") + F.col("unavailable")).alias("unassigned"), "moved", "revoked", "lost")))
            revs_out.append(materialize_state(r.revocations.withColumn("topic", _unscope("topic"))))
            if keep_rows:  # the rounds' rows with the lags of the step, recorded at the end
                rows = r.assignments.select(_G, "generation", "member_id", "topic", "partition")
                if scoped_lags is not None:
                    rows = rows.join(scoped_lags, [_G, "topic", "partition"], "left")
                else:
                    rows = rows.withColumn("lag", F.lit(None).cast("long"))
                rows_out.append(materialize_state(rows.withColumn("topic", _unscope("topic"))))
        owned_state = materialize_state(owned_state.join(sk.select(_G), _G, "left_anti").unionByName(new_owned))
        steps_out.append(materialize_state(_step_stats(flags, roster, meta, owned_state)))

    gens = _union(gens_out) if gens_out else spark.createDataFrame([], SIMULATION_SCHEMA)
    revs = _union(revs_out) if revs_out else spark.createDataFrame(
        [], "group_id string, generation int, round int, member_id string, topic string, partition int, kind string")
    st = _union(steps_out) if steps_out else spark.createDataFrame(
        [], "group_id string, step int, at long, kinds string, rebalanced boolean, partitions long, unassigned long, idle long")
    result = SimulationResult(generations=gens, steps=st, assignment=owned_state.drop("group_instance_id"),
                              revocations=revs, lags=lag_state)
    return result, (_union(rows_out) if rows_out else None)


def _record(history, rows: DataFrame, gens: DataFrame, revs: DataFrame, *, lags_known: bool) -> None:
    """Every generation of the simulation in ``history`` (one commit per table), then
    its simulated times in the ``simulation`` table (one commit), both idempotent."""
    from datetime import datetime, timezone

    meta = gens.select(
        _G, "generation", "strategy", F.lower("protocol").alias("protocol"), "round",
        F.lit(datetime.now(timezone.utc)).cast("timestamp").alias("recorded_at"), "members", "unassigned")
    recorded = history.record_generations(
        rows, meta, revocations=revs.select(_G, "generation", "member_id", *_TP, "kind"), lags_known=lags_known)
    rid = recorded.agg(F.min("record_id")).first()[0]
    simulation_store(history).append(gens, app_id=f"spark-assign:simulation:{rid}")


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
        F.struct(_scope("topic").alias("topic"), F.col("partition").cast("int").alias("partition")))).alias("_o"))
    return (
        roster.join(o, [_G, "member_id"], "left").join(group_state, _G, "left")
        .join(flags.select(_G, F.col("_rule").alias("protocol_rule"), F.col("_gp").alias("group_protocol"),
                           F.when(F.col("_gp") == "consumer", F.col("_strategy")).alias("remote_assignor")), _G)
        .select(
            _G, "member_id", "group_instance_id", "rack",
            F.transform(F.coalesce("topics", F.array().cast("array<string>")),
                        lambda t: F.concat(F.col(_G), F.lit(SCOPE), t)).alias("topics"),
            F.coalesce("_o", F.array().cast(OWNED_TYPE)).cast(OWNED_TYPE).alias("owned"),
            F.when(F.col("_o").isNotNull(), F.col("generation")).cast("int").alias("generation"),
            "assignors",
            F.when(F.col("_o").isNotNull(), F.col("protocol")).alias("protocol"),
            "protocol_rule", "group_protocol", "remote_assignor",
        )
    )


def _step_stats(flags: DataFrame, roster: DataFrame, meta: DataFrame, owned: DataFrame) -> DataFrame:
    subs = roster.select(_G, F.explode("topics").alias("topic")).distinct().join(meta, [_G, "topic"])
    total = subs.groupBy(_G).agg(F.sum("partitions").alias("_total"))
    o = owned.join(flags.select(_G), _G, "left_semi").join(subs.select(_G, "topic"), [_G, "topic"], "left_semi")
    away = roster.where(F.col("status") == "away").select(_G, "member_id")
    cnt = o.groupBy(_G).agg(F.count("*").alias("_owned"))
    idle = o.join(away, [_G, "member_id"], "left_semi").groupBy(_G).agg(F.count("*").alias("_idle"))
    return flags.join(total, _G, "left").join(cnt, _G, "left").join(idle, _G, "left").select(
        _G, "step", "at", "kinds", "rebalanced",
        F.coalesce("_total", F.lit(0)).cast("long").alias("partitions"),
        (F.coalesce("_total", F.lit(0)) - F.coalesce("_owned", F.lit(0))).cast("long").alias("unassigned"),
        F.coalesce("_idle", F.lit(0)).cast("long").alias("idle"),
    )


def _check_rosters_agree(rosters: DataFrame, steps: DataFrame) -> None:
    """NoCommonAssignorError before anything is recorded: at every step of every
    group, the members present must share an assignor. Groups are reported as
    ``<group>@step<k>``."""
    from .errors import NoCommonAssignorError

    m = rosters.join(steps.select(_G, "step", "at"), [_G, "step"]).select(
        F.concat(F.col(_G), F.lit(" at "), F.col("at").cast("string"), F.lit(" (step "),
                 F.col("step").cast("string"), F.lit(")")).alias(_G),
        "member_id", F.array(F.lit("t")).alias("topics"), "assignors")
    raise_if_rows(disagreements(m), NoCommonAssignorError,
                  "no assignor supported by every member of the group (member=[assignors in preference order])")


def simulation_store(history):
    """The ``simulation`` Delta table beside ``history``: simulated time and
    counts of every recorded generation (:data:`SIMULATION_SCHEMA`)."""
    from .storage import DeltaStore, is_path

    sep = "/" if is_path(history.location) else "."
    return DeltaStore(history.spark, f"{history.location}{sep}simulation", SIMULATION_SCHEMA, backend=history.backend)


def simulation_table(history) -> DataFrame:
    """The ``simulation`` rows recorded beside ``history`` (empty when none)."""
    store = simulation_store(history)
    if not store.exists():
        return history.spark.createDataFrame([], SIMULATION_SCHEMA)
    return store.read()


# --------------------------------------------------------------------------- analytics

def analytics_sql(name: str) -> str:
    """The text of the packaged query ``spark_assign/sql/analytics/<name>.sql`` (also
    ``sql/analytics/`` in a checkout), read with :mod:`importlib.resources`, so it works
    from an installed wheel."""
    folder = importlib.resources.files("spark_assign") / "sql" / "analytics"
    path = folder / f"{name}.sql"
    if not path.is_file():
        known = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".sql"))
        raise InvalidOptionError(f"unknown analytics query {name!r}: expected one of {known}")
    return path.read_text()


def register_analytics_views(history, prefix: str = "") -> None:
    """Register ``generations``, ``assignments``, ``revocations`` (via
    ``history.register_views``), ``simulation`` and ``generation_times``."""
    history.register_views(prefix)
    simulation_table(history).createOrReplaceTempView(f"{prefix}simulation")
    sql = analytics_sql("generation_times")
    if prefix:
        for v in ("generations", "simulation"):
            sql = sql.replace(f"FROM {v}", f"FROM {prefix}{v}")
    history.spark.sql(sql).createOrReplaceTempView(f"{prefix}generation_times")


def run_analytics(history, name: str, *, register: bool = True, **params) -> DataFrame:
    """Run ``sql/analytics/<name>.sql`` over ``history`` with named parameters.

    >>> run_analytics(history, "partition_ownership_timeline", group_id="g", topic="t", partition=0)  # doctest: +SKIP
    """
    if register:
        register_analytics_views(history)
    return history.spark.sql(analytics_sql(name), args=params or None)


def generation_version(history, group_id: str, generation: int) -> int:
    """The Delta version of the ``generations`` table that committed generation
    ``generation`` of ``group_id`` (found by the record id in the commit's metadata)."""
    from .errors import HistoryError

    row = history.history(group_id).where(F.col("generation") == generation).select("record_id").first()
    if row is None:
        raise HistoryError(f"generation {generation} of group {group_id!r} is not recorded")
    log = history.delta_history("generations")
    meta_col = "userMetadata" if "userMetadata" in log.columns else "user_metadata"
    hit = log.where(F.col(meta_col).contains(row.record_id)).agg(F.min("version")).first()[0]
    if hit is None:
        raise HistoryError(f"no commit of the generations table carries record {row.record_id}")
    return int(hit)


def as_of_generation(history, group_id: str, generation: int) -> DataFrame:
    """Every group's assignment as of the commit of ``generation`` of ``group_id``
    (Delta time travel on the ``generations`` table, then
    ``sql/analytics/as_of_generation.sql``). Registers ``generations_asof``.

    >>> as_of_generation(history, "orders", 3).show()  # doctest: +SKIP
    """
    version = generation_version(history, group_id, generation)
    history.as_of("generations", version).createOrReplaceTempView("generations_asof")
    history.assignments().createOrReplaceTempView("assignments")
    return history.spark.sql(analytics_sql("as_of_generation"))


# --------------------------------------------------------------------------- what-if

VARIANT_KEYS = ("name", "strategy", "protocol_rule", "session_timeout_ms", "scheduled_rebalance_max_delay_ms",
                "group_protocol", "heartbeat_interval_ms")

WHAT_IF_COLUMNS = (
    "variant", "group_id", "rebalances", "rounds", "partitions_moved", "revoked", "lost",
    "unassigned_partition_seconds", "max_min_partitions", "max_member_lag", "mean_member_lag",
)


@explains_lost_executors
def what_if(
    events: DataFrame,
    partitions: DataFrame,
    variants: Iterable[dict],
    *,
    session_timeout_ms: int = 45_000,
    scheduled_rebalance_max_delay_ms: int = 0,
    protocol_rule: str = "static",
    lags: DataFrame | None = None,
    history: Any = None,
    record_variant: str | None = None,
    max_rounds: int = 5,
    validate: bool = True,
    group_protocol: str | None = None,
    heartbeat_interval_ms: int = 5_000,
    **options: Any,
) -> DataFrame:
    """The same events under several strategies / protocols, in one replay.

    ``variants``: dicts with ``name`` and any of ``strategy``, ``protocol_rule``,
    ``session_timeout_ms``, ``scheduled_rebalance_max_delay_ms``, ``group_protocol``,
    ``heartbeat_interval_ms`` (a migration plan: ``{"name": "kip848", "group_protocol":
    "consumer"}`` next to the classic variants); ``group_protocol`` and
    ``heartbeat_interval_ms`` here are the variants' defaults. Each variant
    runs as groups ``<group_id>@<name>`` in the same distributed steps. Returns
    one row per variant and group: ``variant, group_id, rebalances, rounds,
    partitions_moved, revoked, lost, unassigned_partition_seconds`` (partitions
    unassigned or idle on a crashed/away member, times seconds),
    ``max_min_partitions`` (worst max-min partitions per member after a
    rebalance), ``max_member_lag``, ``mean_member_lag`` (at the end).

    ``history``: every variant's generations are recorded, as groups
    ``<group_id>@<name>``; with ``record_variant``, only that variant's, under the
    events' own group ids, exactly as :func:`simulate` with the variant's settings
    records them (a replay and its what-if variants in one replay).

    >>> what_if(events, parts, [{"name": "eager", "strategy": "range"},
    ...                         {"name": "coop", "strategy": "cooperative-sticky"}]).show()  # doctest: +SKIP
    """
    rows = []
    for v in variants:
        unknown = sorted(set(v) - set(VARIANT_KEYS))
        if unknown or "name" not in v:
            raise InvalidOptionError(
                f"variant {v!r}: expected a 'name' and keys among {VARIANT_KEYS}, found {unknown}")
        st = v.get("strategy")
        gp = _protocol_of(st, v.get("group_protocol", group_protocol))
        st = "uniform" if gp == "consumer" and st is None else st  # the broker's default
        rows.append((
            str(v["name"]), st, v.get("protocol_rule", protocol_rule),
            int(v.get("session_timeout_ms", session_timeout_ms)),
            int(v.get("scheduled_rebalance_max_delay_ms", scheduled_rebalance_max_delay_ms)),
            gp, int(v.get("heartbeat_interval_ms", heartbeat_interval_ms)),
        ))
    if record_variant is not None and record_variant not in {r[0] for r in rows}:
        raise InvalidOptionError(f"record_variant {record_variant!r}: expected one of the variants' names "
                         f"{[r[0] for r in rows]}")
    vcol = F.explode(F.array(*[
        F.struct(F.lit(n).alias("variant"), F.lit(st).cast("string").alias("_strategy"), F.lit(ru).alias("_rule"),
                 F.lit(to).cast("long").alias("_timeout"), F.lit(de).cast("long").alias("_delay"),
                 F.lit(gp).alias("_gp"), F.lit(hb).cast("long").alias("_hb"))
        for n, st, ru, to, de, gp, hb in rows])).alias("_v")
    e = normalize_events(events)
    cols = [c for c in e.columns if c != _G]
    ev = e.select("*", vcol).select(  # every event once per variant (a handful)
        F.concat(F.col(_G), F.lit("@"), F.col("_v.variant")).alias(_G), *cols,
        "_v._strategy", "_v._rule", "_v._timeout", "_v._delay", "_v._gp", "_v._hb")
    vlags = None
    if lags is not None:
        if _G in lags.columns:
            vlags = lags.select("*", vcol).select(
                F.concat(F.col(_G), F.lit("@"), F.col("_v.variant")).alias(_G), "topic", "partition", "lag")
        else:
            vlags = lags
    r, recorded_rows = _replay(
        ev, partitions, strategy=None, protocol_rule=protocol_rule, session_timeout_ms=session_timeout_ms,
        scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms, lags=vlags,
        keep_rows=history is not None, max_rounds=max_rounds, validate=validate, **options)
    if history is not None and recorded_rows is not None:
        tables: tuple[DataFrame, ...] = (recorded_rows, r.generations, r.revocations)
        if record_variant is not None:
            suffix = f"@{record_variant}"
            tables = tuple(
                df.where(F.col(_G).endswith(suffix))
                .withColumn(_G, F.expr(f"substring({_G}, 1, length({_G}) - {len(suffix)})"))
                for df in tables)
        _record(history, *tables, lags_known=r.lags is not None)
    return compare(r, lags=vlags)


def compare(result: SimulationResult, lags: DataFrame | None = None) -> DataFrame:
    """The what-if comparison table of a simulation whose groups are named
    ``<group>@<variant>`` (see :func:`what_if`). Member lags come from ``lags``
    (``[group_id,] topic, partition, lag``), by default the simulation's final lags."""
    g = result.generations
    per = g.groupBy(_G).agg(
        F.count(F.when(F.col("round") == 1, 1)).alias("rebalances"),
        F.count("*").alias("rounds"),
        F.sum("moved").alias("partitions_moved"),
        F.sum("revoked").alias("revoked"),
        F.sum("lost").alias("lost"),
    )
    w = Window.partitionBy(_G).orderBy("step")
    st = result.steps.withColumn("_next", F.lead("at").over(w)).withColumn(
        "_gap", (F.col("unassigned") + F.col("idle")) * (F.coalesce("_next", F.col("at")) - F.col("at")))
    # partitions left unassigned between the rounds of one step (a consumer group's
    # hand-over one heartbeat after its epoch; classic rounds take no simulated time)
    wr = Window.partitionBy(_G, "step").orderBy("round")
    rg = g.withColumn("_gap", F.col("unassigned") * (
        F.unix_millis(F.lead("at").over(wr)) - F.unix_millis("at"))).select(_G, "_gap")
    gap = st.select(_G, "_gap").unionByName(rg).groupBy(_G).agg(
        (F.coalesce(F.sum("_gap"), F.lit(0)) / 1000.0).cast("double").alias("unassigned_partition_seconds"))
    a = result.assignment
    loads = a.groupBy(_G, "member_id").agg(F.count("*").alias("n"))
    bal = loads.groupBy(_G).agg((F.max("n") - F.min("n")).alias("max_min_partitions"))
    out = per.join(gap, _G, "full_outer").join(bal, _G, "left")
    lags = lags if lags is not None else result.lags
    if lags is not None:
        keys = [_G, "topic", "partition"] if _G in lags.columns else ["topic", "partition"]
        ml = a.join(lags.select(*keys, "lag"), keys, "left").groupBy(_G, "member_id").agg(
            F.sum(F.coalesce("lag", F.lit(0))).alias("ml"))
        out = out.join(ml.groupBy(_G).agg(F.max("ml").alias("max_member_lag"),
                                          F.avg("ml").alias("mean_member_lag")), _G, "left")
    if "max_member_lag" not in out.columns:
        out = out.withColumn("max_member_lag", F.lit(None).cast("long")).withColumn(
            "mean_member_lag", F.lit(None).cast("double"))
    return out.select(
        F.substring_index(_G, "@", -1).alias("variant"),
        F.expr("substring(group_id, 1, length(group_id) - length(substring_index(group_id, '@', -1)) - 1)").alias(_G),
        *[F.coalesce(c, F.lit(0)).cast("long").alias(c) for c in
          ("rebalances", "rounds", "partitions_moved", "revoked", "lost")],
        F.coalesce("unassigned_partition_seconds", F.lit(0.0)).alias("unassigned_partition_seconds"),
        F.coalesce("max_min_partitions", F.lit(0)).cast("long").alias("max_min_partitions"),
        F.col("max_member_lag").cast("long").alias("max_member_lag"),
        F.col("mean_member_lag").cast("double").alias("mean_member_lag"),
    )
