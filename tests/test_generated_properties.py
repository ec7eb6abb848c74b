"""Generated groups: 500 groups in one call per strategy (multi-topic, different
subscriptions, static members, racks, Unicode ids, subscribed topics missing from
the metadata), checked against the properties and against an independent oracle.

The oracle is a tiny reference model of Kafka's RangeAssignor (with KIP-881 rack
awareness) and RoundRobinAssignor written in plain Python after Kafka's Java
(clients/src/main/java/org/apache/kafka/clients/consumer/RangeAssignor.java,
RoundRobinAssignor.java, internals/AbstractPartitionAssignor.java). It is used
only here, and is itself checked against Kafka's own test tables
(tests/cases/range, tests/cases/roundrobin). kafka-python's assignors are not
used as the oracle: they order members by member id only (no static members),
by Python's string order rather than Java's, and know nothing of racks.
"""

from __future__ import annotations

import random

import pytest
from casetable import load_cases, parse_tp

from spark_assign import assign, check_assignment

NUM_GROUPS = 500
RACKS = ["a", "b", "c"]


# ---------------------------------------------------------------- reference model (tests only)

def java_key(s: str) -> bytes:
    """Java's String.compareTo order: UTF-16 code units."""
    return s.encode("utf-16-be")


def member_key(m: dict):
    """AbstractPartitionAssignor.MemberInfo.compareTo: static members first by instance id."""
    gi = m.get("group_instance_id")
    return (0, java_key(gi), b"") if gi is not None else (1, b"", java_key(m["member_id"]))


def ref_roundrobin(members: list[dict], counts: dict[str, int]) -> dict[str, list]:
    """RoundRobinAssignor.assign: circular iterator over sorted members, partitions sorted
    by topic (TreeSet, Java order) then partition."""
    order = sorted(members, key=member_key)
    out = {m["member_id"]: [] for m in members}
    it = 0
    for t in sorted({t for m in members for t in m["topics"]}, key=java_key):
        for p in range(counts.get(t, 0)):
            while t not in order[it]["topics"]:
                it = (it + 1) % len(order)
            out[order[it]["member_id"]].append((t, p))
            it = (it + 1) % len(order)
    return out


class _TopicState:
    """RangeAssignor.TopicAssignmentState."""

    def __init__(self, topic, replica_racks, subscribers, force):
        self.topic = topic
        ordered = sorted(subscribers, key=member_key)
        self.consumers = [m["member_id"] for m in ordered]
        self.rack = {m["member_id"]: (m.get("rack") or None) for m in ordered}
        num = len(replica_racks)
        self.unassigned = list(range(num))
        self.assigned = {c: 0 for c in self.consumers}
        self.per_consumer, self.extra = divmod(num, len(self.consumers))
        consumer_racks = {r for r in self.rack.values() if r is not None}
        self.partition_racks, all_racks = {}, set()
        if consumer_racks:
            for p, rs in enumerate(replica_racks):
                self.partition_racks[p] = {r for r in (rs or []) if r is not None}
                all_racks |= self.partition_racks[p]
        if not consumer_racks or consumer_racks.isdisjoint(all_racks):
            self.needs = False
        else:
            self.needs = force or any(v != all_racks for v in self.partition_racks.values())

    def racks_match(self, c, p):
        r = self.rack[c]
        return r is None or r in self.partition_racks.get(p, ())

    def max_assignable(self, c):
        return max(0, self.per_consumer + (1 if self.extra > 0 else 0) - self.assigned[c])

    def on_assigned(self, c, parts):
        self.assigned[c] += len(parts)
        if self.assigned[c] > self.per_consumer:
            self.extra -= 1
        for p in parts:
            self.unassigned.remove(p)


