"""The sticky assignor's general path: members of a group subscribe to different topics.

Kafka's client (``AbstractStickyAssignor.GeneralAssignmentBuilder``) keeps the
valid owned partitions, hands the rest to the least loaded subscribers and then
moves single partitions until no partition could move to a subscriber of its
topic holding two or more fewer (Kafka's balance rule,
``properties.balance_violations(rule="kafka")``). That loop is super-linear.

Here the same result is computed for every group at once, at member x topic
granularity (one row per subscription, integer member and topic indexes per
group, so a group's result never depends on the groups assigned with it), as
DataFrame transformations; the driver only loops over rounds, each one
distributed step over all groups:

1. **initial fill** (:func:`_initial_counts`): ``assigned_count``, how many
   partitions of topic ``t`` member ``m`` gets. Start from the ``owned_count`` and
   spread each topic's unowned partitions over its subscribers by weights fitted
   (iterative proportional fitting) so that members top up to the group's water
   level; round each member's fractional parts jointly over its topics, and give
   each topic's leftover partitions to the members whose rounding wants one, ties
   by hash (an order shared by all topics would pile the errors onto the same
   members). Each member also gets a ``target_load``: its fitted total,
   rounded over the group.
2. **pairing rounds** (:func:`_pair_moves`): the units members hold above their
   target and lack below it are laid out in a hash order and paired by position,
   each pair moving one partition the giver did not own of a topic both share;
   a move is kept only if its giver ends at least as loaded as its receiver. One
   round settles nearly every unit of a fresh group (the benchmark: 2-3 rounds).
   Pairing rounds read and update one row per member (:func:`_member_rows`,
   :func:`_after_moves`), partitioned by group, so a round is one shuffle of the
   member rows; the subscription rows take all their moves at once, when pairing
   stops (:func:`_synced`).
3. **water-fill rounds** (:func:`_round`), once a pairing round finds nothing, while
   Kafka's rule still fails (owners above the level, targets the fit got wrong); no
   pairing round follows them (on the benchmark's 100 mixed groups, the pairing rounds
   after a water-fill round and the member rows rebuilt for them cost about 3-4 s of a
   12-14 s call, and in two of four seeds kept fewer owned partitions):
   every member picks the single topic of its worst violation, as giver or
   receiver, and per topic the members that picked it redistribute its
   partitions among themselves by a water-fill over their other loads
   (:func:`_water_fill`, owned partitions kept first).
   Termination: every move of either round kind goes, played one by one, from a
   member at least two partitions heavier, so each round strictly lowers the sum
   of squared member loads (for water-fill rounds: with ``K(t)`` = largest load of
   a holder of ``t`` minus smallest load of a subscriber, the topic with the
   largest ``K`` is picked by a most loaded holder and a least loaded subscriber,
   and members change load through one topic only). ``MAX_ROUNDS`` is a safety
   cap that raises :class:`~spark_assign.errors.AssignmentPropertyError` naming
   the unbalanced subscriptions, never a silent stop.
4. **stickiness rounds** (:func:`_chain_moves`, once balanced, only where a member
   holds fewer of a topic than it owned): per group and round one chain of moves
   that keeps more owned partitions and Kafka's balance rule: a single move, a
   swap, or ``a -> x -> b`` where each hop hands on one partition (the chains
   Kafka's GeneralAssignmentBuilder reaches among equally loaded members). On the
   tests' 256 random groups this keeps at least as many owned partitions as Kafka
   in every group. A round searches only the groups the round before changed
   (:func:`_sticky_rounds`).
5. **placement** (:mod:`spark_assign.strategies.sticky_placement`): each member keeps
   its owned partitions of a topic up to its ``assigned_count`` (lowest partitions
   first), and the partitions left over are
   handed out by a rank join on ``(group_id, topic, position)`` against the
   members' remaining counts. With ``rack_aware`` (KIP-881, best effort, in
   Kafka's priority balance > rack locality > stickiness) rack-local owned
   partitions are kept first, then rack-local free partitions handed out, then
   other owned partitions kept, then the rest handed out. The counts themselves
   are rack-blind, so rack locality only decides which partitions of a topic a
   member gets, never how many.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..errors import AssignmentPropertyError, raise_if_rows
from ..frames import one_partition, union_all
from ..inputs import topic_sizes as count_topic_sizes
from ..lineage import has_rows, materialize, partitioned_by, stored_select
from ..ordering import java_order, with_member_index
from .sticky_placement import place

#: cap on balancing rounds: reaching it raises AssignmentPropertyError naming the groups
MAX_ROUNDS = 200
#: balancing rounds the last :func:`target_counts` call ran (for benchmarks)
LAST_ROUNDS = 0

_KEYS = ["group_id", "member_id", "topic"]
#: the state carried from round to round: one row per subscription, with the member's index
#: (Kafka's member order) and the topic's (Java's topic order) in the group, how many partitions
#: of the topic the member owned and is assigned, and the member's target load
_STATE = [
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


def _initial_counts(members: DataFrame, sizes: DataFrame, owned: DataFrame | None) -> DataFrame:
    """The first state (:data:`_STATE`): one row per subscription to an existing
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
    return subs.select(*[assigned if x == "assigned_count" else x for x in _STATE])


