"""``cooperative-sticky``: rounds that never hand out a partition another member
still holds, and converge within two follow-up rebalances."""

from __future__ import annotations

import pytest
from casetable import assert_assignment_equal, expected, inputs, load_cases, run_cases
from test_sticky import MEMBER_SCHEMA, oracle_constrained, random_groups

from spark_assign import assign, check_assignment
from spark_assign.properties import balance_violations, cooperative_violations, revocations, validity_violations
from spark_assign.strategies.cooperative_sticky import next_round_members


@pytest.mark.connect
def test_kafka_cooperative_cases(spark):
    """This round as Kafka's tests state it (and spark-assign's own cases: unused
    claims, the holder rule of issue #15), then the follow-up round."""
    cases = load_cases("cooperative/kafka_uniform.yaml", "cooperative/unused_claims.yaml", "cooperative/holders.yaml")
    members, partitions = inputs(spark, cases)
    round1 = run_cases(spark, cases).cache()
    assert_assignment_equal(round1, expected(spark, cases))
    check_assignment(round1, members, partitions, cooperative=True)

    nxt = [c for c in cases if c.raw.get("expected_next")]
    for c in nxt:
        c.expected = c.raw["expected_next"]
    members2 = next_round_members(members, round1)
    round2 = assign(members2, partitions, "cooperative-sticky").cache()
    keep = spark.createDataFrame([(c.group_id,) for c in nxt], "group_id string")
    assert_assignment_equal(round2.join(keep, "group_id", "left_semi"), expected(spark, nxt))
    check_assignment(round2, members2, partitions, cooperative=True)


def test_revocations_of_a_round(spark):
    """What each holder gives up this round: its owned partitions minus its assignment."""
    cases = [c for c in load_cases("cooperative/kafka_uniform.yaml") if c.name == "coop_transfer_list_rack"]
    members, partitions = inputs(spark, cases)
    a = run_cases(spark, cases)
    got = sorted((r["member_id"], r["topic"].split("/")[-1], r["partition"])
                 for r in revocations(members, a, partitions).collect())
    # Kafka moves topic1-1 (rack a owner, replica on b) and topic1-2 (the reverse)
    assert got == [("c0", "topic1", 1), ("c1", "topic1", 2)]


def test_next_round_members(spark):
    rows = [("g", "a", ["t"], [("t", 0), ("t", 1)], 3), ("g", "b", ["t"], None, None),
            ("h", "c", ["t"], None, None)]
    members = spark.createDataFrame(rows, MEMBER_SCHEMA)
    a = spark.createDataFrame([("g", "a", "t", 1), ("g", "b", "t", 0), ("h", "c", "t", 2)],
                              "group_id string, member_id string, topic string, partition int")
    got = {(r["group_id"], r["member_id"]): ([(o["topic"], o["partition"]) for o in r["owned"]], r["generation"])
           for r in next_round_members(members, a).collect()}
    assert got == {("g", "a"): ([("t", 1)], 4), ("g", "b"): ([("t", 0)], 4), ("h", "c"): ([("t", 2)], 0)}


def test_random_groups_converge(spark):
    """200 random groups, every round one call over all groups: no round hands out a
    held partition; two follow-ups reach the complete, balanced assignment, which is
    the eager sticky assignment of the follow-up's input (the oracle's on round 1)."""
    member_rows, part_rows, groups = random_groups(seed=11, count=200)
    members = spark.createDataFrame(member_rows, MEMBER_SCHEMA)
    partitions = spark.createDataFrame(part_rows, "topic string, partition int")

    round1 = assign(members, partitions, "cooperative-sticky").localCheckpoint()
    assert cooperative_violations(round1, members, partitions).count() == 0
    # round 1 is the oracle's sticky assignment minus partitions held by someone else
    want = []
    for gid, (gm, parts) in groups.items():
        full = oracle_constrained(gm, parts)
        holders = {}
        for m, (topics, own, gen) in gm.items():
            for tp in set(own):
                if tp in parts:
                    holders.setdefault(tp, set()).add(m)
        # a partition is held by the members with a claim at its highest generation
        for tp in list(holders):
            gens = {m: (-1 if gm[m][2] is None else gm[m][2]) for m in holders[tp]}
            top = max(gens.values())
            holders[tp] = {m for m, g in gens.items() if g == top}
        for m, tps in full.items():
            for tp in tps:
                # it goes now to one of its holders, or to anyone when nobody holds it
                if tp not in holders or m in holders[tp]:
                    want.append((gid, m, tp[0], tp[1]))
    assert sorted(tuple(r) for r in round1.collect()) == sorted(want)

    current_members, current = members, round1
    for follow_up in (1, 2):
        current_members = next_round_members(current_members, current).localCheckpoint()
        current = assign(current_members, partitions, "cooperative-sticky").localCheckpoint()
        assert cooperative_violations(current, current_members, partitions).count() == 0
    problems = validity_violations(current, members, partitions).unionByName(
        balance_violations(current, members, partitions, "count"))
    assert problems.count() == 0


def test_cooperative_check_follows_the_holder_rule(spark):
    """check_assignment's cooperative check reads the same holder rule: the eager
    sticky assignment of the holder cases hands t-0 and t-1 to b while a, which dropped
    topic t, still lists them (violations naming a), hands u-1 from its holder b to a,
    and gives the contested partitions to one of their claimants (no violation)."""
    cases = load_cases("cooperative/holders.yaml")
    members, partitions = inputs(spark, cases)
    eager = assign(members, partitions, "sticky")
    got = sorted((r.group_id, r.member_id, r.topic.split("/")[-1], r.partition, r.detail)
                 for r in cooperative_violations(eager, members, partitions).collect())
    assert got == [
        ("coop_contested_to_other_waits", "m1", "t", 0, "held by m2,m3"),
        ("coop_dropped_topic_still_held", "b", "t", 0, "held by a"),
        ("coop_dropped_topic_still_held", "b", "t", 1, "held by a"),
        ("coop_lower_generation_claimant_waits", "a", "u", 1, "held by b"),
        ("coop_lower_generation_claimant_waits", "b", "t", 0, "held by a"),
    ]
