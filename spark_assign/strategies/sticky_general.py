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

1. **initial fill** (:func:`_initial_counts`): ``c(m, t)``, how many partitions
   of topic ``t`` member ``m`` gets. Start from the owned counts ``o(m, t)`` and
   spread each topic's unowned partitions over its subscribers by weights fitted
   (iterative proportional fitting) so that members top up to the group's water
   level; round each member's fractional parts jointly over its topics, and give
   each topic's leftover partitions to the members whose rounding wants one, ties
   by hash (an order shared by all topics would pile the errors onto the same
   members). Each member also gets a target load ``_T``: its fitted total,
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
3. **water-fill rounds** (:func:`_round`), when a pairing round finds nothing and
   Kafka's rule still fails (owners above the level, targets the fit got wrong):
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
   in every group.
5. **placement**: each member keeps its owned partitions of a topic up to
   ``c(m, t)`` (lowest partitions first), and the partitions left over are
   handed out by a rank join on ``(group, topic, position)`` against the
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
from ..inputs import topic_sizes as count_topic_sizes
from ..lineage import materialize
from ..ordering import java_order, with_member_index

#: cap on balancing rounds: reaching it raises AssignmentPropertyError naming the groups
MAX_ROUNDS = 200
_DEBUG = False
#: balancing rounds the last :func:`target_counts` call ran (for benchmarks)
LAST_ROUNDS = 0

_KEYS = ["group_id", "member_id", "topic"]
#: the state carried from round to round: one row per subscription, with member index,
#: topic index, owned count ``o``, count ``c`` and the member's target load ``_T``
_STATE = ["group_id", "member_id", "topic", "_mi", "_ti", "o", "c", "_T"]