def ref_range(members: list[dict], replica_racks: dict[str, list], force: bool = False) -> dict[str, list]:
    """RangeAssignor.assignPartitions; ``replica_racks``: topic -> racks of each partition."""
    states = [
        _TopicState(t, replica_racks[t], [m for m in members if t in m["topics"]], force)
        for t in sorted({t for m in members for t in m["topics"]})
        if replica_racks.get(t)
    ]
    out = {m["member_id"]: [] for m in members}

    def give(c, parts, st):
        out[c].extend((st.topic, p) for p in parts)
        st.on_assigned(c, parts)

    def assign_ranges(st, may_assign):
        for c in st.consumers:
            if not st.unassigned:
                break
            parts = [p for p in st.unassigned if may_assign(c, p)][: st.max_assignable(c)]
            if parts:
                give(c, parts, st)

    if any(s.needs for s in states):
        sets: dict = {}
        for s in states:
            sets.setdefault((tuple(sorted(s.rack.items())), len(s.partition_racks)), []).append(s)
        for (_, num), sts in sets.items():
            if len(sts) > 1:
                remaining = list(sts[0].consumers)
                for p in range(num):
                    c = next((c for c in remaining
                              if all(t.racks_match(c, p) and t.max_assignable(c) > 0 for t in sts)), None)
                    if c is None:
                        continue
                    for t in sts:
                        give(c, [p], t)
                    if not any(t.max_assignable(c) > 0 for t in sts):
                        remaining.remove(c)
                        if not remaining:
                            break
            elif sts[0].needs:
                assign_ranges(sts[0], sts[0].racks_match)
    for s in states:
        assign_ranges(s, lambda c, p: True)
    return out


# ---------------------------------------------------------------- the oracle against Kafka's own tables

def _case_replica_racks(case) -> dict[str, list]:
    out = {}
    for topic, spec in case.partitions.items():
        count = spec if isinstance(spec, int) else spec["count"]
        racks = spec.get("racks") if isinstance(spec, dict) else None
        out[topic] = list(racks) if racks else [None] * count
    return out


def _as_sets(assignment: dict) -> dict:
    return {m: sorted(tps) for m, tps in assignment.items() if tps}


def _expected_sets(case) -> dict:
    return {m: sorted(parse_tp(tp) for tp in tps) for m, tps in (case.expected or {}).items() if tps}


def test_reference_model_reproduces_kafka_tables():
    """The oracle gives Kafka's expected answers on Kafka's own scenarios."""
    range_cases, rr_cases = load_cases("range"), load_cases("roundrobin")
    for c in range_cases:
        force = c.options.get("rack_aware") is True
        got = ref_range(c.members, _case_replica_racks(c), force=force)
        assert _as_sets(got) == _expected_sets(c), c.name
    for c in rr_cases:
        counts = {t: (s if isinstance(s, int) else s["count"]) for t, s in c.partitions.items()}
        assert _as_sets(ref_roundrobin(c.members, counts)) == _expected_sets(c), c.name


# ---------------------------------------------------------------- generated groups

def generate_groups(num_groups: int, seed: int = 881):
    """``[(group_id, members, {topic: replica racks per partition})]`` with topics named
    ``<group>/t<j>`` (each group its own metadata), some subscriptions to a missing topic."""
    rnd = random.Random(seed)
    groups = []
    for g in range(num_groups):
        gid = f"g{g:04d}"
        topics = {}
        base = rnd.randint(1, 9)
        for j in range(rnd.randint(1, 4)):
            count = base if rnd.random() < 0.5 else rnd.randint(1, 9)  # co-partitioned topics
            style = rnd.choice(["none", "cycle", "random", "all"])
            if style == "none":
                racks = [None] * count
            elif style == "cycle":
                rf = rnd.choice([1, 2])
                racks = [[RACKS[(p + k) % 3] for k in range(rf)] for p in range(count)]
            elif style == "all":
                racks = [list(RACKS) for _ in range(count)]
            else:
                racks = [rnd.sample(RACKS + [None], rnd.randint(0, 2)) for _ in range(count)]
            topics[f"{gid}/t{j}"] = racks
        names = list(topics) + [f"{gid}/missing"]
        uniform = rnd.random() < 0.4
        common = rnd.sample(names, rnd.randint(1, len(names)))
        members = []
        for i in range(rnd.randint(1, 6)):
            subs = common if uniform else rnd.sample(names, rnd.randint(0, len(names)))
            static = rnd.random() < 0.3
            members.append({
                "member_id": rnd.choice(["c", "m", "consumer-", "\U0001F600", "\uFFFD"]) + f"{rnd.randint(0, 99)}_{i}",
                "group_instance_id": (rnd.choice(["i", "\U0001F600", "\uFF41"]) + f"{rnd.randint(0, 99)}_{i}"
                                      if static else None),
                "rack": rnd.choice(RACKS + ["d", None, ""]),
                "topics": sorted(subs),
            })
        groups.append((gid, members, topics))
    return groups


