"""The sticky assignor's general path (members subscribe to different topics).

All cases (Kafka's scenarios as YAML under tests/cases/sticky_general/, plus a
few hundred random groups) run through ONE ``assign_general`` call per option
set; every result is checked for validity and Kafka's balance rule, and for
keeping at least as many owned partitions as kafka-python's
StickyPartitionAssignor (a port of Kafka's GeneralAssignmentBuilder) keeps on
the same input.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from casetable import SEP, assert_assignment_equal, expected, inputs, load_cases, parse_tp
from pyspark.sql import functions as F

from spark_assign import assign, properties
from spark_assign.errors import AssignmentPropertyError
from spark_assign.inputs import normalize_members, normalize_partitions
from spark_assign.owned import resolve_owned
from spark_assign.strategies.sticky_general import assign_general, target_counts

RANDOM_GROUPS = 240
#: random groups whose claims conflict across generations (issue #15)
CONFLICT_GROUPS = 160
MEMBER_SCHEMA = (
    "group_id string, member_id string, group_instance_id string, rack string, topics array<string>, "
    "owned array<struct<topic:string,partition:int>>, generation int, assignors array<string>"
)


# ----------------------------------------------------------------------------- the oracle


def kafka_sticky(members: list[tuple], sizes: dict[str, int]) -> dict[str, set]:
    """kafka-python's StickyPartitionAssignor on one group.

    ``members``: (member_id, topics, owned [(topic, partition)], generation).
    Returns member -> {(topic, partition)}.
    """
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserData, StickyPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
    from kafka.protocol.old.group import GroupMember

    class Cluster:
        def topics(self):
            return set(sizes)

        def partitions_for_topic(self, t):
            return set(range(sizes[t])) if t in sizes else None

    group = []
    for mid, topics, owned, gen in members:
        by_topic = defaultdict(list)
        for t, p in owned:
            by_topic[t].append(p)
        user_data = StickyAssignorUserData(list(by_topic.items()), gen if gen is not None else -1) if owned else b""
        group.append(GroupMember(mid, None, ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=user_data)))
    out = StickyPartitionAssignor().assign(Cluster(), group)
    return {m: {(t, p) for t, ps in a.assigned_partitions for p in ps} for m, a in out.items()}


# ----------------------------------------------------------------------------- random groups


def random_group(rnd: random.Random, name: str):
    """A group with random different subscriptions and a random (possibly
    unbalanced, partly stale) previous assignment at generation 1."""
    nt, nm = rnd.randint(2, 6), rnd.randint(2, 7)
    topics = [f"{name}{SEP}t{i}" for i in range(nt)]
    sizes = {t: rnd.randint(1, 9) for t in topics}
    subs = {f"m{i}": sorted(rnd.sample(topics, rnd.randint(1, nt))) for i in range(nm)}
    if len({tuple(s) for s in subs.values()}) == 1:  # keep the group non-uniform
        subs["m0"] = subs["m0"][:-1] or topics[:1] + topics[-1:]
    owners = [m for m in subs if rnd.random() < 0.75]
    owned = defaultdict(list)
    for t, n in sizes.items():
        for p in range(n):
            if owners and rnd.random() < 0.85:
                owned[rnd.choice(owners)].append((t, p))
    return [(m, subs[m], owned.get(m, []), 1 if owned.get(m) else None) for m in subs], sizes


def conflict_group(rnd: random.Random, name: str):
    """A group with different subscriptions whose previous assignment conflicts across
    generations: each member at a random generation (or none), each partition claimed
    by zero, one or two members, on topics they may no longer subscribe to."""
    nt, nm = rnd.randint(1, 4), rnd.randint(2, 6)
    topics = [f"{name}{SEP}t{i}" for i in range(nt)]
    sizes = {t: rnd.randint(1, 9) for t in topics}
    subs = {f"m{i}": sorted(rnd.sample(topics, rnd.randint(1, nt))) for i in range(nm)}
    gens = {m: rnd.choice([None, 1, 2, 3, 3, 3]) for m in subs}
    owned = defaultdict(list)
    for t, n in sizes.items():
        for p in range(n):
            for m in rnd.sample(list(subs), min(rnd.choice([0, 1, 1, 1, 2]), nm)):
                owned[m].append((t, p))
    return [(m, subs[m], owned.get(m, []), gens[m] if owned.get(m) else None) for m in subs], sizes


def kafka_valid(members: list[tuple], sizes: dict[str, int], result: dict[str, set]) -> bool:
    """Whether kafka-python's result is a valid assignment (each partition of a
    subscribed topic once, only to a subscriber): its port keeps claims on topics a
    member dropped, so with such claims it sometimes is not."""
    subs = {m: set(topics) for m, topics, _, _ in members}
    flat = [(m, t, p) for m, tps in result.items() for t, p in tps]
    needed = sum(n for t, n in sizes.items() if any(t in ts for ts in subs.values()))
    return (all(t in subs[m] for m, t, _ in flat) and len({(t, p) for _, t, p in flat}) == len(flat) == needed)


def case_members(case) -> list[tuple]:
    def full(t):
        return case.name + SEP + t

    return [
        (
            m["member_id"],
            [full(t) for t in m.get("topics", [])],
            [(full(t), p) for t, p in map(parse_tp, m.get("owned") or [])],
            m.get("generation"),
        )
        for m in case.members
    ]


def case_sizes(case) -> dict[str, int]:
    return {case.name + SEP + t: (s if isinstance(s, int) else s["count"]) for t, s in case.partitions.items()}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def general_run(spark):
    """YAML cases (no racks) and random groups, one assign_general call."""
    cases = load_cases("sticky_general/kafka_general.yaml")
    case_m, case_p = inputs(spark, cases)
    rnd = random.Random(20240)
    mrows, prows, groups = [], [], {}
    for g in range(RANDOM_GROUPS + CONFLICT_GROUPS):
        name = f"random{g:03d}" if g < RANDOM_GROUPS else f"conflict{g - RANDOM_GROUPS:03d}"
        members, sizes = (random_group if g < RANDOM_GROUPS else conflict_group)(rnd, name)
        groups[name] = (members, sizes)
        prows += [(t, p, None) for t, n in sizes.items() for p in range(n)]
        mrows += [(name, mid, None, None, topics, owned, gen, None) for mid, topics, owned, gen in members]
    for c in cases:
        groups[c.group_id] = (case_members(c), case_sizes(c))
    members = normalize_members(case_m.unionByName(spark.createDataFrame(mrows, MEMBER_SCHEMA)))
    partitions = normalize_partitions(
        case_p.unionByName(spark.createDataFrame(prows, "topic string, partition int, racks array<string>"))
    )
    owned = resolve_owned(members, partitions).localCheckpoint()
    result = assign_general(members, partitions, owned, rack_aware=False).localCheckpoint()
    return dict(cases=cases, groups=groups, members=members, partitions=partitions, owned=owned, result=result)


@pytest.fixture(scope="module")
def rack_run(spark):
    cases = load_cases("sticky_general/rack.yaml")
    m, p = inputs(spark, cases)
    members, partitions = normalize_members(m), normalize_partitions(p)
    owned = resolve_owned(members, partitions)
    result = assign_general(members, partitions, owned, rack_aware=True).localCheckpoint()
    return dict(cases=cases, members=members, partitions=partitions, owned=owned, result=result)


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("run", ["general_run", "rack_run"])
def test_valid_and_balanced_by_kafka_rule(run, request):
    r = request.getfixturevalue(run)
    problems = properties.validity_violations(r["result"], r["members"], r["partitions"]).unionByName(
        properties.balance_violations(r["result"], r["members"], r["partitions"], rule="kafka")
    )
    rows = problems.limit(20).collect()
    assert rows == [], [tuple(r) for r in rows]


def test_every_group_answered(general_run):
    got = {r["group_id"] for r in general_run["result"].select("group_id").distinct().collect()}
    assert got == set(general_run["groups"])


def test_at_least_as_sticky_as_kafka(general_run):
    """Owned partitions kept (honoured claims only, as resolve_owned gives them)
    versus kafka-python's StickyPartitionAssignor on the same groups, the groups whose
    claims conflict across generations included."""
    owned_rows = general_run["owned"].collect()
    honoured = defaultdict(set)
    for r in owned_rows:
        honoured[r["group_id"]].add((r["member_id"], r["topic"], r["partition"]))
    ours = defaultdict(int)
    for r in general_run["result"].join(
        general_run["owned"], ["group_id", "member_id", "topic", "partition"]
    ).groupBy("group_id").count().collect():
        ours[r["group_id"]] = r["count"]
    kafka, skipped = {}, []
    for g, (members, sizes) in general_run["groups"].items():
        try:
            res = kafka_sticky(members, sizes)
        except KeyError:  # kafka-python's port fails on some conflicting claims
            res = None
        if res is None or not kafka_valid(members, sizes, res):
            skipped.append(g)
            continue
        kafka[g] = sum(1 for m, tps in res.items() for t, p in tps if (m, t, p) in honoured[g])
    # only kafka-python's invalid results (claims on dropped topics kept) are left out
    assert all(g.startswith("conflict") for g in skipped) and len(skipped) < CONFLICT_GROUPS // 4, skipped
    total_ours, total_kafka = sum(ours.values()), sum(kafka.values())
    worse = {g: (ours[g], kafka[g]) for g in kafka if ours[g] < kafka[g]}
    assert total_ours >= total_kafka, (total_ours, total_kafka, worse)
    # per group too: never fewer owned partitions kept than Kafka's GeneralAssignmentBuilder
    # (the stickiness rounds' chains of moves reach what Kafka's moves among equally
    # loaded members reach), the YAML scenarios from Kafka's tests included
    assert worse == {}, {g: f"ours {o} < kafka {k}" for g, (o, k) in worse.items()}


@pytest.mark.connect
def test_fresh_general_groups_through_assign(spark):
    """Only general groups and nobody owning anything: ``assign`` skips the uniform
    path and the claim resolution. The result equals the general path given the
    resolved (empty) claims, is valid and balanced by Kafka's rule, and
    cooperative-sticky gives the same (nothing is held, so nothing is withheld)."""
    rnd = random.Random(31)
    mrows, prows = [], []
    for g in range(24):
        name = f"fresh{g:02d}"
        group, sizes = random_group(rnd, name)
        prows += [(t, p, None) for t, n in sizes.items() for p in range(n)]
        mrows += [(name, mid, None, None, topics, None, None, None) for mid, topics, _, _ in group]
    members = normalize_members(spark.createDataFrame(mrows, MEMBER_SCHEMA))
    partitions = normalize_partitions(spark.createDataFrame(prows, "topic string, partition int, racks array<string>"))
    sticky = assign(members, partitions, "sticky").localCheckpoint()
    assert sticky.select("group_id").distinct().count() == 24
    full = assign_general(members, partitions, resolve_owned(members, partitions), rack_aware=True)
    assert_assignment_equal(sticky, full)
    assert_assignment_equal(assign(members, partitions, "cooperative-sticky"), sticky)
    problems = properties.validity_violations(sticky, members, partitions).unionByName(
        properties.balance_violations(sticky, members, partitions, rule="kafka")
    )
    assert problems.limit(20).collect() == []


def _case_checks(r):
    result = r["result"]
    loads = {
        (x["group_id"], x["member_id"]): x["partitions"]
        for x in properties.member_loads(result, r["members"]).collect()
    }
    held = defaultdict(set)
    for x in result.collect():
        held[(x["group_id"], x["member_id"])].add((x["topic"].split(SEP, 1)[1], x["partition"]))
    for c in r["cases"]:
        raw = c.raw
        if "load_range" in raw:
            lo, hi = raw["load_range"]
            for m in c.members:
                assert lo <= loads[(c.group_id, m["member_id"])] <= hi, (c.name, m["member_id"])
        for m, tps in (raw.get("must_hold") or {}).items():
            assert set(map(parse_tp, tps)) <= held[(c.group_id, m)], (c.name, m)
    return held


def test_kafka_scenarios(general_run, spark):
    _case_checks(general_run)
    exact = [c for c in general_run["cases"] if c.expected is not None]
    assert exact
    names = [c.group_id for c in exact]
    assert_assignment_equal(general_run["result"].where(F.col("group_id").isin(names)), expected(spark, exact))


def test_rack_aware_locality(rack_run):
    _case_checks(rack_run)
    mismatches = {
        x["group_id"]: x["n"]
        for x in rack_run["result"]
        .join(rack_run["members"].select("group_id", "member_id", "rack"), ["group_id", "member_id"])
        .join(rack_run["partitions"], ["topic", "partition"])
        .groupBy("group_id")
        .agg(F.count(F.when(~F.array_contains("racks", F.col("rack")), 1)).alias("n"))
        .collect()
    }
    for c in rack_run["cases"]:
        assert mismatches[c.group_id] <= c.raw["max_rack_mismatch"], c.name


def test_round_cap_raises_naming_the_group(spark):
    """Reaching the balancing-round cap is an error naming what is still out of balance."""
    # c0 owns all 8 partitions of t0; c1 (t0, t1) joins: balancing needs at least one round
    m = normalize_members(spark.createDataFrame(
        [("capped", "c0", ["t0"], [("t0", p) for p in range(8)], 1), ("capped", "c1", ["t0", "t1"], [], None)],
        "group_id string, member_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int"))
    p = normalize_partitions(spark.createDataFrame([("t0", i) for i in range(8)] + [("t1", 0)], "topic string, partition int"))
    owned = resolve_owned(m, p)
    with pytest.raises(AssignmentPropertyError, match="capped") as err:
        target_counts(m, p, owned, max_rounds=0).collect()
    assert "0 balancing rounds" in str(err.value)
    counts = {(r["member_id"], r["topic"]): r["count"] for r in target_counts(m, p, owned).collect()}
    loads = {"c0": counts[("c0", "t0")], "c1": counts[("c1", "t0")] + counts[("c1", "t1")]}
    assert counts[("c0", "t0")] + counts[("c1", "t0")] == 8 and abs(loads["c0"] - loads["c1"]) <= 1, counts


def test_a_stickiness_round_searches_only_the_groups_the_round_before_changed(general_run, monkeypatch):
    """A group whose stickiness round found no chain keeps its state, so the next round
    leaves it out; each group's counts are still those of the call over every group."""
    import spark_assign.strategies.sticky_chains as sticky_chains

    searched, changed = [], []
    chain_moves = sticky_chains.chain_moves

    def recorded(s):
        moves = chain_moves(s)
        searched.append({r.group_id for r in s.select("group_id").distinct().collect()})
        changed.append({r.group_id for r in moves.select("group_id").distinct().collect()})
        return moves

    monkeypatch.setattr(sticky_chains, "chain_moves", recorded)
    groups = sorted(general_run["groups"])[::3]  # a third of them: a call of its own
    members = general_run["members"].where(F.col("group_id").isin(groups))
    counts = target_counts(members, general_run["partitions"], general_run["owned"].where(F.col("group_id").isin(groups)))
    rows = {(r.group_id, r.member_id, r.topic): r["count"] for r in counts.where("count > 0").collect()}
    # the first round searches every group, the next only those it changed (139 -> 6 groups here)
    assert len(searched) >= 2 and len(searched[1]) < len(searched[0]) == len(groups), [len(s) for s in searched]
    assert all(after == before for before, after in zip(changed, searched[1:])), (changed, searched)
    whole = general_run["result"].where(F.col("group_id").isin(groups)).groupBy("group_id", "member_id", "topic").count()
    assert rows == {(r.group_id, r.member_id, r.topic): r["count"] for r in whole.collect()}


