"""capture() against a real Kafka-compatible broker (tansu) and real kafka-python consumers
(issue #16): what the capture reports is checked against what the consumers themselves
report (their member ids, committed offsets, the log offsets they see), and the faults a
platform team meets (an unreachable address, refused credentials, a topic deleted
mid-capture, malformed member metadata) are reported by name."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import pytest
from chispa import assert_df_equality
from kafka import TopicPartition
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.structs import OffsetAndMetadata
from kafka_broker import RACK, SASL_PASSWORD, SASL_USER, Broker, ConsumerGroup, free_port

from spark_assign import HistoryError, InvalidOptionError, assign
from spark_assign.kafka import (
    LAG_RULES,
    SNAPSHOTS_SCHEMA,
    KafkaUnreachableError,
    Snapshot,
    capture,
    load_snapshot,
)
from spark_assign.kafka import client as kafka_client
from spark_assign.kafka.capture import _described, _Group


def _lag(end, start, committed, reset):
    if committed is not None:
        return max(end - committed, 0), LAG_RULES["committed"]
    return (0 if reset == "latest" else end - start), LAG_RULES[reset]


@pytest.mark.connect
def test_capture_reports_what_the_consumers_see(spark, broker, tmp_path):
    # names of this run's own: the Connect copy runs on the same broker
    cap = f"cap-{uuid.uuid4().hex[:6]}"
    orders, pay = f"{cap}-orders", f"{cap}-pay"
    broker.create_topics({orders: 4, pay: 2})
    broker.produce({(orders, 0): 3, (orders, 1): 1, (orders, 3): 2,
                    (pay, 0): 2, (pay, 1): 1})
    commit = {(orders, 0): 1, (orders, 3): 2, (pay, 0): 2}
    history = str(tmp_path / "history")
    with ConsumerGroup(broker.bootstrap, cap, [orders, pay], 2) as group:
        for i, owned in enumerate(group.assignments()):
            mine = {tp: OffsetAndMetadata(commit[(tp.topic, tp.partition)], None, -1)
                    for tp in owned if (tp.topic, tp.partition) in commit}
            if mine:
                group.call(i, lambda c, mine=mine: c.commit(mine))
        member_ids, owned_live = group.member_ids(), group.assignments()
        snap = capture(spark, broker.bootstrap, [cap, "ghost"], history=history, capture_id="cap-1", timeout_s=5)
        early = capture(spark, broker.bootstrap, cap, auto_offset_reset="earliest", timeout_s=5)
        # what the consumers report: the log offsets and the group's committed offsets
        tps = [TopicPartition(t, p) for t, n in ((orders, 4), (pay, 2)) for p in range(n)]
        ends = group.call(0, lambda c: c.end_offsets(tps))
        starts = group.call(0, lambda c: c.beginning_offsets(tps))
        committed = {tp: group.call(0, lambda c, tp=tp: c.committed(tp)) for tp in tps}

    groups = {r.group_id: r.asDict() for r in snap.groups.collect()}
    assert {g: (r["captured"], r["state"], r["protocol_type"], r["members_described"], r["members"])
            for g, r in groups.items()} == {cap: (True, "Stable", "consumer", 2, 2), "ghost": (False, "Dead", "", 0, 0)}
    assert groups["ghost"]["reason"].startswith("Dead: no such group on the cluster")
    assert groups[cap]["capture_id"] == "cap-1" and isinstance(groups[cap]["captured_at"], datetime)
    # the members as the consumers report themselves: ids, subscriptions, assignments, generation,
    # decoded from the bytes kafka-python wrote (DescribeGroups returns them as sent)
    assert snap.problems.count() == 0
    assert groups[cap]["protocol"] == "range" and groups[cap]["generation"] is None  # first generation
    assert sorted((r.member_id, tuple(sorted(r.topics)), tuple(sorted((tp.topic, tp.partition) for tp in r.owned)),
                   r.generation, tuple(r.assignors)) for r in snap.members.collect()) == sorted(
        (m, (orders, pay), tuple(sorted((tp.topic, tp.partition) for tp in a)), None, ("range",))
        for m, a in zip(member_ids, owned_live))
    # the broker's rack (broker.rack) is every replica's
    assert sorted((r.topic, r.partition, r.racks) for r in snap.partitions.collect()) == [
        (tp.topic, tp.partition, [RACK]) for tp in tps]
    for reset, got in (("latest", snap), ("earliest", early)):
        expected = spark.createDataFrame(
            [(cap, tp.topic, tp.partition, *_lag(ends[tp], starts[tp], committed[tp], reset)) for tp in tps],
            "group_id string, topic string, partition int, lag long, lag_rule string")
        assert_df_equality(got.lags.select(*expected.columns), expected, ignore_row_order=True, ignore_nullable=True)
    assert {(r.topic, r.partition): r.lag for r in snap.lags.collect()}[(orders, 0)] == 2  # end 3 - committed 1

    # recorded once per capture id, read back whole
    assert snap.record(history) is False
    back = load_snapshot(spark, history)
    assert back.capture_id == "cap-1"
    assert_df_equality(back.lags, snap.lags, ignore_row_order=True)
    assert_df_equality(back.groups, snap.groups, ignore_row_order=True)
    with pytest.raises(HistoryError, match="found \\['cap-1'\\]"):
        load_snapshot(spark, history, "cap-2")


def test_topic_deleted_mid_capture_is_reported_and_left_out(spark, broker, monkeypatch):
    broker.create_topics({"del-a": 2, "del-b": 1})
    broker.produce({("del-a", 0): 2, ("del-b", 0): 1})
    with ConsumerGroup(broker.bootstrap, "del", ["del-a", "del-b"], 1) as group:
        group.call(0, lambda c: c.commit({TopicPartition("del-a", 0): OffsetAndMetadata(1, None, -1),
                                          TopicPartition("del-b", 0): OffsetAndMetadata(1, None, -1)}))
    real = kafka_client.log_offsets

    def delete_then_read(admin, partitions):  # the topic goes between the metadata and the offsets
        admin.delete_topics(["del-b"])
        return real(admin, partitions)

    monkeypatch.setattr(kafka_client, "log_offsets", delete_then_read)
    snap = capture(spark, broker.bootstrap, ["del"], timeout_s=5)
    assert [(p.group_id, p.topic) for p in snap.problems.collect()] == [("del", "del-b")]
    assert "deleted during the capture" in snap.problems.first().problem
    assert sorted((r.topic, r.partition, r.lag) for r in snap.lags.collect()) == [("del-a", 0, 1), ("del-a", 1, 0)]
    assert sorted(r.topic for r in snap.partitions.collect()) == ["del-a", "del-a"]


def test_unreachable_address_is_named_within_the_timeout(spark):
    address = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match=f"{address} within 2 s"):
        capture(spark, address, ["g"], timeout_s=2)
    assert time.monotonic() - began < 15


def test_refused_credentials_name_the_address_and_mechanism(spark, broker):
    """The broker's SASL/PLAIN listener: the right password captures, a wrong one is named."""
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": SASL_USER}
    with pytest.raises(KafkaUnreachableError, match=f"{broker.sasl_bootstrap}.*sasl_mechanism=PLAIN"):
        capture(spark, broker.sasl_bootstrap, ["g"], timeout_s=3, sasl_plain_password="wrong", **sasl)
    snap = capture(spark, broker.sasl_bootstrap, ["sasl-none"], timeout_s=5, sasl_plain_password=SASL_PASSWORD,
                   **sasl)
    assert snap.groups.select("group_id", "captured").collect() == [("sasl-none", False)]