def _with_loads(state: DataFrame) -> DataFrame:
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


def _round(s: DataFrame) -> DataFrame:
    """One balancing round over every group (``s`` from :func:`_with_loads`)."""
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
    return rest.select(*_STATE).unionByName(moved.select(*_STATE))


#: cap on the stickiness rounds after balancing (each makes at most one chain of moves per
#: group; stopping there leaves a valid, balanced, slightly less sticky assignment)
MAX_STICKY_ROUNDS = 50


#: short subscriptions (holding fewer than owned) per group a stickiness round starts chains from
STICKY_STARTS = 4


def _chain_moves(s: DataFrame) -> DataFrame:
    """The moves of one stickiness round over balanced groups (``s`` from
    :func:`_with_loads`): per group at most one chain that gives a member ``b``
    back a partition of a topic ``t2`` it owned, either straight from a holder
    ``a`` of ``t2``, or through a middle member ``x``: ``a`` hands ``x`` a
    partition of a topic ``t1`` and ``x`` hands ``b`` one of ``t2`` (``a == b``
    is a swap). The chain is taken only where it keeps more owned partitions
    (gains minus losses, at least one) and keeps Kafka's balance rule, which,
    with ``a`` one partition lighter and ``b`` one heavier afterwards, holds
    exactly when: no topic ``a`` subscribes to has a holder heavier than ``a``;
    every subscriber of the topics ``b`` then holds is at least as heavy as ``b``
    (``a``, if it subscribes to one, at least one heavier); and ``x``'s new topic
    ``t1`` has no subscriber two or more lighter than ``x`` (``a`` not lighter
    than ``x``). Chains start from a few short subscriptions per group
    (:data:`STICKY_STARTS`), so a round stays small. In the columns, ``a`` is the
    ``giver``, ``x`` the ``middle`` and ``b`` the ``receiver``, ``t1`` the
    ``middle_topic`` and ``t2`` the ``receiver_topic``. Returns the chains, materialized
    (at most one row per group: ``group_id, giver, middle, receiver, middle_topic,
    receiver_topic``...); :func:`_hops` turns them into moves."""
    # per member: the heaviest holder of any topic it subscribes to, the lightest subscriber
    # of any topic it holds, the topics it subscribes to and those it holds
    mem = s.groupBy("group_id", "member_id").agg(
        F.max(F.coalesce("max_holder_load", F.lit(0))).alias("subscribed_max_holder_load"),
        F.min(F.when(F.col("assigned_count") > 0, F.col("min_subscriber_load"))).alias("held_min_subscriber_load"),
        F.collect_list("topic_index").alias("subscribed_topics"),
        F.collect_list(F.when(F.col("assigned_count") > 0, F.col("topic_index"))).alias("held_topics"),
    )
    lost = (F.col("owned_count") >= F.col("assigned_count")).cast("int")  # giving one up costs an owned partition
    regains = F.when(F.col("owned_count") > F.col("assigned_count"), 1).otherwise(0)  # receiving one gives one back
    starts = s.where(F.col("assigned_count") < F.col("owned_count")).withColumn(
        "start_rank", F.row_number().over(Window.partitionBy("group_id").orderBy("member_index", "topic_index"))
    ).where(F.col("start_rank") <= STICKY_STARTS).select(
        "group_id", F.col("member_id").alias("receiver"), F.col("topic_index").alias("receiver_topic"),
        F.col("member_load").alias("receiver_load"), F.col("min_subscriber_load").alias("receiver_topic_min_load"),
        F.col("member_index").alias("receiver_index"))
    holders = s.where(F.col("assigned_count") > 0)
    h2 = holders.select("group_id", F.col("topic_index").alias("receiver_topic"), F.col("member_id").alias("middle"),
                        F.col("member_load").alias("middle_load"), lost.alias("middle_gives_owned"),
                        F.col("member_index").alias("middle_index"))
    # every join below reads joins: one_partition keeps a small call's joins from shuffling
    step = one_partition(starts.join(h2, ["group_id", "receiver_topic"]).where(F.col("middle") != F.col("receiver")))
    receiver_cols = ["receiver", "receiver_topic", "receiver_load", "receiver_topic_min_load", "receiver_index"]
    # one hop: x is the giver a
    one = step.select("group_id", *receiver_cols, F.lit(None).cast("string").alias("middle"),
                      F.lit(None).cast("long").alias("middle_topic"), F.col("middle").alias("giver"),
                      F.col("middle_load").alias("giver_load"), F.col("middle_index").alias("giver_index"),
                      (F.lit(1) - F.col("middle_gives_owned")).alias("owned_gain"),
                      F.lit(None).cast("long").alias("middle_load"),
                      F.lit(None).cast("long").alias("middle_topic_min_load"))
    # two hops: a gives x a partition of a topic t1 x subscribes to
    xs = s.select("group_id", F.col("member_id").alias("middle"), F.col("topic_index").alias("middle_topic"),
                  regains.alias("middle_regains_owned"), F.col("min_subscriber_load").alias("middle_topic_min_load"))
    h1 = holders.select("group_id", F.col("topic_index").alias("middle_topic"), F.col("member_id").alias("giver"),
                        F.col("member_load").alias("giver_load"), lost.alias("giver_gives_owned"),
                        F.col("member_index").alias("giver_index"))
    chain_cols = [*receiver_cols, "middle", "middle_topic", "giver", "giver_load", "giver_index"]
    two = (
        one_partition(step.join(xs, ["group_id", "middle"]).where(F.col("middle_topic") != F.col("receiver_topic")))
        .join(h1, ["group_id", "middle_topic"]).where(F.col("giver") != F.col("middle"))
        .select("group_id", *chain_cols,
                (F.lit(1) + F.col("middle_regains_owned") - F.col("giver_gives_owned") - F.col("middle_gives_owned"))
                .alias("owned_gain"), "middle_load", "middle_topic_min_load")
    )
    # two hops with the gain in the middle: x is short on t1 (the start), a holds t1,
    # x passes one of its topics t2 on to a subscriber b
    x_short = starts.select("group_id", F.col("receiver").alias("middle"), F.col("receiver_topic").alias("middle_topic"),
                            F.col("receiver_load").alias("middle_load"),
                            F.col("receiver_topic_min_load").alias("middle_topic_min_load"))
    x_gives = holders.select("group_id", F.col("member_id").alias("middle"), F.col("topic_index").alias("receiver_topic"),
                             lost.alias("middle_gives_owned"))
    b = s.select("group_id", F.col("topic_index").alias("receiver_topic"), F.col("member_id").alias("receiver"),
                 F.col("member_load").alias("receiver_load"), F.col("min_subscriber_load").alias("receiver_topic_min_load"),
                 F.col("member_index").alias("receiver_index"), regains.alias("receiver_regains_owned"))
    mid = one_partition(x_short.join(h1, ["group_id", "middle_topic"]).where(F.col("giver") != F.col("middle")))
    mid = one_partition(mid.join(x_gives, ["group_id", "middle"]).where(F.col("receiver_topic") != F.col("middle_topic")))
    mid = mid.join(b, ["group_id", "receiver_topic"]).where(F.col("receiver") != F.col("middle")).select(
        "group_id", *chain_cols,
        (F.lit(1) + F.col("receiver_regains_owned") - F.col("giver_gives_owned") - F.col("middle_gives_owned"))
        .alias("owned_gain"), "middle_load", "middle_topic_min_load")
    cand = one_partition(one.unionByName(two).unionByName(mid).where(F.col("owned_gain") >= 1))
    ma = mem.select("group_id", F.col("member_id").alias("giver"),
                    F.col("subscribed_max_holder_load").alias("giver_max_holder_load"),
                    F.col("subscribed_topics").alias("giver_topics"))
    mb = mem.select("group_id", F.col("member_id").alias("receiver"),
                    F.col("held_min_subscriber_load").alias("receiver_held_min_load"),
                    F.col("held_topics").alias("receiver_held_topics"))
    gmax = s.groupBy("group_id").agg(F.max("member_load").alias("group_max_load"))
    cand = one_partition(one_partition(cand.join(ma, ["group_id", "giver"])).join(mb, ["group_id", "receiver"])
                         ).join(gmax, "group_id")
    a_load, b_load, x_load = F.col("giver_load"), F.col("receiver_load"), F.col("middle_load")
    swap = F.col("giver") == F.col("receiver")
    shares = F.arrays_overlap(F.col("giver_topics"),
                              F.array_union(F.col("receiver_held_topics"), F.array(F.col("receiver_topic"))))
    x_ok = F.col("middle").isNull() | (
        (F.col("middle_topic_min_load") >= x_load - 1) & (swap | (a_load >= x_load)))
    ok = x_ok & (
        (swap & (F.col("receiver_topic_min_load") >= b_load - 1))
        | (~swap & (F.col("giver_max_holder_load") <= a_load)
           & (F.coalesce("receiver_held_min_load", b_load) >= b_load)
           & (b_load < F.col("group_max_load"))
           & (F.col("receiver_topic_min_load") >= b_load) & (~shares | (a_load - 1 >= b_load)))
    )
    best = cand.where(ok).withColumn("chain_rank", F.row_number().over(Window.partitionBy("group_id").orderBy(
        F.col("owned_gain").desc(), F.col("middle").isNotNull(), "receiver_index", "receiver_topic", "giver_index",
        "middle_topic", "middle")))
    return materialize(best.where("chain_rank = 1"))


