"""The general path's state (:mod:`.sticky_general`): one row per subscription, counts
not partitions. Its columns (:data:`STATE`), the initial fill (:func:`initial_counts`, step 1),
each member's load and its worst violation of Kafka's balance rule (:func:`with_loads`), the
water-fill balancing round (:func:`balancing_round`, step 3) and what moves of single
partitions change per subscription (:func:`move_deltas`, read by the pairing and stickiness
rounds of :mod:`.sticky_pairing` and :mod:`.sticky_chains`).

>>> state = initial_counts(members, topic_sizes(partitions), owned)  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..execution import materialize, one_partition, partitioned_by
from ..ordering import java_order, with_member_index

_KEYS = ["group_id", "member_id", "topic"]
#: the state carried from round to round: one row per subscription, with the member's index
#: (Kafka's member order) and the topic's (Java's topic order) in the group, how many partitions
#: of the topic the member owned and is assigned, and the member's target load
STATE = [
    "group_id", "member_id", "topic", "member_index", "topic_index", "owned_count", "assigned_count", "target_load",
]


def _water_fill(rows: DataFrame, units: str, base: str, own: str | None = None, cur: str | None = None) -> DataFrame:
    """Water-fill ``units`` (a per-(group, topic) column) over the rows of each
    ``(group_id, topic)`` by ``base`` load: add ``fill`` so that the lowest rows
    rise to a common level ``_level`` (some to ``_level + 1``), the highest untouched.

    Closed form over the rows sorted by base: the first ``_n_filled`` rows are filled
    (as many as ``units`` can raise to the base of the last of them, its ``_cost``),
    level ``(units + sum of their bases) // _n_filled``; the remainder's ``+1`` goes first to
    the filled rows that would otherwise end below their owned count ``own``,
    then to those holding most now (``cur``), then in member order. Adds ``fill``.
    """
    wt = Window.partitionBy("group_id", "topic")
    ws = wt.orderBy(F.col(base), F.col("member_index"))
    r = (
        rows.withColumn("_rank", F.row_number().over(ws))
        .withColumn("_base_sum", F.sum(base).over(ws.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("_cost", F.col("_rank") * F.col(base) - F.col("_base_sum"))
        .withColumn("_affordable", F.col("_cost") <= F.col(units))
        .withColumn("_n_filled", F.max(F.when(F.col("_affordable"), F.col("_rank"))).over(wt))
        .withColumn("_filled_base_sum", F.max(F.when(F.col("_affordable"), F.col("_base_sum"))).over(wt))
        .withColumn("_level", F.floor((F.col(units) + F.col("_filled_base_sum")) / F.col("_n_filled")).cast("long"))
        .withColumn("_remainder", F.col(units) + F.col("_filled_base_sum") - F.col("_n_filled") * F.col("_level"))
        .withColumn("_filled", F.col("_rank") <= F.col("_n_filled"))
    )
    short = (F.col("_level") - F.col(base) < F.col(own)) if own else F.lit(False)
    now = F.col(cur) if cur else F.lit(0)
    wp = wt.orderBy(F.col("_filled").desc(), short.desc(), now.desc(), F.col("member_index"))
    r = r.withColumn("_extra_rank", F.row_number().over(wp))
    return r.withColumn(
        "fill",
        F.when(
            F.col("_filled"),
            F.col("_level") - F.col(base) + F.when(F.col("_extra_rank") <= F.col("_remainder"), 1).otherwise(0),
        ).otherwise(F.lit(0)).cast("long"),
    ).drop("_rank", "_base_sum", "_cost", "_affordable", "_n_filled", "_filled_base_sum", "_level", "_remainder",
           "_filled", "_extra_rank")


#: proportional-fitting passes of the initial fill
FIT_PASSES = 1


def initial_counts(members: DataFrame, sizes: DataFrame, owned: DataFrame | None) -> DataFrame:
    """The first state (:data:`STATE`): one row per subscription to an existing
    topic, with ``owned_count``, the initial ``assigned_count`` and the member's ``target_load``.

    The unowned partitions of each topic are spread over its subscribers in
    proportion to weights fitted (:data:`FIT_PASSES` passes of iterative
    proportional fitting; one brings member totals within 1% of the level on
    the benchmark, the pairing rounds absorb the rest) so that every member tops up to the group's water level over the
    owned loads, then rounded: each member's fractional parts are rounded
    jointly over its topics (systematic rounding), and each topic hands its
    remaining partitions to the members whose rounding wants one (ties by hash),
    so member totals land within a partition or two of their fitted share. The
    ``target_load`` is the fitted member total, rounded systematically over the
    group's members. ``owned`` None: nobody owns anything (the water level is then
    the group's mean load, without the windows that find it over owned loads).
    ``sizes``: the partitions' :func:`spark_assign.inputs.topic_sizes`.
    """
    # members may be an unmaterialized plan: it is read once. Indexes are per group (member_index
    # in Kafka's member order, topic_index in Java's topic order), so that a group's result
    # never depends on the other groups assigned with it
    m = with_member_index(members, "member_index").select("group_id", "member_id", "member_index", "topics")
    topics = sizes.select("topic", F.col("num_partitions").cast("long").alias("num_partitions"))
    subs = m.select("group_id", "member_id", "member_index", F.explode("topics").alias("topic")).join(topics, "topic")
    if owned is None:
        subs = subs.withColumn("owned_count", F.lit(0).cast("long"))
    else:
        own = owned.groupBy(*_KEYS).agg(F.count("*").alias("owned_count"))
        subs = one_partition(subs).join(own, _KEYS, "left").withColumn(
            "owned_count", F.coalesce("owned_count", F.lit(0)).cast("long"))
    wt = Window.partitionBy("group_id", "topic_index")
    wm = Window.partitionBy("group_id", "member_index")
    wg = Window.partitionBy("group_id")
    # one partition per group from here on: every window below is then shuffle-free.
    # Member-level sums over the group count each member once, on its first row
    # (each window spec is one pass over the group's rows: the topic sums and the first
    # of each topic share one ordered spec, and so do the member sums and first member)
    by_member = wt.orderBy("member_index")
    by_topic = wm.orderBy("topic_index")
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    subs = materialize(
        partitioned_by(subs, "group_id")
        .withColumn("topic_index", F.dense_rank().over(wg.orderBy(java_order("topic"))) - 1)
        .withColumn("topic_unowned", F.col("num_partitions") - F.sum("owned_count").over(by_member.rowsBetween(*whole)))
        .withColumn("topic_subscribers", F.count("*").over(by_member.rowsBetween(*whole)))
        .withColumn("first_of_topic", F.row_number().over(by_member) == 1)
        .withColumn("owned_load", F.sum("owned_count").over(by_topic.rowsBetween(*whole)))
        .withColumn("open_topics",  # the member's topics with unowned partitions
                    F.count(F.when(F.col("topic_unowned") > 0, 1)).over(by_topic.rowsBetween(*whole)))
        .withColumn("first_of_member", F.row_number().over(by_topic) == 1)
        .withColumns({
            "group_unowned":
                F.sum(F.when(F.col("first_of_topic"), F.greatest(F.col("topic_unowned"), F.lit(0)))).over(wg),
            "group_members": F.count(F.when(F.col("first_of_member"), 1)).over(wg),  # read when nobody owns anything
        })
    )
    first = F.col("first_of_member")
    if owned is None:  # nobody owns anything: every member needs the group's mean load
        subs = subs.withColumn("need", F.col("group_unowned") / F.col("group_members"))
    else:
        # the group's water level over owned loads (eligibility ignored): members below
        # it need the difference. Over the members by owned load: the k lowest can be
        # topped up to the k-th's load while that costs at most the unowned partitions
        by_load = wg.orderBy("owned_load", "member_index")  # default frame: members up to this one
        subs = (
            subs.withColumn("members_up_to", F.count(F.when(first, 1)).over(by_load))
            .withColumn("owned_up_to", F.sum(F.when(first, F.col("owned_load"))).over(by_load))
            .withColumn("can_top_up", first & (
                F.col("members_up_to") * F.col("owned_load") - F.col("owned_up_to") <= F.col("group_unowned")))
            .withColumn("topped_members", F.max(F.when(F.col("can_top_up"), F.col("members_up_to"))).over(wg))
            .withColumn("topped_owned_load", F.max(F.when(F.col("can_top_up"), F.col("owned_up_to"))).over(wg))
            .withColumn("need", F.greatest(F.lit(0.0), (F.col("group_unowned") + F.col("topped_owned_load"))
                                           / F.col("topped_members") - F.col("owned_load")))
        )
    subs = subs.withColumn(
        "weight", F.when(F.col("open_topics") > 0, F.col("need") / F.col("open_topics")).otherwise(F.lit(0.0)))

    def share(df: DataFrame) -> DataFrame:
        tw = F.sum(F.when(F.col("topic_unowned") > 0, F.col("weight"))).over(wt)
        return df.withColumn(
            "fitted_share",
            F.when(F.col("topic_unowned") <= 0, F.lit(0.0))
            .when(tw > 0, F.col("topic_unowned") * F.col("weight") / tw)
            .otherwise(F.col("topic_unowned") / F.col("topic_subscribers")),
        )

    for _ in range(FIT_PASSES):
        fitted = share(subs).withColumn("member_fitted_share", F.sum("fitted_share").over(wm))
        subs = fitted.withColumn(
            "weight",
            F.when(F.col("member_fitted_share") > 0, F.col("weight") * F.col("need") / F.col("member_fitted_share"))
            .otherwise(F.col("weight")),
        ).drop("fitted_share", "member_fitted_share")
    subs = share(subs).withColumn("share_floor", F.floor("fitted_share").cast("long")).withColumn(
        "share_fraction", F.col("fitted_share") - F.col("share_floor"))
    # systematic rounding along each member's topics: an extra wherever the running
    # sum of fractional parts crosses an integer (+ 0.5)
    run = F.sum("share_fraction").over(by_topic.rowsBetween(Window.unboundedPreceding, 0)) + F.lit(0.5)
    # target loads: the fitted member totals rounded systematically in member order
    # (so that they add up to the group's partitions)
    cum = F.sum(F.when(first, F.col("fitted_load"))).over(wg.orderBy("member_index")) + F.lit(0.5)  # members up to here
    subs = (
        subs.withColumn("wants_extra", F.floor(run) - F.floor(run - F.col("share_fraction")))
        .withColumn("fitted_load",  # in run's pass
                    F.col("owned_load") + F.sum("fitted_share").over(by_topic.rowsBetween(*whole)))
        .withColumn("target_load", (F.floor(cum) - F.floor(cum - F.col("fitted_load"))).cast("long"))
    )
    # per topic the +1s go to the members whose rounding wants one, ties broken by a
    # hash: any member-level order (say by fractional part) would favour the same
    # members in every topic and pile the rounding errors onto them
    deal = wt.orderBy(F.col("wants_extra").desc(), F.xxhash64("member_index", "topic_index"), "member_index")
    subs = subs.withColumn(
        "leftover", F.col("topic_unowned") - F.sum("share_floor").over(deal.rowsBetween(*whole))
    ).withColumn("deal_rank", F.row_number().over(deal) - 1)
    left, rank = F.col("leftover"), F.col("deal_rank")
    add = F.when(left > rank, F.floor((left - rank - 1) / F.col("topic_subscribers")) + 1).otherwise(0)
    assigned = (F.col("owned_count") + F.col("share_floor") + add).cast("long").alias("assigned_count")
    return subs.select(*[assigned if x == "assigned_count" else x for x in STATE])


def with_loads(state: DataFrame) -> DataFrame:
    """Add the member loads ``member_load``, per topic the smallest subscriber load
    ``min_subscriber_load``, the largest holder load ``max_holder_load`` and whether a
    most loaded holder holds partitions it did not own (``top_holder_unowned``), and
    each row's violation option key ``violation_key``."""
    wm = Window.partitionBy("group_id", "member_id")
    wt = Window.partitionBy("group_id", "topic")
    load, lo, hi = F.col("member_load"), F.col("min_subscriber_load"), F.col("max_holder_load")
    assigned, owned = F.col("assigned_count"), F.col("owned_count")
    s = (
        state.withColumn("member_load", F.sum("assigned_count").over(wm))
        .withColumn("min_subscriber_load", F.min("member_load").over(wt))
        .withColumn("max_holder_load", F.max(F.when(assigned > 0, load)).over(wt))
        # a most loaded holder of the topic holds partitions it did not own
        .withColumn("top_holder_unowned", F.max(F.when((load == hi) & (assigned > owned), 1).otherwise(0)).over(wt))
    )
    give = F.when((assigned > 0) & (load - lo >= 2), load - lo)
    take = F.when(hi - load >= 2, hi - load)
    # key: gap, then whether a partition can move without costing an owned one
    # (the giver's own rows / the topic's for a receiver), then the topic index
    key = lambda gap, free: (  # noqa: E731
        gap.cast("long") * F.lit(1 << 32) + free * F.lit(1 << 31) + (F.lit((1 << 31) - 1) - F.col("topic_index")))
    gkey = key(give, F.when(assigned > owned, 1).otherwise(0))
    tkey = key(take, F.col("top_holder_unowned"))
    return s.withColumn("violation_key", F.greatest(gkey, tkey))  # greatest skips nulls