def test_options_are_checked_before_connecting(spark):
    with pytest.raises(InvalidOptionError, match="bogus_setting"):
        capture(spark, "127.0.0.1:1", ["g"], bogus_setting=1)
    with pytest.raises(InvalidOptionError, match="auto_offset_reset='none'"):
        capture(spark, "127.0.0.1:1", ["g"], auto_offset_reset="none")


def _subscription(version, topics, owned=(), generation=-1, rack=None):
    s = ConsumerProtocolSubscription
    return s(version=version, topics=topics, user_data=None, generation_id=generation, rack_id=rack,
             owned_partitions=[s.TopicPartition(topic=t, partitions=p) for t, p in owned]).encode()


def _assignment(partitions):
    a = ConsumerProtocolAssignment
    return a(version=3, user_data=None,
             assigned_partitions=[a.TopicPartition(topic=t, partitions=p) for t, p in partitions]).encode()


def test_member_metadata_from_a_java_style_group_decodes_to_assign_inputs(spark):
    """DescribeGroups bytes as a Java or kafka-python consumer sends them (tansu returns
    none): owned partitions from the assignment at the group's generation, from the
    subscription where there is no assignment yet; malformed metadata reported per member."""
    member = kafka_client.DescribedMember
    described = kafka_client.DescribedGroup("orders", None, "Stable", "consumer", "range", (
        member("c1", "i1", "", "", _subscription(3, ["t"], [("t", [0])], 4, "r1"), _assignment([("t", [0, 1])])),
        member("c2", None, "", "", _subscription(1, ["t"], [("t", [2])]), b""),
        member("c3", None, "", "", b"\x00\x03\x00\x00\x00\x05", b""),
    ))
    g = _described(_Group("orders", "classic"), described)
    rows = spark.createDataFrame([("x", datetime(2026, 11, 25), "b:9092", *g.record())], SNAPSHOTS_SCHEMA)
    snap = Snapshot("x", datetime(2026, 11, 25), rows)
    expected = spark.createDataFrame(
        [("orders", "c1", "i1", "r1", ["t"], [("t", 0), ("t", 1)], 5, ["range"]),
         ("orders", "c2", None, None, ["t"], [("t", 2)], None, ["range"])],
        "group_id string, member_id string, group_instance_id string, rack string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int, assignors array<string>")
    assert_df_equality(snap.members.select(*expected.columns), expected, ignore_row_order=True, ignore_nullable=True)
    assert [(p.member_id, "topics count 5" in p.problem) for p in snap.problems.collect()] == [("c3", True)]
    assert snap.groups.select("generation", "members_described", "members").first() == (5, 3, 2)
    # the captured members are assign()'s input as they are
    parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    got = sorted((r.member_id, r.partition) for r in assign(snap.members, parts, "range").collect())
    assert got == [("c1", 0), ("c1", 1), ("c2", 2), ("c2", 3)]