def _hops(chains: DataFrame) -> DataFrame:
    """The moves of ``chains`` (:func:`_chain_moves`): ``group_id, topic_index, giver,
    receiver``, one row per partition moved (one or two per chain)."""
    hop1 = chains.selectExpr("group_id", "coalesce(middle_topic, receiver_topic) AS topic_index", "giver",
                             "coalesce(middle, receiver) AS receiver")
    hop2 = chains.where("middle IS NOT NULL").selectExpr(
        "group_id", "receiver_topic AS topic_index", "middle AS giver", "receiver")
    return hop1.unionByName(hop2)


def _move_deltas(moves: DataFrame) -> DataFrame:
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


def _apply_moves(s: DataFrame, moves: DataFrame) -> DataFrame:
    """The state rows (:data:`_STATE`) after ``moves`` (:func:`_move_deltas`)."""
    return s.join(_move_deltas(moves), ["group_id", "member_id", "topic_index"], "left").select(
        *[x for x in _STATE if x != "assigned_count"],
        (F.col("assigned_count") + F.coalesce("delta", F.lit(0))).cast("long").alias("assigned_count"),
    ).select(*_STATE)


def _sticky_rounds(state: DataFrame, loads: DataFrame) -> DataFrame:
    """The stickiness rounds over balanced ``state`` (:data:`_STATE`; ``loads``: its
    :func:`_with_loads`, stored, as the balancing rounds left it): give members back
    owned partitions where balance allows, each round at most one chain per group
    (:func:`_chain_moves`). A round reads only the groups the round before changed: a
    group's chains depend on its own rows alone, so a group that found none keeps its
    state and would find none again (on the benchmark's 100 mixed groups, 100 groups
    searched in the first round and 23, 14, 8 and 2 in the next). Returns the state rows
    of every group."""
    settled: list[DataFrame] = []  # the groups whose last round found no chain, as they are
    for k in range(MAX_STICKY_ROUNDS):
        if not has_rows(state, greater=("owned_count", "assigned_count")):  # nobody short of owned ones
            break
        s = loads if k == 0 else materialize(_with_loads(state))
        chains = _chain_moves(s)  # stored; its moves are a projection of it, not stored again
        if not has_rows(chains):
            break
        changed = chains.select("group_id")  # one chain per group
        settled.append(state.join(changed, "group_id", "left_anti"))
        state = materialize(_apply_moves(s.join(changed, "group_id", "left_semi"), _hops(chains)))
    return union_all([*settled, state])


