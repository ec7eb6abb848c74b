"""``uniform``: the broker's default assignor of the consumer rebalance protocol
(KIP-848, Kafka's group-coordinator ``UniformAssignor``).

Under KIP-848 the broker computes each group's target assignment. A member's
``owned`` column is its current target assignment; generations play no part (the
broker tracks each member's epoch), so every listed partition of a subscribed
topic counts as owned, and a partition listed by two members (which the broker
never produces) is owned by neither.

* **Homogeneous** groups (every member subscribes to the same topics): Kafka's
  ``UniformHomogeneousAssignmentBuilder`` gives ``P % N`` members ``P // N + 1``
  partitions and the rest ``P // N``; each member keeps its current partitions up
  to its quota and the rest are handed out. This is the quota fill of the sticky
  assignors' uniform path (:mod:`.sticky_uniform`: the C_f/C_c/C_r windows and the
  rank join). Kafka picks the members that get the extra partition in Java hash
  order, whatever they own; here they are members that own at least ``C_c``, so
  at least as many current partitions are kept as Kafka keeps, on every group.
* **Heterogeneous** groups (``UniformHeterogeneousAssignmentBuilder``): a balanced,
  sticky assignment; no partition could move to a subscriber of its topic holding
  two or more fewer (the sticky assignors' general path, :mod:`.sticky_general`).

No rack awareness (the broker's assignors in Kafka 4.0 take none), no options. A
subscribed topic the metadata does not have plays no part: the broker resolves
subscriptions against its metadata before its assignor runs.
Which members keep which partitions when several choices keep as many is not
Kafka's (Kafka's follows Java hash order): compare results by their properties
(valid, balanced, partitions kept), as ``tests/cases/kip848/`` does.

>>> from spark_assign import assign
>>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
...                                 "group_id string, member_id string, topics array<string>")
>>> parts = spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int")
>>> assign(members, parts, "uniform").groupBy("member_id").count().orderBy("member_id").show()
+---------+-----+
|member_id|count|
+---------+-----+
|        a|    2|
|        b|    1|
+---------+-----+
<BLANKLINE>
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .sticky import sticky_assignment


def assign_uniform(
    members: DataFrame, partitions: DataFrame, *, lags=None, validate: bool = True,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's server-side UniformAssignor for every group in ``members`` (normalized
    members and partitions, as :func:`spark_assign.assign` passes them).

    Returns ``group_id, member_id, topic, partition`` (the module's example).
    """
    # the current target assignment has no generation: every claim counts the same
    current = members.withColumn("generation", F.lit(None).cast("int"))
    return sticky_assignment(current, partitions, cooperative=False, rack_aware=False, topic_sizes=topic_sizes)