@pytest.mark.parametrize("group_type, state, protocol_type, error, reason", [
    ("classic", "Dead", "", None, "Dead: the group vanished"),
    ("classic", "Stable", "connect", None, "protocol type 'connect': not a consumer group"),
    ("classic", "", "", "GroupAuthorizationFailedError", "DescribeGroups answered GroupAuthorizationFailedError"),
])
def test_groups_not_captured_say_why(group_type, state, protocol_type, error, reason):
    described = kafka_client.DescribedGroup("g", error, state, protocol_type, "", ())
    g = _described(_Group("g", group_type), described)
    assert not g.captured and g.reason.startswith(reason) and g.members == []


def test_broker_gone_mid_capture_names_the_step_and_records_nothing(spark, monkeypatch, tmp_path):
    from spark_assign.kafka import KafkaCaptureError
    from spark_assign.kafka.snapshots import snapshot_store

    doomed = Broker()
    try:
        doomed.create_topics({"gone-t": 2})
        admin = doomed.admin()
        admin.alter_group_offsets("g", {TopicPartition("gone-t", 0): OffsetAndMetadata(0, None, -1)})
        admin.close()
        real = kafka_client.describe_topics

        def stop_then_read(admin, topics):  # the broker dies between the groups and the metadata
            doomed.stop()
            return real(admin, topics)

        monkeypatch.setattr(kafka_client, "describe_topics", stop_then_read)
        with pytest.raises(KafkaCaptureError, match=f"capture from {doomed.bootstrap} failed reading the topics' "
                                                    "metadata: .*nothing of it was recorded"):
            capture(spark, doomed.bootstrap, ["g"], history=str(tmp_path / "h"), timeout_s=2)
        assert not snapshot_store(spark, str(tmp_path / "h")).exists()
    finally:
        if doomed.process.poll() is None:
            doomed.stop()


