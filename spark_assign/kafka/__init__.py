"""Kafka in the loop (issue #16): live consumer groups as spark-assign's inputs.

* :func:`capture` asks a cluster for its groups' members, partitions and lags
  (:mod:`spark_assign.kafka.capture`, on kafka-python: ``pip install 'spark-assign[kafka]'``)
  and returns a :class:`Snapshot`, recorded in the history's ``snapshots`` table;
  :func:`load_snapshot` reads one back. KIP-848 ``consumer`` groups are described with
  ConsumerGroupDescribe (:mod:`spark_assign.kafka.kip848`): member epochs, current and
  target assignments.
* :class:`~spark_assign.kafka.assignor.SparkAssignAssignor`, a kafka-python partition
  assignor that records the rebalances it leads into the history's ``rebalances`` table
  (read by :func:`capture`) and, in plan mode, hands out the assignment recorded for the
  group's latest generation (``from spark_assign.kafka.assignor import SparkAssignAssignor``;
  it subclasses kafka-python's assignor, so importing it needs the ``kafka`` extra).
* The consumer protocol's member metadata decoded exactly
  (:mod:`spark_assign.kafka.consumer_protocol`), and turned into rows of
  :func:`spark_assign.assign`'s members contract (:func:`member_row`). Pure Python: no
  Kafka client is needed to decode bytes captured elsewhere.

>>> from spark_assign.kafka import decode_subscription, member_row
>>> sub = decode_subscription(bytes.fromhex("0000" "00000001" "0001" "74" "ffffffff"))
>>> member_row("orders", "c1", None, sub)["topics"]
['t']
"""

from __future__ import annotations

from typing import Any

from .capture import LAG_RULES, capture
from .client import KafkaAuthenticationError, KafkaCaptureError, KafkaUnreachableError
from .consumer_protocol import (
    ASSIGNMENT_VERSION,
    SUBSCRIPTION_VERSION,
    Assignment,
    MemberMetadataError,
    Subscription,
    decode_assignment,
    decode_subscription,
)
from .snapshots import SNAPSHOTS_SCHEMA, Snapshot, load_snapshot

__all__ = [
    "ASSIGNMENT_VERSION",
    "LAG_RULES",
    "SNAPSHOTS_SCHEMA",
    "SUBSCRIPTION_VERSION",
    "Assignment",
    "KafkaAuthenticationError",
    "KafkaCaptureError",
    "KafkaUnreachableError",
    "MemberMetadataError",
    "Snapshot",
    "Subscription",
    "capture",
    "decode_assignment",
    "decode_subscription",
    "load_snapshot",
    "member_row",
]


def member_row(group_id: str, member_id: str, group_instance_id: str | None, subscription: Subscription,
               assignors: list[str] | None = None) -> dict[str, Any]:
    """One row of the members contract of :func:`spark_assign.assign` from a decoded
    subscription: ``topics``, ``owned`` (sorted), ``generation`` and ``rack`` as the member sent
    them; ``assignors``: the member's ``partition.assignment.strategy`` names, when known
    (the JoinGroup protocols it listed).

    >>> sub = Subscription(2, ("t",), None, (("t", 3), ("t", 1)), 7, None)
    >>> row = member_row("g", "c1", "i1", sub, ["cooperative-sticky"])
    >>> row["owned"], row["generation"]
    ([{'topic': 't', 'partition': 1}, {'topic': 't', 'partition': 3}], 7)
    """
    return {
        "group_id": group_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "topics": list(subscription.topics),
        "owned": [{"topic": t, "partition": p} for t, p in sorted(set(subscription.owned_partitions))],
        "generation": subscription.generation,
        "rack": subscription.rack,
        "assignors": list(assignors) if assignors is not None else None,
    }
