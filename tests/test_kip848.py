"""KIP-848's server-side assignors, held against Kafka's own (tests/cases/kip848/,
written by tests/tools/kip848_oracle.py from apache/kafka's group-coordinator).

* ``range`` with ``group_protocol="consumer"``: equal to Kafka's server RangeAssignor
  on every case;
* ``uniform``: valid, balanced by Kafka's rule (homogeneous groups: partition counts
  differ by at most one; heterogeneous: no partition could move to a subscriber
  holding two or more fewer) and keeping at least as many current partitions as
  Kafka's UniformAssignor, on every group.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from casetable import SEP, assert_assignment_equal, expected, inputs, load_cases, parse_tp, run_cases
from pyspark.sql import functions as F

from spark_assign import InvalidOptionError, assign, properties


@pytest.mark.connect
def test_server_range_equals_kafka(spark):
    """Every case in one call; the rack case's racks are ignored (the client range
    with racks places it differently)."""
    cases = load_cases("kip848/range.yaml")
    got = run_cases(spark, cases).cache()
    assert_assignment_equal(got, expected(spark, cases))
    # Kafka's broker class name means the same assignor (on the hand-written cases)
    members, partitions = inputs(spark, cases[:6])
    alias = assign(members, partitions, "org.apache.kafka.coordinator.group.assignor.RangeAssignor")
    assert_assignment_equal(alias, got.join(members.select("group_id").distinct(), "group_id", "left_semi"))
    racks = [c for c in cases if c.name == "server_range_racks_ignored"]
    rm, rp = inputs(spark, racks)
    client = {(r.member_id, r.partition) for r in assign(rm, rp, "range").collect()}
    server = {(r.member_id, r.partition) for r in got.where(F.col("group_id") == racks[0].group_id).collect()}
    assert client != server  # the client range matches racks (KIP-881), the server range does not


@pytest.mark.connect
def test_uniform_against_kafka(spark):
    """All cases in one call: valid, balanced, at least as sticky as Kafka per group."""
    cases = load_cases("kip848/uniform.yaml")
    members, partitions = inputs(spark, cases)
    got = assign(members, partitions, "uniform").cache()
    homogeneous = [c.group_id for c in cases if len({tuple(sorted(m["topics"])) for m in c.members}) == 1]
    hom = spark.createDataFrame([(g,) for g in homogeneous], "group_id string")
    problems = properties.validity_violations(got, members, partitions).unionByName(
        properties.balance_violations(got.join(hom, "group_id", "left_semi"), members.join(hom, "group_id", "left_semi"),
                                      partitions, "count")).unionByName(
        properties.balance_violations(got.join(hom, "group_id", "left_anti"), members.join(hom, "group_id", "left_anti"),
                                      partitions, "kafka"))
    assert [tuple(r) for r in problems.limit(20).collect()] == []

    held = defaultdict(set)
    for r in got.collect():
        held[r.group_id].add((r.member_id, r.topic.split(SEP, 1)[1], r.partition))
    worse, total_ours, total_kafka = {}, 0, 0
    for c in cases:
        current = {(m["member_id"], *parse_tp(tp)) for m in c.members for tp in m.get("owned") or []}
        kafka = {(mid, *parse_tp(tp)) for mid, tps in c.raw["kafka"].items() for tp in tps}
        ours_kept, kafka_kept = len(held[c.group_id] & current), len(kafka & current)
        total_ours, total_kafka = total_ours + ours_kept, total_kafka + kafka_kept
        if ours_kept < kafka_kept:
            worse[c.name] = (ours_kept, kafka_kept)
    assert worse == {}, worse
    assert total_ours >= total_kafka > 0
    # Kafka's broker class name means the same assignor (on the hand-written cases)
    hm, hp = inputs(spark, cases[:7])
    alias = assign(hm, hp, "org.apache.kafka.coordinator.group.assignor.UniformAssignor")
    assert_assignment_equal(alias, got.join(hm.select("group_id").distinct(), "group_id", "left_semi"))


@pytest.mark.parametrize("strategy, options, fragment", [
    ("sticky", {"group_protocol": "consumer"}, "does not run under group_protocol='consumer'"),
    ("uniform", {"group_protocol": "classic"}, "does not run under group_protocol='classic'"),
    ("range", {"group_protocol": "kip848"}, "option group_protocol of strategy 'range'"),
    ("uniform", {"rack_aware": True}, "unknown option(s) ['rack_aware'] of strategy 'uniform'"),
    ("range", {"group_protocol": "consumer", "rack_aware": "auto"}, "of strategy 'range' under group_protocol"),
    ("org.apache.kafka.coordinator.group.assignor.RangeAssignor", {"group_protocol": "classic"},
     "does not run under group_protocol='classic'"),
])
def test_group_protocol_option(spark, strategy, options, fragment):
    members = spark.createDataFrame([("g", "a", ["t"])], "group_id string, member_id string, topics array<string>")
    parts = spark.createDataFrame([("t", 0)], "topic string, partition int")
    with pytest.raises(InvalidOptionError) as err:
        assign(members, parts, strategy, **options)
    assert fragment in str(err.value)


def test_topic_missing_from_the_metadata(spark):
    """The broker resolves subscriptions against its metadata: a topic it does not
    have is no part of the assignment (both assignors), never an error or a partial one."""
    members = spark.createDataFrame([("g", "a", ["t", "gone"]), ("g", "b", ["t"])],
                                    "group_id string, member_id string, topics array<string>")
    parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    uniform = sorted((r.member_id, r.partition) for r in assign(members, parts, "uniform").collect())
    assert [m for m, _ in uniform].count("a") == 2 and sorted(p for _, p in uniform) == [0, 1, 2, 3]
    server_range = sorted((r.member_id, r.partition) for r in
                          assign(members, parts, "range", group_protocol="consumer").collect())
    assert server_range == [("a", 0), ("a", 1), ("b", 2), ("b", 3)]


#: a consumer group's member a owns all 4 partitions of t and b nothing: uniform's target gives
#: each 2. What a revokes at the epoch, by the protocol its client speaks (``member_type``) and
#: its own list (ConsumerCoordinator: the protocol every assignor it lists supports)
CLASSIC_MEMBERS = [
    # member_type, a's assignors, a's revoked partitions in round 1
    (None, None, 2),  # no column: every member on the consumer protocol revokes what the target takes
    ("consumer", ["range", "cooperative-sticky"], 2),  # a consumer member's list plays no part
    ("classic", ["range", "cooperative-sticky"], 4),  # EAGER: everything, at its rejoin
    ("classic", ["cooperative-sticky"], 2),  # COOPERATIVE: what the target takes
]


@pytest.mark.parametrize("member_type, assignors, revoked", CLASSIC_MEMBERS)
def test_a_classic_member_of_a_consumer_group_revokes_as_its_list_has_it(spark, member_type, assignors, revoked):
    from spark_assign import rebalance

    schema = ("group_id string, member_id string, topics array<string>, assignors array<string>, "
              "owned array<struct<topic:string,partition:int>>, generation int, member_type string")
    members = spark.createDataFrame([("g", "a", ["t"], assignors, [("t", p) for p in range(4)], 3, member_type),
                                     ("g", "b", ["t"], None, None, None, None)], schema)
    if member_type is None:
        members = members.drop("member_type")
    parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    r = rebalance(members, parts, group_protocol="consumer", check=True)
    rounds = {(x.round, x.member_id): x.n for x in r.revocations.groupBy("round", "member_id").agg(
        F.count("*").alias("n")).collect()}
    assert rounds == {(1, "a"): revoked}
    final = {x.member_id: x.n for x in r.final.groupBy("member_id").agg(F.count("*").alias("n")).collect()}
    assert final == {"a": 2, "b": 2}
