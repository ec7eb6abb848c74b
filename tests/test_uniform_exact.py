"""The broker's ``uniform`` on homogeneous groups, member by member against Kafka 4.4.0's own
``UniformAssignor`` called as the coordinator calls it (tests/oracle/KafkaAssignors.java: the
member map, the overlay of the joining member, the replayed targets, the topic ids).

Seeded random histories of homogeneous groups with random member and topic ids (as the broker
makes them): a fresh group, then changes one at a time (a member joins, a member leaves, a
topic grows, every member subscribes to one more topic, a static member is replaced under a
new member id), each generation's ``owned`` being Kafka's previous target in the order the
broker holds it and ``describe_position`` the coordinator's member map order. Every
generation's assignment must equal Kafka's for every member.
"""

from __future__ import annotations

import base64
import random

from spark_assign import assign

SEED = 848
HISTORIES = 60
STEPS = 3
CHANGES = ("join", "leave", "grow", "new_topic", "static_replaced")


def _uuid(rng: random.Random) -> str:
    """A random id printed as Kafka prints a Uuid (KIP-848 member ids are such strings)."""
    return base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")


def _fresh(rng: random.Random, name: str) -> dict:
    topics = {f"{name}.t{i}": {"count": rng.randint(1, 14), "id": _uuid(rng)} for i in range(rng.randint(1, 5))}
    subscription = list(topics) + ([f"{name}.absent"] if rng.random() < 0.2 else [])
    rng.shuffle(subscription)
    members = [{"id": _uuid(rng), "topics": list(subscription), "owned": [],
                "instance_id": f"{name}.i{k}" if rng.random() < 0.3 else None}
               for k in range(rng.randint(1, 12))]
    return {"id": name, "assignor": "uniform", "topics": topics, "members": members}


def _change(rng: random.Random, case: dict, kafka: dict) -> dict:
    """The next generation of ``case`` after Kafka computed ``kafka``: owned as the broker holds
    it, the members in the member map's insertion order, one change applied."""
    held = kafka["held"]
    members = [{**m, "joining": False, "owned": [list(tp) for tp in held.get(m["id"], [])]} for m in case["members"]]
    topics = {t: dict(v) for t, v in case["topics"].items()}
    change = rng.choice(CHANGES)
    statics = [m for m in members if m["instance_id"]]
    if change == "leave" and len(members) > 1:
        members.pop(rng.randrange(len(members)))
    elif change == "grow":
        grown = rng.choice(list(topics))
        topics[grown]["count"] += rng.randint(1, 6)
    elif change == "new_topic":
        new = f"{case['id']}.n{len(topics)}"
        topics[new] = {"count": rng.randint(1, 10), "id": _uuid(rng)}
        for m in members:
            m["topics"] = m["topics"] + [new]
    elif change == "static_replaced" and statics:
        old = rng.choice(statics)
        members.remove(old)
        # the new member id takes over the old one's target (UpdatedMembersAndTargetAssignmentView)
        members.append({**old, "id": _uuid(rng), "joining": True})
    else:  # join
        members.append({"id": _uuid(rng), "topics": list(members[0]["topics"]) if members else [],
                        "owned": [], "instance_id": None, "joining": True})
    return {**case, "topics": topics, "members": members}


def _inputs(spark, cases: list[dict], kafka_before: dict[str, dict]):
    """The cases as ``members`` and ``partitions`` frames, each member's ``describe_position`` its
    place in the member map Kafka held before this generation's joiner."""
    member_rows, partition_rows = [], []
    for c in cases:
        order = kafka_before[c["id"]]["describe_order"]
        for m in c["members"]:
            position = None if m.get("joining") else order.index(m["id"])
            member_rows.append((c["id"], m["id"], m["topics"], [tuple(tp) for tp in m["owned"]], position))
        partition_rows += [(t, p, v["id"]) for t, v in c["topics"].items() for p in range(v["count"])]
    members = spark.createDataFrame(member_rows, "group_id string, member_id string, topics array<string>, "
                                                 "owned array<struct<topic:string,partition:int>>, "
                                                 "describe_position int")
    return members, spark.createDataFrame(partition_rows, "topic string, partition int, topic_id string")


def _ours(spark, cases: list[dict], kafka_before: dict[str, dict]) -> dict[str, dict[str, list]]:
    """spark-assign's uniform over every case at once (:func:`_inputs`)."""
    members, partitions = _inputs(spark, cases, kafka_before)
    out: dict[str, dict[str, list]] = {c["id"]: {} for c in cases}
    for r in assign(members, partitions, "uniform").collect():
        out[r.group_id].setdefault(r.member_id, []).append((r.topic, r.partition))
    return {g: {m: sorted(tps) for m, tps in ms.items()} for g, ms in out.items()}


def test_uniform_equals_kafka_member_by_member(spark):
    from kafka_oracle import run_broker

    rng = random.Random(SEED)
    cases = [_fresh(rng, f"h{i}") for i in range(HISTORIES)]
    wrong: list[str] = []
    compared = 0
    for step in range(STEPS):
        # the member map order as Kafka holds it for this generation (the joiner not yet in it)
        kafka = run_broker([{**c, "members": [{k: v for k, v in m.items()} for m in c["members"]]} for c in cases])
        ours = _ours(spark, cases, kafka)
        for c in cases:
            theirs = {m: sorted(tps) for m, tps in kafka[c["id"]]["assignment"].items() if tps}
            compared += 1
            if theirs != ours[c["id"]]:
                wrong.append(f"step {step}, group {c['id']}: {c}\nKafka: {theirs}\nours:  {ours[c['id']]}")
        cases = [_change(rng, c, kafka[c["id"]]) for c in cases]
    assert compared == HISTORIES * STEPS
    assert not wrong, f"{len(wrong)} of {compared} generations differ from Kafka's uniform; the first:\n{wrong[0]}"


def test_the_target_is_held_in_kafkas_order(spark):
    """Each member's new target in the order the broker holds it after replaying the target's
    record (what the next generation reads as ``owned``) equals Kafka's, list for list."""
    from kafka_oracle import run_broker

    from spark_assign.inputs import normalize_members, normalize_partitions
    from spark_assign.strategies.uniform_homogeneous import assign_uniform_homogeneous

    rng = random.Random(SEED + 1)
    cases = [_fresh(rng, f"o{i}") for i in range(HISTORIES)]
    wrong: list[str] = []
    compared = 0
    for step in range(STEPS):
        kafka = run_broker([{**c, "members": [dict(m) for m in c["members"]]} for c in cases])
        members, partitions = _inputs(spark, cases, kafka)
        members, partitions = normalize_members(members), normalize_partitions(partitions)
        held: dict[str, dict[str, list]] = {c["id"]: {} for c in cases}
        for r in assign_uniform_homogeneous(members, partitions, held_order=True).collect():
            held[r.group_id].setdefault(r.member_id, []).append((r.held_at, (r.topic, r.partition)))
        for c in cases:
            ours = {m: [tp for _, tp in sorted(v)] for m, v in held[c["id"]].items()}
            theirs = {m: tps for m, tps in kafka[c["id"]]["held"].items() if tps}
            compared += 1
            if ours != theirs:
                wrong.append(f"step {step}, group {c['id']}: {c}\nKafka holds: {theirs}\nours:        {ours}")
        cases = [_change(rng, c, kafka[c["id"]]) for c in cases]
    assert compared == HISTORIES * STEPS
    assert not wrong, f"{len(wrong)} of {compared} generations are held in another order than Kafka's; " \
                      f"the first:\n{wrong[0]}"