def test_pairing_stops_at_its_first_round_that_moves_nothing(general_run, monkeypatch):
    """Once a pairing round moves nothing, the water-fill rounds finish the balancing alone:
    no pairing round follows, and the member rows pairing reads are not rebuilt. The assignment
    is still valid and balanced by Kafka's rule."""
    import spark_assign.strategies.sticky_general as sticky_general

    steps = []  # ("pair", moved partitions) or ("fill", None), in the order the rounds ran
    pair_moves, water_round = sticky_general.pair_moves, sticky_general.balancing_round

    def pairing(mem, rnd):
        moves = pair_moves(mem, rnd)
        steps.append(("pair", moves.count()))
        return moves

    def filling(s):
        steps.append(("fill", None))
        return water_round(s)

    monkeypatch.setattr(sticky_general, "pair_moves", pairing)
    monkeypatch.setattr(sticky_general, "balancing_round", filling)
    groups = sorted(general_run["groups"])[1::3]  # a third of them: a call of its own
    members = general_run["members"].where(F.col("group_id").isin(groups))
    partitions = general_run["partitions"]
    result = assign_general(members, partitions, general_run["owned"].where(F.col("group_id").isin(groups)))
    problems = properties.validity_violations(result, members, partitions).unionByName(
        properties.balance_violations(result, members, partitions, rule="kafka")).limit(20).collect()
    futile = [i for i, (kind, moved) in enumerate(steps) if kind == "pair" and not moved]
    # this input needs water-fill rounds after pairing has run dry
    assert futile and any(kind == "fill" for kind, _ in steps[futile[0]:]), steps
    assert [kind for kind, _ in steps[futile[0] + 1:]] == ["fill"] * (len(steps) - futile[0] - 1), steps
    assert problems == [], [tuple(r) for r in problems]
