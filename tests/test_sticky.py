"""``sticky`` on the uniform-subscription path: Kafka's scenarios as YAML tables,
rack awareness, and randomized runs over hundreds of groups in one job against a
plain-Python oracle of Kafka's constrained algorithm (tests only)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from casetable import (
    assert_assignment_equal,
    expected,
    inputs,
    load_cases,
    run_cases,
)
from chispa import assert_df_equality
from pyspark.sql import functions as F

from spark_assign import assign, check_assignment
from spark_assign.inputs import normalize_members, normalize_partitions
from spark_assign.ordering import java_string_hash
from spark_assign.properties import balance_violations, validity_violations
from spark_assign.strategies.sticky import split_uniform
from spark_assign.strategies.sticky_uniform import _route, assign_uniform, group_topic_sizes

MEMBER_SCHEMA = (
    "group_id string, member_id string, topics array<string>, "
    "owned array<struct<topic:string,partition:int>>, generation int"
)


# ---------------------------------------------------------------------------------------
# plain-Python oracle: Kafka's ConstrainedAssignmentBuilder (no racks), members visited in
# member-id order, owned claims resolved by the KAFKA-14639 per-partition rule
# ---------------------------------------------------------------------------------------
def oracle_owned(members, parts):
    """members: {member: (topics, owned list, generation)} -> {member: [valid owned]}"""
    claims = defaultdict(list)
    for m, (topics, owned, gen) in members.items():
        for tp in dict.fromkeys(owned or []):
            if tp[0] in topics and tp in parts:
                claims[tp].append((-1 if gen is None else gen, m))
    result = {m: [] for m in members}
    for tp, cs in claims.items():
        top = max(g for g, _ in cs)
        holders = [m for g, m in cs if g == top]
        if len(holders) == 1:
            result[holders[0]].append(tp)
    return result


def oracle_constrained(members, parts):
    """Kafka's constrained sticky assignment of one group -> {member: set of (topic, partition)}."""
    owned = oracle_owned(members, parts)
    n, p = len(members), len(parts)
    min_q, max_q, expected_max = p // n, -(-p // n), p % n
    current_max = 0
    assignment = {m: [] for m in members}
    under, exactly_min = [], []
    for m in sorted(members):
        own = sorted(owned[m], key=lambda tp: (tp[1], tp[0]))
        if len(own) < min_q:
            assignment[m] += own
            under.append(m)
        elif len(own) >= max_q and current_max < expected_max:
            current_max += 1
            if current_max == expected_max:
                exactly_min.clear()
            assignment[m] += own[:max_q]
        else:
            assignment[m] += own[:min_q]
            if current_max < expected_max:
                exactly_min.append(m)
    taken = {tp for a in assignment.values() for tp in a}
    unassigned = [tp for tp in sorted(parts) if tp not in taken]
    under.sort()
    exactly_min.sort()
    i = 0
    for tp in unassigned:
        if under:
            i %= len(under)
            m = under[i]
        else:
            m = exactly_min.pop(0)
        assignment[m].append(tp)
        if m in under and len(assignment[m]) == min_q:
            under.pop(i)
            exactly_min.append(m)
        elif m in under:
            i += 1
    return {m: set(a) for m, a in assignment.items()}


def random_groups(seed: int, count: int):
    """Small uniform groups with owned partitions from a previous generation, joins and
    leaves, stale generations and double claims. Returns (member rows, partition rows,
    {group: (members, parts)})."""
    rnd = random.Random(seed)
    member_rows, part_rows, groups = [], [], {}
    for g in range(count):
        gid = f"g{g:04d}"
        topics = [f"{gid}.t{j}" for j in range(rnd.randint(1, 3))]
        parts = {(t, p) for t in topics for p in range(rnd.randint(0, 7))}
        part_rows += [(t, p) for t, p in sorted(parts)]
        n = rnd.randint(1, 7)
        names = [f"m{rnd.randint(0, 99):02d}" for _ in range(n)]
        names = list(dict.fromkeys(names))
        members = {}
        shuffled = sorted(parts)
        rnd.shuffle(shuffled)
        for i, name in enumerate(names):
            mine = [tp for k, tp in enumerate(shuffled) if k % (len(names) + 1) == i]
            if rnd.random() < 0.15 and shuffled:  # a double or stale claim
                mine.append(rnd.choice(shuffled))
            if rnd.random() < 0.1:  # a claim on a topic that no longer exists
                mine.append((f"{gid}.gone", 0))
            gen = rnd.choice([None, 3, 4, 4, 4]) if mine else rnd.choice([None, 4])
            owned = None if rnd.random() < 0.2 else mine
            members[name] = (topics, owned or [], gen)
            member_rows.append((gid, name, topics, owned, gen))
        groups[gid] = (members, parts)
    return member_rows, part_rows, groups


