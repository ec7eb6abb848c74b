"""``range``: Kafka's RangeAssignor (with KIP-881 rack awareness) as DataFrame transformations.

Plain range: per group and topic, the subscribed members in Kafka's member order
each take a consecutive block of the topic's partitions: the first ``P % n``
members get ``ceil(P / n)``, the rest ``floor(P / n)`` (see
:mod:`spark_assign.quota`). Works at member x topic granularity (one row per
group and topic holding its subscribers and partition numbers as arrays), then
one explode places each partition: no join back to members.

Rack-aware range (KIP-881), exactly as ``RangeAssignor.assignPartitions``:

* a topic *needs* rack awareness when its subscribers have racks (empty rack ids
  count as none), those racks meet the racks of the topic's replicas, and some
  partition's replica racks differ from the union of the topic's replica racks;
  a group goes rack-aware when any of its topics needs it;
* in a rack-aware group, topics with the same subscribers (that have racks) and
  the same partition count are *co-partitioned*: partition ``i`` of all of them
  goes to one member, taken partition by partition by the first member (in
  Kafka's order) whose rack is on a replica of partition ``i`` of every topic of
  the set and that still has quota; a topic alone in its set that needs rack
  awareness is matched member by member instead: each member in order takes the
  first partitions on its rack, up to its quota;
* then every topic is completed member by member, each member taking the first
  unassigned partitions up to its quota. The quota is Kafka's: ``floor(P / n)``
  plus one while fewer than ``P % n`` members have reached ``floor(P / n) + 1``.
  Members without a rack match every partition.

The two matching passes are greedy scans whose every step depends on the ones
before (which partitions earlier members took, how many members already reached
``floor(P / n) + 1``); no closed form reproduces them in general, so they run,
exactly, as SQL ``aggregate`` scans over one row per rack-aware (group, topic
set): the set's members (ranks, racks) and partitions (replica racks) as arrays.
That is one distributed step for all groups at once, no driver loop, but its
cost is O(members x partitions) per rack-aware topic set (a scan inside one row,
not a join); every other topic takes the closed-form path.

Deviations from Kafka, none visible with real metadata: partitions are matched
across co-partitioned topics by position in partition order (Kafka by partition
number; the same when a topic's partitions are 0..P-1, as Kafka's always are).

Options: ``rack_aware`` = ``"auto"`` (default, Kafka's rule above), ``True``
(also when every partition has replicas on the same racks: Kafka's test-only
``preferRackAwareLogic``; subscribers' racks must still meet the replica racks)
or ``False`` (plain range).
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.utils import is_remote

from ..errors import InvalidOptionError
from ..execution import merge_side, stored_rows
from ..frames import let
from ..options import RACK_AWARE, parse_rack_aware
from ..ordering import with_member_index
from ..quota import rank_for_position


def _rack_mode(rack_aware) -> str:
    """``"auto"``, ``"force"`` or ``"off"`` from the ``rack_aware`` option
    (:func:`spark_assign.options.parse_rack_aware`)."""
    try:
        parsed = parse_rack_aware(rack_aware)
    except ValueError:
        raise InvalidOptionError(f"option 'rack_aware' of strategy 'range': expected {RACK_AWARE.expected}, "
                                 f"found {rack_aware!r}") from None
    return {"auto": "auto", True: "force", False: "off"}[parsed]


def no_member_racks(members: DataFrame) -> bool:
    """Whether the members' rows, on the driver in a small call (:func:`~spark_assign.execution.stored_rows`),
    show that no member has a rack: then every set takes Kafka's plain ranges whatever
    ``rack_aware`` says, and the rack-aware passes (a large expression that Spark analyzes and
    optimizes in every plan that holds it) are left out. False when the rows are not on the driver.

    >>> no_member_racks(spark.range(1))  # no rows on the driver
    False
    """
    import pyarrow.compute as pc

    rows = stored_rows(members)
    if rows is None or "rack" not in rows.column_names:
        return False
    return not pc.any(pc.greater(pc.utf8_length(rows["rack"]), 0)).as_py()


def _topic_metadata(partitions: DataFrame) -> DataFrame:
    """Per topic of the metadata: ``num_partitions``, ``parts`` (partition numbers in
    order), ``prs`` (replica racks per partition, same order, nulls dropped),
    ``partition_racks`` (their union) and ``min_racks`` (fewest racks of a partition)."""
    # the plans of this module are SQL text where they can be: a projection is one JVM call,
    # where column functions take several each (the fixed cost of a small call)
    racks = "array_distinct(filter(coalesce(racks, CAST(array() AS array<string>)), r -> r IS NOT NULL))"
    return (
        partitions.groupBy("topic").agg(
            F.expr(f"array_sort(collect_list(named_struct('partition', partition, 'racks', {racks}))) AS _p"),
            F.expr("CAST(count(*) AS INT) AS num_partitions"))
        .selectExpr("topic", "num_partitions", "transform(_p, x -> x.partition) AS parts",
                    "transform(_p, x -> x.racks) AS prs")
        .selectExpr("*", "array_distinct(flatten(prs)) AS partition_racks",
                    "array_min(transform(prs, r -> size(r))) AS min_racks")
    )


def _topic_subscribers(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """One row per (group, subscribed topic present in the metadata): the topic's
    metadata (see :func:`_topic_metadata`) and ``subscribers``, an array of
    ``struct<member_index, member_id, rack>`` in Kafka's member order (empty racks as null)."""
    subs = with_member_index(members).selectExpr(
        "group_id", "explode(topics) AS topic",
        "named_struct('member_index', member_index, 'member_id', member_id, "
        "'rack', CASE WHEN rack != '' THEN rack END) AS sub")
    return (
        subs.groupBy("group_id", "topic").agg(F.expr("array_sort(collect_list(sub)) AS subscribers"))
        .join(merge_side(_topic_metadata(partitions)), "topic")  # topics missing from the metadata are skipped
    )


