"""KIP-848 ``consumer`` groups: the ConsumerGroupDescribe request (API 69), which kafka-python
does not ship.

The request and response are declared in Kafka's message-schema format
(``schemas/ConsumerGroupDescribe*.json``: version 0, the one Kafka marked stable in 3.7,
where ``MemberId`` is a string and an assignment is its topic partitions) and encoded and
decoded by kafka-python's schema machinery. A broker that does not advertise API 69 makes
:func:`describe_consumer_groups` raise kafka-python's ``IncompatibleBrokerVersion``; the
capture reports such groups as not captured, with that reason.

Each described member carries its **member epoch**, its subscription (topic names, or a
regex), its **current assignment** (what it owns now) and its **target assignment** (what
the broker's assignor decided, reached once the partitions' previous owners revoke them);
the group its **group epoch** and its **assignment epoch** (the group epoch its target
assignment was computed at: behind the group epoch while a new assignment is pending).

>>> request, response = messages()
>>> request.API_KEY, request.max_version, response.max_version
(69, 0, 0)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .client import per_coordinator

#: the topic partitions of an assignment: ``(topic, partition)``, sorted (a target: in the
#: order the broker holds it, which its UniformAssignor reads)
TopicPartitions = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ConsumerGroupMember:
    """A member of a KIP-848 group as ConsumerGroupDescribe reports it."""

    member_id: str
    instance_id: str | None
    rack: str | None
    member_epoch: int
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    topic_regex: str | None
    assigned: TopicPartitions
    target: TopicPartitions
    #: the topic ids the broker named in the member's assignments: ``(topic, id)``, the id as
    #: Kafka prints a Uuid
    topic_ids: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A KIP-848 group as ConsumerGroupDescribe reports it; ``error``: the error's name, or None."""

    group_id: str
    error: str | None
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerGroupMember, ...]


@functools.lru_cache(maxsize=1)
def messages() -> tuple[type, type]:
    """kafka-python message classes for ConsumerGroupDescribe: ``(request, response)``
    (declared on first use: kafka-python is the optional ``kafka`` extra)."""
    from kafka.protocol.api_message import ApiMessage

    from . import schemas

    class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
        pass

    class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
        pass

    return ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse


def _partitions(assignment: Any, *, in_order: bool = False) -> TopicPartitions:
    """An assignment's topic partitions, sorted, or ``in_order`` as the broker listed them
    (ConsumerGroupMember.topicPartitionsFromAssignment: the broker's map and sets as they iterate)."""
    if assignment is None:
        return ()
    listed = [(tp.topic_name, int(p)) for tp in (assignment.topic_partitions or []) for p in (tp.partitions or [])]
    return tuple(listed) if in_order else tuple(sorted(listed))


def kafka_uuid(value: Any) -> str | None:
    """A Uuid as Kafka prints it (URL-safe base64 of its 16 bytes, no padding), from what the
    message decoder gives (a ``uuid.UUID``, bytes or a string).

    >>> import uuid
    >>> kafka_uuid(uuid.UUID(int=1))
    'AAAAAAAAAAAAAAAAAAAAAQ'
    """
    import base64
    import uuid

    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        value = value.bytes
    if isinstance(value, str) and len(value) == 36:  # the UUID text form, as some decoders give it
        value = uuid.UUID(value).bytes
    if isinstance(value, (bytes, bytearray)):
        return base64.urlsafe_b64encode(bytes(value)).decode().rstrip("=")
    return str(value)


def _topic_ids(*assignments: Any) -> tuple[tuple[str, str], ...]:
    ids = {tp.topic_name: kafka_uuid(tp.topic_id) for a in assignments if a is not None
           for tp in (a.topic_partitions or []) if getattr(tp, "topic_id", None) is not None}
    return tuple(sorted((t, i) for t, i in ids.items() if i is not None))


def consumer_group(described: Any) -> ConsumerGroupDescription:
    """One ``DescribedGroup`` of a decoded ConsumerGroupDescribe response as a
    :class:`ConsumerGroupDescription`."""
    error = None
    if described.error_code:
        from kafka.errors import for_code

        error = for_code(described.error_code).__name__
    members = tuple(
        ConsumerGroupMember(
            m.member_id, m.instance_id, m.rack_id, int(m.member_epoch), m.client_id or "", m.client_host or "",
            tuple(m.subscribed_topic_names or ()), m.subscribed_topic_regex or None,
            _partitions(m.assignment), _partitions(m.target_assignment, in_order=True),
            _topic_ids(m.assignment, m.target_assignment))
        for m in (described.members or []))
    return ConsumerGroupDescription(described.group_id, error, described.group_state or "",
                                    int(described.group_epoch), int(described.assignment_epoch),
                                    described.assignor_name or "", members)


def describe_consumer_groups(admin, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
    """ConsumerGroupDescribe for ``group_ids``, one request per coordinator, on
    kafka-python's admin client ``admin``. Raises kafka-python's ``IncompatibleBrokerVersion``
    when a coordinator does not support the request."""
    request_cls, _ = messages()
    responses = per_coordinator(admin, group_ids, lambda groups: request_cls(
        group_ids=groups, include_authorized_operations=False))
    return {g.group_id: consumer_group(g) for response in responses for g in response.groups}