# ---------------------------------------------------------------------------------------
@pytest.mark.connect
def test_kafka_uniform_cases(spark):
    """Kafka's exact lists for the uniform scenarios, and spark-assign's own cases of
    claims a member cannot use (one Spark job, one group per case)."""
    cases = load_cases("sticky/kafka_uniform.yaml", "sticky/kafka_hash_order.yaml", "sticky/unused_claims.yaml")
    members, partitions = inputs(spark, cases)
    actual = run_cases(spark, cases).cache()
    assert_assignment_equal(actual, expected(spark, cases))
    check_assignment(actual, members, partitions, balance="count")


def test_rack_aware_uniform(spark):
    """KIP-881 scenarios: exact where Kafka's layout is forced, rack mismatches as Kafka asserts."""
    cases = load_cases("sticky/kafka_rack_uniform.yaml")
    members, partitions = inputs(spark, cases)
    actual = run_cases(spark, cases).cache()
    check_assignment(actual, members, partitions, balance="count")
    with_expected = [c for c in cases if c.expected]
    exact = actual.join(
        spark.createDataFrame([(c.group_id,) for c in with_expected], "group_id string"), "group_id", "left_semi"
    )
    assert_assignment_equal(exact, expected(spark, with_expected))
    racks = partitions.select("topic", "partition", "racks")
    mism = (
        actual.join(members.select("group_id", "member_id", "rack"), ["group_id", "member_id"])
        .join(racks, ["topic", "partition"])
        .where(F.col("rack").isNotNull() & ~F.coalesce(F.array_contains("racks", F.col("rack")), F.lit(False)))
        .groupBy("group_id").count()
    )
    got = {r["group_id"]: r["count"] for r in mism.collect()}
    for c in cases:
        if "rack_mismatches" in c.raw:
            assert got.get(c.group_id, 0) == c.raw["rack_mismatches"], c.name


def test_member_id_order_default(spark):
    """Default member order: the first owners in member-id order keep C_c (Kafka: HashMap order)."""
    cases = load_cases("sticky/kafka_hash_order.yaml")
    members, partitions = inputs(spark, cases)
    a = assign(members, partitions, "sticky")  # member_order defaults to member-id order
    loads = {r["member_id"]: r["count"] for r in a.groupBy("member_id").count().collect()}
    assert loads == {"consumer1": 2, "consumer2": 1, "consumer3": 1}


def test_random_groups_match_oracle(spark):
    """300 random uniform groups in one call: exactly the oracle's assignment, valid,
    balanced, and as sticky as Kafka's quota rule allows."""
    member_rows, part_rows, groups = random_groups(seed=7, count=300)
    members = spark.createDataFrame(member_rows, MEMBER_SCHEMA)
    partitions = spark.createDataFrame(part_rows, "topic string, partition int")
    actual = assign(members, partitions, "sticky").cache()
    rows = actual.collect()
    got = defaultdict(set)
    for r in rows:
        got[(r["group_id"], r["member_id"])].add((r["topic"], r["partition"]))
    mismatches = []
    kept_total = quota_total = 0
    for gid, (gm, parts) in groups.items():
        want = oracle_constrained(gm, parts)
        owned = oracle_owned(gm, parts)
        n, p = len(gm), len(parts)
        for m, tps in want.items():
            if got.get((gid, m), set()) != tps:
                mismatches.append((gid, m, sorted(tps), sorted(got.get((gid, m), set()))))
            kept_total += len(got.get((gid, m), set()) & set(owned[m]))
        # Kafka's quota rule: each member keeps min(owned, C_f) (C_c for up to C_r members)
        c_f, c_c, c_r = p // n, -(-p // n), p % n
        at_max = 0
        for m in sorted(gm):
            k = len(owned[m])
            if k >= c_c and at_max < c_r:
                at_max += 1
                quota_total += c_c
            else:
                quota_total += min(k, c_f)
    assert not mismatches, mismatches[:5]
    assert kept_total == quota_total
    problems = validity_violations(actual, members, partitions).unionByName(
        balance_violations(actual, members, partitions, "count")
    )
    assert problems.count() == 0


