"""The consumer protocol's member metadata (issue #16): bytes encoded by a real client
library (kafka-python) at every version, decoded by spark_assign.kafka; malformed bytes
rejected with the member, field and offset. Cases: tests/cases/kafka/metadata.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from spark_assign.kafka import (
    SUBSCRIPTION_VERSION,
    MemberMetadataError,
    decode_assignment,
    decode_subscription,
    member_row,
)

CASES = yaml.safe_load((Path(__file__).parent / "cases" / "kafka" / "metadata.yaml").read_text())


def _hex(value):
    return None if value is None else bytes.fromhex(value)


def _encode_subscription(sent: dict, version: int) -> bytes:
    s = ConsumerProtocolSubscription
    return s(version=version, topics=sent["topics"], user_data=_hex(sent["user_data"]),
             owned_partitions=[s.TopicPartition(topic=t, partitions=p) for t, p in sent["owned"].items()],
             generation_id=sent["generation"], rack_id=sent["rack"]).encode()


@pytest.mark.parametrize("case", CASES["subscriptions"], ids=lambda c: c["name"])
def test_subscription_decodes_what_kafka_python_encodes(case):
    for version, expected in case["expected"].items():
        sub = decode_subscription(_encode_subscription(case["sent"], version), member="m1")
        got = {"topics": list(sub.topics), "user_data": None if sub.user_data is None else sub.user_data.hex(),
               "owned": [list(tp) for tp in sub.owned_partitions], "generation": sub.generation, "rack": sub.rack}
        assert (sub.version, got) == (version, expected), f"version {version}"


@pytest.mark.parametrize("case", CASES["assignments"], ids=lambda c: c["name"])
def test_assignment_decodes_what_kafka_python_encodes(case):
    a = ConsumerProtocolAssignment
    for version in range(4):
        raw = a(version=version, user_data=_hex(case["sent"]["user_data"]), assigned_partitions=[
            a.TopicPartition(topic=t, partitions=p) for t, p in case["sent"]["partitions"].items()]).encode()
        got = decode_assignment(raw, member="m1")
        assert got.version == version
        assert [list(tp) for tp in got.partitions] == case["expected"]["partitions"]
        assert got.user_data == _hex(case["expected"]["user_data"])


@pytest.mark.parametrize("case", CASES["malformed"], ids=lambda c: c["name"])
def test_malformed_metadata_names_member_field_and_offset(case):
    decode = decode_subscription if case["kind"] == "subscription" else decode_assignment
    with pytest.raises(MemberMetadataError) as e:
        decode(bytes.fromhex(case["hex"]), member="m1")
    assert str(e.value) == case["error"]


def test_newer_versions_read_as_the_highest_known():
    """Kafka's ConsumerProtocol reads a newer version's known fields and ignores the rest."""
    raw = bytearray(_encode_subscription(CASES["subscriptions"][0]["sent"], SUBSCRIPTION_VERSION))
    raw[0:2] = (SUBSCRIPTION_VERSION + 2).to_bytes(2, "big")
    sub = decode_subscription(bytes(raw) + b"\x00\x00\x00\x09")  # a field of the future version
    assert (sub.version, sub.generation, sub.rack) == (SUBSCRIPTION_VERSION + 2, 812, "eu-west-1a")


def test_member_row_follows_the_members_contract():
    sub = decode_subscription(_encode_subscription(CASES["subscriptions"][0]["sent"], 3))
    assert member_row("g", "c1", "i1", sub, ["cooperative-sticky", "range"]) == {
        "group_id": "g", "member_id": "c1", "group_instance_id": "i1", "topics": ["orders", "billing"],
        "owned": [{"topic": "billing", "partition": 1}, {"topic": "orders", "partition": 0},
                  {"topic": "orders", "partition": 3}],
        "generation": 812, "rack": "eu-west-1a", "assignors": ["cooperative-sticky", "range"]}
