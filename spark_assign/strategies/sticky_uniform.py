"""The sticky assignors' uniform-subscription path (Kafka's ConstrainedAssignmentBuilder,
KAFKA-9987 / KAFKA-12464) as window functions and equi-joins on ranks.

(Past 400 lines: one algorithm, the claims' routes and the quota fill, whose steps share
their intermediate columns; split, each half would need the other's to be read.)

For a group of ``N`` members that all subscribe to the same topics, with ``P``
partitions, ``C_f = P // N``, ``C_c = ceil(P / N)`` and ``C_r = P % N`` members
end at ``C_c`` (:mod:`spark_assign.quota`):

1. **Quotas.** On the slim member rows (one per member), window functions over
   each group's members give ``C_f``, ``C_c``, ``C_r`` and how many owned partitions each
   member keeps: all of them when it owns fewer than ``C_f``; up to ``C_c`` when it owns
   at least ``C_c`` and fewer than ``C_r`` members before it (in member-id order) keep
   ``C_c``; otherwise up to ``C_f``. Kafka walks a Java ``HashMap`` here, so *which*
   members keep ``C_c`` follows the hash order of the member ids; spark-assign uses
   member-id order (Java String order) by default, or Kafka's HashMap order with
   ``member_order="java_hash"``. A member keeps its first usable claims ranked by
   ``(partition, topic)`` (Kafka since KAFKA-16277, so the kept partitions spread over
   the topics); only lists longer than ``C_f`` can be cut, only they are sorted.
2. **Owned partitions** (Kafka's per-partition rule, :mod:`spark_assign.owned`,
   KAFKA-14639), by one of two routes per group:

   * *clean* groups (every claim is on a partition of the subscription and no
     partition is claimed twice, so every claim is honoured whatever its
     generation; a steady group is clean): the claims are counted per block of 64
     partition numbers, a count and a bit mask each (one hash aggregation to a few
     rows per thousand claims); the quotas above are final, a member's list is cut
     in place, and the unclaimed partitions are the blocks' missing bits;
   * the other groups (contested, stale or repeated claims, claims on partitions
     the subscription does not have, topics not numbered ``0..n-1``): one hash
     aggregation per partition over the union of the group's partitions and the
     claims resolves the rule and finds the unclaimed partitions at once; a claim
     that is not used shifts the ranks of its member's later claims, and the
     quotas are taken again on the usable counts.

   Neither route builds the members x partitions product or joins claims with
   partitions.
3. **Fill.** The unassigned partitions in Kafka's order (topic, then partition:
   ``t0-0, t0-1, ..., t1-0, ...``) are dealt round-robin to the members below
   ``C_f`` (sorted by member id) until they reach ``C_f``; then one more each to the
   members that may still reach ``C_c`` (members that kept exactly ``C_f``, sorted
   by member id, then the filled members in the order they reached ``C_f``).
   The deal is arithmetic: every member gets one *slot* per partition it still
   takes (``explode(sequence)``, output-sized); slot ``s`` of a member belongs to
   round ``s``, so sorting slots by ``(round, member)`` gives each slot its
   position in the deal, and an equi-join on ``(group, position)`` with the ranked
   unassigned partitions places every partition. A fresh assignment equals Kafka's.
4. **Racks (KIP-881).** When a group uses rack-aware assignment (Kafka's rule, see
   :func:`rack_aware_groups`), owned partitions with no replica on the member's
   rack are not kept, the unassigned partitions are ordered by how many members
   could take them rack-locally, and the slots are first matched with
   rack-local partitions (rank-join rounds: one on each partition's first replica
   rack, then :data:`~spark_assign.strategies.uniform_fill.RACK_ROUNDS` over all its
   replica racks; :mod:`~spark_assign.strategies.uniform_fill`), then the rest as in
   step 3. Priority as Kafka: balance, then rack locality, then stickiness;
   the rack-aware layout is best effort and need not equal Kafka's exactly. When a
   member of the call has a rack, every group takes the per-partition route.
5. **Cooperative** (``cooperative=True``, or a frame of the cooperative groups' ids
   when one call serves groups of both kinds): a partition dealt to a member that is
   not one of its holders (the claimants at its highest generation, see
   :mod:`spark_assign.owned`) while it has some is left out: it changes owner next
   round. A contested partition dealt to one of its claimants is handed out now.

No step collects rows to the driver (only counts and one flag, which decide
what runs) or loops over members or partitions; every window is partitioned by
group (or finer) and fully ordered.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..execution import (
    broadcast_within,
    count_rows,
    has_rows,
    join_small,
    materialize,
    one_partition,
    partitioned_by,
    per_group,
    union_all,
)
from ..frames import one_row
from ..inputs import BLOCK_BITS, owned_or_empty, partition_bit, partition_block, topic_sizes
from ..ordering import MEMBER_ORDERS, java_order_sql, member_order_keys
from ..owned import claim_aggregates, claim_outcome, free_to_take, member_ranks
from ..quota import max_quota, min_quota, num_max_quota
from .uniform_fill import deal

_G = "group_id"


def group_subscriptions(members: DataFrame) -> DataFrame:
    """Each group's (common) subscription, sorted: ``group_id, _topics``."""
    return members.groupBy(_G).agg(F.expr("min(sort_array(topics)) AS _topics"))