def _assert_routes_agree(members, partitions):
    """The uniform path's block route (clean groups) and its per-partition route give
    the same assignment, eager and cooperative."""
    m, p = normalize_members(members), normalize_partitions(partitions)
    for cooperative in (False, True):
        routed = assign_uniform(m, p, cooperative=cooperative, racks=False)
        per_partition = assign_uniform(m, p, cooperative=cooperative, racks=False, per_partition=True)
        assert_df_equality(routed, per_partition, ignore_row_order=True, ignore_nullable=True)


def test_claim_routes(spark):
    """Which groups the uniform path reads by blocks (clean claims) and which it
    resolves partition by partition; both routes give the same assignment, and the
    exact lists hold."""
    cases = load_cases("sticky/claim_routes.yaml")
    members, partitions = inputs(spark, cases)
    m, p = normalize_members(members), normalize_partitions(partitions)
    _, dirty = _route(m, group_topic_sizes(m, p))
    not_clean = {r["group_id"] for r in dirty.collect()}
    assert {c.group_id: "per_partition" if c.group_id in not_clean else "clean" for c in cases} == {
        c.group_id: c.raw["route"] for c in cases}
    _assert_routes_agree(members, partitions)
    with_expected = [c for c in cases if c.expected]
    actual = run_cases(spark, with_expected).cache()
    assert_assignment_equal(actual, expected(spark, with_expected))
    check_assignment(run_cases(spark, cases), members, partitions, balance="count")


def test_random_groups_routes_agree(spark):
    """200 random uniform groups, clean and not (double, stale and deleted claims):
    the block route and the per-partition route agree, eager and cooperative."""
    member_rows, part_rows, _ = random_groups(seed=11, count=200)
    members = spark.createDataFrame(member_rows, MEMBER_SCHEMA)
    partitions = spark.createDataFrame(part_rows, "topic string, partition int")
    m, p = normalize_members(members), normalize_partitions(partitions)
    _, dirty = _route(m, group_topic_sizes(m, p))
    assert 20 <= dirty.count() <= 180
    _assert_routes_agree(members, partitions)


def test_split_uniform(spark):
    """Subscriptions compare as sent: order and duplicates do not matter, a topic
    missing from the metadata does."""
    rows = [
        ("same", "a", ["t1", "t2"], None, None), ("same", "b", ["t2", "t1", "t1"], None, None),
        ("gone", "a", ["t1"], None, None), ("gone", "b", ["t1", "missing"], None, None),
        ("diff", "a", ["t1"], None, None), ("diff", "b", ["t2"], None, None),
    ]
    from spark_assign.inputs import normalize_members

    members = normalize_members(spark.createDataFrame(rows, MEMBER_SCHEMA))
    uniform, general = split_uniform(members)
    assert sorted({r[0] for r in uniform.select("group_id").collect()}) == ["same"]
    assert sorted({r[0] for r in general.select("group_id").collect()}) == ["diff", "gone"]


def _java_hash(s: str) -> int:
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h


def test_java_string_hash(spark):
    words = ["", "consumer1", "consumer-2-abcdef", "ümlaut", "\U0001F600x", "a" * 40]
    df = spark.createDataFrame([(w,) for w in words], "w string")
    got = {r["w"]: r["h"] for r in df.select("w", java_string_hash("w").alias("h")).collect()}
    assert got == {w: _java_hash(w) for w in words}
