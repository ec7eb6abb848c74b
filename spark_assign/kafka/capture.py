"""``capture()``: a live cluster's consumer groups as spark-assign's inputs.

One capture asks the cluster, for every group at once: DescribeGroups (members and
their subscription and assignment bytes), the committed offsets, the topics'
metadata, the brokers' racks, and the log start and end offsets. Each group is one
row of the ``snapshots`` table (:mod:`spark_assign.kafka.snapshots`).

Rules, where the broker leaves a choice:

* **owned partitions and generation**: a member's owned partitions are its current
  assignment (the SyncGroup bytes DescribeGroups returns), at the group's generation;
  a member with no assignment yet (mid-rebalance) owns what its subscription says
  (consumer protocol v1+), at the generation it sent (v2+).
* **the group's generation**: DescribeGroups does not report it. It is one more than
  the highest generation the members' subscriptions carry (each member sends the
  generation it last owned partitions at when it joins the current one), null when
  none carries one (protocol below v2, or a group of new members).
* **recorded rebalances**: with ``history``, a group whose latest rebalance recorded by
  :class:`~spark_assign.kafka.assignor.SparkAssignAssignor` (``<history>/rebalances``) has
  exactly the members DescribeGroups lists takes its members from that record: their
  subscriptions and racks as the leader saw them, owned partitions as it assigned them,
  at the generation the coordinator gave it (exact). This is how a broker that returns
  no member metadata (or a KIP-848-era proxy) still yields a full capture.
* **assignors**: the assignor the group chose (DescribeGroups gives the chosen one,
  not each member's list), when it is one spark-assign runs; else null (a custom
  assignor, or ``spark-assign-plan``: give the rebalance a strategy).
* **lags**: ``log end - committed``, never below 0 (``lag_rule = 'end - committed'``);
  for a partition the group has not committed, the consumer's ``auto.offset.reset``
  decides where it would start: ``latest`` gives 0 (``'no commit, latest: 0'``),
  ``earliest`` gives ``log end - log start`` (``'no commit, earliest: end - start'``).
  The lags cover the partitions of the topics the group subscribes to or has committed
  offsets on.
* **partitions**: the partitions of those topics; ``racks``: the racks of the brokers
  holding the partition's replicas (null when no broker has a rack).

KIP-848 ``consumer`` groups (the type ListGroups gives) are described with
ConsumerGroupDescribe (:mod:`spark_assign.kafka.kip848`): a member's owned partitions are
its current assignment, its ``generation`` its **member epoch**; the group's
``generation`` is its group epoch, ``assignment_epoch`` the epoch of its target
assignment, and ``Snapshot.targets`` holds each member's target assignment (where the
broker's assignor is taking it). ``assignors`` is the broker's assignor (``uniform``,
``range``). A member that subscribes by regex subscribes to the topics it is assigned or
targeted (reported in ``problems``: the regex is not resolved).

Not captured, each with its reason in ``groups.reason``: groups the cluster does not
have (Kafka 4 answers GroupIdNotFound), groups whose coordinator
returns an error or a ``Dead`` state (a group that vanished), groups of another
protocol type (Connect), and KIP-848 groups on a broker without ConsumerGroupDescribe
(API 69). Reported per member or topic in
``problems``, the rest of the capture going on: member metadata that does not follow
the consumer protocol (a non-Java client) or that the broker returned empty, topics
missing from the metadata, topics deleted between the metadata and the offsets,
committed offsets a group's coordinator would not give, a group deleted between
DescribeGroups and its offsets (its lags left out).

>>> snap = capture(spark, "broker:9092", ["orders"], security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
...                sasl_plain_username="ops", sasl_plain_password="...")     # doctest: +SKIP
>>> assign(snap.members, snap.partitions, "lag-aware", lags=snap.lags)       # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from ..errors import InvalidOptionError, UnknownStrategyError
from ..strategies.registry import strategy_name
from . import client
from .consumer_protocol import MemberMetadataError, Subscription, decode_assignment, decode_subscription
from .kip848 import ConsumerGroupDescription, describe_consumer_groups
from .live_tables import latest_rebalances
from .snapshots import SNAPSHOTS_SCHEMA, Snapshot

if TYPE_CHECKING:
    from ..history import AssignmentHistory

LAG_RULES = {"committed": "end - committed", "latest": "no commit, latest: 0",
             "earliest": "no commit, earliest: end - start"}

KIP848_UNSUPPORTED = ("a KIP-848 consumer group, and its coordinator does not support ConsumerGroupDescribe "
                      "(API 69): its members' epochs and assignments cannot be read")


def capture(spark: SparkSession, bootstrap_servers: str | list[str], groups: Iterable[str] | None = None, *,
            auto_offset_reset: str = "latest", timeout_s: float = 10.0, capture_id: str | None = None,
            history: str | AssignmentHistory | None = None, **client_config: Any) -> Snapshot:
    """Capture ``groups`` (default: every group the brokers list) from the cluster at
    ``bootstrap_servers``; record the capture in ``<history>/snapshots`` when ``history``
    is given (a folder, a catalog prefix or an :class:`~spark_assign.history.AssignmentHistory`;
    idempotent per ``capture_id``, default a new id), where the members also come from the
    rebalances recorded in it (see the module doc).

    ``client_config``: kafka-python ``KafkaAdminClient`` settings (security, SASL, SSL);
    an unknown one raises :class:`~spark_assign.errors.InvalidOptionError`. An unreachable
    cluster raises :class:`~spark_assign.kafka.client.KafkaUnreachableError` after
    ``timeout_s`` seconds; refused credentials raise
    :class:`~spark_assign.kafka.client.KafkaAuthenticationError` where kafka-python says so
    (it may report them as a bootstrap timeout: then the unreachable error names the
    security settings). A request that fails after the cluster was reached (a broker gone,
    a timeout) raises :class:`~spark_assign.kafka.client.KafkaCaptureError` naming the step;
    nothing of the capture is recorded. See the module doc for the rules.

    >>> snap = capture(spark, "127.0.0.1:9092", ["orders"], history="out/history")  # doctest: +SKIP
    >>> snap.groups.show()                                                           # doctest: +SKIP
    """
    reset = str(auto_offset_reset).strip().lower()
    if reset not in ("latest", "earliest"):
        raise InvalidOptionError(f"auto_offset_reset={auto_offset_reset!r}: expected 'latest' or 'earliest'")
    wanted = None if groups is None else ([groups] if isinstance(groups, str) else list(groups))
    if wanted is not None and not all(isinstance(g, str) and g for g in wanted):
        raise InvalidOptionError(f"groups={wanted!r}: expected non-empty group id strings")
    servers = bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
    captured_at = datetime.now(timezone.utc).replace(tzinfo=None)
    capture_id = capture_id or f"{captured_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    admin = client.connect(servers, timeout_s=timeout_s, client_config=client_config)
    steps = ["listing the groups"]
    try:
        records = _capture_groups(admin, wanted, reset, history, steps)
    except client.kafka_error() as e:
        raise client.KafkaCaptureError(f"capture from {servers} failed {steps[-1]}: {type(e).__name__}: {e}; "
                                       "nothing of it was recorded") from None
    finally:
        admin.close()
    rows = [(capture_id, captured_at, servers, *record) for record in records]
    snap = Snapshot(capture_id, captured_at, spark.createDataFrame(rows, SNAPSHOTS_SCHEMA))
    if history is not None:
        snap.record(history)
    return snap


class _Group:
    """One group's capture as it is put together."""

    def __init__(self, group_id: str, group_type: str):
        self.group_id, self.group_type = group_id, group_type
        self.state = self.protocol_type = self.protocol = ""
        self.generation: int | None = None
        self.captured = False
        self.reason: str | None = None
        self.members: list[tuple] = []
        self.members_described = 0
        self.assignment_epoch: int | None = None
        self.targets: list[tuple] = []
        self.topic_ids: dict[str, str] = {}
        self.topics: set[str] = set()
        self.committed: dict[tuple[str, int], int] = {}
        self.offsets_known = True
        self.partitions: list[tuple] = []
        self.lags: list[tuple] = []
        self.problems: list[tuple] = []

    def record(self) -> tuple:
        return (self.group_id, self.group_type, self.state, self.protocol_type, self.protocol or None,
                self.generation, self.members_described, self.captured, self.reason, self.members,
                self.partitions, self.lags, self.problems, self.assignment_epoch, self.targets)