def _placed(rows: DataFrame, owners: Column | None) -> DataFrame:
    """Explode rows of (group, set of topics) into assignment rows. ``owners``: rank per
    partition position (rack-aware sets), or null for Kafka's closed-form ranges."""
    rows = rows.withColumn("owners", owners) if owners is not None else rows.selectExpr(
        "*", "CAST(NULL AS array<int>) AS owners")
    exploded = rows.selectExpr("group_id", "subscribers", "num_partitions", "owners", "explode(topics) AS t").selectExpr(
        "group_id", "subscribers", "num_partitions", "owners", "t.topic AS topic", "posexplode(t.parts) AS (pos, partition)")
    closed_form = rank_for_position("num_partitions", "size(subscribers)", "pos")
    rank = f"coalesce(get(owners, pos), CAST({closed_form} AS INT))"
    return exploded.selectExpr("group_id", f"get(subscribers, {rank}).member_id AS member_id", "topic", "partition")

# --- the sequential passes, as SQL higher-order functions over one row per (group, topic set) ---
# Row columns used: cons (array<string>, member racks by rank), prs (array<array<string>>, replica
# racks by partition position), n, P, q = P div n. State: owner (array<int>, rank per position,
# -1 = unassigned), cnt (array<int>, partitions per rank), rem (members that may still reach q + 1).


def _cap(s: Column, i: Column) -> Column:
    """Kafka's ``maxAssignable``: quota left to the member at rank ``i``."""
    return F.greatest(
        F.lit(0), F.col("q") + F.when(s["rem"] > 0, 1).otherwise(0) - F.get(s["cnt"], i)
    )


def _matches(i: Column, pos: Column) -> Column:
    """Kafka's ``racksMatch``: member ``i`` has no rack, or a replica of ``pos`` is on it."""
    rack = F.get(F.col("cons"), i)
    return rack.isNull() | F.coalesce(F.array_contains(F.get(F.col("prs"), pos), rack), F.lit(False))


def _state(owner: Column, cnt: Column, rem: Column) -> Column:
    return F.struct(owner.alias("owner"), cnt.alias("cnt"), rem.cast("int").alias("rem"))


def _member_takes(s: Column, i: Column, rack_match: bool) -> Column:
    """Member ``i`` takes the first unassigned (rack-matching) partitions up to its quota
    (``assignRanges`` for one member)."""
    ok = (lambda pos: _matches(i, pos)) if rack_match else (lambda pos: F.lit(True))

    def with_take(x: Column) -> Column:
        take, last, before = x["take"], x["last"], F.get(s["cnt"], i)
        new = _state(
            F.transform(s["owner"], lambda o, pos: F.when((o == -1) & (pos <= last) & ok(pos), i).otherwise(o)),
            F.transform(s["cnt"], lambda c, j: F.when(j == i, c + take).otherwise(c)),
            s["rem"] - F.when(before + take > F.col("q"), 1).otherwise(0),
        )
        return F.when(take > 0, new).otherwise(s)

    def with_cands(cands: Column) -> Column:
        take = F.least(_cap(s, i), F.size(cands))
        return let(F.struct(take.alias("take"), F.get(cands, take - 1).alias("last")), with_take)

    cap = _cap(s, i)
    cands = F.filter(
        F.sequence(F.lit(0), F.col("P") - 1), lambda pos: (F.get(s["owner"], pos) == -1) & ok(pos)
    )
    return F.when(cap > 0, let(cands, with_cands)).otherwise(s)