def test_group_deleted_mid_capture_is_reported_and_nothing_half_recorded(spark, broker, monkeypatch, tmp_path):
    """The group is deleted between DescribeGroups and the committed offsets: the capture goes
    on, says so for that group, and records one whole snapshot."""
    from spark_assign.kafka.snapshots import snapshot_store

    broker.create_topics({"gdel-t": 2})
    broker.produce({("gdel-t", 0): 3})
    admin = broker.admin()
    for g in ("gdel", "gkeep"):
        admin.alter_group_offsets(g, {TopicPartition("gdel-t", 0): OffsetAndMetadata(1, None, -1)})
    real = kafka_client.committed_offsets

    def delete_then_read(admin_client, group_ids):
        admin.delete_groups(["gdel"])
        return real(admin_client, group_ids)

    monkeypatch.setattr(kafka_client, "committed_offsets", delete_then_read)
    history = str(tmp_path / "h")
    snap = capture(spark, broker.bootstrap, ["gdel", "gkeep"], history=history, timeout_s=5)
    admin.close()
    lags = {(r.group_id, r.partition): r.lag for r in snap.lags.collect()}
    assert lags[("gkeep", 0)] == 2
    problems = [(p.group_id, p.problem) for p in snap.problems.collect()]
    assert [g for g, _ in problems] == ["gdel"] and "committed offsets not read" in problems[0][1], problems
    assert not [k for k in lags if k[0] == "gdel"]
    assert snapshot_store(spark, history).read().count() == 2


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_a_librdkafka_classic_group_is_captured_and_assign_reproduces_it(spark, broker, strategy):
    """confluent-kafka (librdkafka) consumers in a classic group encode the consumer protocol's
    bytes with other code than kafka-python: the capture decodes their subscriptions, racks and
    assignments, and spark-assign's assignor of the same name gives the live assignment exactly."""
    from kafka_broker import LibrdkafkaClassicGroup, wait_until

    group_id = f"rdk-{strategy}"
    topics = {f"{group_id}-a": 5, f"{group_id}-b": 3}
    broker.create_topics(topics)
    racks = ["rack-a", "rack-b", "rack-a"]
    with LibrdkafkaClassicGroup(broker.bootstrap, group_id, sorted(topics), 3, strategy=strategy,
                                racks=racks) as group:
        wait_until(lambda: sum(len(v) for v in group.assignments().values()) == 8
                   and all(group.assignments().values()), 60, f"group {group_id} assigning every partition")
        time.sleep(1)  # a second generation would show as a changed member id set below
        live = group.assignments()
        rack_of = {m.member_id(): racks[i] for i, m in enumerate(group.members)}
        snap = capture(spark, broker.bootstrap, [group_id], timeout_s=5)
    g = snap.groups.first()
    assert (g.captured, g.state, g.protocol, g.members) == (True, "Stable", strategy, 3)
    assert snap.problems.count() == 0
    members = {r.member_id: r for r in snap.members.collect()}
    assert {m: {(tp.topic, tp.partition) for tp in r.owned} for m, r in members.items()} == live
    assert {m: r.rack for m, r in members.items()} == rack_of
    assert all(sorted(r.topics) == sorted(topics) for r in members.values())
    ours = {}
    for r in assign(snap.members, snap.partitions, strategy).collect():
        ours.setdefault(r.member_id, set()).add((r.topic, r.partition))
    assert ours == live


def _raw_member(bootstrap: str, group_id: str, metadata: bytes) -> str:
    """A member that joins ``group_id`` with subscription ``metadata`` bytes of the test's own
    (a raw JoinGroup, then SyncGroup as its leader): no client encodes them."""
    from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

    admin = kafka_client.connect(bootstrap, timeout_s=5)
    try:
        def join(member_id):
            return lambda groups: JoinGroupRequest(
                group_id=groups[0], session_timeout_ms=30000, rebalance_timeout_ms=10000, member_id=member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)])

        first = kafka_client.per_coordinator(admin, [group_id], join(""))[0]  # MEMBER_ID_REQUIRED
        joined = kafka_client.per_coordinator(admin, [group_id], join(first.member_id))[0]
        assert joined.error_code == 0, joined
        synced = kafka_client.per_coordinator(admin, [group_id], lambda groups: SyncGroupRequest(
            group_id=groups[0], generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=[]))[0]
        assert synced.error_code == 0, synced
        return joined.member_id
    finally:
        admin.close()


def test_undecodable_member_metadata_from_the_broker_is_reported_per_member(spark, broker):
    """A member whose JoinGroup metadata does not follow the consumer protocol: the broker
    returns the bytes as sent, the capture names the member and the byte offset, and the other
    groups of the same capture are captured whole."""
    broker.create_topics({"raw-t": 2})
    raw = _raw_member(broker.bootstrap, "rawjoin", b"\x00\x03\x00\x00\x00\x05")  # 5 topics, then nothing
    with ConsumerGroup(broker.bootstrap, "rawjoin-ok", ["raw-t"], 1):
        snap = capture(spark, broker.bootstrap, ["rawjoin", "rawjoin-ok"], timeout_s=5)
    groups = {r.group_id: (r.captured, r.state, r.members_described, r.members) for r in snap.groups.collect()}
    assert groups == {"rawjoin": (True, "Stable", 1, 0), "rawjoin-ok": (True, "Stable", 1, 1)}
    problems = [(p.group_id, p.member_id, p.problem) for p in snap.problems.collect()]
    assert [(g, m) for g, m, _ in problems] == [("rawjoin", raw)], problems
    assert "topics count 5" in problems[0][2] and "left out of members" in problems[0][2]