def _capture_groups(admin, wanted: list[str] | None, reset: str, history: str | AssignmentHistory | None,
                    steps: list[str]) -> list[tuple]:
    """The groups' records; ``steps`` gets the step under way (for the error of a failed request)."""
    try:
        listed = client.list_groups(admin)
    except client.kafka_error():
        if wanted is None:
            raise
        listed = {}  # a broker that cannot list groups: the groups asked for default to classic
    ids = sorted(listed) if wanted is None else list(dict.fromkeys(wanted))
    steps.append(f"describing the groups {ids[:5]}{' ...' if len(ids) > 5 else ''}")
    kip848 = [g for g in ids if listed.get(g) == "consumer"]
    classic = [g for g in ids if listed.get(g) != "consumer"]
    described = client.describe_groups(admin, classic) if classic else {}
    consumer_groups: dict[str, ConsumerGroupDescription] | None = {}
    if kip848:
        try:
            consumer_groups = describe_consumer_groups(admin, kip848)
        except client.unsupported_request_error():
            consumer_groups = None
    where = history if history is None or isinstance(history, str) else history.location
    recorded = latest_rebalances(where, classic) if where is not None and classic else {}
    groups = [_consumer_described(_Group(g, "consumer"), consumer_groups) if listed.get(g) == "consumer"
              else _described(_Group(g, listed.get(g, "classic")), described.get(g), recorded.get(g), g in listed)
              for g in ids]
    live = [g for g in groups if g.captured]
    steps.append("reading the committed offsets")
    committed, failed = client.committed_offsets(admin, [g.group_id for g in live])
    for g in live:
        g.committed = committed.get(g.group_id, {})
        g.topics |= {t for t, _ in g.committed}
        if g.group_id in failed:
            g.offsets_known = False
            g.problems.append((None, None, f"committed offsets not read ({failed[g.group_id]}): lags left out"))
    # a group deleted since DescribeGroups answers its offsets with none: ask again for those
    bare = [g for g in live if g.offsets_known and not g.committed and g.group_type != "consumer"]
    again = client.describe_groups(admin, [g.group_id for g in bare]) if bare else {}
    for g in bare:
        d = again.get(g.group_id)
        if d is not None and (d.error == "GroupIdNotFoundError" or d.state == "Dead"):
            g.offsets_known = False
            g.problems.append((None, None, "committed offsets not read (the group was deleted during the "
                                           "capture): lags left out"))
    steps.append("reading the topics' metadata")
    known, missing, topic_ids = client.describe_topics(admin, {t for g in live for t in g.topics})
    racks = client.broker_racks(admin) if known else {}
    steps.append("reading the log offsets")
    ends, gone = client.log_offsets(admin, {t: [p for p, _ in parts] for t, parts in known.items()})
    for g in live:
        _partitions_and_lags(g, known, missing, gone, racks, ends, reset, topic_ids)
    return [g.record() for g in groups]


