"""KIP-848 consumer groups: a real group on Apache Kafka captured through ConsumerGroupDescribe
(API 69), and an answer assembled byte by byte from Kafka's message schema (a group
mid-reconciliation, a regex subscription), independently of the schema file the library
declares the message with."""

from __future__ import annotations

import struct
import uuid
from datetime import datetime

import pytest
from chispa import assert_df_equality
from kafka_broker import ConsumerGroup, KIP848Group, stable_capture

from spark_assign import assign, check_assignment
from spark_assign.kafka import SNAPSHOTS_SCHEMA, Snapshot
from spark_assign.kafka import client as kafka_client
from spark_assign.kafka.capture import KIP848_UNSUPPORTED, _consumer_described, _Group, _partitions_and_lags
from spark_assign.kafka.kip848 import consumer_group, describe_consumer_groups, messages


def test_a_kip848_group_is_captured_as_the_broker_and_its_members_see_it(spark, broker):
    """confluent-kafka consumers in a KIP-848 group (``group.protocol=consumer``): the capture
    has the broker's group epoch and assignor, and each member's id, subscription, epoch and
    assignment as the member's own callbacks report it; ConsumerGroupDescribe of a classic
    group answers GroupIdNotFound, as Kafka does."""
    broker.create_topics({"k848-a": 4, "k848-b": 3})
    with KIP848Group(broker.bootstrap, "k848", ["k848-a", "k848-b"], 3, instance_ids=["s0", None, None]) as group:
        snap = stable_capture(spark, broker.bootstrap, ["k848"], {"k848": 3})
        live = group.assignments()
        static = group.members[0].member_id()
    g = snap.groups.first()
    assert (g.group_type, g.state, g.protocol, g.captured, g.members) == ("consumer", "Stable", "uniform", True, 3)
    assert g.generation == g.assignment_epoch and g.generation >= 1
    members = {r.member_id: r for r in snap.members.collect()}
    assert {m: {(tp.topic, tp.partition) for tp in r.owned} for m, r in members.items()} == live
    assert all(sorted(r.topics) == ["k848-a", "k848-b"] and r.generation == g.generation for r in members.values())
    assert {m: r.group_instance_id for m, r in members.items()}[static] == "s0"
    assert sum(len(v) for v in live.values()) == 7 and sorted(len(v) for v in live.values()) == [2, 2, 3]
    assert {r.rack for r in members.values()} == {None}
    assert snap.problems.count() == 0

    with ConsumerGroup(broker.bootstrap, "k848-classic", ["k848-a"], 1):
        admin = kafka_client.connect(broker.bootstrap, timeout_s=5)
        try:
            got = describe_consumer_groups(admin, ["k848-classic"])
        finally:
            admin.close()
    assert got["k848-classic"].error == "GroupIdNotFoundError"


def test_a_broker_without_the_request_leaves_the_group_uncaptured_with_the_reason(broker):
    """An admin client that takes the broker for Kafka 2.8 (no API 69) gets kafka-python's
    refusal, and the capture reports the group as not captured."""
    admin = kafka_client.connect(broker.bootstrap, timeout_s=5, client_config={"api_version": (2, 8)})
    try:
        with pytest.raises(kafka_client.unsupported_request_error()):
            describe_consumer_groups(admin, ["kip-any"])
    finally:
        admin.close()
    g = _consumer_described(_Group("kip-any", "consumer"), None)
    assert (g.captured, g.reason, g.members) == (False, KIP848_UNSUPPORTED, [])


# ----------------------------------------------------------------------------- the wire format, field by field

def _uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _string(s: str | None) -> bytes:  # compact (nullable) string: length + 1, 0 for null
    if s is None:
        return _uvarint(0)
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _array(items: list[bytes]) -> bytes:  # compact array: count + 1
    return _uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = _uvarint(0)


def _assignment(parts: dict[str, list[int]]) -> bytes:
    topics = [uuid.uuid5(uuid.NAMESPACE_DNS, t).bytes + _string(t) + _array([struct.pack(">i", p) for p in ps])
              + NO_TAGS for t, ps in parts.items()]
    return _array(topics) + NO_TAGS


def _member(member_id, instance_id, rack, epoch, topics, regex, assigned, target) -> bytes:
    return (_string(member_id) + _string(instance_id) + _string(rack) + struct.pack(">i", epoch)
            + _string("client-" + member_id) + _string("/10.0.0.1") + _array([_string(t) for t in topics])
            + _string(regex) + _assignment(assigned) + _assignment(target) + NO_TAGS)


def _group(error, group_id, state, group_epoch, assignment_epoch, assignor, members) -> bytes:
    return (struct.pack(">h", error) + _string(None) + _string(group_id) + _string(state)
            + struct.pack(">ii", group_epoch, assignment_epoch) + _string(assignor) + _array(members)
            + struct.pack(">i", -2147483648) + NO_TAGS)


def _response(*groups: bytes) -> bytes:
    return struct.pack(">i", 0) + _array(list(groups)) + NO_TAGS


