"""The general path's stickiness rounds (:mod:`.sticky_general`, step 4): once balanced,
give members back owned partitions where Kafka's balance rule allows, per group and round
one chain of moves (:func:`chain_moves`), each round over the groups the round before
changed (:func:`sticky_rounds`).

>>> state = sticky_rounds(state, materialize(with_loads(state)))  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..execution import has_rows, materialize, one_partition, union_all
from .sticky_counts import STATE, move_deltas, with_loads

#: cap on the stickiness rounds after balancing (each makes at most one chain of moves per
#: group; stopping there leaves a valid, balanced, slightly less sticky assignment)
MAX_STICKY_ROUNDS = 50
#: short subscriptions (holding fewer than owned) per group a stickiness round starts chains from
STICKY_STARTS = 4


def chain_moves(s: DataFrame) -> DataFrame:
    """The moves of one stickiness round over balanced groups (``s`` from
    :func:`with_loads`): per group at most one chain that gives a member ``b``
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
    """The moves of ``chains`` (:func:`chain_moves`): ``group_id, topic_index, giver,
    receiver``, one row per partition moved (one or two per chain)."""
    hop1 = chains.selectExpr("group_id", "coalesce(middle_topic, receiver_topic) AS topic_index", "giver",
                             "coalesce(middle, receiver) AS receiver")
    hop2 = chains.where("middle IS NOT NULL").selectExpr(
        "group_id", "receiver_topic AS topic_index", "middle AS giver", "receiver")
    return hop1.unionByName(hop2)


def _apply_moves(s: DataFrame, moves: DataFrame) -> DataFrame:
    """The state rows (:data:`STATE`) after ``moves`` (:func:`move_deltas`)."""
    return s.join(move_deltas(moves), ["group_id", "member_id", "topic_index"], "left").select(
        *[x for x in STATE if x != "assigned_count"],
        (F.col("assigned_count") + F.coalesce("delta", F.lit(0))).cast("long").alias("assigned_count"),
    ).select(*STATE)


def sticky_rounds(state: DataFrame, loads: DataFrame) -> DataFrame:
    """The stickiness rounds over balanced ``state`` (:data:`STATE`; ``loads``: its
    :func:`with_loads`, stored, as the balancing rounds left it): give members back
    owned partitions where balance allows, each round at most one chain per group
    (:func:`chain_moves`). A round reads only the groups the round before changed: a
    group's chains depend on its own rows alone, so a group that found none keeps its
    state and would find none again (on the benchmark's 100 mixed groups, 100 groups
    searched in the first round and 23, 14, 8 and 2 in the next). Returns the state rows
    of every group."""
    settled: list[DataFrame] = []  # the groups whose last round found no chain, as they are
    for k in range(MAX_STICKY_ROUNDS):
        if not has_rows(state, greater=("owned_count", "assigned_count")):  # nobody short of owned ones
            break
        s = loads if k == 0 else materialize(with_loads(state))
        chains = chain_moves(s)  # stored; its moves are a projection of it, not stored again
        if not has_rows(chains):
            break
        changed = chains.select("group_id")  # one chain per group
        settled.append(state.join(changed, "group_id", "left_anti"))
        state = materialize(_apply_moves(s.join(changed, "group_id", "left_semi"), _hops(chains)))
    return union_all([*settled, state])
