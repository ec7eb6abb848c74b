"""``uniform``: the broker's default assignor of the consumer rebalance protocol
(KIP-848, Kafka's group-coordinator ``UniformAssignor``).

Under KIP-848 the broker computes each group's target assignment. A member's
``owned`` column is its current target assignment; generations play no part (the
broker tracks each member's epoch), so every listed partition of a subscribed
topic counts as owned, and a partition listed by two members (which the broker
never produces) is owned by neither.

* **Homogeneous** groups (every member subscribes to the same topics): Kafka 4.4.0's
  ``UniformHomogeneousAssignmentBuilder``, member by member
  (:mod:`.uniform_homogeneous`): its answer depends on the order the coordinator walks the
  members (their ids, and ``describe_position``) and the topics (their ids, ``topic_id`` in
  ``partitions``), and on the order of each member's current target (the ``owned`` array's
  order: ``capture()`` keeps the broker's). docs/kafka.md says what that rests on.
* **Heterogeneous** groups (``UniformHeterogeneousAssignmentBuilder``): a balanced,
  sticky assignment; no partition could move to a subscriber of its topic holding
  two or more fewer (the sticky assignors' general path, :mod:`.sticky_general`). It is
  valid and balanced, but not yet Kafka's member by member: compare it by its properties.

No rack awareness (the broker's assignors in Kafka 4 take none), no options. A subscribed
topic the metadata does not have plays no part: the broker resolves subscriptions against
its metadata before its assignor runs.

>>> from spark_assign import assign
>>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
...                                 "group_id string, member_id string, topics array<string>")
>>> parts = spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int")
>>> assign(members, parts, "uniform").groupBy("member_id").count().orderBy("member_id").show()
+---------+-----+
|member_id|count|
+---------+-----+
|        a|    1|
|        b|    2|
+---------+-----+
<BLANKLINE>
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .sticky import group_kinds, group_paths, split_uniform, sticky_assignment
from .uniform_homogeneous import assign_uniform_homogeneous


def assign_uniform(
    members: DataFrame, partitions: DataFrame, *, lags=None, validate: bool = True,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Kafka's server-side UniformAssignor for every group in ``members`` (normalized
    members and partitions, as :func:`spark_assign.assign` passes them).

    Returns ``group_id, member_id, topic, partition`` (the module's example).
    """
    # homogeneous as the broker has it: the same topic names (ModernGroup.subscriptionType)
    kinds = group_kinds(members)
    homogeneous, heterogeneous = split_uniform(members, kinds)
    exact = assign_uniform_homogeneous(homogeneous, partitions, topic_sizes=topic_sizes)
    if not group_paths(kinds)["general"]:
        return exact
    # the current target assignment has no generation: every claim counts the same
    current = heterogeneous.withColumn("generation", F.lit(None).cast("int"))
    other = sticky_assignment(current, partitions, cooperative=False, rack_aware=False, topic_sizes=topic_sizes)
    return exact.unionByName(other)
