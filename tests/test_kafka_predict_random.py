"""Predicting the broker on randomized groups: 20 KIP-848 groups of confluent-kafka consumers on
the test broker (``group.protocol=consumer``), half under the broker's ``uniform``, half under its
``range``, each with random topics, sizes and membership (the member ids are the broker's), each
changed once (a member joins, a member leaves, a topic grows, a static member is replaced under a
new member id). Captured before the change, predicted from that capture with one ``assign()``
over every group, and compared with the targets the broker computed after it: equal, member by
member, for every group.
"""

from __future__ import annotations

import random

from kafka_broker import KIP848Group, stable_capture

from spark_assign import assign

GROUPS = 20
CHANGES = ("join", "leave", "grow", "static")


def _plan(rng: random.Random) -> list[dict]:
    plans = []
    for i in range(GROUPS):
        name = f"rnd{i}"
        topics = {f"{name}-t{k}": rng.randint(1, 7) for k in range(rng.randint(1, 3))}
        members = rng.randint(2, 4)
        change = CHANGES[i % len(CHANGES)]
        plans.append({"name": name, "remote": ("uniform", "range")[(i // len(CHANGES)) % 2], "topics": topics,
                      "members": members, "change": change,
                      "statics": [f"{name}-s0" if change == "static" and k == 0 else None for k in range(members)]})
    return plans


def _by_member(rows) -> dict[str, dict[str, set]]:
    out: dict[str, dict[str, set]] = {}
    for r in rows:
        out.setdefault(r.group_id, {}).setdefault(r.member_id, set()).add((r.topic, r.partition))
    return out


def test_randomized_groups_are_predicted_member_by_member(spark, broker):
    plans = _plan(random.Random(1274))
    assert {p["remote"] for p in plans} == {"uniform", "range"} and {p["change"] for p in plans} == set(CHANGES)
    broker.create_topics({t: n for p in plans for t, n in p["topics"].items()})
    groups = {p["name"]: KIP848Group(broker.bootstrap, p["name"], sorted(p["topics"]), p["members"],
                                     remote_assignor=p["remote"], instance_ids=p["statics"]) for p in plans}
    names = [p["name"] for p in plans]
    try:
        for g in groups.values():
            g.__enter__()
        before = stable_capture(spark, broker.bootstrap, names, {p["name"]: p["members"] for p in plans}, seconds=120)
        after_count = {}
        for p in plans:
            g, topics = groups[p["name"]], sorted(p["topics"])
            if p["change"] == "join":
                g.add(topics)
            elif p["change"] == "leave":
                g.leave(g.members[-1])
            elif p["change"] == "grow":
                grown = topics[0]
                broker.add_partitions(grown, p["topics"][grown] + 3)
            else:  # the static member restarts under a new member id, within its session
                g.leave(g.members[0])
                g.add(topics, instance_id=p["statics"][0])
            after_count[p["name"]] = p["members"] + {"join": 1, "leave": -1}.get(p["change"], 0)
        after = stable_capture(spark, broker.bootstrap, names, after_count, seconds=120)
    finally:
        for g in groups.values():
            g.__exit__()
    held = {(r.group_id, r.member_id): (r.owned, r.describe_position) for r in before.members.collect()}
    by_instance = {(r.group_id, r.group_instance_id): (r.owned, None) for r in before.members.collect()
                   if r.group_instance_id}
    rows = []
    for r in after.members.collect():
        # a static member back under a new id takes over its predecessor's target; a joiner has none
        owned, position = held.get((r.group_id, r.member_id)) or by_instance.get(
            (r.group_id, r.group_instance_id), ([], None))
        rows.append((r.group_id, r.member_id, r.group_instance_id, r.topics, owned, position))
    members = spark.createDataFrame(rows, "group_id string, member_id string, group_instance_id string, "
                                          "topics array<string>, owned array<struct<topic:string,partition:int>>, "
                                          "describe_position int")
    brokers = _by_member(after.targets.collect())
    wrong = []
    for remote in ("uniform", "range"):
        ids = [p["name"] for p in plans if p["remote"] == remote]
        predicted = _by_member(assign(members.where(members.group_id.isin(ids)), after.partitions, remote,
                                      group_protocol="consumer").collect())
        wrong += [(gid, remote, predicted.get(gid), brokers.get(gid)) for gid in ids
                  if predicted.get(gid) != brokers.get(gid)]
    sizes: dict[str, int] = {}
    for r in after.partitions.collect():
        sizes[r.topic] = max(sizes.get(r.topic, 0), r.partition + 1)
    grown = [sorted(p["topics"])[0] for p in plans if p["change"] == "grow"]
    assert all(sizes[t] == next(p["topics"][t] for p in plans if t in p["topics"]) + 3 for t in grown)
    assert not wrong, f"{len(wrong)} of {GROUPS} predictions differ from the broker's target; the first: {wrong[0]}"