def _water_fill(rows: DataFrame, units: str, base: str, own: str | None = None, cur: str | None = None) -> DataFrame:
    """Water-fill ``units`` (a per-(group, topic) column) over the rows of each
    ``(group_id, topic)`` by ``base`` load: add ``fill`` so that the lowest rows
    rise to a common level ``lvl`` (some to ``lvl + 1``), the highest untouched.

    Closed form over the rows sorted by base: ``k`` rows filled, level
    ``(units + sum of their bases) // k``; the remainder's ``+1`` goes first to
    the filled rows that would otherwise end below their owned count ``own``,
    then to those holding most now (``cur``), then in member order. Adds ``fill``.
    """
    wt = Window.partitionBy("group_id", "topic")
    ws = wt.orderBy(F.col(base), F.col("_mi"))
    r = (
        rows.withColumn("_k", F.row_number().over(ws))
        .withColumn("_s", F.sum(base).over(ws.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("_cost", F.col("_k") * F.col(base) - F.col("_s"))
        .withColumn("_ok", F.col("_cost") <= F.col(units))
        .withColumn("_kmax", F.max(F.when(F.col("_ok"), F.col("_k"))).over(wt))
        .withColumn("_smax", F.max(F.when(F.col("_ok"), F.col("_s"))).over(wt))
        .withColumn("_lvl", F.floor((F.col(units) + F.col("_smax")) / F.col("_kmax")).cast("long"))
        .withColumn("_rem", F.col(units) + F.col("_smax") - F.col("_kmax") * F.col("_lvl"))
        .withColumn("_in", F.col("_k") <= F.col("_kmax"))
    )
    short = (F.col("_lvl") - F.col(base) < F.col(own)) if own else F.lit(False)
    wp = wt.orderBy(F.col("_in").desc(), short.desc(), (F.col(cur) if cur else F.lit(0)).desc(), F.col("_mi"))
    r = r.withColumn("_pr", F.row_number().over(wp))
    return r.withColumn(
        "fill",
        F.when(
            F.col("_in"),
            F.col("_lvl") - F.col(base) + F.when(F.col("_pr") <= F.col("_rem"), 1).otherwise(0),
        ).otherwise(F.lit(0)).cast("long"),
    ).drop(*([] if _DEBUG else ["_k", "_s", "_cost", "_ok", "_kmax", "_smax", "_lvl", "_rem", "_in", "_pr"]))


#: proportional-fitting passes of the initial fill
FIT_PASSES = 1


def _initial_counts(members: DataFrame, sizes: DataFrame, owned: DataFrame | None) -> DataFrame:
    """The first state (:data:`_STATE`): one row per subscription to an existing
    topic, with owned count ``o``, initial count ``c`` and the member's target load ``_T``.

    The unowned partitions of each topic are spread over its subscribers in
    proportion to weights fitted (:data:`FIT_PASSES` passes of iterative
    proportional fitting; one brings member totals within 1% of the level on
    the benchmark, the pairing rounds absorb the rest) so that every member tops up to the group's water level over the
    owned loads, then rounded: each member's fractional parts are rounded
    jointly over its topics (systematic rounding), and each topic hands its
    remaining partitions to the members whose rounding wants one (ties by hash),
    so member totals land within a partition or two of their fitted share. The
    target ``_T`` is the fitted member total, rounded systematically over the
    group's members. ``owned`` None: nobody owns anything (the water level is then
    the group's mean load, without the windows that find it over owned loads).
    ``sizes``: the partitions' :func:`spark_assign.inputs.topic_sizes`.
    """
    # members may be an unmaterialized plan: it is read once. Indexes are per group (_mi
    # in Kafka's member order, _ti in Java's topic order), so that a group's result
    # never depends on the other groups assigned with it
    m = with_member_index(members, "_mi").select("group_id", "member_id", "_mi", "topics")
    topics = sizes.select("topic", F.col("num_partitions").cast("long").alias("_p"))
    subs = m.select("group_id", "member_id", "_mi", F.explode("topics").alias("topic")).join(topics, "topic")
    if owned is None:
        subs = subs.withColumn("o", F.lit(0).cast("long"))
    else:
        own = owned.groupBy(*_KEYS).agg(F.count("*").alias("o"))
        subs = subs.join(own, _KEYS, "left").withColumn("o", F.coalesce("o", F.lit(0)).cast("long"))
    wt = Window.partitionBy("group_id", "_ti")
    wm = Window.partitionBy("group_id", "_mi")
    wg = Window.partitionBy("group_id")
    # one partition per group from here on: every window below is then shuffle-free.
    # Member-level sums over the group count each member once, on its first row
    # (each window spec is one pass over the group's rows: the topic sums and the first
    # of each topic share one ordered spec, and so do the member sums and first member)
    by_member = wt.orderBy("_mi")
    by_topic = wm.orderBy("_ti")
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    subs = materialize(
        subs.repartition("group_id")
        .withColumn("_ti", F.dense_rank().over(wg.orderBy(java_order("topic"))) - 1)
        .withColumn("_u", F.col("_p") - F.sum("o").over(by_member.rowsBetween(*whole)))
        .withColumn("_n", F.count("*").over(by_member.rowsBetween(*whole)))
        .withColumn("_tf", F.row_number().over(by_member) == 1)
        .withColumn("_b", F.sum("o").over(by_topic.rowsBetween(*whole)))
        .withColumn("_deg", F.count(F.when(F.col("_u") > 0, 1)).over(by_topic.rowsBetween(*whole)))
        .withColumn("_first", F.row_number().over(by_topic) == 1)
        .withColumns({
            "_tot": F.sum(F.when(F.col("_tf"), F.greatest(F.col("_u"), F.lit(0)))).over(wg),
            "_nm": F.count(F.when(F.col("_first"), 1)).over(wg),  # members (read when nobody owns anything)
        })
    )
    first = F.col("_first")
    if owned is None:  # nobody owns anything: every member needs the group's mean load
        subs = subs.withColumn("_need", F.col("_tot") / F.col("_nm"))
    else:
        # the group's water level over owned loads (eligibility ignored): members below
        # it need the difference. Over the members by owned load: the k lowest can be
        # topped up to the k-th's load while that costs at most the unowned partitions
        by_load = wg.orderBy("_b", "_mi")  # default frame: members up to this one
        subs = (
            subs.withColumn("_k", F.count(F.when(first, 1)).over(by_load))
            .withColumn("_s", F.sum(F.when(first, F.col("_b"))).over(by_load))
            .withColumn("_ok", first & (F.col("_k") * F.col("_b") - F.col("_s") <= F.col("_tot")))
            .withColumn("_kmax", F.max(F.when(F.col("_ok"), F.col("_k"))).over(wg))
            .withColumn("_smax", F.max(F.when(F.col("_ok"), F.col("_s"))).over(wg))
            .withColumn("_need", F.greatest(F.lit(0.0), (F.col("_tot") + F.col("_smax")) / F.col("_kmax") - F.col("_b")))
        )
    subs = subs.withColumn("_w", F.when(F.col("_deg") > 0, F.col("_need") / F.col("_deg")).otherwise(F.lit(0.0)))

    def share(df: DataFrame) -> DataFrame:
        tw = F.sum(F.when(F.col("_u") > 0, F.col("_w"))).over(wt)
        return df.withColumn(
            "_x",
            F.when(F.col("_u") <= 0, F.lit(0.0))
            .when(tw > 0, F.col("_u") * F.col("_w") / tw)
            .otherwise(F.col("_u") / F.col("_n")),
        )

    for _ in range(FIT_PASSES):
        fitted = share(subs).withColumn("_xsum", F.sum("_x").over(wm))
        subs = fitted.withColumn(
            "_w", F.when(F.col("_xsum") > 0, F.col("_w") * F.col("_need") / F.col("_xsum")).otherwise(F.col("_w"))
        ).drop("_x", "_xsum")
    subs = share(subs).withColumn("_f", F.floor("_x").cast("long")).withColumn("_fr", F.col("_x") - F.col("_f"))
    # systematic rounding along each member's topics: an extra wherever the running
    # sum of fractional parts crosses an integer (+ 0.5)
    run = F.sum("_fr").over(wm.orderBy("_ti").rowsBetween(Window.unboundedPreceding, 0)) + F.lit(0.5)
    # target loads: the fitted member totals rounded systematically in member order
    # (so that they add up to the group's partitions)
    cum = F.sum(F.when(first, F.col("_X"))).over(wg.orderBy("_mi")) + F.lit(0.5)  # members up to this one
    subs = (
        subs.withColumn("_want", F.floor(run) - F.floor(run - F.col("_fr")))
        .withColumn("_X", F.col("_b") + F.sum("_x").over(wm.orderBy("_ti").rowsBetween(*whole)))  # run's pass
        .withColumn("_T", (F.floor(cum) - F.floor(cum - F.col("_X"))).cast("long"))
    )
    # per topic the +1s go to the members whose rounding wants one, ties broken by a
    # hash: any member-level order (say by fractional part) would favour the same
    # members in every topic and pile the rounding errors onto them
    deal = wt.orderBy(F.col("_want").desc(), F.xxhash64("_mi", "_ti"), "_mi")
    subs = subs.withColumn("_extra", F.col("_u") - F.sum("_f").over(deal.rowsBetween(*whole))).withColumn(
        "_r", F.row_number().over(deal) - 1
    )
    add = F.when(F.col("_extra") > F.col("_r"), F.floor((F.col("_extra") - F.col("_r") - 1) / F.col("_n")) + 1).otherwise(0)
    return subs.select(
        "group_id", "member_id", "topic", "_mi", "_ti", "o", (F.col("o") + F.col("_f") + add).cast("long").alias("c"), "_T"
    )


def _with_loads(state: DataFrame) -> DataFrame:
    """Add member loads ``L``, per-topic smallest subscriber load ``lo`` and
    largest holder load ``hi``, and each row's violation option key ``key``."""
    wm = Window.partitionBy("group_id", "member_id")
    wt = Window.partitionBy("group_id", "topic")
    s = (
        state.withColumn("L", F.sum("c").over(wm))
        .withColumn("lo", F.min("L").over(wt))
        .withColumn("hi", F.max(F.when(F.col("c") > 0, F.col("L"))).over(wt))
        # a most loaded holder of the topic holds partitions it did not own
        .withColumn("free", F.max(F.when((F.col("L") == F.col("hi")) & (F.col("c") > F.col("o")), 1).otherwise(0)).over(wt))
    )
    give = F.when((F.col("c") > 0) & (F.col("L") - F.col("lo") >= 2), F.col("L") - F.col("lo"))
    take = F.when(F.col("hi") - F.col("L") >= 2, F.col("hi") - F.col("L"))
    # key: gap, then whether a partition can move without costing an owned one
    # (the giver's own rows / the topic's for a receiver), then the topic index
    key = lambda gap, free: gap.cast("long") * F.lit(1 << 32) + free * F.lit(1 << 31) + (F.lit((1 << 31) - 1) - F.col("_ti"))  # noqa: E731
    gkey = key(give, F.when(F.col("c") > F.col("o"), 1).otherwise(0))
    tkey = key(take, F.col("free"))
    return s.withColumn("key", F.greatest(gkey, tkey))  # greatest skips nulls


def _round(s: DataFrame) -> DataFrame:
    """One balancing round over every group (``s`` from :func:`_with_loads`)."""
    wm = Window.partitionBy("group_id", "member_id")
    s = s.withColumn("_best", F.max("key").over(wm))
    picked = s.where(F.col("key").isNotNull() & (F.col("key") == F.col("_best")))
    rest = s.where(F.col("key").isNull() | (F.col("key") != F.col("_best")))
    wt = Window.partitionBy("group_id", "topic")
    picked = picked.withColumn("_u", F.sum("c").over(wt)).withColumn("_b", F.col("L") - F.col("c"))
    moved = _water_fill(picked, "_u", "_b", own="o", cur="c").withColumn("c", F.col("fill"))
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
    (:data:`STICKY_STARTS`), so a round stays small. Returns ``group_id, _ti, _a, _b``."""
    mem = s.groupBy("group_id", "member_id").agg(
        F.max(F.coalesce("hi", F.lit(0))).alias("_hisub"),
        F.min(F.when(F.col("c") > 0, F.col("lo"))).alias("_loheld"),
        F.collect_list("_ti").alias("_subs"),
        F.collect_list(F.when(F.col("c") > 0, F.col("_ti"))).alias("_held"),
    )
    lost = (F.col("o") >= F.col("c")).cast("int")  # giving one up costs an owned partition
    starts = s.where(F.col("c") < F.col("o")).withColumn(
        "_r", F.row_number().over(Window.partitionBy("group_id").orderBy("_mi", "_ti"))
    ).where(F.col("_r") <= STICKY_STARTS).select(
        "group_id", F.col("member_id").alias("_b"), F.col("_ti").alias("_t2"), F.col("L").alias("_Lb"),
        F.col("lo").alias("_lo2"), F.col("_mi").alias("_bmi"))
    holders = s.where(F.col("c") > 0)
    h2 = holders.select("group_id", F.col("_ti").alias("_t2"), F.col("member_id").alias("_x"),
                        F.col("L").alias("_Lx"), lost.alias("_lx2"), F.col("_mi").alias("_xmi"))
    step = starts.join(h2, ["group_id", "_t2"]).where(F.col("_x") != F.col("_b"))
    # one hop: x is the giver a
    one = step.select("group_id", "_b", "_t2", "_Lb", "_lo2", "_bmi", F.lit(None).cast("string").alias("_x"),
                      F.lit(None).cast("long").alias("_t1"), F.col("_x").alias("_a"), F.col("_Lx").alias("_La"),
                      F.col("_xmi").alias("_ami"), (F.lit(1) - F.col("_lx2")).alias("_gain"),
                      F.lit(None).cast("long").alias("_Lx"), F.lit(None).cast("long").alias("_lo1"))
    # two hops: a gives x a partition of a topic t1 x subscribes to
    xs = s.select("group_id", F.col("member_id").alias("_x"), F.col("_ti").alias("_t1"),
                  F.when(F.col("o") > F.col("c"), 1).otherwise(0).alias("_gx1"), F.col("lo").alias("_lo1"))
    h1 = holders.select("group_id", F.col("_ti").alias("_t1"), F.col("member_id").alias("_a"),
                        F.col("L").alias("_La"), lost.alias("_la1"), F.col("_mi").alias("_ami"))
    two = (
        step.join(xs, ["group_id", "_x"]).where(F.col("_t1") != F.col("_t2"))
        .join(h1, ["group_id", "_t1"]).where(F.col("_a") != F.col("_x"))
        .select("group_id", "_b", "_t2", "_Lb", "_lo2", "_bmi", "_x", "_t1", "_a", "_La", "_ami",
                (F.lit(1) + F.col("_gx1") - F.col("_la1") - F.col("_lx2")).alias("_gain"), "_Lx", "_lo1")
    )
    # two hops with the gain in the middle: x is short on t1 (the start), a holds t1,
    # x passes one of its topics t2 on to a subscriber b
    mid = (
        starts.select("group_id", F.col("_b").alias("_x"), F.col("_t2").alias("_t1"), F.col("_Lb").alias("_Lx"),
                      F.col("_lo2").alias("_lo1"))
        .join(h1, ["group_id", "_t1"]).where(F.col("_a") != F.col("_x"))
        .join(holders.select("group_id", F.col("member_id").alias("_x"), F.col("_ti").alias("_t2"), lost.alias("_lx2")),
              ["group_id", "_x"]).where(F.col("_t2") != F.col("_t1"))
        .join(s.select("group_id", F.col("_ti").alias("_t2"), F.col("member_id").alias("_b"), F.col("L").alias("_Lb"),
                       F.col("lo").alias("_lo2"), F.col("_mi").alias("_bmi"),
                       F.when(F.col("o") > F.col("c"), 1).otherwise(0).alias("_gb2")),
              ["group_id", "_t2"]).where(F.col("_b") != F.col("_x"))
        .select("group_id", "_b", "_t2", "_Lb", "_lo2", "_bmi", "_x", "_t1", "_a", "_La", "_ami",
                (F.lit(1) + F.col("_gb2") - F.col("_la1") - F.col("_lx2")).alias("_gain"), "_Lx", "_lo1")
    )
    cand = one.unionByName(two).unionByName(mid).where(F.col("_gain") >= 1)
    ma = mem.select("group_id", F.col("member_id").alias("_a"), F.col("_hisub").alias("_ahi"), F.col("_subs").alias("_asubs"))
    mb = mem.select("group_id", F.col("member_id").alias("_b"), F.col("_loheld").alias("_blo"), F.col("_held").alias("_bheld"))
    gmax = s.groupBy("group_id").agg(F.max("L").alias("_gmax"))
    cand = cand.join(ma, ["group_id", "_a"]).join(mb, ["group_id", "_b"]).join(gmax, "group_id")
    swap = F.col("_a") == F.col("_b")
    shares = F.arrays_overlap(F.col("_asubs"), F.array_union(F.col("_bheld"), F.array(F.col("_t2"))))
    x_ok = F.col("_x").isNull() | ((F.col("_lo1") >= F.col("_Lx") - 1) & (swap | (F.col("_La") >= F.col("_Lx"))))
    ok = x_ok & (
        (swap & (F.col("_lo2") >= F.col("_Lb") - 1))
        | (~swap & (F.col("_ahi") <= F.col("_La")) & (F.coalesce("_blo", F.col("_Lb")) >= F.col("_Lb"))
           & (F.col("_Lb") < F.col("_gmax"))
           & (F.col("_lo2") >= F.col("_Lb")) & (~shares | (F.col("_La") - 1 >= F.col("_Lb"))))
    )
    best = cand.where(ok).withColumn("_r", F.row_number().over(Window.partitionBy("group_id").orderBy(
        F.col("_gain").desc(), F.col("_x").isNotNull(), "_bmi", "_t2", "_ami", "_t1", "_x")))
    best = materialize(best.where("_r = 1"))
    hop1 = best.select("group_id", F.coalesce("_t1", "_t2").alias("_ti"), "_a", F.coalesce("_x", "_b").alias("_b"))
    hop2 = best.where(F.col("_x").isNotNull()).select("group_id", F.col("_t2").alias("_ti"), F.col("_x").alias("_a"), "_b")
    return hop1.unionByName(hop2)


def _move_deltas(moves: DataFrame) -> DataFrame:
    """What ``moves`` (``group_id, _ti, _a, _b``: one partition of topic ``_ti`` from
    ``_a`` to ``_b`` per row, any number of rows) change per subscription:
    ``group_id, member_id, _ti, d`` (partitions received minus given)."""
    side = F.explode(F.array(
        F.struct(F.col("_a").alias("member_id"), F.lit(-1).alias("d")),
        F.struct(F.col("_b").alias("member_id"), F.lit(1).alias("d")),
    )).alias("_s")
    return (
        moves.select("group_id", "_ti", side).select("group_id", "_s.member_id", "_ti", "_s.d")
        .groupBy("group_id", "member_id", "_ti").agg(F.sum("d").alias("d"))
    )


def _apply_moves(s: DataFrame, moves: DataFrame) -> DataFrame:
    """The state rows (:data:`_STATE`) after ``moves`` (:func:`_move_deltas`)."""
    return s.join(_move_deltas(moves), ["group_id", "member_id", "_ti"], "left").select(
        *[x for x in _STATE if x != "c"], (F.col("c") + F.coalesce("d", F.lit(0))).cast("long").alias("c"),
    ).select(*_STATE)


def _member_rows(state: DataFrame, subscribers: DataFrame | None = None) -> DataFrame:
    """One row per member of the state (:data:`_STATE`), what a pairing round reads
    (:func:`_with_topic_sets`): load ``L``, target ``T``, the indexes of the topics it
    subscribes to (``subs``) and ``dmap``: topic index -> count minus owned count, for
    the topics where they differ. ``T`` and ``subs`` never change from round to round:
    given ``subscribers`` (these rows' ``group_id, member_id, _mi, T, subs``), only the
    subscriptions holding or owning something are aggregated (in a fresh group, most
    hold nothing); without, everything comes from one aggregation."""
    keys = ["group_id", "member_id", "_mi"]
    differs = F.col("c") != F.col("o")
    load = F.sum("c").cast("long").alias("L")
    dmap = F.map_from_entries(F.collect_list(F.when(differs, F.struct("_ti", (F.col("c") - F.col("o")).alias("d"))))).alias("dmap")
    if subscribers is None:
        return state.groupBy(*keys).agg(load, F.max("_T").alias("T"), F.collect_list("_ti").alias("subs"), dmap)
    held = state.where((F.col("c") > 0) | (F.col("o") > 0)).groupBy(*keys).agg(load, dmap)
    return subscribers.join(held, keys, "left").select(
        *keys, F.coalesce("L", F.lit(0)).cast("long").alias("L"), "T", "subs",
        F.coalesce("dmap", _no_diff()).alias("dmap"),
    )


def _no_diff() -> Column:
    """An empty ``dmap``."""
    return F.create_map().cast("map<int,bigint>")


def _after_moves(mem: DataFrame, moves: DataFrame) -> DataFrame:
    """:func:`_member_rows` after ``moves`` (``group_id, _ti, _a, _b``), computed on
    the member rows alone: loads and ``dmap`` entries shift by the partitions each
    member gave and received. Adds ``_moved``: whether the member gave or received any.
    The member rows and the moves meet in one aggregation per member (no join: with
    both partitioned by group, nothing is shuffled)."""
    keys = ["group_id", "member_id"]
    per_topic = _move_deltas(moves)
    cols = {"_mi": "int", "L": "long", "T": "long", "subs": "array<int>", "dmap": "map<int,bigint>"}
    rows = mem.select(*keys, *cols, F.lit(None).cast("int").alias("_ti"), F.lit(None).cast("long").alias("d")).unionByName(
        per_topic.select(*keys, *[F.lit(None).cast(t).alias(c) for c, t in cols.items()], "_ti", "d"))
    merged = rows.groupBy(*keys).agg(
        *[F.first(c, ignorenulls=True).alias(c) for c in cols],
        F.sum("d").alias("_dL"),
        F.map_from_entries(F.collect_list(F.when(F.col("_ti").isNotNull(), F.struct("_ti", "d")))).alias("_dd"),
    )
    dmap = F.map_zip_with("dmap", "_dd", lambda k, a, b: F.coalesce(a, F.lit(0)) + F.coalesce(b, F.lit(0)))
    return merged.select(
        *keys, "_mi", (F.col("L") + F.coalesce("_dL", F.lit(0))).alias("L"), "T", "subs",
        F.map_filter(dmap, lambda k, v: v != 0).alias("dmap"), F.col("_dL").isNotNull().alias("_moved"),
    )


def _synced(state: DataFrame, mem: DataFrame) -> DataFrame:
    """The state rows (:data:`_STATE`) with the counts the member rows ``mem``
    (:func:`_member_rows`) hold, ``c = o + dmap[_ti]``, and the member's load ``L``."""
    d = F.coalesce(F.try_element_at("dmap", F.col("_ti")), F.lit(0))
    return state.join(mem.select("group_id", "_mi", "dmap", "L"), ["group_id", "_mi"]).select(
        *[F.col(x) if x != "c" else (F.col("o") + d).cast("long").alias("c") for x in _STATE], "L")


def _with_topic_sets(mem: DataFrame) -> DataFrame:
    """``mem`` (:func:`_member_rows`) plus the topic index sets pairing reads: held
    beyond the owned count (``free``, with how many in ``cnt``) and held fewer of
    than owned (``gain``)."""
    cnt = F.map_filter("dmap", lambda k, v: v > 0)
    return mem.select(
        "*", F.map_keys(cnt).alias("free"), cnt.alias("cnt"),
        F.map_keys(F.map_filter("dmap", lambda k, v: v < 0)).alias("gain"),
    )


def _pair_moves(mem: DataFrame, rnd: int) -> DataFrame:
    """The moves of one pairing round over every group (``mem``: :func:`_member_rows`).

    Members above their target load ``_T`` give, members below it receive: their
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
    squared loads strictly drops. Returns ``group_id, _ti, _a, _b`` (one row per
    partition moved).

    Every window and aggregation here is keyed by group and more, so with ``mem``
    partitioned by group (``mem.repartition("group_id")``, as :func:`target_counts`
    passes it) a round shuffles nothing: givers and receivers meet in a window over
    their slot, not in a join."""
    mem = _with_topic_sets(mem)
    # side 1: givers (above target), side 2: receivers; a unit per partition above / below
    units = mem.where(F.col("L") != F.col("T")).withColumns({
        "_side": F.when(F.col("L") > F.col("T"), 1).otherwise(2), "_u": F.abs(F.col("L") - F.col("T"))})
    end = F.sum("_u").over(Window.partitionBy("group_id", "_side").orderBy(
        F.xxhash64("_mi", F.lit(rnd), F.col("_side")), "_mi").rowsBetween(Window.unboundedPreceding, 0))
    units = units.withColumn("_end", end).withColumn(
        "_slot", F.explode(F.sequence(F.col("_end") - F.col("_u"), F.col("_end") - 1)))
    # the receiver of each slot, beside its giver (a group's surplus and deficit units are
    # equally many: the targets add up to its partitions; a slot missing either pairs nothing)
    receiver = F.struct(F.col("member_id").alias("_b"), F.col("L").alias("L_b"), F.col("subs").alias("subs_b"),
                        F.col("gain").alias("gain_b"))
    pairs = units.withColumn(
        "_r", F.max(F.when(F.col("_side") == 2, receiver)).over(Window.partitionBy("group_id", "_slot"))
    ).where((F.col("_side") == 1) & F.col("_r").isNotNull()).select(
        "group_id", "_slot", F.col("member_id").alias("_a"), F.col("L").alias("L_a"), F.col("free").alias("free_a"),
        F.col("cnt").alias("cnt_a"), "_r._b", "_r.L_b", "_r.subs_b", "_r.gain_b")
    # only partitions the giver did not own: pairing never costs an owned partition
    # (what balance takes from owners, the water-fill rounds take, owned ones last)
    options = [F.array_intersect(F.col("free_a"), F.col("gain_b")), F.array_intersect(F.col("free_a"), F.col("subs_b"))]
    cand = F.coalesce(*[F.when(F.size(o) > 0, o) for o in options])
    pick = F.array_min(F.transform(cand, lambda t: F.struct(F.xxhash64(t, F.col("_slot"), F.lit(rnd)).alias("h"), t.alias("t"))))
    cap = Window.partitionBy("group_id", "_a", "_ti").orderBy("_slot")
    moves = (
        pairs.withColumn("_ti", pick["t"]).where(F.col("_ti").isNotNull())
        .withColumn("_q", F.row_number().over(cap)).where(F.col("_q") <= F.element_at("cnt_a", F.col("_ti")))
    )
    fin = (
        moves.withColumn("_fa", F.col("L_a") - F.count("*").over(Window.partitionBy("group_id", "_a")))
        .withColumn("_fb", F.col("L_b") + F.count("*").over(Window.partitionBy("group_id", "_b")))
    )
    return fin.where(F.col("_fa") >= F.col("_fb")).select("group_id", "_ti", "_a", "_b")


def target_counts(
    members: DataFrame, partitions: DataFrame, owned: DataFrame | None, *, max_rounds: int = MAX_ROUNDS,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Per subscription, how many partitions of the topic the member gets:
    ``group_id, member_id, topic, owned_count, count`` (balanced by Kafka's rule).
    ``topic_sizes``: the partitions' :func:`spark_assign.inputs.topic_sizes` (counted
    here when None).

    >>> target_counts(members, partitions, resolve_owned(members, partitions)).show()  # doctest: +SKIP
    """
    global LAST_ROUNDS
    sizes = count_topic_sizes(partitions) if topic_sizes is None else topic_sizes
    state = materialize(_initial_counts(members, sizes, owned))
    mem = materialize(_member_rows(state))
    subscribers = mem.select("group_id", "member_id", "_mi", "T", "subs")
    synced = True  # the state rows hold the counts the member rows say
    LAST_ROUNDS = 0
    for LAST_ROUNDS in range(max_rounds + 1):
        # a pairing round while some member is above its target and pairing finds
        # moves (on the member rows alone), else check Kafka's rule and water-fill
        if LAST_ROUNDS < max_rounds and not mem.where(F.col("L") > F.col("T")).isEmpty():
            by_group = mem.repartition("group_id")  # the round shuffles nothing more
            paired = materialize(_after_moves(by_group, _pair_moves(by_group, LAST_ROUNDS)))
            if not paired.where(F.col("_moved")).isEmpty():
                mem, synced = paired.drop("_moved"), False
                continue
        # Kafka's rule fails exactly where a topic's most loaded holder is two or more
        # above its least loaded subscriber: one aggregation per topic over the loads
        if synced:
            loads = state.join(mem.select("group_id", "_mi", "L"), ["group_id", "_mi"])
        else:  # the subscription rows take every pairing round's moves at once
            loads = materialize(_synced(state, mem))
            state, synced = loads.select(*_STATE), True
        if loads.groupBy("group_id", "_ti").agg(
            (F.max(F.when(F.col("c") > 0, F.col("L"))) - F.min("L")).alias("_spread")
        ).where(F.col("_spread") >= 2).isEmpty():
            break
        s = materialize(_with_loads(state))
        pending = s.where(F.col("key").isNotNull())
        if LAST_ROUNDS == max_rounds:
            raise_if_rows(
                pending.select("group_id", "member_id", "topic", "c", "L", "lo", "hi"),
                AssignmentPropertyError,
                f"the general sticky path did not reach Kafka's balance rule in {max_rounds} "
                "balancing rounds (max_rounds); subscriptions still out of balance",
            )
        state = materialize(_round(s))
        mem = materialize(_member_rows(state, subscribers))
    # stickiness rounds: give members back owned partitions where balance allows (each
    # round keeps at least one more owned partition in every group it changes)
    for _ in range(MAX_STICKY_ROUNDS if owned is not None else 0):
        if state.where(F.col("c") < F.col("o")).isEmpty():  # nobody short of its owned partitions
            break
        s = materialize(_with_loads(state))
        moves = materialize(_chain_moves(s))
        if moves.isEmpty():
            break
        state = materialize(_apply_moves(s, moves))
    return state.select(
        "group_id", "member_id", "topic", "_mi", F.col("o").alias("owned_count"), F.col("c").alias("count")
    )


def _rank_fill(free: DataFrame, capacity: DataFrame) -> DataFrame:
    """Hand the ``free`` partitions (``group_id, topic, partition``) of each topic
    to the ``capacity`` rows (``group_id, member_id, topic, _mi, cap``) by a rank
    join: free partitions by partition number against member slots in member
    order. Returns ``group_id, member_id, topic, partition``."""
    wt = Window.partitionBy("group_id", "topic")
    fp = free.withColumn("_pos", F.row_number().over(wt.orderBy("partition")) - 1)
    cap = capacity.where(F.col("cap") > 0).withColumn(
        "_end", F.sum("cap").over(wt.orderBy("_mi").rowsBetween(Window.unboundedPreceding, 0))
    )
    slots = cap.select(
        "group_id", "member_id", "topic",
        F.explode(F.sequence(F.col("_end") - F.col("cap"), F.col("_end") - 1)).alias("_pos"),
    )
    return fp.join(slots, ["group_id", "topic", "_pos"]).select("group_id", "member_id", "topic", "partition")


def _place(
    counts: DataFrame, members: DataFrame, partitions: DataFrame, owned: DataFrame | None, rack_aware: bool
) -> DataFrame:
    keys4 = ["group_id", "member_id", "topic", "partition"]
    counts = counts.where(F.col("count") > 0)  # a member keeps or gets nothing of the others
    subscribed = counts.select("group_id", "topic").distinct()
    all_parts = subscribed.join(partitions.select("topic", "partition", "racks"), "topic")
    if owned is None:  # nothing to keep
        if not rack_aware:
            return _rank_fill(all_parts.select("group_id", "topic", "partition"),
                              counts.select(*_KEYS, "_mi", F.col("count").alias("cap")))
        owned = counts.select("group_id", "member_id", "topic", F.lit(None).cast("int").alias("partition")).where(F.lit(False))
    own = owned.select(*keys4).join(counts.select(*_KEYS, "count"), _KEYS)
    if rack_aware:
        member_rack = members.select("group_id", "member_id", "rack")
        own = (
            own.join(member_rack, ["group_id", "member_id"])
            .join(partitions.select("topic", "partition", "racks"), ["topic", "partition"])
            .withColumn("_local", F.col("rack").isNotNull() & F.coalesce(F.array_contains("racks", F.col("rack")), F.lit(False)))
        )
    else:
        own = own.withColumn("_local", F.lit(False))
    # 1. keep owned partitions up to the count (rack-local first when rack-aware)
    wk = Window.partitionBy(*_KEYS).orderBy(F.col("_local").desc(), "partition")
    own = own.withColumn("_r", F.row_number().over(wk))
    if not rack_aware:
        kept = own.where(F.col("_r") <= F.col("count")).select(*keys4)
        cap = counts.join(kept.groupBy(*_KEYS).agg(F.count("*").alias("_k")), _KEYS, "left").select(
            *_KEYS, "_mi", (F.col("count") - F.coalesce("_k", F.lit(0))).alias("cap")
        )
        free = all_parts.join(kept, ["group_id", "topic", "partition"], "left_anti").select("group_id", "topic", "partition")
        return kept.unionByName(_rank_fill(free, cap))
    kept1 = own.where(F.col("_local") & (F.col("_r") <= F.col("count"))).select(*keys4)

    def held(dfs: list[DataFrame]) -> DataFrame:
        return dfs[0] if len(dfs) == 1 else dfs[0].unionByName(held(dfs[1:]))

    def capacity(done: DataFrame) -> DataFrame:
        return counts.join(done.groupBy(*_KEYS).agg(F.count("*").alias("_k")), _KEYS, "left").select(
            *_KEYS, "_mi", (F.col("count") - F.coalesce("_k", F.lit(0))).alias("cap")
        )

    # 2. rack-local free partitions to members of that rack with room (per rack, rank join)
    cap1 = capacity(kept1)
    free1 = all_parts.join(kept1, ["group_id", "topic", "partition"], "left_anti")
    member_rack = members.select("group_id", "member_id", "rack").where(F.col("rack").isNotNull())
    cap_r = cap1.join(member_rack, ["group_id", "member_id"])
    free_r = free1.select("group_id", "topic", "partition", F.explode("racks").alias("rack"))
    wtr = Window.partitionBy("group_id", "topic", "rack")
    fp = free_r.withColumn("_pos", F.row_number().over(wtr.orderBy("partition")) - 1)
    cr = cap_r.where(F.col("cap") > 0).withColumn(
        "_end", F.sum("cap").over(wtr.orderBy("_mi").rowsBetween(Window.unboundedPreceding, 0))
    )
    slots = cr.select(
        "group_id", "member_id", "topic", "rack", "_mi",
        F.explode(F.sequence(F.col("_end") - F.col("cap"), F.col("_end") - 1)).alias("_pos"),
    )
    cand = fp.join(slots, ["group_id", "topic", "rack", "_pos"])
    # a partition with replicas on several racks may be matched twice: keep the first
    local2 = (
        cand.withColumn("_d", F.row_number().over(Window.partitionBy("group_id", "topic", "partition").orderBy("_mi", "rack")))
        .where(F.col("_d") == 1)
        .select(*keys4)
    )
    done = kept1.unionByName(local2)
    # 3. other owned partitions, still free, up to the remaining count
    cap2 = capacity(done)
    own3 = (
        own.join(done, ["group_id", "topic", "partition"], "left_anti")
        .join(cap2.select(*_KEYS, "cap"), _KEYS)
        .withColumn("_r3", F.row_number().over(Window.partitionBy(*_KEYS).orderBy("partition")))
        .where(F.col("_r3") <= F.col("cap"))
        .select(*keys4)
    )
    done = done.unionByName(own3)
    # 4. the rest by rank join
    free = all_parts.join(done, ["group_id", "topic", "partition"], "left_anti").select("group_id", "topic", "partition")
    return held([done, _rank_fill(free, capacity(done))])


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
    out = _place(counts, members, partitions, owned, rack_aware)
    return out.select("group_id", "member_id", "topic", F.col("partition").cast("int"))