#: the columns of :func:`_member_rows`
_MEMBER_ROWS = [
    "group_id", "member_id", "member_index", "member_load", "target_load", "subscribed_topics", "diff_by_topic"]


def _member_rows(state: DataFrame, subscribers: DataFrame | None = None) -> DataFrame:
    """One row per member of the state (:data:`_STATE`), what a pairing round reads
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


def _after_moves(mem: DataFrame, moves: DataFrame) -> DataFrame:
    """:func:`_member_rows` after ``moves`` (``group_id, topic_index, giver, receiver``),
    computed on the member rows alone: loads and ``diff_by_topic`` entries shift by the
    partitions each member gave and received. Adds ``moved``: whether the member gave or
    received any.
    The member rows and the moves meet in one aggregation per member (no join: with
    both partitioned by group, nothing is shuffled)."""
    keys = ["group_id", "member_id"]
    per_topic = _move_deltas(moves)
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


def _synced(state: DataFrame, mem: DataFrame) -> DataFrame:
    """The state rows (:data:`_STATE`) with the counts the member rows ``mem``
    (:func:`_member_rows`) hold, ``assigned_count = owned_count + diff_by_topic[topic_index]``,
    and the member's load ``member_load``."""
    diff = F.coalesce(F.try_element_at("diff_by_topic", F.col("topic_index")), F.lit(0))
    assigned = (F.col("owned_count") + diff).cast("long").alias("assigned_count")
    rows = mem.select("group_id", "member_index", "diff_by_topic", "member_load")
    return state.join(rows, ["group_id", "member_index"]).select(
        *[F.col(x) if x != "assigned_count" else assigned for x in _STATE], "member_load")