def group_layout(subscriptions: DataFrame, sizes: DataFrame) -> DataFrame:
    """The topics of each group's subscription (``group_id, _topics``) that the
    metadata has, with their sizes (:func:`spark_assign.inputs.topic_sizes`):
    ``group_id, topic, num_partitions, _contiguous`` (the topic's partitions are
    ``0 .. num_partitions - 1``, as Kafka numbers them; validated partitions are
    distinct and non-negative, so the largest being ``num_partitions - 1`` says so)."""
    # one row per topic, small next to the partitions: broadcast (Spark cannot tell from a
    # checkpoint's estimate, and would shuffle both sides before it finds out)
    return join_small(subscriptions.selectExpr(_G, "explode(_topics) AS topic"), sizes, "topic").selectExpr(
        _G, "topic", "num_partitions", "last_partition = num_partitions - 1 AS _contiguous")


def group_topic_sizes(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """:func:`group_layout` of ``members`` and ``partitions``."""
    return group_layout(group_subscriptions(members), topic_sizes(partitions))


def group_partitions(topics: DataFrame, partitions: DataFrame) -> DataFrame:
    """Every partition of the groups' topics (``group_id, topic`` rows):
    ``group_id, topic, partition, racks``."""
    # (group, topic) pairs are few next to the partitions: broadcast them
    return join_small(partitions.select("topic", "partition", "racks"), topics.select(_G, "topic"), "topic").select(
        _G, "topic", "partition", F.array_distinct(F.filter("racks", lambda r: r.isNotNull())).alias("racks")
    )


def rack_aware_groups(members: DataFrame, gparts: DataFrame, rack_aware) -> DataFrame:
    """Per group, whether rack-aware assignment is used: ``group_id, use_racks``.

    Kafka's rule: some member has a (non-empty) rack, some partition has a replica
    on a member rack, and not every partition has replicas on every rack
    (``rack_aware=True`` drops the last condition, like Kafka's
    ``preferRackAwareLogic``; ``False`` turns racks off).
    """
    if rack_aware is False:
        return members.select(_G).distinct().withColumn("use_racks", F.lit(False))
    mracks = members.groupBy(_G).agg(
        F.collect_set(F.when(F.col("rack") != "", F.col("rack"))).alias("m_racks")
    )
    pracks = gparts.groupBy(_G).agg(
        F.array_distinct(F.flatten(F.collect_set("racks"))).alias("p_racks"),
        F.min(F.size("racks")).alias("min_racks"),
    )
    df = mracks.join(pracks, _G, "left")
    intersects = F.coalesce(F.size(F.array_intersect("m_racks", "p_racks")) > 0, F.lit(False))
    if rack_aware is True:
        use = intersects
    else:
        use = intersects & (F.col("min_racks") < F.size("p_racks"))
    return df.select(_G, use.alias("use_racks"))


#: at most this many partitions with a dropped claim are broadcast to find the
#: dropped claims' positions (more take a shuffle join)
BROADCAST_ROWS = 100_000


def _sorted_owned() -> str:
    """Each member's owned list sorted by ``(partition, topic)``, topics in Java
    order (SQL text): a claim's position in it is its rank among the member's claims (a
    repeated claim is one more claim that is not used).

    UTF-8 order is Java's order unless a topic has a character from U+E000 up
    (Kafka's legal topic names are ASCII): only then is each topic encoded as
    UTF-16 for the sort (an element-wise lambda, several times slower)."""
    owned = owned_or_empty()
    ranked = "array<struct<partition:int,_jt:binary,topic:string>>"
    # zipped by position, the fields named by the cast
    utf8 = (f"CAST(arrays_zip(owned.partition, array_repeat(CAST(NULL AS BINARY), size({owned})), owned.topic) "
            f"AS {ranked})")
    utf16 = f"transform({owned}, x -> named_struct('partition', x.partition, '_jt', {java_order_sql('x.topic')}, " \
            "'topic', x.topic))"
    high = "exists(topics, t -> t RLIKE '[\\\\x{E000}-\\\\x{10FFFF}]')"
    return f"sort_array(CASE WHEN {high} THEN {utf16} ELSE {utf8} END)"


def assign_uniform(
    members: DataFrame,
    partitions: DataFrame,
    *,
    rack_aware="auto",
    member_order: str = "member_id",
    cooperative: bool | DataFrame = False,
    racks: bool,
    layout: DataFrame | None = None,
    per_partition: bool = False,
) -> DataFrame:
    """The constrained sticky assignment of every group in ``members`` (all
    members of a group subscribe to the same topics; normalized members and
    partitions). With ``cooperative``, partitions another member still holds are
    left out (Kafka's ``partitionsTransferringOwnership``); ``cooperative`` may also be a
    frame of the ``group_id`` s whose round does so (one call for groups of both kinds). ``racks``: whether
    some member has a rack (:func:`.sticky.sticky_assignment` reads it from the group kinds).
    ``layout``: the groups' :func:`group_layout` over materialized inputs (computed
    and materialized here when None).
    ``per_partition`` resolves every group's claims partition by partition, even
    clean ones (the tests compare both routes).
    Returns ``group_id, member_id, topic, partition``.

    >>> assign_uniform(members, partitions, cooperative=True, racks=False)  # doctest: +SKIP
    """
    if rack_aware not in (True, False, "auto", None):
        raise ValueError(f"rack_aware must be True, False or 'auto', got {rack_aware!r}")
    if rack_aware is None:
        rack_aware = "auto"
    if member_order not in MEMBER_ORDERS:
        raise ValueError(f"unknown member_order {member_order!r}: expected one of {MEMBER_ORDERS}")
    # racks need a member with a rack (without one, the rack steps over every partition
    # are skipped)
    use_racks = rack_aware is not False and racks
    if layout is None:
        layout = materialize(group_topic_sizes(members, partitions))
    # on the slim member rows: member ranks, N, P from the topic sizes, and the quotas as
    # if every claim were usable (so they are in a clean group: see _route). The plans of
    # this module are SQL text: a projection is one JVM call, where column functions take
    # several each (the fixed cost of a small call)
    sizes = layout.groupBy(_G).agg(F.expr("sum(num_partitions) AS P"))
    slim = member_ranks(members.selectExpr(
        _G, "member_id", "rack", f"size({owned_or_empty()}) AS n_own",
        "count(*) OVER (PARTITION BY group_id) AS N")).join(sizes, _G, "left")
    gparts: DataFrame | None = None
    if use_racks:
        gparts = materialize(group_partitions(layout, partitions))
        slim = slim.join(rack_aware_groups(members, gparts, rack_aware), _G, "left")
        mrack = "CASE WHEN coalesce(use_racks, false) AND rack != '' THEN rack END"
    else:
        mrack = "CAST(NULL AS STRING)"
    slim = slim.selectExpr(_G, "member_id", "m_rank", f"{mrack} AS mrack", "N", "CAST(coalesce(P, 0) AS BIGINT) AS P",
                           "CAST(array() AS array<int>) AS _dropped", "CAST(n_own AS BIGINT) AS n_own")
    routed = not (use_racks or per_partition)
    # routed: the quotas as if every claim were usable (final for the clean groups). The
    # per-partition route takes the quotas on its usable counts (_resolve_claims); here it
    # needs only C_f, which says whose lists are ranked
    ranks = _quotas(slim, member_order) if routed else materialize(slim.selectExpr(
        "*", f"{min_quota('P', 'N')} AS C_f", "CAST(NULL AS BIGINT) AS kept"))
    # the owned lists stay in the input rows: only a member claiming more than C_f
    # partitions can lose some to the quota, so only its list is ranked (sorted where it
    # is); the others keep every claim they may use.
    # Read by the claim steps and the final query: stored (lazily, by the first, which reads
    # it all) so that the joins run and the lists are sorted once (deterministic)
    mem0 = materialize(join_small(members, ranks.selectExpr(
        _G, "member_id", "m_rank", "N", "P", "mrack", "n_own AS _listed", "C_f", "kept"),
        [_G, "member_id"]).selectExpr(
        _G, "member_id", "m_rank", "N", "P", "generation", "owned",
        f"CASE WHEN _listed > C_f THEN {_sorted_owned()} END AS _ranked", "_listed", "mrack", "kept"),
        eager=False)

    # -- 1. owned partitions: clean groups by blocks, the others partition by partition ---
    clean: DataFrame | None = None
    blocks: DataFrame | None = None
    dirty: DataFrame | None = None
    rest: DataFrame | None = mem0
    if routed:
        blocks, dirty = _route(mem0, layout)
        if dirty is None:
            clean, rest = mem0, None
        else:
            clean, rest = mem0.join(dirty, _G, "left_anti"), mem0.join(dirty, _G, "left_semi")
            blocks = blocks.join(dirty, _G, "left_anti")
    mems, kept, unassigned = [], [], []
    if rest is not None:
        if gparts is None:
            gparts = group_partitions(layout.join(rest.select(_G).distinct(), _G, "left_semi"), partitions)
        rest_rows, pm = _resolve_claims(rest, gparts, use_racks)
        mem_rest = _quotas(rest_rows, member_order)
        k, u = _split_resolved(pm, mem_rest, use_racks)
        mems.append(mem_rest)
        kept.append(k)
        unassigned.append(u)
    if clean is not None:
        mems.append(ranks if dirty is None else ranks.join(dirty, _G, "left_anti"))
        assert blocks is not None  # routed: blocks come with the clean groups
        k, u = _split_clean(clean, blocks)
        kept.append(k)
        unassigned.append(u)

    # -- 2. the unassigned partitions dealt to the members below their quotas -------------
    mem = union_all(mems)
    filled = deal(mem, union_all(unassigned), use_racks)
    # a partition another member still holds changes owner next round
    free = free_to_take("holder", "co_holder", "m_rank")
    if isinstance(cooperative, DataFrame):  # the cooperative groups only
        coop = cooperative.selectExpr(_G).distinct().selectExpr(_G, "true AS _coop")
        filled = join_small(filled, coop, _G, "left").where(f"_coop IS NULL OR {free}")
    elif cooperative:
        filled = filled.where(free)
    return filled.selectExpr(_G, "member_id", "topic", "partition").unionByName(union_all(kept))


def _route(mem0: DataFrame, layout: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """Find the groups that are not clean. A clean group (every claim is on a partition
    of the group's subscription, no partition claimed twice: every claim is honoured,
    whatever its generation) needs no per-partition aggregation: its claims are counted
    per block of ``2**BLOCK_BITS`` partition numbers (a count and a bit mask: a few rows
    per thousand claims), and its unclaimed partitions are the blocks' missing bits.
    Returns ``(blocks, the groups that are not clean)`` (``None`` when every group is
    clean: one small job decides), blocks materialized, the groups broadcast."""
    # a count and a bit mask per block of claimed partition numbers (a hash aggregation to
    # a few rows per thousand claims), joined with the blocks of the subscribed topics
    claimed = mem0.selectExpr(_G, "inline(owned)").selectExpr(
        _G, "topic", f"{partition_block('partition')} AS _block", f"{partition_bit('partition')} AS _bit",
    ).groupBy(_G, "topic", "_block").agg(F.expr("count(*) AS _n"), F.expr("bit_or(_bit) AS _mask"))
    span = layout.where("num_partitions > 0").selectExpr(
        _G, "topic", "num_partitions", "_contiguous",
        f"explode(sequence(0, {partition_block('num_partitions - 1')})) AS _block")
    blocks = span.join(claimed, [_G, "topic", "_block"], "full").selectExpr(
        _G, "topic", "_block", "num_partitions", "_contiguous", "coalesce(_n, 0) AS _n",
        "coalesce(_mask, CAST(0 AS BIGINT)) AS _mask")
    # a claim outside the subscription (no block row) or past the topic's end, a partition
    # claimed twice (fewer bits than claims), or a topic not numbered 0..n-1: not clean
    past_end = f"({_BLOCK_WIDTH} < {1 << BLOCK_BITS} AND shiftright(_mask, {_BLOCK_WIDTH}) != 0)"
    bad = f"num_partitions IS NULL OR NOT _contiguous OR {past_end} OR _n != bit_count(_mask)"
    # lazy: the check below computes and stores the blocks (an aggregation, deterministic),
    # so they cost no action of their own
    blocks = materialize(blocks.selectExpr(_G, "topic", "_block", "num_partitions", "_mask", f"{bad} AS _bad"),
                         eager=False)
    if not has_rows(blocks, true="_bad"):
        return blocks, None
    return blocks, per_group(materialize(blocks.where("_bad").selectExpr(_G).distinct()))


#: how many partition numbers of a topic's block exist (all but in the last block), SQL text
_BLOCK_WIDTH = f"least({1 << BLOCK_BITS}, num_partitions - _block * {1 << BLOCK_BITS})"


def _split_clean(rows: DataFrame, blocks: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Kept and unassigned partitions of the clean groups: a member keeps the first
    ``kept`` partitions of its owned list (ranked by ``(partition, topic)`` where it
    is cut); the rest of the list and the blocks' missing partitions are unassigned."""
    tp = [_G, "member_id", "_tp.topic", "_tp.partition"]
    # a member that keeps its whole list needs no ranking; the lists that are cut were
    # ranked once, in the stored member rows (they give both the kept and the revoked partitions)
    whole = rows.where("NOT (kept < _listed)").selectExpr(_G, "member_id", "explode(owned) AS _tp").selectExpr(*tp)
    cut = rows.where("kept < _listed").selectExpr(_G, "member_id", "m_rank", "kept", "_listed", "_ranked")
    n = "CAST(kept AS INT)"
    kept = whole.unionByName(
        cut.selectExpr(_G, "member_id", f"explode(slice(_ranked, 1, {n})) AS _tp").selectExpr(*tp))
    revoked = cut.selectExpr(_G, "m_rank AS holder", f"explode(slice(_ranked, {n} + 1, _listed - {n})) AS _tp")
    width = _BLOCK_WIDTH
    missing = (f"CASE WHEN _mask = 0 THEN sequence(0, {width} - 1) "
               f"ELSE filter(sequence(0, {width} - 1), i -> bit_get(_mask, i) = 0) END")
    gaps = blocks.where(f"bit_count(_mask) < {width}").selectExpr(
        _G, "topic", "_block", f"explode({missing}) AS _bit").selectExpr(
        _G, "topic", f"_block * {1 << BLOCK_BITS} + _bit AS partition", "CAST(NULL AS INT) AS holder")
    unassigned = revoked.selectExpr(_G, "_tp.topic", "_tp.partition", "holder").unionByName(gaps)
    return kept, unassigned.selectExpr("*", "holder AS co_holder")


def _resolve_claims(mem0: DataFrame, gparts: DataFrame, use_racks: bool) -> tuple[DataFrame, DataFrame]:
    """The per-partition route: one hash aggregation per partition over the union of
    the group's partitions and the members' claims resolves Kafka's rule
    (:mod:`spark_assign.owned`) and finds the unclaimed partitions at once. Returns the
    member rows (``n_own`` usable claims, ``_dropped``: positions of the unused ones)
    and one row per partition (holder, usable, the claim's position)."""
    # a claim's position: its rank among the member's claims (ranked lists), else its index
    def claims_of(rows: DataFrame, col: str) -> DataFrame:
        return rows.select(_G, "m_rank", "generation", F.posexplode(col).alias("pos", "_tp")).select(
            _G, "_tp.topic", "_tp.partition", "m_rank", "generation", "pos", F.lit(None).cast("int").alias("_meta"))

    claims = union_all([claims_of(mem0.where(F.col("_ranked").isNull()), "owned"),
                        claims_of(mem0.where(F.col("_ranked").isNotNull()), "_ranked")])
    meta = gparts.select(
        _G, "topic", "partition", F.lit(None).cast("int").alias("m_rank"), F.lit(None).cast("int").alias("generation"),
        F.lit(None).cast("int").alias("pos"), F.lit(1).alias("_meta"))
    out = claim_outcome()
    # shuffled by partition first (the keys are all distinct, so a map-side partial
    # aggregation would only cost), into tasks of bounded size (a small call's rows are
    # one partition already: no shuffle, no count to size one)
    tp = [_G, "topic", "partition"]

    def n_rows() -> int:  # the claims and the metadata rows
        return one_row(mem0.agg(F.sum("_listed") + F.sum(F.when(F.col("m_rank") == 0, F.col("P")))))[0] or 0

    parts = partitioned_by(meta.unionByName(claims), *tp, rows=n_rows).groupBy(*tp).agg(
        *map(F.expr, ("count(_meta) AS _np", *claim_aggregates("generation", "m_rank", "pos")))
    ).selectExpr(_G, "topic", "partition", "_np", "_n_claims", f"{out['holder']} AS holder",
                 f"{out['co_holder']} AS co_holder", f"{out['contested']} AS contested", "_pos")
    # a claim is honoured when its partition is in the subscription and nobody else claims it
    # at its generation; rack-aware groups use it only with a replica on the member's rack
    usable = (F.col("_np") > 0) & (F.col("_n_claims") > 0) & ~F.col("contested")
    if use_racks:
        holders = mem0.select(_G, F.col("m_rank").alias("holder"), F.col("mrack").alias("_hrack"))
        parts = join_small(parts.join(gparts.select(_G, "topic", "partition", "racks"), [_G, "topic", "partition"],
                                      "left"), holders, [_G, "holder"], "left")
        usable = usable & (F.col("_hrack").isNull() | F.coalesce(F.array_contains("racks", F.col("_hrack")), F.lit(False)))
    usable = F.coalesce(usable, F.lit(False))
    parts = materialize(parts.select("*", usable.alias("_usable"), usable.cast("int").alias("_n_usable")))

    # each member's unused claims: their positions shift its ranks (none in a steady
    # group: then no join at all). A small call reads it off its stored rows, where a
    # broadcast would be a job of its own; otherwise one count sizes the join
    dropped = F.array().cast("array<int>")
    rare = parts.where(F.col("_n_claims") > F.col("_n_usable")).select(
        _G, "topic", "partition", F.col("holder").alias("_h"), F.col("_pos").alias("_hpos"), "_usable")
    n_rare = count_rows(parts, greater=("_n_claims", "_n_usable"))
    mem = mem0
    if n_rare:
        losers = claims.join(broadcast_within(rare, n_rare, BROADCAST_ROWS), [_G, "topic", "partition"]).where(
            ~(F.col("_usable") & (F.col("m_rank") == F.col("_h")) & (F.col("pos") == F.col("_hpos"))))
        lost = one_partition(losers.groupBy(_G, "m_rank").agg(F.sort_array(F.collect_list("pos")).alias("_dropped")))
        mem = mem.join(lost, [_G, "m_rank"], "left")
        dropped = F.coalesce("_dropped", dropped)
    mem = mem.select(
        _G, "member_id", "m_rank", "mrack", "N", "P", dropped.alias("_dropped"),
        (F.col("_listed") - F.size(dropped)).cast("long").alias("n_own"),
    )
    return mem, parts.where(F.col("_np") > 0)


def _quotas(mem: DataFrame, member_order: str) -> DataFrame:
    """Member rows with their quotas (``C_f``, ``C_c``, ``C_r``), how many owned
    partitions each keeps (``kept``), how many it still takes (``deficit``, and
    ``e_rank`` < ``X`` for one more up to ``C_c``), and ``_t``: the claim position its
    kept claims stay below. Materialized (one row per member), lazily: the first query
    that reads it broadcasts all of it and stores it (windows fully ordered by unique
    member ranks: deterministic)."""
    gw = "PARTITION BY group_id"
    mem = mem.selectExpr(
        "*", f"{min_quota('P', 'N')} AS C_f", f"{max_quota('P', 'N')} AS C_c", f"{num_max_quota('P', 'N')} AS C_r")
    # members that keep C_c: those owning >= C_c, the first C_r of them in member order
    can_max = "(C_r > 0 AND n_own >= C_c)"
    max_rank = (f"sum(CASE WHEN {can_max} THEN 1 ELSE 0 END) OVER ({gw} ORDER BY "
                f"{', '.join(member_order_keys(member_order, 'N'))} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")
    mem = mem.selectExpr("*", f"{can_max} AND {max_rank} <= C_r AS at_max")
    mem = mem.selectExpr("*", "CAST(CASE WHEN at_max THEN C_c ELSE least(n_own, C_f) END AS BIGINT) AS kept")
    deficit = "greatest(C_f - kept, 0)"
    # X members still have to reach C_c: members that kept exactly C_f (in member order),
    # then the members below C_f in the order the round-robin fills them up to C_f
    # (smaller deficit first: it is reached in an earlier round; then member order)
    x = f"C_r - sum(CASE WHEN at_max THEN 1 ELSE 0 END) OVER ({gw})"
    e_phase = f"CASE WHEN {deficit} > 0 THEN 1 WHEN NOT at_max AND kept = C_f THEN 0 END"
    e_rank = (f"row_number() OVER ({gw} ORDER BY coalesce({e_phase}, 2), "
              f"CASE WHEN {deficit} > 0 THEN {deficit} ELSE 0 END, m_rank) - 1")
    # a member keeps its first `kept` usable claims: in claim positions, those before `_t`
    # (every unused claim before the bound pushes it one further)
    bound = "aggregate(_dropped, kept, (t, d) -> CASE WHEN d < t THEN t + 1 ELSE t END)"
    return materialize(mem.selectExpr(
        "*", f"{deficit} AS deficit", f"{x} AS X", f"{e_phase} AS e_phase", f"{e_rank} AS e_rank", f"{bound} AS _t",
    ), eager=False)


def _split_resolved(pm: DataFrame, mem: DataFrame, use_racks: bool) -> tuple[DataFrame, DataFrame]:
    """Kept and unassigned partitions of the per-partition route."""
    owners = mem.select(_G, F.col("m_rank").alias("holder"), F.col("member_id").alias("_owner"), "_t")
    pm = join_small(pm, owners, [_G, "holder"], "left")
    is_kept = F.col("_usable") & (F.col("_pos") < F.col("_t"))
    kept = pm.where(is_kept).select(_G, F.col("_owner").alias("member_id"), "topic", "partition")
    unassigned = pm.where(~is_kept).select(_G, "topic", "partition", "holder", "co_holder",
                                           *(["racks"] if use_racks else []))
    return kept, unassigned