def balancing_round(s: DataFrame) -> DataFrame:
    """One balancing round over every group (``s`` from :func:`with_loads`)."""
    wm = Window.partitionBy("group_id", "member_id")
    s = s.withColumn("best_key", F.max("violation_key").over(wm))
    picked = s.where(F.col("violation_key").isNotNull() & (F.col("violation_key") == F.col("best_key")))
    rest = s.where(F.col("violation_key").isNull() | (F.col("violation_key") != F.col("best_key")))
    wt = Window.partitionBy("group_id", "topic")
    # per topic, the partitions its pickers hold go round again over their loads on other topics
    picked = picked.withColumn("topic_assigned", F.sum("assigned_count").over(wt)).withColumn(
        "other_load", F.col("member_load") - F.col("assigned_count"))
    moved = _water_fill(picked, "topic_assigned", "other_load", own="owned_count", cur="assigned_count").withColumn(
        "assigned_count", F.col("fill"))
    return rest.select(*STATE).unionByName(moved.select(*STATE))


def move_deltas(moves: DataFrame) -> DataFrame:
    """What ``moves`` (``group_id, topic_index, giver, receiver``: one partition of
    topic ``topic_index`` from ``giver`` to ``receiver`` per row, any number of rows)
    change per subscription: ``group_id, member_id, topic_index, delta`` (partitions
    received minus given)."""
    side = F.explode(F.array(
        F.struct(F.col("giver").alias("member_id"), F.lit(-1).alias("delta")),
        F.struct(F.col("receiver").alias("member_id"), F.lit(1).alias("delta")),
    )).alias("move_side")
    return (
        moves.select("group_id", "topic_index", side)
        .select("group_id", "move_side.member_id", "topic_index", "move_side.delta")
        .groupBy("group_id", "member_id", "topic_index").agg(F.sum("delta").alias("delta"))
    )
