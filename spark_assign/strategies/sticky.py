"""``sticky``: Kafka's StickyAssignor (AbstractStickyAssignor) for any number of groups.

Each group takes one of Kafka's two paths:

* **uniform**: every member sent the same subscription, so the constrained
  quota algorithm applies (:mod:`.sticky_uniform`, window functions and rank joins);
* **general**: the members' subscriptions differ (:mod:`.sticky_general`).

The split is one window over the members: a group is uniform when the minimum
and maximum of its members' sorted subscription arrays are equal. As in Kafka,
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

from ..inputs import ASSIGNMENT_COLUMNS
from ..lineage import materialize
from ..owned import partition_claims, without_transfers
from .sticky_general import assign_general
from .sticky_uniform import assign_uniform


_G = "group_id"


def split_uniform(members: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(uniform, general)``: the members of groups whose members all sent the same
    subscription, and the members of the other groups.

    >>> uniform, general = split_uniform(members)  # doctest: +SKIP
    """
    key = F.sort_array("topics")
    # one flag per group, joined back: the member rows keep their partitioning
    flags = materialize(members.groupBy(_G).agg((F.min(key) == F.max(key)).alias("_uniform")))
    flagged = members.join(F.broadcast(flags), _G)
    cols = members.columns
    return (
        flagged.where(F.col("_uniform")).select(*cols),
        flagged.where(~F.col("_uniform")).select(*cols),
    )


def sticky_assignment(
    members: DataFrame,
    partitions: DataFrame,
    *,
    cooperative: bool,
    rack_aware="auto",
    member_order: str = "member_id",
) -> DataFrame:
    """The sticky assignment of every group in ``members`` (normalized members and
    partitions); with ``cooperative``, without the partitions changing owner
    (:func:`spark_assign.owned.without_transfers`). Returns ``group_id, member_id, topic, partition``.

    >>> sticky_assignment(members, partitions, cooperative=True)  # doctest: +SKIP
    """
    uniform, general = split_uniform(members)
    result = assign_uniform(
        uniform, partitions, rack_aware=rack_aware, member_order=member_order, cooperative=cooperative,
    ).select(*ASSIGNMENT_COLUMNS)
    # the general path runs a few driver-side rounds (each a distributed step over its
    # groups): skip it outright when every group is uniform (one cheap job)
    if general.isEmpty():
        return result
    claims = materialize(partition_claims(general, partitions))
    owned = claims.where(~F.col("contested")).select(_G, "member_id", "topic", "partition", "generation")
    # the general path takes a flag: "auto" lets it apply racks where members have them
    other = assign_general(general, partitions, owned, rack_aware=rack_aware is not False)
    if cooperative:
        other = without_transfers(other, claims)
    return result.unionByName(other.select(*ASSIGNMENT_COLUMNS))


def assign_sticky(
    members: DataFrame,
    partitions: DataFrame,
    *,
    lags=None,
    validate: bool = True,
    rack_aware="auto",
    member_order: str = "member_id",
    **options,
) -> DataFrame:
    """Kafka's StickyAssignor for every group in ``members`` (normalized members and
    partitions, as :func:`spark_assign.assign` passes them).

    Returns ``group_id, member_id, topic, partition``.

    >>> assign(members, partitions, "sticky").show()  # doctest: +SKIP
    """
    return sticky_assignment(members, partitions, cooperative=False, rack_aware=rack_aware, member_order=member_order)
