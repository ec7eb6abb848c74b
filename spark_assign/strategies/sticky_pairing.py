"""The general path's pairing rounds (:mod:`.sticky_general`, step 2): members above their
target load hand single partitions to members below it, paired by position in a hash order
(:func:`pair_moves`). A round reads and updates one row per member (:func:`member_rows`,
:func:`after_moves`); the subscription rows take every round's moves at once when pairing
stops (:func:`synced_state`).

>>> mem = after_moves(mem, pair_moves(mem, 0))  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .sticky_counts import STATE, move_deltas

#: the columns of :func:`member_rows`
MEMBER_ROWS = [
    "group_id", "member_id", "member_index", "member_load", "target_load", "subscribed_topics", "diff_by_topic"]


def member_rows(state: DataFrame, subscribers: DataFrame | None = None) -> DataFrame:
    """One row per member of the state (:data:`STATE`), what a pairing round reads
    (:func:`_with_topic_sets`): ``member_load``, ``target_load``, the indexes of the
    topics it subscribes to (``subscribed_topics``) and ``diff_by_topic``: topic index ->
    assigned count minus owned count, for the topics where they differ. ``target_load``
    and ``subscribed_topics`` never change from round to round: given ``subscribers``
    (these rows' ``group_id, member_id, member_index, target_load, subscribed_topics``), only the
    subscriptions holding or owning something are aggregated (in a fresh group, most
    hold nothing); without, everything comes from one aggregation."""
    keys = ["group_id", "member_id", "member_index"]
    differs = F.col("assigned_count") != F.col("owned_count")
    load = F.sum("assigned_count").cast("long").alias("member_load")
    diff = (F.col("assigned_count") - F.col("owned_count")).alias("delta")
    diffs = F.map_from_entries(F.collect_list(F.when(differs, F.struct("topic_index", diff)))).alias("diff_by_topic")
    if subscribers is None:
        return state.groupBy(*keys).agg(
            load, F.max("target_load").alias("target_load"), F.collect_list("topic_index").alias("subscribed_topics"),
            diffs)
    held = state.where((F.col("assigned_count") > 0) | (F.col("owned_count") > 0)).groupBy(*keys).agg(load, diffs)
    return subscribers.join(held, keys, "left").select(
        *keys, F.coalesce("member_load", F.lit(0)).cast("long").alias("member_load"), "target_load",
        "subscribed_topics",
        F.coalesce("diff_by_topic", _no_diff()).alias("diff_by_topic"),
    )


def _no_diff() -> Column:
    """An empty ``diff_by_topic``."""
    return F.create_map().cast("map<int,bigint>")


def after_moves(mem: DataFrame, moves: DataFrame) -> DataFrame:
    """:func:`member_rows` after ``moves`` (``group_id, topic_index, giver, receiver``),
    computed on the member rows alone: loads and ``diff_by_topic`` entries shift by the
    partitions each member gave and received. Adds ``moved``: whether the member gave or
    received any.
    The member rows and the moves meet in one aggregation per member (no join: with
    both partitioned by group, nothing is shuffled)."""
    keys = ["group_id", "member_id"]
    per_topic = move_deltas(moves)
    cols = {"member_index": "int", "member_load": "long", "target_load": "long", "subscribed_topics": "array<int>",
            "diff_by_topic": "map<int,bigint>"}
    rows = mem.select(
        *keys, *cols, F.lit(None).cast("int").alias("topic_index"), F.lit(None).cast("long").alias("delta")
    ).unionByName(
        per_topic.select(*keys, *[F.lit(None).cast(t).alias(c) for c, t in cols.items()], "topic_index", "delta"))
    merged = rows.groupBy(*keys).agg(
        *[F.first(c, ignorenulls=True).alias(c) for c in cols],
        F.sum("delta").alias("load_delta"),
        F.map_from_entries(F.collect_list(F.when(F.col("topic_index").isNotNull(), F.struct("topic_index", "delta"))))
        .alias("delta_by_topic"),
    )
    diffs = F.map_zip_with("diff_by_topic", "delta_by_topic",
                          lambda k, a, b: F.coalesce(a, F.lit(0)) + F.coalesce(b, F.lit(0)))
    return merged.select(
        *keys, "member_index", (F.col("member_load") + F.coalesce("load_delta", F.lit(0))).alias("member_load"),
        "target_load", "subscribed_topics",
        F.map_filter(diffs, lambda k, v: v != 0).alias("diff_by_topic"), F.col("load_delta").isNotNull().alias("moved"),
    )


def synced_state(state: DataFrame, mem: DataFrame) -> DataFrame:
    """The state rows (:data:`STATE`) with the counts the member rows ``mem``
    (:func:`member_rows`) hold, ``assigned_count = owned_count + diff_by_topic[topic_index]``,
    and the member's load ``member_load``."""
    diff = F.coalesce(F.try_element_at("diff_by_topic", F.col("topic_index")), F.lit(0))
    assigned = (F.col("owned_count") + diff).cast("long").alias("assigned_count")
    rows = mem.select("group_id", "member_index", "diff_by_topic", "member_load")
    return state.join(rows, ["group_id", "member_index"]).select(
        *[F.col(x) if x != "assigned_count" else assigned for x in STATE], "member_load")


def _with_topic_sets(mem: DataFrame) -> DataFrame:
    """``mem`` (:func:`member_rows`) plus the topic index sets pairing reads: held
    beyond the owned count (``free_topics``, with how many in ``free_counts``) and held
    fewer of than owned (``short_topics``)."""
    free = F.map_filter("diff_by_topic", lambda k, v: v > 0)
    return mem.select(
        "*", F.map_keys(free).alias("free_topics"), free.alias("free_counts"),
        F.map_keys(F.map_filter("diff_by_topic", lambda k, v: v < 0)).alias("short_topics"),
    )


def pair_moves(mem: DataFrame, rnd: int) -> DataFrame:
    """The moves of one pairing round over every group (``mem``: :func:`member_rows`).

    Members above their ``target_load`` give, members below it receive: their
    surplus and deficit units are laid out in a hash order (a different one each
    round ``rnd``) and paired by position, so that one round pairs every unit of a
    group at once. A pair moves one partition of a topic the receiver subscribes
    to and the giver holds beyond its owned count (pairing never costs an owned
    partition), one that gives the receiver an owned partition back first, ties by
    hash. The members' topics travel as arrays of topic indexes (one row per member),
    so pairing needs no join of subscription rows. Pairs without such a topic, or
    beyond the giver's count of it, wait for a later round. Then only moves whose
    giver ends at least as loaded as its receiver are kept (dropping a move only
    raises givers and lowers receivers, so one pass does): played one by one, each
    such move goes from a member at least two partitions heavier, so the sum of
    squared loads strictly drops. Returns ``group_id, topic_index, giver, receiver``
    (one row per partition moved).

    Every window and aggregation here is keyed by group and more, so with ``mem``
    partitioned by group (``partitioned_by(mem, "group_id")``, as
    :func:`.sticky_general.target_counts` passes it) a round shuffles nothing: givers
    and receivers meet in a window over their slot, not in a join."""
    mem = _with_topic_sets(mem)
    # side 1: givers (above target), side 2: receivers; a unit per partition above / below
    load, target = F.col("member_load"), F.col("target_load")
    units = mem.where(load != target).withColumns({
        "side": F.when(load > target, 1).otherwise(2), "units": F.abs(load - target)})
    end = F.sum("units").over(Window.partitionBy("group_id", "side").orderBy(
        F.xxhash64("member_index", F.lit(rnd), F.col("side")), "member_index"
    ).rowsBetween(Window.unboundedPreceding, 0))
    units = units.withColumn("slot_end", end).withColumn(
        "slot", F.explode(F.sequence(F.col("slot_end") - F.col("units"), F.col("slot_end") - 1)))
    # the receiver of each slot, beside its giver (a group's surplus and deficit units are
    # equally many: the targets add up to its partitions; a slot missing either pairs nothing)
    receiver = F.struct(F.col("member_id").alias("receiver"), F.col("member_load").alias("receiver_load"),
                        F.col("subscribed_topics").alias("receiver_topics"),
                        F.col("short_topics").alias("receiver_short_topics"))
    pairs = units.withColumn(
        "paired", F.max(F.when(F.col("side") == 2, receiver)).over(Window.partitionBy("group_id", "slot"))
    ).where((F.col("side") == 1) & F.col("paired").isNotNull()).select(
        "group_id", "slot", F.col("member_id").alias("giver"), F.col("member_load").alias("giver_load"),
        F.col("free_topics").alias("giver_free_topics"), F.col("free_counts").alias("giver_free_counts"),
        "paired.receiver", "paired.receiver_load", "paired.receiver_topics", "paired.receiver_short_topics")
    # only partitions the giver did not own: pairing never costs an owned partition
    # (what balance takes from owners, the water-fill rounds take, owned ones last)
    options = [F.array_intersect(F.col("giver_free_topics"), F.col("receiver_short_topics")),
               F.array_intersect(F.col("giver_free_topics"), F.col("receiver_topics"))]
    cand = F.coalesce(*[F.when(F.size(o) > 0, o) for o in options])
    pick = F.array_min(F.transform(
        cand, lambda t: F.struct(F.xxhash64(t, F.col("slot"), F.lit(rnd)).alias("tiebreak"), t.alias("topic_index"))))
    per_giver_topic = Window.partitionBy("group_id", "giver", "topic_index").orderBy("slot")
    moves = (
        pairs.withColumn("topic_index", pick["topic_index"]).where(F.col("topic_index").isNotNull())
        .withColumn("giver_topic_rank", F.row_number().over(per_giver_topic))
        .where(F.col("giver_topic_rank") <= F.element_at("giver_free_counts", F.col("topic_index")))
    )
    fin = (
        moves.withColumn("giver_final_load",
                         F.col("giver_load") - F.count("*").over(Window.partitionBy("group_id", "giver")))
        .withColumn("receiver_final_load",
                    F.col("receiver_load") + F.count("*").over(Window.partitionBy("group_id", "receiver")))
    )
    return fin.where(F.col("giver_final_load") >= F.col("receiver_final_load")).select(
        "group_id", "topic_index", "giver", "receiver")
