"""``roundrobin``: Kafka's RoundRobinAssignor as DataFrame transformations.

Kafka walks every partition of every subscribed topic, sorted by topic (Java
string order) then partition, with a circular iterator over all members of the
group in Kafka's member order; each partition goes to the next member (from the
iterator's position) subscribed to its topic.

Within one topic the subscribers simply cycle: if the iterator enters topic
``t`` at member index ``pos``, the first partition goes to the first subscriber
at or after ``pos`` (circularly), say rank ``j0`` among the ``m`` subscribers,
and partition ``k`` (0-based, in partition order) goes to rank ``(j0 + k) % m``.
The iterator leaves the topic just after the member that took the last
partition. So only the entry position of each topic depends on the topics
before it: one SQL ``aggregate`` per group over its array of topics (member x
topic granularity: each topic's sorted subscriber indices and partition count)
yields every topic's ``j0``, then one explode places the partitions. With uniform
subscriptions this is the global partition index modulo the member count.

Topics subscribed but missing from the metadata are skipped; members with
nothing assigned are absent from the result; the result is exact (no
deviation) for Kafka's metadata. One note: Kafka walks partition numbers
0..P-1 from each topic's partition count, spark-assign walks the metadata's
actual partition numbers in order; the two are the same whenever a topic's
partitions are 0..P-1, as Kafka's always are.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..execution import merge_side
from ..ordering import java_order, with_member_index


def _enter(state: Column, topic: Column) -> Column:
    """One topic of the iterator walk: record the entry rank ``j0``, move the iterator."""
    subs, m, p = topic["subscribers"], F.size(topic["subscribers"]), topic["num_partitions"]
    at_or_after = F.filter(F.sequence(F.lit(0), m - 1), lambda j: F.get(subs, j)["member_index"] >= state["pos"])
    j0 = F.coalesce(F.get(at_or_after, 0), F.lit(0))
    last = F.get(subs, F.pmod(j0 + p - 1, m).cast("int"))["member_index"]
    return F.struct(
        F.pmod(last + 1, F.col("num_members")).cast("int").alias("pos"),
        F.concat(state["starts"], F.array(j0.cast("int"))).alias("starts"),
    )


def assign_roundrobin(
    members: DataFrame, partitions: DataFrame, *, lags=None, validate: bool = True,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's RoundRobinAssignor for every group in ``members`` (normalized inputs).

    >>> from spark_assign import assign
    >>> members = spark.createDataFrame([("g", "a", ["t", "u"]), ("g", "b", ["t", "u"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", 0), ("t", 1), ("u", 0)], "topic string, partition int")
    >>> assign(members, parts, "roundrobin").orderBy("topic", "partition").show()
    +--------+---------+-----+---------+
    |group_id|member_id|topic|partition|
    +--------+---------+-----+---------+
    |       g|        a|    t|        0|
    |       g|        b|    t|        1|
    |       g|        a|    u|        0|
    +--------+---------+-----+---------+
    <BLANKLINE>
    """
    m = with_member_index(members).withColumn(
        "num_members", F.count("*").over(Window.partitionBy("group_id")).cast("int")
    )
    subs = m.select(
        "group_id", "num_members", F.explode("topics").alias("topic"),
        F.struct("member_index", "member_id").alias("sub"),
    )
    meta = partitions.groupBy("topic").agg(
        F.array_sort(F.collect_list("partition")).alias("parts"), F.count("*").cast("int").alias("num_partitions")
    )
    per_topic = (
        subs.groupBy("group_id", "num_members", "topic")
        .agg(F.array_sort(F.collect_list("sub")).alias("subscribers"))
        .join(merge_side(meta), "topic")  # topics missing from the metadata are skipped
    )
    walks = per_topic.groupBy("group_id", "num_members").agg(
        F.array_sort(
            F.collect_list(F.struct(java_order("topic").alias("key"), "topic", "subscribers", "num_partitions", "parts"))
        ).alias("topics")
    )
    init = F.struct(F.lit(0).alias("pos"), F.array().cast("array<int>").alias("starts"))
    walked = walks.select(
        "group_id",
        F.explode(F.arrays_zip(F.col("topics").alias("t"), F.aggregate("topics", init, _enter)["starts"].alias("j0"))).alias("x"),
    )
    placed = walked.select(
        "group_id", F.col("x.t.topic").alias("topic"), F.col("x.t.subscribers").alias("subscribers"),
        F.col("x.j0").alias("j0"), F.posexplode("x.t.parts").alias("k", "partition"),
    )
    rank = F.pmod(F.col("j0") + F.col("k"), F.size("subscribers")).cast("int")
    return placed.select("group_id", F.get("subscribers", rank)["member_id"].alias("member_id"), "topic", "partition")