def _described(g: _Group, d: client.DescribedGroup | None, recorded: dict | None = None,
               listed: bool = True) -> _Group:
    """The group's state, protocol and members from its DescribeGroups answer (``listed``:
    whether ListGroups named it when the capture began)."""
    if d is None:
        g.reason = "its coordinator did not describe it"
        return g
    g.state, g.protocol_type, g.protocol = d.state, d.protocol_type, d.protocol
    g.members_described = len(d.members)
    if (d.error == "GroupIdNotFoundError" or d.state == "Dead") and not listed:
        # Kafka 4 answers GroupIdNotFound for a group it does not hold, earlier brokers Dead
        g.reason = "Dead: no such group on the cluster (never created, deleted, or expired)"
    elif d.error:
        g.reason = f"DescribeGroups answered {d.error}"
    elif d.state == "Dead":
        g.reason = "Dead: the group vanished (deleted, or expired with no members or offsets) during the capture"
    elif d.protocol_type not in ("consumer", ""):
        g.reason = f"protocol type {d.protocol_type!r}: not a consumer group"
    else:
        g.captured = True
        if recorded is not None and {m["member_id"] for m in recorded["members"]} == {m.member_id for m in d.members}:
            _recorded_members(g, recorded)
        else:
            if recorded is not None:
                g.problems.append((None, None, f"the latest recorded rebalance (generation {recorded['generation']}) "
                                               "has other members than the group now: not used"))
            _members(g, d)
    return g


