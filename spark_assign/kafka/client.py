"""The Kafka requests :func:`~spark_assign.kafka.capture` makes, on kafka-python's admin client.

Why kafka-python (the ``kafka`` extra): it is pure Python (no native library to build
on a Databricks cluster or a CI image), it is maintained, its admin client covers every
request a capture needs, and its own assignors are the peer this project measures
against, so the bytes it encodes are the reference the decoder is tested on.

Each function is one round of requests for every group or topic at once; the caller
turns the answers into rows. Failures the caller cannot go on from raise
:class:`KafkaUnreachableError` or :class:`KafkaAuthenticationError`; the rest come back as
values the caller reports per group, member or topic.

>>> connect("127.0.0.1:1", timeout_s=0.5)  # doctest: +SKIP
Traceback (most recent call last):
...
spark_assign.kafka.client.KafkaUnreachableError: no answer from bootstrap server(s) 127.0.0.1:1 within 0.5 s ...
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidOptionError, SparkAssignError


class KafkaUnreachableError(SparkAssignError, ConnectionError):
    """No broker answered at the bootstrap address within the timeout."""


class KafkaAuthenticationError(SparkAssignError, PermissionError):
    """The broker refused the client's credentials."""


class KafkaCaptureError(SparkAssignError, RuntimeError):
    """A request of a capture failed after the cluster was reached (a broker gone, a timeout,
    a refused request): names the step; nothing of the capture is recorded."""


def kafka_error() -> type[BaseException]:
    """kafka-python's base error class."""
    return _kafka()[1].KafkaError


def _kafka():
    try:
        import kafka  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is installed in every test run
        raise SparkAssignError(
            "capturing from Kafka needs kafka-python: pip install 'spark-assign[kafka]'") from None
    import kafka.errors as errors
    from kafka import KafkaAdminClient

    return KafkaAdminClient, errors


def connect(bootstrap_servers: str | list[str], *, timeout_s: float = 10.0,
            client_config: Mapping[str, Any] | None = None):
    """A kafka-python ``KafkaAdminClient`` bootstrapped within ``timeout_s`` seconds.

    ``client_config``: kafka-python admin settings (``security_protocol``,
    ``sasl_mechanism``, ``ssl_cafile``, ...); an unknown key raises
    :class:`~spark_assign.errors.InvalidOptionError` listing the known ones.
    """
    admin_cls, errors = _kafka()
    config = dict(client_config or {})
    unknown = sorted(set(config) - set(admin_cls.DEFAULT_CONFIG))
    if unknown:
        raise InvalidOptionError(
            f"unknown Kafka client setting(s) {unknown}: expected kafka-python KafkaAdminClient settings "
            f"such as {sorted(k for k in admin_cls.DEFAULT_CONFIG if k.startswith(('security', 'sasl', 'ssl')))}")
    for key in ("bootstrap_servers", "bootstrap_timeout_ms"):
        if key in config:
            raise InvalidOptionError(f"Kafka client setting {key!r}: give it as capture()'s own argument")
    servers = bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
    timeout_ms = int(timeout_s * 1000)
    config.setdefault("request_timeout_ms", max(timeout_ms, 1000))
    try:
        return admin_cls(bootstrap_servers=servers, bootstrap_timeout_ms=timeout_ms, **config)
    except _named(errors, "AuthenticationFailedError", "SaslAuthenticationFailedError",
                  "UnsupportedSaslMechanismError", "IllegalSaslStateError") as e:
        raise KafkaAuthenticationError(
            f"bootstrap server(s) {servers} refused the credentials "
            f"({_security(config)}): {type(e).__name__}: {e}") from None
    except _named(errors, "KafkaTimeoutError", "NoBrokersAvailable", "KafkaConnectionError") as e:
        security = _security(config)
        hint = (f": unreachable, or it ended the connection during authentication ({security}); kafka-python "
                "reports both as a bootstrap timeout") if security != "no authentication" else ""
        raise KafkaUnreachableError(
            f"no answer from bootstrap server(s) {servers} within {timeout_s:g} s{hint} ({type(e).__name__})"
        ) from None


def unsupported_request_error() -> tuple[type[BaseException], ...]:
    """kafka-python's error for a request the broker does not support."""
    return _named(_kafka()[1], "IncompatibleBrokerVersion", "UnsupportedVersionError")


def _named(errors, *names: str) -> tuple[type[BaseException], ...]:
    """The kafka-python error classes of those names that this version has."""
    return tuple(getattr(errors, n) for n in names if hasattr(errors, n))