GROUPS = generate_groups(NUM_GROUPS)


@pytest.fixture(scope="module")
def generated(spark):
    members = spark.createDataFrame(
        [(gid, m["member_id"], m["group_instance_id"], m["rack"], m["topics"]) for gid, ms, _ in GROUPS for m in ms],
        "group_id string, member_id string, group_instance_id string, rack string, topics array<string>",
    ).cache()
    partitions = spark.createDataFrame(
        [(t, p, r) for _, _, ts in GROUPS for t, rs in ts.items() for p, r in enumerate(rs)],
        "topic string, partition int, racks array<string>",
    ).cache()
    yield members, partitions
    members.unpersist()
    partitions.unpersist()


def _oracle(spark, fn):
    rows = [(gid, mid, t, p) for gid, ms, ts in GROUPS for mid, tps in fn(ms, ts).items() for t, p in tps]
    return spark.createDataFrame(rows, "group_id string, member_id string, topic string, partition int")


def _compare(actual, expected_df):
    from chispa import assert_df_equality

    cols = ["group_id", "member_id", "topic", "partition"]
    assert_df_equality(actual.select(*cols).orderBy(*cols), expected_df.select(*cols).orderBy(*cols),
                       ignore_row_order=True, ignore_nullable=True)


def test_generated_groups_exercise_every_path():
    """The generator hits what it must: static members, racks (useful or not), missing topics."""
    members = [m for _, ms, _ in GROUPS for m in ms]
    assert sum(m["group_instance_id"] is not None for m in members) > 100
    assert sum(bool(m["rack"]) for m in members) > 300
    needs = sum(any(s.needs for s in [
        _TopicState(t, ts[t], [m for m in ms if t in m["topics"]], False)
        for t in ts if any(t in m["topics"] for m in ms)]) for _, ms, ts in GROUPS)
    assert 100 < needs < NUM_GROUPS - 50, needs


def test_generated_range_matches_oracle_and_properties(spark, generated):
    members, partitions = generated
    result = assign(members, partitions, "range").cache()
    _compare(result, _oracle(spark, lambda ms, ts: ref_range(ms, ts)))
    check_assignment(result, members, partitions, balance="topic")
    result.unpersist()


def test_generated_range_rack_aware_forced_and_off(spark, generated):
    """Also on differently partitioned inputs: results must not depend on Spark's partitioning."""
    members, partitions = generated
    members, partitions = members.repartition(7, "member_id"), partitions.repartition(3, "partition")
    forced = assign(members, partitions, "range", rack_aware=True, validate=False)
    off = assign(members, partitions, "range", rack_aware=False, validate=False)

    def tag(df, label):
        return df.selectExpr(f"concat('{label}:', group_id) AS group_id", "member_id", "topic", "partition")

    expected_forced = _oracle(spark, lambda ms, ts: ref_range(ms, ts, force=True))
    expected_off = _oracle(spark, lambda ms, ts: ref_range([{**m, "rack": None} for m in ms], ts))
    _compare(tag(forced, "forced").unionByName(tag(off, "off")),
             tag(expected_forced, "forced").unionByName(tag(expected_off, "off")))


def test_generated_roundrobin_matches_oracle_and_properties(spark, generated):
    members, partitions = generated
    result = assign(members, partitions, "roundrobin").cache()
    _compare(result, _oracle(spark, lambda ms, ts: ref_roundrobin(ms, {t: len(r) for t, r in ts.items()})))
    check_assignment(result, members, partitions, balance=None)
    result.unpersist()
