"""Kafka 4.4.0's ``UniformHomogeneousAssignmentBuilder`` (the broker's ``uniform`` assignor for a
group whose members all subscribe to the same topics), as window functions and equi-joins.

The builder walks the members in the order the coordinator hands them over, and each member's
current target assignment in the order the broker holds it; its answer depends on both, so this
module reproduces them (:func:`broker_member_order`, :func:`subscribed_topic_order`):

1. **Quotas.** ``P`` partitions over ``N`` members: ``q = P // N`` each, and ``R = P % N``
   extra partitions. Walking the members in order, a member takes an extra while some are left
   if it already holds more than ``q`` (it is *rich*), or when as many members are left as
   extras (then every member left takes one). Written without the walk: with
   ``rich_before`` the rich members before member ``i``, member ``i`` is *forced* when
   ``N - i - R + rich_before <= 0`` (the walk's condition, which stays true once true), and
   takes an extra when forced, or when rich and ``rich_before < R``.
2. **What each member keeps.** Its current partitions of the subscribed topics, in the
   broker's order (the ``owned`` array's, as ``capture()`` records it: the broker's map lists
   a topic's partitions together, and a list that does not is taken as listed), up to its
   quota; the rest are revoked.
3. **The unassigned list.** The partitions nobody holds, topic by topic in the order of the
   ``HashSet`` of the subscribed topic ids, each topic's from partition 0 up; then the revoked
   partitions, member by member in order.
4. **The fill.** The members below their quota, in order, each take the next partitions of
   the list up to their quota: a member's slots are numbered from the sum of the quotas still
   open before it (a window), and an equi-join on the slot number places every partition.

No step collects a group, loops over members or builds the members x partitions product.

>>> from spark_assign import assign
>>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
...                                 "group_id string, member_id string, topics array<string>")
>>> parts = spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int")
>>> sorted((r.member_id, r.partition) for r in assign(members, parts, "uniform").collect())  # b takes the extra
[('a', 0), ('b', 1), ('b', 2)]
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..execution import has_rows, join_small, materialize
from ..inputs import BLOCK_BITS, partition_bit, partition_block
from ..inputs import topic_sizes as count_topic_sizes
from ..ordering import (
    default_topic_id,
    hash_bucket,
    hashmap_capacity,
    hashset_copy_capacity,
    java_order_sql,
    pow2_at_least,
    string_hash,
    timeline_capacity,
    timeline_slot,
    uuid_hash,
)

_G = "group_id"


def broker_member_order(members: DataFrame) -> DataFrame:
    """``members`` with ``m_pos``: the member's 0-based place in the order the coordinator
    hands the members to the assignor, and ``n_members``.

    That order (``TargetAssignmentBuilder.build``) is a ``HashMap`` keyed by member id, filled
    from the group's member map (a ``TimelineHashMap``) with the member whose heartbeat
    computes the target last (``OverlayMap``'s additions): by HashMap bucket, then in the
    member map's order. ``describe_position`` is a member's place in that map, as
    ConsumerGroupDescribe lists the members (``capture()`` records it); a member without one
    in a group where others have one is the member joining now. Without any, the member map's
    order is its slots (``BaseHashTable.findSlot``) for a map that grew to the group's size,
    and members sharing a slot go by member id (the broker: the later joiner first).
    """
    n = "count(*) OVER (PARTITION BY group_id)"
    known = "max(describe_position) OVER (PARTITION BY group_id) IS NOT NULL"
    m = members.selectExpr("*", f"{n} AS n_members", f"{known} AS _known", f"{string_hash('member_id')} AS _h")
    m = m.selectExpr("*", f"{hashmap_capacity('n_members')} AS _hm", f"{timeline_capacity('n_members')} AS _tl")
    m = m.selectExpr(
        "*", f"{hash_bucket('_h', '_hm')} AS _bucket", "_known AND describe_position IS NULL AS _new",
        f"CASE WHEN _known THEN CAST(describe_position AS BIGINT) ELSE {timeline_slot('_h', '_tl')} END AS _slot")
    return m.selectExpr(
        "*", "row_number() OVER (PARTITION BY group_id ORDER BY _bucket, _new, _slot, "
        f"{java_order_sql('member_id')}) - 1 AS m_pos").drop("_known", "_h", "_hm", "_tl", "_bucket", "_new", "_slot")


def subscribed_topic_order(first: DataFrame, sizes: DataFrame) -> DataFrame:
    """Per group, its subscribed topics that exist with ``t_pos``, their order in the builder's
    ``new HashSet<>(subscribedTopicIds)`` of the first member in order (``first``: ``group_id,
    topics``): by bucket of the topic id's hash, then in the order the member's topic ids
    iterate (``TopicIds`` over the names' ``HashSet``: by the name's bucket, then the
    subscription's order). Also ``n_parts``, the topic's partition count (``sizes``: the
    partitions' :func:`~spark_assign.inputs.topic_sizes`, with ``topic_id``)."""
    topics = first.selectExpr(_G, f"{hashset_copy_capacity('size(topics)')} AS _cap",
                              "posexplode(topics) AS (_at, topic)")
    topics = topics.join(sizes.selectExpr("topic", "num_partitions AS n_parts", "topic_id AS _id"), "topic").selectExpr(
        _G, "topic", "n_parts", "_at", "_cap", f"{_topic_id_or_default('_id')} AS _id").selectExpr(
        "*", f"{uuid_hash('_id')} AS _th", f"{string_hash('topic')} AS _sh")
    return topics.selectExpr(
        _G, "topic", "n_parts",
        f"row_number() OVER (PARTITION BY group_id ORDER BY {hash_bucket('_th', '_cap')}, "
        f"{hash_bucket('_sh', '_cap')}, _at) - 1 AS t_pos")


def topic_ids(sizes: DataFrame) -> DataFrame:
    """``topic, _id``: the topics that have a ``topic_id``, from the partitions'
    :func:`~spark_assign.inputs.topic_sizes`."""
    return sizes.where("topic_id IS NOT NULL").selectExpr("topic", "topic_id AS _id")


def assign_uniform_homogeneous(members: DataFrame, partitions: DataFrame, *, topic_sizes: DataFrame | None = None,
                               held_order: bool = False) -> DataFrame:
    """The broker's ``uniform`` target for every group of ``members`` (normalized members of
    homogeneous groups; partitions with ``topic_id``): ``group_id, member_id, topic, partition``,
    and with ``held_order`` ``held_at``, the partition's place in the member's target as the
    broker holds it afterwards (:func:`held_positions`). ``topic_sizes``: the partitions'
    :func:`~spark_assign.inputs.topic_sizes` (counted here when None).

    A member's current target stays a list (no row per partition until the result), cut in
    place. Whether a group's lists are clean (every partition exists, is subscribed and is
    listed once) is read from a count and a bit mask per block of 64 partition numbers, whose
    missing bits are also the partitions nobody holds; only a group that is not clean has its
    lists filtered element by element (a partition listed by two members, which the broker
    never does, is then held by neither).
    """
    order = materialize(broker_member_order(members.select(_G, "member_id", "topics", "describe_position")),
                        eager=False)
    sizes_of = count_topic_sizes(partitions) if topic_sizes is None else topic_sizes
    topics = materialize(subscribed_topic_order(order.where("m_pos = 0").select(_G, "topics"), sizes_of),
                         eager=False)
    sizes = topics.groupBy(_G).agg(F.expr("map_from_entries(collect_list(struct(topic, n_parts))) AS _sizes"),
                                   F.expr("sum(n_parts) AS n_parts"))
    # the current targets, each member's list as listed (the broker's order). A group is clean
    # when every listed partition exists, is subscribed and is listed once: read from a count
    # and a bit mask per block of 64 partition numbers; only a group that is not has its
    # lists filtered, element by element
    lists = join_small(members.selectExpr(_G, "member_id", "coalesce(owned, array()) AS _valid"),
                       sizes.select(_G, "n_parts"), _G)
    claimed = lists.selectExpr(_G, "member_id", "inline(_valid)").selectExpr(
        _G, "member_id", "topic", "partition", f"{partition_block('partition')} AS _block",
        f"{partition_bit('partition')} AS _bit")
    # every block of the subscribed topics, and the claims: one aggregation of both (the blocks
    # of a topic nobody holds have no claim; a claim on a topic not subscribed, no block)
    span = topics.selectExpr(_G, "topic", "t_pos", "n_parts",
                             f"explode(sequence(0, {partition_block('n_parts - 1')})) AS _block",
                             "CAST(0 AS BIGINT) AS _bit", "0 AS _claim")
    claims = claimed.selectExpr(_G, "topic", "_block", "_bit", "1 AS _claim", "CAST(NULL AS INT) AS t_pos",
                                "CAST(NULL AS INT) AS n_parts")
    width = f"least({1 << BLOCK_BITS}, n_parts - _block * {1 << BLOCK_BITS})"
    blocks = span.unionByName(claims).groupBy(_G, "topic", "_block").agg(*map(F.expr, (
        "sum(_claim) AS _n", "bit_or(_bit) AS _mask", "max(t_pos) AS t_pos", "max(n_parts) AS n_parts"))).selectExpr(
        _G, "topic", "_block", "t_pos", f"{width} AS _width", "_mask",
        f"t_pos IS NULL OR _n > bit_count(_mask) OR ({width} < {1 << BLOCK_BITS} AND shiftright(_mask, {width}) != 0) "
        "AS _bad")
    blocks = materialize(blocks, eager=False)
    twice = None
    if has_rows(blocks, true="_bad"):
        # a partition listed by two members (which the broker never does) is held by neither
        twice = join_small(claimed, blocks.where("_bad").select(_G, "topic", "_block"), [_G, "topic", "_block"],
                           "left_semi").select(_G, "member_id", "topic", "partition").distinct().groupBy(
            _G, "topic", "partition").count().where("count > 1").select(_G, "topic", "partition")
        bad = blocks.where("_bad").select(_G).distinct().selectExpr(_G, "true AS _bad_group").join(
            twice.groupBy(_G).agg(F.expr("collect_list(struct(topic, partition)) AS _twice")), _G, "left")
        valid = ("filter(array_distinct(_valid), o -> o.partition >= 0 AND "
                 "o.partition < coalesce(try_element_at(_sizes, o.topic), 0) AND "
                 "NOT coalesce(array_contains(_twice, o), false))")
        lists = join_small(join_small(lists, bad, _G, "left"), sizes.select(_G, "_sizes"), _G).selectExpr(
            _G, "member_id", "n_parts", f"CASE WHEN _bad_group THEN {valid} ELSE _valid END AS _valid")
    lists = lists.selectExpr("*", "size(_valid) AS n_owned")
    # 1. quotas, in member order
    q = join_small(lists.select(_G, "member_id", "n_parts", "n_owned"),
                   order.select(_G, "member_id", "m_pos", "n_members"), [_G, "member_id"])
    q = q.selectExpr(
        "*", "n_parts DIV n_members AS _q", "n_parts % n_members AS _r", "n_owned AS _owned").selectExpr(
        "*", "_owned > _q AS _rich",
        "coalesce(sum(CASE WHEN _owned > _q THEN 1 ELSE 0 END) OVER (PARTITION BY group_id ORDER BY m_pos "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS _rich_before").selectExpr(
        _G, "member_id", "m_pos",
        "_q + CASE WHEN n_members - m_pos - _r + _rich_before <= 0 OR (_rich AND _rich_before < _r) "
        "THEN 1 ELSE 0 END AS quota", "_owned")
    # 2. what each member keeps, and what it gives up: the first `quota` of its list (its
    # list joins the quotas, a few columns a member: the lists are not shuffled)
    cut = materialize(join_small(lists, q.selectExpr(_G, "member_id", "m_pos", "quota",
                                                     "greatest(quota - _owned, 0) AS need"), [_G, "member_id"]),
                      eager=False)
    keep = "slice(_valid, 1, CAST(least(quota, n_owned) AS INT))"
    if held_order:  # each kept partition's place in the list: the order the broker copies it in
        kept = cut.selectExpr(_G, "member_id", f"posexplode({keep}) AS (ins, _e)").selectExpr(
            _G, "member_id", "_e.topic AS topic", "_e.partition AS partition", "CAST(ins AS BIGINT) AS ins")
    else:
        kept = cut.selectExpr(_G, "member_id", f"inline({keep})").selectExpr(
            _G, "member_id", "topic", "partition", "CAST(NULL AS BIGINT) AS ins")
    given_up = cut.where("n_owned > quota").selectExpr(
        _G, "m_pos", "posexplode(slice(_valid, CAST(quota AS INT) + 1, CAST(n_owned - quota AS INT))) AS (_k2, _e)"
    ).selectExpr(_G, "_e.topic AS topic", "_e.partition AS partition", "1 AS _part", "m_pos AS _k1", "_k2")
    # 3. the unassigned list: nobody's partitions in topic order (the blocks' missing bits, and
    # the partitions listed twice), then the revoked ones
    in_range = (f"CASE WHEN _width = {1 << BLOCK_BITS} THEN _mask "
                "ELSE _mask & (shiftleft(CAST(1 AS BIGINT), _width) - 1) END")
    gaps = blocks.where(f"t_pos IS NOT NULL AND bit_count({in_range}) < _width").selectExpr(
        _G, "topic", "t_pos",
        "explode(transform(filter(sequence(0, _width - 1), i -> bit_get(_mask, i) = 0), "
        f"i -> CAST(_block * {1 << BLOCK_BITS} + i AS INT))) AS partition")
    if twice is not None:
        gaps = gaps.unionByName(join_small(twice, topics.select(_G, "topic", "t_pos"), [_G, "topic"]))
    free = gaps.selectExpr(_G, "topic", "partition", "0 AS _part", "t_pos AS _k1", "partition AS _k2")
    unassigned = free.unionByName(given_up).selectExpr(
        _G, "topic", "partition",
        "row_number() OVER (PARTITION BY group_id ORDER BY _part, _k1, _k2) - 1 AS slot")
    # 4. the fill: member by member, each the next `need` partitions of the list
    slots = cut.where("need > 0").selectExpr(
        _G, "member_id", "need",
        "coalesce(sum(need) OVER (PARTITION BY group_id ORDER BY m_pos "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS _start").selectExpr(
        _G, "member_id", "explode(sequence(_start, _start + need - 1)) AS slot")
    filled = slots.join(unassigned, [_G, "slot"]).selectExpr(
        _G, "member_id", "topic", "partition", f"{_ADDED} + slot AS ins")
    target = kept.unionByName(filled)
    if not held_order:
        return target.select(_G, "member_id", "topic", "partition")
    return held_positions(target, members.select(_G, "member_id", "owned"), topic_ids(sizes_of))


def _topic_id_or_default(column: str) -> str:
    """A topic's id column, or the id spark-assign takes for a topic without one (SQL text)."""
    return f"coalesce({column}, {default_topic_id('topic')})"


#: the insertion rank of a partition a member receives, after every partition it kept
_ADDED = 1 << 40


def held_positions(target: DataFrame, before: DataFrame, ids: DataFrame) -> DataFrame:
    """``target`` (``group_id, member_id, topic, partition, ins``: ``ins`` the partition's
    place in the member's ``owned`` when it kept it, else ``_ADDED`` + its place in the fill)
    with ``held_at``: its place in the member's target as the broker holds it once the target's
    record is replayed, the order the next target computation reads (``before``: each member's
    ``owned`` before; ``ids``: :func:`topic_ids`).

    A member whose target did not change keeps its map (no record): its old order. Otherwise
    the builder deep-copied its map (``AssignorHelpers.deepCopyAssignment``: a
    ``HashMap(size)``, each set a ``HashSet(set)``), removed and added partitions (a topic new
    to it in a ``new HashSet<>()``), the record lists that map as it iterates, and
    ``Assignment.fromRecord`` rebuilds it (a ``HashMap``, each set a ``HashSet(list)``). A
    Java hash table iterates by bucket, a bucket in insertion order (but ``computeIfAbsent``
    links a new key first); a copy inserts in the original's order. So the held order is:
    topics by bucket in the rebuilt map, then by bucket in the copy, then the topics new to
    the member (the last added first) before the copied ones (in ``owned`` order); within a
    topic, partitions by bucket in the rebuilt set, then in the copy's set, then old (in
    ``owned`` order) before new (in fill order).
    """
    old = before.selectExpr(
        _G, "member_id", "coalesce(size(owned), 0) AS n_before",
        "size(array_distinct(transform(coalesce(owned, array()), o -> o.topic))) AS k_before",
        "posexplode_outer(owned) AS (_at, _o)").selectExpr(
        _G, "member_id", "n_before", "k_before", "_o.topic AS topic", "_at")
    old_topics = old.where("topic IS NOT NULL").groupBy(_G, "member_id", "topic").agg(
        {"_at": "min", "*": "count"}).withColumnsRenamed({"min(_at)": "_t_at", "count(1)": "n_t_before"})
    members = old.groupBy(_G, "member_id").agg({"n_before": "max", "k_before": "max"}).withColumnsRenamed(
        {"max(n_before)": "n_before", "max(k_before)": "k_before"})
    t = target.join(members, [_G, "member_id"], "left").join(old_topics, [_G, "member_id", "topic"], "left").join(
        ids, "topic", "left")
    per_member = "PARTITION BY group_id, member_id"
    per_topic = "PARTITION BY group_id, member_id, topic"
    t = t.selectExpr(
        "*", f"count(*) OVER ({per_member}) AS n_after",
        f"max(ins) OVER ({per_member}) >= {_ADDED} OR count(*) OVER ({per_member}) != coalesce(n_before, 0) "
        "AS _changed",
        f"count(*) OVER ({per_topic}) AS n_t_after",
        # a topic new to the member enters the copied map by computeIfAbsent, which links a new
        # key first in its bucket: new topics before the copied ones, the last added first
        f"coalesce({_ADDED} + _t_at, -min(ins) OVER ({per_topic})) AS _t_ins",
        f"{uuid_hash(_topic_id_or_default('_id'))} AS _th")
    t = t.selectExpr(
        "*", f"size(collect_set(topic) OVER ({per_member})) AS k_after")
    # the copy: HashMap(k_before) filled by put (resized after an insert past 0.75 of its
    # table), then the new topics by computeIfAbsent (resized before an insert past it)
    k_added = "CASE WHEN min(_t_ins) OVER (PARTITION BY group_id, member_id) < 0 THEN k_after - 1 ELSE 0 END"
    map_copy = pow2_at_least(f"greatest({pow2_at_least('greatest(coalesce(k_before, 0), 1)')}, "
                             f"CAST(ceil(coalesce(k_before, 0) / 0.75D) AS BIGINT), "
                             f"CAST(ceil(({k_added}) / 0.75D) AS BIGINT))")
    n_max = "greatest(coalesce(n_t_before, 0), n_t_after)"
    copied = pow2_at_least(f"greatest({hashset_copy_capacity('n_t_before')}, CAST(ceil({n_max} / 0.75D) AS BIGINT))")
    set_copy = f"CASE WHEN n_t_before IS NULL THEN {hashmap_capacity('n_t_after')} ELSE {copied} END"
    order = (f"CASE WHEN _changed THEN named_struct("
             f"'a', {hash_bucket('_th', hashmap_capacity('k_after'))}, 'b', {hash_bucket('_th', map_copy)}, "
             f"'c', _t_ins, 'd', {hash_bucket('CAST(partition AS BIGINT)', hashset_copy_capacity('n_t_after'))}, "
             f"'e', {hash_bucket('CAST(partition AS BIGINT)', set_copy)}, 'f', ins) "
             f"ELSE named_struct('a', CAST(0 AS BIGINT), 'b', CAST(0 AS BIGINT), 'c', CAST(0 AS BIGINT), "
             f"'d', CAST(0 AS BIGINT), 'e', CAST(0 AS BIGINT), 'f', ins) END")
    return t.selectExpr(
        _G, "member_id", "topic", "partition", f"row_number() OVER ({per_member} ORDER BY {order}) - 1 AS held_at")