def _security(config: Mapping[str, Any]) -> str:
    protocol = config.get("security_protocol", "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return "no authentication"
    mechanism = config.get("sasl_mechanism")
    return f"security_protocol={protocol}" + (f", sasl_mechanism={mechanism}" if mechanism else "")


@dataclass(frozen=True)
class DescribedMember:
    """A member as DescribeGroups returns it: the metadata and assignment bytes undecoded."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    group_id: str
    error: str | None
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


def list_groups(admin) -> dict[str, str]:
    """``group_id -> group type`` (``classic``, ``consumer``; ``classic`` where the broker
    does not say) of every group the brokers list."""
    return {g["group_id"]: (g.get("group_type") or "classic") for g in admin.list_groups()}


def per_coordinator(admin, group_ids: Iterable[str], request: Callable[[list[str]], Any]) -> list[Any]:
    """The responses to ``request(groups)``, sent once to each coordinator with the groups it
    coordinates (kafka-python's admin client ``admin``)."""
    ids = list(group_ids)

    async def run():
        by_coordinator: dict[int, list[str]] = defaultdict(list)
        for group_id, node in (await admin._find_coordinator_ids(ids)).items():
            by_coordinator[node].append(group_id)
        return [await admin._manager.send(request(groups), node_id=node) for node, groups in by_coordinator.items()]

    return admin._manager.run(run)


def describe_groups(admin, group_ids: Iterable[str]) -> dict[str, DescribedGroup]:
    """DescribeGroups for ``group_ids``, one request per coordinator, the member
    bytes kept as sent. (kafka-python's ``describe_groups`` decodes the bytes itself,
    dropping what it cannot parse, and fails on brokers that report authorized
    operations as -1.)"""
    from kafka.protocol.admin import DescribeGroupsRequest

    out = {}
    for response in per_coordinator(admin, group_ids, lambda groups: DescribeGroupsRequest(
            groups=groups, include_authorized_operations=False)):
        for g in response.groups:
            members = tuple(
                DescribedMember(m.member_id, getattr(m, "group_instance_id", None), m.client_id or "",
                                m.client_host or "", bytes(m.member_metadata or b""), bytes(m.member_assignment or b""))
                for m in g.members)
            error = None
            if g.error_code:
                from kafka.errors import for_code

                error = for_code(g.error_code).__name__
            out[g.group_id] = DescribedGroup(g.group_id, error, g.group_state or "", g.protocol_type or "",
                                             g.protocol_data or "", members)
    return out


def committed_offsets(admin, group_ids: Iterable[str]) -> tuple[dict[str, dict[tuple[str, int], int]], dict[str, str]]:
    """The groups' committed offsets, ``group -> {(topic, partition): offset}``, and
    ``group -> error`` for the groups whose offsets could not be read (asked again one
    by one when the batched request fails)."""
    _, errors = _kafka()
    ids = list(group_ids)
    if not ids:
        return {}, {}

    def rows(answer) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): om.offset for tp, om in answer.items() if om.offset is not None and om.offset >= 0}

    try:
        return {g: rows(a) for g, a in admin.list_group_offsets({g: None for g in ids}).items()}, {}
    except (errors.KafkaError, ValueError):
        pass
    found, failed = {}, {}
    for g in ids:
        try:
            found[g] = rows(admin.list_group_offsets({g: None})[g])
        except (errors.KafkaError, ValueError) as e:
            failed[g] = f"{type(e).__name__}: {e}"
    return found, failed


def describe_topics(admin, topics: Iterable[str]) -> tuple[dict[str, list[tuple[int, list[int]]]], dict[str, str],
                                                          dict[str, str]]:
    """``topic -> [(partition, replica node ids)]``, ``topic -> error`` for topics the
    metadata does not know, and ``topic -> topic id`` (as Kafka prints a Uuid) for the topics
    whose metadata names one."""
    from .kip848 import kafka_uuid

    _, errors = _kafka()
    known, failed, ids = {}, {}, {}
    names = sorted(set(topics))
    if not names:
        return {}, {}, {}
    for t in admin.describe_topics(names):
        if t["error_code"]:
            failed[t["name"]] = errors.for_code(t["error_code"]).__name__
        else:
            known[t["name"]] = sorted((p["partition_index"], list(p["replica_nodes"])) for p in t["partitions"])
            topic_id = kafka_uuid(t.get("topic_id"))
            if topic_id and topic_id != "AAAAAAAAAAAAAAAAAAAAAA":  # Uuid.ZERO_UUID: none given
                ids[t["name"]] = topic_id
    return known, failed, ids


def broker_racks(admin) -> dict[int, str | None]:
    """``broker node id -> rack`` (None where a broker has no rack)."""
    return {b["broker_id"]: b.get("rack") for b in admin.describe_cluster()["brokers"]}


def log_offsets(admin, partitions: Mapping[str, Iterable[int]]) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[str, str]]:
    """``(topic, partition) -> (log start, log end)`` offsets, and ``topic -> error`` for
    topics whose offsets could not be read (a topic deleted since its metadata was read):
    one request per spec for every partition, asked again topic by topic when it fails."""
    _, errors = _kafka()
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    def ask(tps: list) -> dict[tuple[str, int], tuple[int, int]]:
        start = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
        end = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        return {(tp.topic, tp.partition): (start[tp].offset, end[tp].offset) for tp in tps}

    every = {t: [TopicPartition(t, p) for p in ps] for t, ps in partitions.items()}
    if not every:
        return {}, {}
    try:
        return ask([tp for tps in every.values() for tp in tps]), {}
    except errors.KafkaError:
        pass
    found, failed = {}, {}
    for topic, tps in every.items():
        try:
            found.update(ask(tps))
        except errors.KafkaError as e:
            failed[topic] = type(e).__name__
    return found, failed
