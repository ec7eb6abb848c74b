"""The sticky assignor's general path: members of a group subscribe to different topics.

Kafka's client (``AbstractStickyAssignor.GeneralAssignmentBuilder``) keeps the
valid owned partitions, hands the rest to the least loaded subscribers and then
moves single partitions until no partition could move to a subscriber of its
topic holding two or more fewer (Kafka's balance rule,
``properties.balance_violations(rule="kafka")``). That loop is super-linear.

Here the same result is computed for every group at once, at member x topic
granularity (one row per subscription), as DataFrame transformations:

1. **counts**: ``c(m, t)``, how many partitions of topic ``t`` member ``m`` gets.
   Start from the owned counts ``o(m, t)`` and spread each topic's unowned
   partitions over its subscribers by weights fitted so that members top up to
   the group's water level (a few passes of iterative proportional fitting,
   then rounding that keeps member totals within about one partition).
2. **balancing rounds** (each one distributed step over all groups): every
   member picks the single topic of its worst violation of Kafka's rule, as
   giver (it holds the topic and a subscriber holds two or more fewer) or as
   receiver (a holder of the topic holds two or more more). Per topic, the
   members that picked it redistribute its partitions among themselves by a
   water-fill over their loads from other topics (a closed form per topic over
   the sorted loads, :func:`_water_fill`). The rounds stop when no
   violation is left. Termination: with ``K(t)`` = (largest load of a holder of
   ``t`` minus smallest load of a subscriber, whether such a holder holds a
   partition it did not own, topic order), the topic with the
   largest ``K`` is picked by a most loaded holder and a least loaded
   subscriber (every option a member has is keyed at most by its topic's key),
   so each round strictly lowers the sum of squared member loads; members change
   load through one topic only, so the per-topic water-fills do not interfere.
   The number of rounds is not bounded by a constant in theory; ``MAX_ROUNDS``
   is a safety cap that raises :class:`~spark_assign.errors.AssignmentPropertyError`
   naming the unbalanced subscriptions, never a silent stop. In practice the
   fitted fill leaves a handful (see the tests and the benchmark, which reports it).
3. **placement**: each member keeps its owned partitions of a topic up to
   ``c(m, t)`` (lowest partitions first), and the partitions left over are
   handed out by a rank join on ``(group, topic, position)`` against the
   members' remaining counts. With ``rack_aware`` (KIP-881, best effort, in
   Kafka's priority balance > rack locality > stickiness) rack-local owned
   partitions are kept first, then rack-local free partitions handed out, then
   other owned partitions kept, then the rest handed out. The counts themselves
   are rack-blind, so rack locality only decides which partitions of a topic a
   member gets, never how many.

Stickiness: counts only ever drop below a member's owned count on a topic when
a balancing round needs it, and the water-fill gives its extra partitions to
members that would otherwise fall below their owned count first. Once balanced,
stickiness rounds (:func:`_sticky_moves`, at most one move per group and round)
give a member back an owned partition from a member one partition heavier
wherever Kafka's balance rule still holds after the move. What they do not find
is a gain through a cycle of moves among equally loaded members, which Kafka's
GeneralAssignmentBuilder sometimes reaches: on 256 random groups Kafka keeps
more owned partitions in one (16 against 15), spark-assign more in total.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..errors import AssignmentPropertyError, raise_if_rows
from ..inputs import subscriptions
from ..lineage import materialize
from ..ordering import java_order, with_member_index

#: cap on balancing rounds: reaching it raises AssignmentPropertyError naming the groups
MAX_ROUNDS = 200
_DEBUG = False
#: balancing rounds the last :func:`target_counts` call ran (for benchmarks)
LAST_ROUNDS = 0

_KEYS = ["group_id", "member_id", "topic"]


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
FIT_PASSES = 2


def _initial_counts(members: DataFrame, partitions: DataFrame, owned: DataFrame) -> DataFrame:
    """Rows ``group_id, member_id, topic, _mi, _ti, o, c``: one per subscription
    to an existing topic, with owned count ``o`` and initial count ``c``.

    The unowned partitions of each topic are spread over its subscribers in
    proportion to weights fitted (a few passes of iterative proportional
    fitting) so that every member tops up to the group's water level over the
    owned loads, then rounded per topic: each member's fractional parts are
    rounded jointly over its topics (systematic rounding), so member totals
    stay within about one partition of their fitted share.
    """
    m = with_member_index(members, "_mi").select("group_id", "member_id", "_mi")
    sizes = partitions.groupBy("topic").agg(F.count("*").alias("_p"))
    own = owned.groupBy(*_KEYS).agg(F.count("*").alias("o"))
    subs = (
        subscriptions(members)
        .join(sizes, "topic")
        .join(m, ["group_id", "member_id"])
        .join(own, _KEYS, "left")
        .withColumn("o", F.coalesce("o", F.lit(0)).cast("long"))
    )
    wt = Window.partitionBy("group_id", "topic")
    wm = Window.partitionBy("group_id", "member_id")
    topics = subs.select("group_id", "topic").distinct().withColumn(
        "_ti", F.row_number().over(Window.partitionBy("group_id").orderBy(java_order("topic"))) - 1
    )
    # one partition per group from here on: every window below is then shuffle-free
    subs = materialize(subs.join(topics, ["group_id", "topic"]).repartition("group_id"))
    subs = (
        subs.withColumn("_u", F.col("_p") - F.sum("o").over(wt))
        .withColumn("_n", F.count("*").over(wt))
        .withColumn("_b", F.sum("o").over(wm))
        .withColumn("_deg", F.count(F.when(F.col("_u") > 0, 1)).over(wm))
    )
    # the group's water level over owned loads (eligibility ignored): members below it need the difference
    wg = Window.partitionBy("group_id")
    wgs = wg.orderBy("_b", "_mi")
    first_of_topic = F.row_number().over(wt.orderBy("_mi")) == 1
    first_of_member = F.row_number().over(wm.orderBy("_ti")) == 1
    subs = materialize(
        subs.withColumn("_tot", F.sum(F.when(first_of_topic, F.greatest(F.col("_u"), F.lit(0)))).over(wg))
        .withColumn("_first", first_of_member)
    )
    lvl = (
        subs.where("_first").select("group_id", "member_id", "_mi", "_b", "_tot")
        .withColumn("_k", F.row_number().over(wgs))
        .withColumn("_s", F.sum("_b").over(wgs.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("_ok", F.col("_k") * F.col("_b") - F.col("_s") <= F.col("_tot"))
        .withColumn("_kmax", F.max(F.when(F.col("_ok"), F.col("_k"))).over(wg))
        .withColumn("_smax", F.max(F.when(F.col("_ok"), F.col("_s"))).over(wg))
        .select("group_id", "member_id",
                F.greatest(F.lit(0.0), (F.col("_tot") + F.col("_smax")) / F.col("_kmax") - F.col("_b")).alias("_need"))
    )
    subs = materialize(subs.join(lvl, ["group_id", "member_id"]).repartition("group_id")).withColumn(
        "_w", F.when(F.col("_deg") > 0, F.col("_need") / F.col("_deg")).otherwise(F.lit(0.0))
    )

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
    subs = subs.withColumn("_want", F.floor(run) - F.floor(run - F.col("_fr")))
    subs = subs.withColumn("_extra", F.col("_u") - F.sum("_f").over(wt)).withColumn(
        "_r", F.row_number().over(wt.orderBy(F.col("_want").desc(), F.col("_fr").desc(), "_mi")) - 1
    )
    add = F.when(F.col("_extra") > F.col("_r"), F.floor((F.col("_extra") - F.col("_r") - 1) / F.col("_n")) + 1).otherwise(0)
    return subs.select(
        "group_id", "member_id", "topic", "_mi", "_ti", "o",
        (F.col("o") + F.col("_f") + add).cast("long").alias("c"),
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
    cols = ["group_id", "member_id", "topic", "_mi", "_ti", "o", "c"]
    return rest.select(*cols).unionByName(moved.select(*cols))


#: cap on the stickiness rounds after balancing (each moves at most one partition per
#: group; stopping there leaves a valid, balanced, slightly less sticky assignment)
MAX_STICKY_ROUNDS = 50


def _sticky_moves(s: DataFrame) -> DataFrame:
    """The moves of one stickiness round over balanced groups (``s`` from
    :func:`_with_loads`): per group, at most one partition of a topic moves from a
    member ``a`` holding more of it than it owned to a member ``b`` holding fewer
    than it owned and one partition lighter, so ``b`` gets an owned partition
    back and the loads swap. A move is taken only where it keeps Kafka's balance
    rule, which holds exactly when every topic ``b`` then holds has no subscriber
    lighter than ``b`` was (``lo >= L_b``) and no topic ``a`` subscribes to has a
    holder heavier than ``a`` was (``hi <= L_a``). Returns ``group_id, topic, _a, _b``."""
    wm = Window.partitionBy("group_id", "member_id")
    big = F.lit(1 << 62)
    s = s.withColumn("_lo_held", F.min(F.when(F.col("c") > 0, F.col("lo"))).over(wm)).withColumn(
        "_hi_sub", F.max(F.coalesce("hi", F.lit(0))).over(wm))
    give = s.where(F.col("c") > F.col("o")).select(
        "group_id", "topic", "_ti", F.col("member_id").alias("_a"), F.col("L").alias("_La"),
        F.col("_mi").alias("_ami"), F.col("_hi_sub").alias("_ahi"))
    take = s.where(F.col("c") < F.col("o")).select(
        "group_id", "topic", F.col("member_id").alias("_b"), F.col("L").alias("_Lb"),
        F.col("_mi").alias("_bmi"), F.coalesce("_lo_held", big).alias("_blo"), F.col("lo").alias("_tlo"))
    cand = give.join(take, ["group_id", "topic"]).where(
        (F.col("_La") == F.col("_Lb") + 1) & (F.col("_blo") >= F.col("_Lb"))
        & (F.col("_tlo") >= F.col("_Lb")) & (F.col("_ahi") <= F.col("_La"))
    )
    return cand.withColumn(
        "_r", F.row_number().over(Window.partitionBy("group_id").orderBy("_ti", "_ami", "_bmi"))
    ).where("_r = 1").select("group_id", "topic", "_a", "_b")


def _apply_moves(s: DataFrame, moves: DataFrame) -> DataFrame:
    """The state rows (``group_id, member_id, topic, _mi, _ti, o, c``) after ``moves``."""
    delta = F.when(F.col("member_id") == F.col("_a"), -1).when(F.col("member_id") == F.col("_b"), 1).otherwise(0)
    cols = ["group_id", "member_id", "topic", "_mi", "_ti", "o"]
    return s.join(moves, ["group_id", "topic"], "left").select(
        *cols, (F.col("c") + F.coalesce(delta, F.lit(0))).cast("long").alias("c"),
    )


def target_counts(
    members: DataFrame, partitions: DataFrame, owned: DataFrame, *, max_rounds: int = MAX_ROUNDS
) -> DataFrame:
    """Per subscription, how many partitions of the topic the member gets:
    ``group_id, member_id, topic, owned_count, count`` (balanced by Kafka's rule).

    >>> target_counts(members, partitions, resolve_owned(members, partitions)).show()  # doctest: +SKIP
    """
    global LAST_ROUNDS
    state = _initial_counts(members, partitions, owned)
    LAST_ROUNDS = 0
    for LAST_ROUNDS in range(max_rounds + 1):
        s = materialize(_with_loads(state))
        pending = s.where(F.col("key").isNotNull())
        if pending.isEmpty():
            break
        if LAST_ROUNDS == max_rounds:
            raise_if_rows(
                pending.select("group_id", "member_id", "topic", "c", "L", "lo", "hi"),
                AssignmentPropertyError,
                f"the general sticky path did not reach Kafka's balance rule in {max_rounds} "
                "balancing rounds (max_rounds); subscriptions still out of balance",
            )
        state = _round(s)
    # stickiness rounds: give members back owned partitions where balance allows
    for _ in range(MAX_STICKY_ROUNDS):
        s = materialize(_with_loads(state))
        moves = materialize(_sticky_moves(s))
        if moves.isEmpty():
            break
        state = _apply_moves(s, moves)
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


def _place(counts: DataFrame, members: DataFrame, partitions: DataFrame, owned: DataFrame, rack_aware: bool) -> DataFrame:
    keys4 = ["group_id", "member_id", "topic", "partition"]
    subscribed = counts.select("group_id", "topic").distinct()
    all_parts = subscribed.join(partitions.select("topic", "partition", "racks"), "topic")
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
    held = lambda dfs: dfs[0] if len(dfs) == 1 else dfs[0].unionByName(held(dfs[1:]))  # noqa: E731

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
    members: DataFrame, partitions: DataFrame, owned: DataFrame, *, rack_aware: bool = False
) -> DataFrame:
    """Sticky assignment for groups whose members subscribe to different topics.

    ``members``: normalized members (spark_assign.inputs); ``partitions``:
    normalized partitions; ``owned``: the honoured owned partitions
    (:func:`spark_assign.owned.resolve_owned`). Returns the full target
    assignment ``group_id, member_id, topic, partition``: valid, balanced by
    Kafka's rule, keeping owned partitions wherever balance allows.

    >>> m = normalize_members(members_df)  # doctest: +SKIP
    >>> assign_general(m, parts, resolve_owned(m, parts), rack_aware=False).show()  # doctest: +SKIP
    """
    counts = materialize(target_counts(members, partitions, owned))
    out = _place(counts, members, partitions, owned, rack_aware)
    return out.select("group_id", "member_id", "topic", F.col("partition").cast("int"))