def _partition_taken(s: Column, pos: Column) -> Column:
    """Partition ``pos`` of a co-partitioned set goes to the first member in order that
    matches its racks and has quota left (``assignCoPartitionedWithRackMatching``)."""

    def with_member(c: Column) -> Column:
        new = _state(
            F.transform(s["owner"], lambda o, j: F.when(j == pos, c).otherwise(o)),
            F.transform(s["cnt"], lambda x, j: F.when(j == c, x + 1).otherwise(x)),
            s["rem"] - F.when(F.get(s["cnt"], c) + 1 > F.col("q"), 1).otherwise(0),
        )
        return F.when(c.isNotNull(), new).otherwise(s)

    cands = F.filter(
        F.sequence(F.lit(0), F.col("n") - 1), lambda i: (_cap(s, i) > 0) & _matches(i, pos)
    )
    return let(F.get(cands, 0), with_member)


def _owners() -> Column:
    """Rank owning each partition position after Kafka's matching pass and fill pass
    (null for sets that take the closed form). Row columns: kind, cons, prs, n, P, q.

    Built once per process and kind of session (classic or Connect) and reused: the
    expression only names columns, and building its nested lambdas is about a thousand
    py4j calls, most of a small ``range`` call's planning."""
    return _owners_expr(is_remote())


@functools.lru_cache(maxsize=2)
def _owners_expr(remote: bool) -> Column:
    init = _state(
        F.array_repeat(F.lit(-1), F.col("P")),
        F.array_repeat(F.lit(0), F.col("n")),
        F.col("P") % F.col("n"),
    )
    members = F.sequence(F.lit(0), F.col("n") - 1)
    positions = F.sequence(F.lit(0), F.col("P") - 1)
    copart = F.aggregate(positions, init, _partition_taken)
    single = F.aggregate(members, init, lambda s, i: _member_takes(s, i, True))
    matched = F.when(F.col("kind") == "copartitioned", copart).otherwise(single)
    filled = F.aggregate(members, matched, lambda s, i: _member_takes(s, i, False))
    return F.when(F.col("kind") != "plain", filled["owner"])


def _rack_aware_sets(per_topic: DataFrame, mode: str) -> DataFrame:
    """Group topics into Kafka's co-partitioned sets and decide each set's pass:
    ``kind`` is ``plain``, ``single`` (member-by-member rack matching) or
    ``copartitioned`` (partition-by-partition rack matching over the set)."""
    t = per_topic.selectExpr(
        "*", "array_distinct(filter(transform(subscribers, x -> x.rack), r -> r IS NOT NULL)) AS member_racks"
    ).selectExpr("*", "size(member_racks) > 0 AS has_racks")
    useful = "has_racks AND arrays_overlap(member_racks, partition_racks)"
    if mode == "auto":
        useful = f"{useful} AND min_racks < size(partition_racks)"
    sets = t.selectExpr("*", f"coalesce({useful}, false) AS needs").groupBy(
        "group_id", "subscribers", "num_partitions", "has_racks").agg(
        F.expr("array_sort(collect_list(named_struct('topic', topic, 'parts', parts, 'prs', prs))) AS topics"),
        F.expr("max(CAST(needs AS INT)) AS set_needs"))
    kind = ("CASE WHEN NOT group_rack_aware OR NOT has_racks THEN 'plain' WHEN size(topics) > 1 THEN 'copartitioned' "
            "WHEN set_needs = 1 THEN 'single' ELSE 'plain' END")
    return sets.selectExpr("*", "max(set_needs) OVER (PARTITION BY group_id) = 1 AS group_rack_aware").selectExpr(
        "*", f"{kind} AS kind")


def assign_range(
    members: DataFrame, partitions: DataFrame, *, lags=None, validate: bool = True, rack_aware="auto",
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's RangeAssignor for every group in ``members`` (normalized inputs).

    >>> from spark_assign import assign
    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int")
    >>> [(r.member_id, r.partition) for r in assign(members, parts, "range").orderBy("partition").collect()]
    [('a', 0), ('a', 1), ('b', 2)]
    """
    mode = _rack_mode(rack_aware)
    if no_member_racks(members):  # every set takes the plain ranges
        mode = "off"
    per_topic = _topic_subscribers(members, partitions)
    if mode == "off":
        rows = per_topic.selectExpr("group_id", "subscribers", "num_partitions",
                                    "array(named_struct('topic', topic, 'parts', parts)) AS topics")
        return _placed(rows, None)
    sets = _rack_aware_sets(per_topic, mode)
    # a partition position matches a member when its rack is on a replica of that position
    # in every topic of the set
    prs = ("aggregate(slice(transform(topics, x -> x.prs), 2, size(topics)), get(topics, 0).prs, "
           "(acc, x) -> zip_with(acc, x, (a, b) -> array_intersect(a, b)))")
    rows = sets.selectExpr(
        "*", "size(subscribers) AS n", "num_partitions AS P", "CAST(num_partitions / size(subscribers) AS INT) AS q",
        "transform(subscribers, x -> x.rack) AS cons", f"CASE WHEN kind != 'plain' THEN {prs} END AS prs")
    return _placed(rows, _owners())
