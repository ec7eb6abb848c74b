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

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..inputs import ASSIGNMENT_COLUMNS
from ..lineage import materialize
from ..owned import partition_claims
from .sticky_general import assign_general
from .sticky_uniform import assign_uniform


_G = "group_id"


def split_uniform(members: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(uniform, general)``: the members of groups whose members all sent the same
    subscription, and the members of the other groups.

    >>> uniform, general = split_uniform(members)  # doctest: +SKIP
    """
    key = F.array_sort("topics")
    w = Window.partitionBy(_G)
    flagged = materialize(members.withColumn(
        "_uniform", F.min(key).over(w) == F.max(key).over(w)
    ))
    cols = members.columns
    return (
        flagged.where(F.col("_uniform")).select(*cols),
        flagged.where(~F.col("_uniform")).select(*cols),
    )


def assign_sticky(
    members: DataFrame,
    partitions: DataFrame,
    *,
    lags=None,
    validate: bool = True,
    rack_aware="auto",
    member_order: str = "member_id",
    claims: DataFrame | None = None,
    **options,
) -> DataFrame:
    """Kafka's StickyAssignor for every group in ``members`` (normalized members and
    partitions, as :func:`spark_assign.assign` passes them). ``claims``: the
    :func:`spark_assign.owned.partition_claims` of these members, when the caller
    has them already (cooperative-sticky does).

    Returns ``group_id, member_id, topic, partition``.

    >>> assign(members, partitions, "sticky").show()  # doctest: +SKIP
    """
    uniform, general = split_uniform(members)
    if claims is None:
        claims = partition_claims(members, partitions)
    owned = claims.where(~F.col("contested")).select(_G, "member_id", "topic", "partition", "generation")

    def owned_of(groups: DataFrame) -> DataFrame:
        return owned.join(groups.select(_G).distinct(), _G, "left_semi")

    result = assign_uniform(
        uniform, partitions, owned_of(uniform), rack_aware=rack_aware, member_order=member_order,
    ).select(*ASSIGNMENT_COLUMNS)
    # the general path runs a few driver-side rounds (each a distributed step):
    # skip it outright when every group is uniform (one cheap job)
    if general.isEmpty():
        return result
    # the general path takes a flag: "auto" lets it apply racks where members have them
    other = assign_general(
        general, partitions, owned_of(general), rack_aware=rack_aware is not False
    ).select(*ASSIGNMENT_COLUMNS)
    return result.unionByName(other)
