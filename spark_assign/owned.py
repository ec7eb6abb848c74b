"""Owned partitions across generations: which claims a rebalance honours.

Kafka's current rule (KAFKA-14639), applied per partition:

* claims on topics the member no longer subscribes to, or on partitions the
  metadata does not have, are dropped;
* the claim from the highest generation wins (a null generation is lower than
  any generation);
* two or more members claiming the partition in that same highest generation
  void the claim: nobody owns it, and it counts as changing owner (a
  cooperative round leaves it out, see :func:`current_claims`).

Kafka's constrained (uniform) path drops every claim of a member below the
group's highest generation; spark-assign applies the per-partition rule on
both paths, so a lagging member keeps the partitions nobody newer claims.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .inputs import owned_claims, subscriptions

#: the generation a null generation sorts as
NO_GENERATION = -1


def current_claims(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """The claims at each partition's highest generation.

    Columns: ``group_id, member_id, topic, partition, generation, contested``
    (``contested``: more than one member claims the partition at that
    generation). Inputs are normalized members and partitions.
    """
    claims = (
        owned_claims(members)
        .join(subscriptions(members), ["group_id", "member_id", "topic"], "left_semi")
        .join(partitions.select("topic", "partition"), ["topic", "partition"], "left_semi")
        .dropDuplicates(["group_id", "member_id", "topic", "partition"])
        .withColumn("generation", F.coalesce("generation", F.lit(NO_GENERATION)))
    )
    w = Window.partitionBy("group_id", "topic", "partition")
    return (
        claims.withColumn("_top", F.max("generation").over(w))
        .where(F.col("generation") == F.col("_top"))
        .withColumn("contested", F.count("*").over(w) > 1)
        .select("group_id", "member_id", "topic", "partition", "generation", "contested")
    )


def partition_claims(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Per claimed partition, who holds it now: ``group_id, topic, partition,
    member_id, generation, contested``. ``member_id`` is the claimant at the
    partition's highest generation (the smallest member id when several claim it
    there: then ``contested`` is true and nobody owns it).

    One hash aggregation per partition (no sort): the highest ``(generation,
    member)`` and the highest generation with the smallest member differ in
    member exactly when two members claim the partition at that generation.
    """
    claims = (
        owned_claims(members)
        .join(subscriptions(members), ["group_id", "member_id", "topic"], "left_semi")
        .join(partitions.select("topic", "partition"), ["topic", "partition"], "left_semi")
        .withColumn("generation", F.coalesce("generation", F.lit(NO_GENERATION)))
    )
    agg = claims.groupBy("group_id", "topic", "partition").agg(
        F.max(F.struct("generation", "member_id")).alias("_hi"),
        F.min(F.struct(-F.col("generation"), F.col("member_id"))).alias("_lo"),
    )
    return agg.select(
        "group_id", "topic", "partition",
        F.col("_lo.member_id").alias("member_id"),
        F.col("_hi.generation").alias("generation"),
        (F.col("_hi.member_id") != F.col("_lo.member_id")).alias("contested"),
    )


def resolve_owned(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """The honoured owned partitions: one owner per partition at most.

    Columns: ``group_id, member_id, topic, partition, generation``.

    >>> resolve_owned(members, partitions).where("group_id = 'g1'").show()  # doctest: +SKIP
    """
    return partition_claims(members, partitions).where(~F.col("contested")).select(
        "group_id", "member_id", "topic", "partition", "generation"
    )
