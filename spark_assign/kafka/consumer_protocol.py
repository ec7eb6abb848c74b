"""The classic consumer protocol's member metadata, decoded byte by byte.

A classic consumer group's members send their subscription as opaque bytes in
JoinGroup; the group leader's assignment comes back as opaque bytes in SyncGroup,
and DescribeGroups returns both. Their layout is Apache Kafka's
``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` schemas
(``clients/src/main/resources/common/message/``), not flexible (no tagged fields),
big-endian:

=========================  ========  ============================================
field                      versions  encoding
=========================  ========  ============================================
version                    all       int16
topics                     0+        int32 count, then each string (int16 length + UTF-8)
user_data                  0+        nullable bytes (int32 length, -1 for null)
owned_partitions           1+        int32 count of (topic string, int32 count + int32 ids)
generation_id              2+        int32 (-1: unknown)
rack_id                    3+        nullable string (int16 length, -1 for null)
=========================  ========  ============================================

The assignment is ``version`` (int16), ``assigned_partitions`` (as ``owned_partitions``)
and ``user_data`` in every version (0-3). As Kafka's ``ConsumerProtocol`` does, a
version above the highest known one is read as the highest (newer fields come after
the known ones), and a negative version is an error. Bytes left over after the
fields of the version are ignored (Kafka does the same for newer versions' fields).

>>> sub = decode_subscription(bytes.fromhex("0000" "00000001" "0006" "6f7264657273" "ffffffff"))
>>> sub.version, sub.topics, sub.owned_partitions, sub.generation, sub.rack
(0, ('orders',), (), None, None)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InvalidInputError

#: the highest versions of the schemas (Apache Kafka 3.x / 4.x)
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


class MemberMetadataError(InvalidInputError):
    """Member metadata bytes that do not follow the consumer protocol: names the
    member (when known), the field and the byte offset."""


@dataclass(frozen=True)
class Subscription:
    """A decoded ``ConsumerProtocolSubscription``. ``generation`` is None where the
    version does not carry it (below 2) or the member sent -1; ``owned_partitions``
    is empty below version 1; ``rack`` is None below version 3 or when unset."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, int], ...]
    generation: int | None
    rack: str | None


@dataclass(frozen=True)
class Assignment:
    """A decoded ``ConsumerProtocolAssignment``: ``partitions`` as ``(topic, partition)``."""

    version: int
    partitions: tuple[tuple[str, int], ...]
    user_data: bytes | None


class _Reader:
    """Big-endian reads over ``data`` that name the field and offset when bytes run out."""

    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def _take(self, n: int, field: str) -> bytes:
        if n < 0:
            raise MemberMetadataError(f"{self.what}: negative length {n} for {field} at byte {self.pos}")
        end = self.pos + n
        if end > len(self.data):
            raise MemberMetadataError(
                f"{self.what}: truncated reading {field} at byte {self.pos}: expected {n} byte(s), "
                f"found {len(self.data) - self.pos} (of {len(self.data)})")
        chunk, self.pos = self.data[self.pos:end], end
        return chunk

    def int16(self, field: str) -> int:
        return struct.unpack(">h", self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return struct.unpack(">i", self._take(4, field))[0]

    def string(self, field: str, *, nullable: bool = False) -> str | None:
        n = self.int16(f"{field} length")
        if n == -1 and nullable:
            return None
        raw = self._take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MemberMetadataError(f"{self.what}: {field} is not UTF-8 at byte {self.pos - n + e.start}") from None

    def bytes_(self, field: str) -> bytes | None:
        n = self.int32(f"{field} length")
        return None if n == -1 else self._take(n, field)

    def count(self, field: str) -> int:
        n = self.int32(f"{field} count")
        # each element takes at least 2 bytes: a count beyond what is left is corrupt,
        # not a reason to loop billions of times
        if n < 0 or n * 2 > len(self.data) - self.pos:
            raise MemberMetadataError(
                f"{self.what}: {field} count {n} at byte {self.pos - 4} does not fit the "
                f"{len(self.data) - self.pos} byte(s) left")
        return n

    def topic_partitions(self, field: str) -> tuple[tuple[str, int], ...]:
        out = []
        for i in range(self.count(field)):
            topic = self.string(f"{field}[{i}].topic")
            assert topic is not None  # not nullable
            for j in range(self.count(f"{field}[{i}].partitions")):
                out.append((topic, self.int32(f"{field}[{i}].partitions[{j}]")))
        return tuple(out)


def _version(r: _Reader, highest: int) -> tuple[int, int]:
    """The version sent and the version to read it as."""
    sent = r.int16("version")
    if sent < 0:
        raise MemberMetadataError(f"{r.what}: unsupported version {sent}: expected 0 or more")
    return sent, min(sent, highest)


def decode_subscription(data: bytes, *, member: str | None = None) -> Subscription:
    """Decode a member's subscription metadata (JoinGroup / DescribeGroups bytes).

    Raises :class:`MemberMetadataError` naming ``member``, the field and the offset
    when the bytes do not follow the schema.

    >>> decode_subscription(b"\\x00\\x02", member="c1")
    Traceback (most recent call last):
    ...
    spark_assign.kafka.consumer_protocol.MemberMetadataError: subscription of member c1: truncated reading topics count at byte 2: expected 4 byte(s), found 0 (of 2)
    """
    r = _Reader(bytes(data), f"subscription of member {member}" if member else "subscription")
    sent, v = _version(r, SUBSCRIPTION_VERSION)
    topics = []
    for i in range(r.count("topics")):
        t = r.string(f"topics[{i}]")
        assert t is not None  # not nullable
        topics.append(t)
    user_data = r.bytes_("user_data")
    owned = r.topic_partitions("owned_partitions") if v >= 1 else ()
    generation = r.int32("generation_id") if v >= 2 else -1
    rack = r.string("rack_id", nullable=True) if v >= 3 else None
    return Subscription(version=sent, topics=tuple(topics), user_data=user_data, owned_partitions=owned,
                        generation=None if generation == -1 else generation, rack=rack)


def decode_assignment(data: bytes, *, member: str | None = None) -> Assignment:
    """Decode a member's assignment (SyncGroup / DescribeGroups bytes). Empty bytes
    (a member that has no assignment yet) decode to no partitions.

    >>> decode_assignment(bytes.fromhex("0000" "00000001" "0001" "74" "00000002" "00000000" "00000003" "ffffffff"))
    Assignment(version=0, partitions=(('t', 0), ('t', 3)), user_data=None)
    """
    if not data:
        return Assignment(version=0, partitions=(), user_data=None)
    r = _Reader(bytes(data), f"assignment of member {member}" if member else "assignment")
    sent, _ = _version(r, ASSIGNMENT_VERSION)
    partitions = r.topic_partitions("assigned_partitions")
    return Assignment(version=sent, partitions=partitions, user_data=r.bytes_("user_data"))