def test_a_populated_answer_decodes_to_members_epochs_and_target_assignments(spark, tmp_path, capsys):
    """A uniform group mid-reconciliation: m2 still holds t0-2, which the broker's target
    moves to the new member m3 (group epoch 12, target computed at 12, m3 at epoch 12 and
    the others still at 11); m3 subscribes by regex."""
    body = _response(
        _group(0, "orders", "Reconciling", 12, 12, "uniform", [
            _member("m1", "i-1", "rack-a", 11, ["t0", "t1"], None, {"t0": [0, 1], "t1": [0]}, {"t0": [0, 1], "t1": [0]}),
            _member("m2", None, None, 11, ["t0", "t1"], None, {"t0": [2], "t1": [1, 2]}, {"t1": [1, 2]}),
            _member("m3", None, "rack-b", 12, [], "t[0-9]", {}, {"t0": [2]}),
        ]),
        _group(69, "gone", "Dead", -1, -1, "", []),  # GROUP_ID_NOT_FOUND
    )
    response = messages()[1].decode(body, version=0)
    described = {g.group_id: consumer_group(g) for g in response.groups}
    assert described["gone"].error == "GroupIdNotFoundError"

    groups = [_consumer_described(_Group(g, "consumer"), described) for g in ("orders", "gone")]
    # the partitions and lags as the rest of a capture reads them for a group (topic metadata:
    # 3 partitions per topic on broker 1; log offsets 0 to 5; nothing committed)
    metadata = {t: [(p, [1]) for p in range(3)] for t in ("t0", "t1")}
    _partitions_and_lags(groups[0], metadata, {}, {}, {1: None}, {(t, p): (0, 5) for t in metadata for p in range(3)},
                         "earliest", {})
    stamp = datetime(2026, 11, 25)
    snap = Snapshot("k", stamp, spark.createDataFrame([("k", stamp, "b:9092", *g.record()) for g in groups],
                                                      SNAPSHOTS_SCHEMA))
    expected_members = spark.createDataFrame(
        [("orders", "m1", "i-1", "rack-a", ["t0", "t1"], [("t0", 0), ("t0", 1), ("t1", 0)], 11, ["uniform"]),
         # owned: the target's partitions in the broker's order, then the rest (pending revocation)
         ("orders", "m2", None, None, ["t0", "t1"], [("t1", 1), ("t1", 2), ("t0", 2)], 11, ["uniform"]),
         ("orders", "m3", None, "rack-b", ["t0"], [], 12, ["uniform"])],
        "group_id string, member_id string, group_instance_id string, rack string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int, assignors array<string>")
    assert_df_equality(snap.members.select(*expected_members.columns), expected_members,
                       ignore_row_order=True, ignore_nullable=True)
    expected_targets = spark.createDataFrame(
        [("orders", "m1", "t0", 0), ("orders", "m1", "t0", 1), ("orders", "m1", "t1", 0),
         ("orders", "m2", "t1", 1), ("orders", "m2", "t1", 2), ("orders", "m3", "t0", 2)],
        "group_id string, member_id string, topic string, partition int")
    assert_df_equality(snap.targets, expected_targets, ignore_row_order=True, ignore_nullable=True)
    assert {r.group_id: (r.captured, r.group_type, r.state, r.protocol, r.generation, r.assignment_epoch,
                         r.members_described, r.reason) for r in snap.groups.collect()} == {
        "orders": (True, "consumer", "Reconciling", "uniform", 12, 12, 3, None),
        "gone": (False, "consumer", "Dead", None, None, None, 0, "GroupIdNotFound: the group vanished during the capture")}
    assert [(p.member_id, "regex 't[0-9]'" in p.problem) for p in snap.problems.collect()] == [("m3", True)]

    # the captured members are assign()'s input as they are: the broker's uniform assignor
    # over them is valid and balanced, and m1 and m2 keep only partitions they hold
    result = assign(snap.members, snap.partitions, "uniform").transform(
        lambda a: check_assignment(a, snap.members, snap.partitions))
    got: dict[str, set] = {}
    for r in result.collect():
        got.setdefault(r.member_id, set()).add((r.topic, r.partition))
    assert sorted(len(v) for v in got.values()) == [2, 2, 2] and {t for t, _ in got["m3"]} == {"t0"}
    assert got["m1"] < {("t0", 0), ("t0", 1), ("t1", 0)} and got["m2"] < {("t0", 2), ("t1", 1), ("t1", 2)}

    # recorded, then planned by the rebalance job under the broker's protocol, from the
    # group epoch on, with the lags (5 per partition: nothing committed, earliest)
    from spark_assign import AssignmentHistory
    from spark_assign.cli import rebalance as rebalance_job

    history = str(tmp_path / "history")
    assert snap.record(history)
    assert rebalance_job.main(["--snapshot", "latest", "--history", history]) == 0
    assert "rebalanced 1 group(s)" in capsys.readouterr().out
    gens = AssignmentHistory(history, spark, backend="embedded").history().orderBy("generation").collect()
    # epoch 13 assigns the 4 partitions no other member holds; the 2 moving to m3 follow at 14,
    # once revoked (KIP-848's reconciliation)
    assert [(g.group_id, g.generation, g.strategy, g.protocol, g.members, g.partitions, g.total_lag)
            for g in gens] == [("orders", 13, "uniform", "consumer", 3, 4, 20),
                               ("orders", 14, "uniform", "consumer", 3, 6, 30)]
