"""``range``: Kafka's RangeAssignor as DataFrame transformations.

Per group and topic, the subscribed members in Kafka's member order each take a
consecutive block of the topic's partitions: the first ``P % n`` members get
``ceil(P / n)``, the rest ``floor(P / n)`` (see :mod:`spark_assign.quota`).
Works at member x topic granularity, then one join places each partition.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..inputs import subscriptions
from ..ordering import with_member_index
from ..quota import rank_for_position


def assign_range(members: DataFrame, partitions: DataFrame, *, lags=None, **options) -> DataFrame:
    """Kafka's RangeAssignor for every group in ``members``."""
    m = with_member_index(members)
    sizes = partitions.groupBy("topic").agg(F.count("*").alias("num_partitions"))
    subs = (
        subscriptions(m)
        .join(m.select("group_id", "member_id", "member_index"), ["group_id", "member_id"])
        .join(sizes, "topic")  # topics missing from the metadata are skipped
    )
    wt = Window.partitionBy("group_id", "topic")
    subs = subs.withColumn("rank", F.row_number().over(wt.orderBy("member_index")) - 1).withColumn(
        "num_members", F.count("*").over(wt)
    )
    parts = partitions.withColumn(
        "pos", F.row_number().over(Window.partitionBy("topic").orderBy("partition")) - 1
    )
    per_topic = subs.select("group_id", "topic", "num_members", "num_partitions").distinct()
    placed = per_topic.join(parts, "topic").withColumn(
        "rank", rank_for_position(F.col("num_partitions"), F.col("num_members"), F.col("pos"))
    )
    return placed.join(subs.select("group_id", "topic", "rank", "member_id"), ["group_id", "topic", "rank"]).select(
        "group_id", "member_id", "topic", "partition"
    )