def _consumer_described(g: _Group, described: dict[str, ConsumerGroupDescription] | None) -> _Group:
    """A KIP-848 group from its ConsumerGroupDescribe answer (None: the broker has no such request)."""
    g.protocol_type = "consumer"
    if described is None:
        g.reason = KIP848_UNSUPPORTED
        return g
    d = described.get(g.group_id)
    if d is None:
        g.reason = "its coordinator did not describe it"
        return g
    g.state, g.protocol, g.members_described = d.state, d.assignor, len(d.members)
    if d.error:
        g.reason = ("GroupIdNotFound: the group vanished during the capture" if d.error == "GroupIdNotFoundError"
                    else f"ConsumerGroupDescribe answered {d.error}")
        return g
    if d.state == "Dead":
        g.reason = "Dead: the group vanished during the capture"
        return g
    g.captured, g.generation, g.assignment_epoch = True, d.group_epoch, d.assignment_epoch
    assignors = _assignors(d.assignor)
    for position, m in enumerate(d.members):
        topics = set(m.topics)
        if m.topic_regex is not None:
            topics |= {t for t, _ in m.assigned + m.target}
            g.problems.append((m.member_id, None, f"subscribes by regex {m.topic_regex!r}: its topics are taken "
                                                  f"as {sorted(topics)} (named, assigned or targeted)"))
        g.topics |= topics | {t for t, _ in m.assigned + m.target}
        g.topic_ids.update(m.topic_ids)
        # owned: what the member holds, in the order the broker holds its target (the order the
        # broker's uniform assignor reads); describe_position: its place in the member map
        order = {tp: k for k, tp in enumerate(m.target)}
        owned = sorted(m.assigned, key=lambda tp: (order.get(tp, len(order)), tp))
        g.members.append((m.member_id, m.instance_id, m.rack, sorted(topics), owned, m.member_epoch,
                          assignors, position))
        g.targets.extend((m.member_id, t, p) for t, p in m.target)
    return g


def _recorded_members(g: _Group, recorded: dict) -> None:
    """The members as the leader's assignor recorded them at the group's latest rebalance."""
    g.generation = recorded["generation"]
    g.protocol = g.protocol or (recorded["strategy"] if recorded["strategy"] != "plan" else "spark-assign-plan")
    for m in recorded["members"]:
        owned = sorted((tp["topic"], tp["partition"]) for tp in m["assigned"])
        g.topics |= set(m["topics"]) | {t for t, _ in owned}
        g.members.append((m["member_id"], m["group_instance_id"], m["rack"], list(m["topics"]), owned,
                          g.generation, _assignors(g.protocol), None))


def _assignors(protocol: str) -> list[str] | None:
    """The members' ``assignors``: the group's chosen assignor when spark-assign runs it."""
    try:
        return [strategy_name(protocol)] if protocol else None
    except UnknownStrategyError:
        return None


def _members(g: _Group, d: client.DescribedGroup) -> None:
    decoded: list[tuple[client.DescribedMember, Subscription]] = []
    for m in d.members:
        if not m.metadata:
            g.problems.append((m.member_id, None, "the broker returned empty subscription metadata: its "
                                                  "subscription and owned partitions are unknown; left out of members"))
            continue
        try:
            decoded.append((m, decode_subscription(m.metadata, member=m.member_id)))
        except MemberMetadataError as e:
            g.problems.append((m.member_id, None, f"{e}; left out of members"))
    generations = [s.generation for _, s in decoded if s.generation is not None]
    g.generation = max(generations) + 1 if generations else None
    for m, sub in decoded:
        owned, generation = sub.owned_partitions, sub.generation
        if m.assignment:
            try:
                owned, generation = decode_assignment(m.assignment, member=m.member_id).partitions, g.generation
            except MemberMetadataError as e:
                g.problems.append((m.member_id, None, f"{e}; owned partitions taken from its subscription"))
        g.topics |= set(sub.topics) | {t for t, _ in owned}
        g.members.append((m.member_id, m.group_instance_id, sub.rack, list(sub.topics),
                          [(t, p) for t, p in sorted(set(owned))], generation, _assignors(g.protocol), None))


def _partitions_and_lags(g: _Group, known, missing, gone, racks, ends, reset: str, topic_ids: dict[str, str]) -> None:
    for topic in sorted(g.topics):
        if topic in missing:
            g.problems.append((None, topic, f"not in the cluster's metadata ({missing[topic]}): left out"))
            continue
        if topic in gone:
            g.problems.append((None, topic, f"deleted during the capture: its offsets could not be read "
                                            f"({gone[topic]}); left out of partitions and lags"))
            continue
        for partition, replicas in known[topic]:
            replica_racks = sorted({r for r in (racks.get(n) for n in replicas) if r is not None})
            topic_id = topic_ids.get(topic) or g.topic_ids.get(topic)  # the metadata's, else the describe's
            g.partitions.append((topic, partition, replica_racks or None, topic_id))
            if not g.offsets_known:
                continue
            start, end = ends[(topic, partition)]
            committed = g.committed.get((topic, partition))
            if committed is not None:
                lag, rule = max(end - committed, 0), LAG_RULES["committed"]
            else:
                lag, rule = (0 if reset == "latest" else end - start), LAG_RULES[reset]
            g.lags.append((topic, partition, lag, start, end, committed, rule))
