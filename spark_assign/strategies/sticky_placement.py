"""The sticky assignor's general path, step 5 (:mod:`spark_assign.strategies.sticky_general`):
the partitions placed on the members once each member's count per topic is known. Each member
keeps its owned partitions of a topic up to its count (lowest partitions first), and the
partitions left over are handed out by a rank join on ``(group_id, topic, position)``
(:func:`rank_fill`); rack-aware groups (KIP-881) keep and take rack-local partitions first.

>>> out = place(counts, members, partitions, owned, rack_aware=False)  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..execution import materialize, one_partition

_KEYS = ["group_id", "member_id", "topic"]


def rank_fill(free: DataFrame, capacity: DataFrame) -> DataFrame:
    """Hand the ``free`` partitions (``group_id, topic, partition``) of each topic
    to the ``capacity`` rows (``group_id, member_id, topic, member_index, remaining``:
    how many more partitions of the topic the member gets) by a rank join: free
    partitions by partition number against member slots in member order. Returns
    ``group_id, member_id, topic, partition``."""
    wt = Window.partitionBy("group_id", "topic")
    fp = free.withColumn("position", F.row_number().over(wt.orderBy("partition")) - 1)
    cap = capacity.where(F.col("remaining") > 0).withColumn(
        "slot_end", F.sum("remaining").over(wt.orderBy("member_index").rowsBetween(Window.unboundedPreceding, 0))
    )
    slots = cap.select(
        "group_id", "member_id", "topic",
        F.explode(F.sequence(F.col("slot_end") - F.col("remaining"), F.col("slot_end") - 1)).alias("position"),
    )
    return fp.join(slots, ["group_id", "topic", "position"]).select("group_id", "member_id", "topic", "partition")


def place(
    counts: DataFrame, members: DataFrame, partitions: DataFrame, owned: DataFrame | None, rack_aware: bool
) -> DataFrame:
    keys4 = ["group_id", "member_id", "topic", "partition"]
    counts = counts.where(F.col("count") > 0)  # a member keeps or gets nothing of the others
    subscribed = counts.select("group_id", "topic").distinct()
    # one_partition: joins of joins shuffle nothing in a small call (execution.one_partition)
    all_parts = one_partition(subscribed.join(partitions.select("topic", "partition", "racks"), "topic"))
    if owned is None:  # nothing to keep
        if not rack_aware:
            return rank_fill(all_parts.select("group_id", "topic", "partition"),
                              counts.select(*_KEYS, "member_index", F.col("count").alias("remaining")))
        owned = counts.select("group_id", "member_id", "topic", F.lit(None).cast("int").alias("partition")).where(F.lit(False))
    own = one_partition(owned.select(*keys4).join(counts.select(*_KEYS, "count"), _KEYS))
    if rack_aware:
        member_rack = members.select("group_id", "member_id", "rack")
        own = (
            one_partition(own.join(member_rack, ["group_id", "member_id"]))
            .join(partitions.select("topic", "partition", "racks"), ["topic", "partition"])
            .withColumn("rack_local", F.col("rack").isNotNull()
                        & F.coalesce(F.array_contains("racks", F.col("rack")), F.lit(False)))
        )
    else:
        own = own.withColumn("rack_local", F.lit(False))
    # 1. keep owned partitions up to the count (rack-local first when rack-aware)
    wk = Window.partitionBy(*_KEYS).orderBy(F.col("rack_local").desc(), "partition")
    own = own.withColumn("keep_rank", F.row_number().over(wk))
    if not rack_aware:
        kept = own.where(F.col("keep_rank") <= F.col("count")).select(*keys4)
        cap = counts.join(kept.groupBy(*_KEYS).agg(F.count("*").alias("placed_count")), _KEYS, "left").select(
            *_KEYS, "member_index", (F.col("count") - F.coalesce("placed_count", F.lit(0))).alias("remaining")
        )
        free = all_parts.join(kept, ["group_id", "topic", "partition"], "left_anti").select("group_id", "topic", "partition")
        return kept.unionByName(rank_fill(free, cap))
    # the rack-aware steps each read what the steps before placed, several times: each
    # placement is materialized, else the last step's plan repeats the whole history per
    # read (263 shuffle and broadcast exchanges for the README's sample groups)
    own = materialize(own, eager=False)
    kept1 = own.where(F.col("rack_local") & (F.col("keep_rank") <= F.col("count"))).select(*keys4)

    def capacity(done: DataFrame) -> DataFrame:
        return one_partition(counts.join(done.groupBy(*_KEYS).agg(F.count("*").alias("placed_count")), _KEYS,
                                         "left").select(
            *_KEYS, "member_index", (F.col("count") - F.coalesce("placed_count", F.lit(0))).alias("remaining")
        ))

    # 2. rack-local free partitions to members of that rack with room (per rack, rank join)
    cap1 = capacity(kept1)
    free1 = one_partition(all_parts.join(kept1, ["group_id", "topic", "partition"], "left_anti"))
    member_rack = members.select("group_id", "member_id", "rack").where(F.col("rack").isNotNull())
    cap_r = one_partition(cap1.join(member_rack, ["group_id", "member_id"]))
    free_r = free1.select("group_id", "topic", "partition", F.explode("racks").alias("rack"))
    wtr = Window.partitionBy("group_id", "topic", "rack")
    fp = free_r.withColumn("position", F.row_number().over(wtr.orderBy("partition")) - 1)
    cr = cap_r.where(F.col("remaining") > 0).withColumn(
        "slot_end", F.sum("remaining").over(wtr.orderBy("member_index").rowsBetween(Window.unboundedPreceding, 0))
    )
    slots = cr.select(
        "group_id", "member_id", "topic", "rack", "member_index",
        F.explode(F.sequence(F.col("slot_end") - F.col("remaining"), F.col("slot_end") - 1)).alias("position"),
    )
    cand = fp.join(slots, ["group_id", "topic", "rack", "position"])
    # a partition with replicas on several racks may be matched twice: keep the first
    local2 = (
        cand.withColumn("match_rank", F.row_number().over(
            Window.partitionBy("group_id", "topic", "partition").orderBy("member_index", "rack")))
        .where(F.col("match_rank") == 1)
        .select(*keys4)
    )
    done = materialize(kept1.unionByName(local2), eager=False)
    # 3. other owned partitions, still free, up to the remaining count
    cap2 = capacity(done)
    own3 = (
        one_partition(own.join(done, ["group_id", "topic", "partition"], "left_anti"))
        .join(cap2.select(*_KEYS, "remaining"), _KEYS)
        .withColumn("owned_rank", F.row_number().over(Window.partitionBy(*_KEYS).orderBy("partition")))
        .where(F.col("owned_rank") <= F.col("remaining"))
        .select(*keys4)
    )
    done = materialize(done.unionByName(own3), eager=False)
    # 4. the rest by rank join
    free = one_partition(all_parts.join(done, ["group_id", "topic", "partition"], "left_anti")).select(
        "group_id", "topic", "partition")
    return done.unionByName(rank_fill(free, capacity(done)))
