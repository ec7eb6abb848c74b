"""``cooperative-sticky``: Kafka's CooperativeStickyAssignor (KIP-429).

The sticky assignment (:func:`.sticky.sticky_assignment`) with every partition that
changes owner left out of this round (Kafka's ``partitionsTransferringOwnership``):
a partition is withheld when it goes to a member that does not hold it while other
members do. Its holders are every member that lists it at its highest claimed
generation, whether or not it still subscribes to the topic (:mod:`spark_assign.owned`);
a contested partition may go to one of its claimants. The uniform path decides it in
the same aggregation that resolves the claims; the general path through
:func:`spark_assign.owned.without_transfers`.
Its holder revokes it this round (:func:`spark_assign.properties.revocations`); the next rebalance, with
``owned`` = this round's result and the generation one higher
(:func:`next_round_members`), hands it to its new owner.

>>> from spark_assign import assign
>>> members = spark.createDataFrame([("g", "a", ["t"], [("t", p) for p in range(4)], 3), ("g", "b", ["t"], [], 3)],
...     "group_id string, member_id string, topics array<string>, "
...     "owned array<struct<topic:string,partition:int>>, generation int")
>>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
>>> a1 = assign(members, parts, "cooperative-sticky")  # a keeps t-0 and t-1; t-2 and t-3 are revoked
>>> sorted(r.partition for r in a1.collect())
[0, 1]
>>> a2 = assign(next_round_members(members, a1), parts, "cooperative-sticky")  # b takes them
>>> sorted((r.member_id, r.partition) for r in a2.collect())
[('a', 0), ('a', 1), ('b', 2), ('b', 3)]
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..frames import owned_lists
from ..inputs import OWNED_TYPE, normalize_members
from .sticky import sticky_assignment

_G = "group_id"


def assign_cooperative_sticky(
    members: DataFrame, partitions: DataFrame, *, lags=None, validate: bool = True,
    rack_aware="auto", member_order: str = "member_id", topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's CooperativeStickyAssignor for every group in ``members`` (normalized).

    Returns ``group_id, member_id, topic, partition``; partitions changing owner
    are absent until the next round (the module's example).
    """
    return sticky_assignment(members, partitions, cooperative=True, rack_aware=rack_aware,
                             member_order=member_order, topic_sizes=topic_sizes)


def next_round_members(members: DataFrame, assignment: DataFrame) -> DataFrame:
    """The members of the next rebalance: ``owned`` := this round's assignment
    (sorted by topic, partition), ``generation`` := the group's highest generation
    plus one (0 when no member had one). Other columns are kept.

    >>> members = spark.createDataFrame([("g", "a", ["t"], None, 3), ("g", "b", ["t"], None, 3)],
    ...     "group_id string, member_id string, topics array<string>, "
    ...     "owned array<struct<topic:string,partition:int>>, generation int")
    >>> a1 = spark.createDataFrame([("g", "a", "t", 1), ("g", "a", "t", 0)], "group_id string, member_id string, topic string, partition int")
    >>> next_round_members(members, a1).select("member_id", "owned", "generation").orderBy("member_id").show()
    +---------+----------------+----------+
    |member_id|           owned|generation|
    +---------+----------------+----------+
    |        a|[{t, 0}, {t, 1}]|         4|
    |        b|              []|         4|
    +---------+----------------+----------+
    <BLANKLINE>
    """
    m = normalize_members(members)
    owned = owned_lists(assignment, "_owned")
    gen = m.groupBy(_G).agg((F.coalesce(F.max("generation"), F.lit(-1)) + 1).cast("int").alias("_gen"))
    out = (
        m.join(owned, [_G, "member_id"], "left")
        .join(gen, _G)
        .withColumn("owned", F.coalesce("_owned", F.array().cast(OWNED_TYPE)).cast(OWNED_TYPE))
        .withColumn("generation", F.col("_gen"))
    )
    return out.select(*m.columns)
