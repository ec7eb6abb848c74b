"""``sticky``: Kafka's StickyAssignor (AbstractStickyAssignor) for any number of groups.

Each group takes one of Kafka's two paths:

* **uniform**: every member sent the same subscription, so the constrained
  quota algorithm applies (:mod:`.sticky_uniform`, window functions and rank joins);
* **general**: the members' subscriptions differ (:mod:`.sticky_general`).

The split is one aggregation per group: a group is uniform when the minimum
and maximum of its members' sorted subscription arrays are equal (the same
small job tells whether any general group claims owned partitions, so a path
with no groups, and the claim resolution of fresh general groups, are skipped
outright). As in Kafka,
the subscriptions are compared as the members sent them (de-duplicated): a topic
missing from the metadata still counts, so ``[t1, gone]`` and ``[t1]`` take the
general path. (Kafka treats an empty first subscription specially by accident;
here an empty subscription is compared like any other.)

Owned partitions follow the per-partition rule of :mod:`spark_assign.owned`
(KAFKA-14639). Options: ``rack_aware`` (``"auto"`` as Kafka, ``True`` to prefer
rack-aware whenever member and replica racks overlap, ``False`` to ignore racks),
``member_order`` (``"member_id"`` or ``"java_hash"``, see :mod:`.sticky_uniform`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..execution import join_small, materialize, stored_rows
from ..frames import one_row, sql_name
from ..inputs import ASSIGNMENT_COLUMNS
from ..inputs import topic_sizes as count_topic_sizes
from ..owned import partition_claims, without_transfers
from .sticky_general import assign_general
from .sticky_uniform import assign_uniform, group_layout

_G = "group_id"


def group_kinds(members: DataFrame) -> DataFrame:
    """One row per group: ``_uniform`` (all members sent the same subscription),
    ``_topics`` (the sorted subscription of a uniform group), ``_claims`` (some member
    claims owned partitions) and ``_racks`` (some member has a rack). Materialized (small)
    lazily: the path flags of :func:`sticky_assignment` read every row, computing and
    storing it (a deterministic aggregation) without an action of its own."""
    # SQL text: one JVM call an aggregate, where column functions take several each
    return materialize(members.groupBy(_G).agg(*map(F.expr, (
        "min(sort_array(topics)) = max(sort_array(topics)) AS _uniform", "min(sort_array(topics)) AS _topics",
        "coalesce(max(size(owned)) > 0, false) AS _claims", "bool_or(coalesce(rack != '', false)) AS _racks",
    ))), eager=False)


def group_paths(kinds: DataFrame) -> dict[str, bool]:
    """Which paths have groups, whether the general groups claim anything, and where members
    have racks (from :func:`group_kinds`): one small job that lets the general path's
    driver-side rounds (and the uniform path's jobs, and the rack steps) be skipped when no
    group needs them. In a small call ``kinds`` is on the driver already: no job."""
    rows = stored_rows(kinds)
    if rows is not None:
        # per group: (uniform, general, racks, claims), as the aggregation below reads them
        kind = [(u is True, u is False, bool(r), bool(c)) for u, r, c in
                zip(*(rows[col].to_pylist() for col in ("_uniform", "_racks", "_claims")))]
        return {"uniform": any(u for u, _, _, _ in kind), "general": any(g for _, g, _, _ in kind),
                "uniform_racks": any(u and r for u, _, r, _ in kind),
                "general_claims": any(g and c for _, g, _, c in kind),
                "general_racks": any(g and r for _, g, r, _ in kind)}
    u, g = F.col("_uniform"), ~F.col("_uniform")
    flags = one_row(kinds.agg(  # one row of flags, never the groups (bool_or of no rows: None)
        F.bool_or(u).alias("uniform"), F.bool_or(g).alias("general"),
        F.bool_or(u & F.col("_racks")).alias("uniform_racks"),
        F.bool_or(g & F.col("_claims")).alias("general_claims"),
        F.bool_or(g & F.col("_racks")).alias("general_racks"),
    ))
    return {k: bool(flags[k]) for k in ("uniform", "general", "uniform_racks", "general_claims", "general_racks")}


def split_uniform(members: DataFrame, kinds: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """``(uniform, general)``: the members of groups whose members all sent the same
    subscription, and the members of the other groups.

    >>> uniform, general = split_uniform(members)  # doctest: +SKIP
    """
    kinds = group_kinds(members) if kinds is None else kinds
    # one flag per group, joined back: the member rows keep their partitioning
    flagged = join_small(members, kinds.selectExpr(_G, "_uniform"), _G)
    cols = [sql_name(c) for c in members.columns]
    return flagged.where("_uniform").selectExpr(*cols), flagged.where("NOT _uniform").selectExpr(*cols)


def sticky_assignment(
    members: DataFrame,
    partitions: DataFrame,
    *,
    cooperative: bool | DataFrame,
    rack_aware="auto",
    member_order: str = "member_id",
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """The sticky assignment of every group in ``members`` (normalized members and
    partitions); with ``cooperative``, without the partitions changing owner
    (:func:`spark_assign.owned.without_transfers`); ``cooperative`` may also be a frame of
    the ``group_id`` s that withhold them (the others assign as ``sticky``: one call serves
    groups of both kinds, as a rebalance round runs them). ``topic_sizes``: the partitions'
    :func:`spark_assign.inputs.topic_sizes`, materialized (counted here when None).
    Returns ``group_id, member_id, topic, partition``.

    >>> sticky_assignment(members, partitions, cooperative=True)  # doctest: +SKIP
    """
    kinds = group_kinds(members)
    paths = group_paths(kinds)
    uniform, general = split_uniform(members, kinds)
    result = None
    if paths["uniform"] or not paths["general"]:  # no groups at all: the uniform path's empty result
        # the uniform groups' topics with their sizes: from the group kinds and the topic
        # sizes, both materialized (the partitions are not counted again)
        if topic_sizes is None:
            topic_sizes = materialize(count_topic_sizes(partitions))
        layout = group_layout(kinds.where("_uniform").select(_G, "_topics"), topic_sizes)
        result = assign_uniform(
            uniform, partitions, rack_aware=rack_aware, member_order=member_order, cooperative=cooperative,
            racks=bool(paths["uniform_racks"]), layout=layout,
        ).select(*ASSIGNMENT_COLUMNS)
    if not paths["general"]:
        assert result is not None  # the uniform path ran
        return result
    claims = None
    if paths["general_claims"]:
        claims = materialize(partition_claims(general, partitions))
        owned = claims.where(~F.col("contested")).select(_G, "member_id", "topic", "partition", "generation")
    else:  # nobody in a general group claims anything
        owned = None
    # the general path takes a flag: "auto" lets it apply racks where members have them
    # (with no member rack, its rack-aware placement equals the plain one)
    racks = bool(paths["general_racks"])
    other = assign_general(general, partitions, owned, rack_aware=rack_aware is not False and racks,
                           topic_sizes=topic_sizes)
    if cooperative is not False and claims is not None:
        # the holders: every listed partition, also of a topic the member no longer subscribes to
        # (only the cooperative groups' holders: in the other groups, a partition with no
        # holder is free to take, so nothing is withheld)
        holders = partition_claims(general, partitions, subscribed_only=False)
        if isinstance(cooperative, DataFrame):
            holders = join_small(holders, cooperative.select(_G).distinct(), _G, "left_semi")
        other = without_transfers(other, holders)
    other = other.select(*ASSIGNMENT_COLUMNS)
    return other if result is None else result.unionByName(other)


def assign_sticky(
    members: DataFrame,
    partitions: DataFrame,
    *,
    lags=None,
    validate: bool = True,
    rack_aware="auto",
    member_order: str = "member_id",
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's StickyAssignor for every group in ``members`` (normalized members and
    partitions, as :func:`spark_assign.assign` passes them).

    Returns ``group_id, member_id, topic, partition``.

    >>> from spark_assign import assign
    >>> members = spark.createDataFrame([("g", "a", ["t"], [("t", 2)], 3), ("g", "b", ["t"], [], 3)],
    ...     "group_id string, member_id string, topics array<string>, "
    ...     "owned array<struct<topic:string,partition:int>>, generation int")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> assign(members, parts, "sticky").orderBy("partition").show()  # a keeps t-2
    +--------+---------+-----+---------+
    |group_id|member_id|topic|partition|
    +--------+---------+-----+---------+
    |       g|        a|    t|        0|
    |       g|        b|    t|        1|
    |       g|        a|    t|        2|
    |       g|        b|    t|        3|
    +--------+---------+-----+---------+
    <BLANKLINE>
    """
    return sticky_assignment(members, partitions, cooperative=False, rack_aware=rack_aware,
                             member_order=member_order, topic_sizes=topic_sizes)