def _with_topic_sets(mem: DataFrame) -> DataFrame:
    """``mem`` (:func:`_member_rows`) plus the topic index sets pairing reads: held
    beyond the owned count (``free_topics``, with how many in ``free_counts``) and held
    fewer of than owned (``short_topics``)."""
    free = F.map_filter("diff_by_topic", lambda k, v: v > 0)
    return mem.select(
        "*", F.map_keys(free).alias("free_topics"), free.alias("free_counts"),
        F.map_keys(F.map_filter("diff_by_topic", lambda k, v: v < 0)).alias("short_topics"),
    )


def _pair_moves(mem: DataFrame, rnd: int) -> DataFrame:
    """The moves of one pairing round over every group (``mem``: :func:`_member_rows`).

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
    partitioned by group (``partitioned_by(mem, "group_id")``, as :func:`target_counts`
    passes it) a round shuffles nothing: givers and receivers meet in a window over
    their slot, not in a join."""
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


def target_counts(
    members: DataFrame, partitions: DataFrame, owned: DataFrame | None, *, max_rounds: int = MAX_ROUNDS,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Per subscription, how many partitions of the topic the member gets:
    ``group_id, member_id, topic, member_index, owned_count, count`` (balanced by
    Kafka's rule; ``member_index``: the member's position in Kafka's member order).
    ``topic_sizes``: the partitions' :func:`spark_assign.inputs.topic_sizes` (counted
    here when None).

    >>> target_counts(members, partitions, resolve_owned(members, partitions)).show()  # doctest: +SKIP
    """
    global LAST_ROUNDS
    sizes = count_topic_sizes(partitions) if topic_sizes is None else topic_sizes
    state = materialize(_initial_counts(members, sizes, owned))
    mem = materialize(_member_rows(state))
    subscribers = mem.select("group_id", "member_id", "member_index", "target_load", "subscribed_topics")
    synced = True  # the state rows hold the counts the member rows say
    pairing = True  # until a pairing round moves nothing: the water-fill rounds finish alone
    LAST_ROUNDS = 0
    for LAST_ROUNDS in range(max_rounds + 1):
        # a pairing round while some member is above its target and pairing finds
        # moves (on the member rows alone), else check Kafka's rule and water-fill
        if pairing and LAST_ROUNDS < max_rounds and has_rows(mem, greater=("member_load", "target_load")):
            by_group = partitioned_by(mem, "group_id")  # the round shuffles nothing more
            paired = materialize(_after_moves(by_group, _pair_moves(by_group, LAST_ROUNDS)))
            if has_rows(paired, true="moved"):
                mem, synced = stored_select(paired, *_MEMBER_ROWS), False
                continue
            pairing = False
        if not synced:  # the subscription rows take every pairing round's moves at once
            state, synced = stored_select(materialize(_synced(state, mem)), *_STATE), True
        # Kafka's rule fails exactly where a topic's most loaded holder is two or more above
        # its least loaded subscriber: where some subscription has a violation key (a holder
        # two or more above the topic's least loaded subscriber, or a subscriber two or more
        # below its most loaded holder), read off the stored rows
        s = materialize(_with_loads(state))
        if not has_rows(s, not_null="violation_key"):
            break
        pending = s.where(F.col("violation_key").isNotNull())
        if LAST_ROUNDS == max_rounds:
            raise_if_rows(
                pending.select("group_id", "member_id", "topic", "assigned_count", "member_load",
                               "min_subscriber_load", "max_holder_load"),
                AssignmentPropertyError,
                f"the general sticky path did not reach Kafka's balance rule in {max_rounds} "
                "balancing rounds (max_rounds); subscriptions still out of balance",
            )
        state = materialize(_round(s))
        if pairing:  # the member rows are pairing's
            mem = materialize(_member_rows(state, subscribers))
    state = _sticky_rounds(state, s) if owned is not None else state
    return state.select(
        "group_id", "member_id", "topic", "member_index", "owned_count", F.col("assigned_count").alias("count"))


def assign_general(
    members: DataFrame, partitions: DataFrame, owned: DataFrame | None, *, rack_aware: bool = False,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Sticky assignment for groups whose members subscribe to different topics.

    ``members``: normalized members (spark_assign.inputs); ``partitions``:
    normalized partitions; ``owned``: the honoured owned partitions
    (:func:`spark_assign.owned.resolve_owned`), or None when nobody owns anything
    (fresh groups: the steps that only concern owned partitions are left out);
    ``topic_sizes`` as in :func:`target_counts`. Returns the full target
    assignment ``group_id, member_id, topic, partition``: valid, balanced by
    Kafka's rule, keeping owned partitions wherever balance allows.

    >>> m = normalize_members(members_df)  # doctest: +SKIP
    >>> assign_general(m, parts, resolve_owned(m, parts), rack_aware=False).show()  # doctest: +SKIP
    """
    counts = target_counts(members, partitions, owned, topic_sizes=topic_sizes)  # a projection of materialized state
    out = place(counts, members, partitions, owned, rack_aware)
    return out.select("group_id", "member_id", "topic", F.col("partition").cast("int"))
