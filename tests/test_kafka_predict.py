"""Predicting the broker (KIP-848): capture stable groups, change them (a member joins, a member
leaves, a subscription changes, a topic grows), predict each group's new target with one
``assign()`` over all of them, let Apache Kafka compute it, and compare.

* the broker's ``range`` (``group.remote.assignor=range``): equal to the broker's target;
* ``uniform`` on the groups whose members subscribe alike: equal to the broker's target, member
  by member, from what the capture recorded (the members' order in the coordinator's member map,
  each member's target in the broker's order, the topic ids);
* ``uniform`` on mixed subscriptions: equal wherever Kafka's choice is determined, that is where
  Kafka's own ``UniformAssignor`` (tests/kafka_oracle.py) gives the same result with the member
  ids renamed and their order permuted; elsewhere valid, balanced by Kafka's rule, and at least as
  sticky as the broker (as many partitions kept by their current owner).
"""

from __future__ import annotations

import pytest
from kafka_broker import KIP848Group, stable_capture

from spark_assign import assign

#: group -> (its topics and sizes, the members' subscriptions, the change)
SCENARIOS = {
    "join-equal": ({"a": 6, "b": 4}, [["a", "b"]] * 3, "join"),
    "leave-equal": ({"a": 7, "b": 2}, [["a", "b"]] * 4, "leave"),
    "grow-equal": ({"a": 4}, [["a"]] * 3, "grow"),
    "join-mixed": ({"a": 5, "b": 3, "c": 4}, [["a", "b"], ["b", "c"], ["a", "c"]], "join"),
    "subscribe-mixed": ({"a": 4, "b": 6}, [["a"], ["a", "b"], ["b"]], "subscribe"),
}


def _topics(remote: str, group: str) -> list[str]:
    return [f"{remote}-{group}-{t}" for t in SCENARIOS[group][0]]


def _change(broker, remote: str, name: str, group: KIP848Group) -> int:
    """Apply the scenario's change; the number of members after it."""
    sizes, subs, change = SCENARIOS[name]
    prefix = f"{remote}-{name}-"
    if change == "join":
        group.add([prefix + t for t in sizes][:2])
    elif change == "leave":
        group.leave(group.members[1])
    elif change == "grow":
        broker.add_partitions(prefix + "a", sizes["a"] + 3)
    elif change == "subscribe":
        group.members[0].subscribe([prefix + "a", prefix + "b"])
    return len(subs) + (1 if change == "join" else -1 if change == "leave" else 0)


def _by_member(rows) -> dict[str, dict[str, set]]:
    out: dict[str, dict[str, set]] = {}
    for r in rows:
        out.setdefault(r.group_id, {}).setdefault(r.member_id, set()).add((r.topic, r.partition))
    return out


#: how many renamings and orders of the members :func:`_determined` tries
TRIES = 12


def _determined(members: list, partitions: dict, got: dict[str, set]) -> bool:
    """Whether Kafka's UniformAssignor gives ``got`` whatever the member ids and their order.
    Its homogeneous builder gives the extra partitions to the members it meets first in the
    group's member map (``UniformHomogeneousAssignmentBuilder.maybeRevokePartitions``), so
    the order matters: :data:`TRIES` seeded shuffles, each with new ids."""
    import random

    from kafka_oracle import run

    rng = random.Random(848)
    cases, renames = [], []
    for k in range(TRIES):
        order = list(members)
        rng.shuffle(order)
        rename = {m.member_id: f"x{k}-{rng.getrandbits(32):08x}" for m in order}
        renames.append({new: old for old, new in rename.items()})
        cases.append({"id": str(k), "assignor": "uniform", "topics": partitions,
                      "members": [{"id": rename[m.member_id], "topics": list(m.topics),
                                   "instance_id": m.group_instance_id,
                                   "owned": [[tp.topic, tp.partition] for tp in (m.owned or [])]}
                                  for m in order]})
    results = run(cases)
    back = [{renames[k][m]: set(tps) for m, tps in results[str(k)].items() if tps} for k in range(len(cases))]
    return all(b == {m: tps for m, tps in got.items() if tps} for b in back)


@pytest.mark.parametrize("remote", ["uniform", "range"])
def test_predicted_targets_are_the_brokers(spark, broker, remote):
    names = sorted(SCENARIOS)
    ids = [f"{remote}-{n}" for n in names]
    broker.create_topics({t: n for name in names for t, n in
                          zip(_topics(remote, name), SCENARIOS[name][0].values())})
    groups = {name: KIP848Group(broker.bootstrap, f"{remote}-{name}", _topics(remote, name),
                                len(SCENARIOS[name][1]), remote_assignor=remote,
                                subscriptions=[[f"{remote}-{name}-{t}" for t in s] for s in SCENARIOS[name][1]])
              for name in names}
    try:
        for g in groups.values():
            g.__enter__()
        before = stable_capture(spark, broker.bootstrap, ids, {f"{remote}-{n}": len(SCENARIOS[n][1]) for n in names})
        owned = {(r.group_id, r.member_id): (r.owned, r.describe_position) for r in before.members.collect()}
        expected = {f"{remote}-{n}": _change(broker, remote, n, groups[n]) for n in names}
        after = stable_capture(spark, broker.bootstrap, ids, expected)
    finally:
        for g in groups.values():
            g.__exit__()
    # the prediction's input: the members after the change, owning what they owned before it, in
    # the broker's order, at their place in the member map before it (a joiner has none yet)
    members = spark.createDataFrame(
        [(r.group_id, r.member_id, r.group_instance_id, r.topics) + owned.get((r.group_id, r.member_id), ([], None))
         for r in after.members.collect()],
        "group_id string, member_id string, group_instance_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, describe_position int")
    assert after.partitions.where("topic_id IS NULL").count() == 0, "the capture names every topic's id"
    predicted = _by_member(assign(members, after.partitions, remote, group_protocol="consumer").collect())
    brokers = _by_member(after.targets.collect())
    sizes: dict[str, int] = {}
    for r in after.partitions.collect():
        sizes[r.topic] = max(sizes.get(r.topic, 0), r.partition + 1)
    # the changes took effect: the grown topic, the new subscription (the joins and the leave:
    # stable_capture waited for the member counts)
    assert sizes[f"{remote}-grow-equal-a"] == 7
    assert sorted(len(m.topics) for m in members.collect() if m.group_id == f"{remote}-subscribe-mixed") == [1, 2, 2]
    exact = []
    for gid in ids:
        ours, theirs = predicted.get(gid, {}), brokers[gid]
        alike = len({tuple(sorted(s)) for s in SCENARIOS[gid.split("-", 1)[1]][1]}) == 1
        if remote == "range" or alike or ours == theirs:
            assert ours == theirs, (gid, ours, theirs)
            exact.append(gid)
            continue
        rows = [m for m in members.collect() if m.group_id == gid]
        assert not _determined(rows, {t: sizes[t] for m in rows for t in m.topics}, theirs), (
            f"{gid}: Kafka's choice is determined, and the prediction differs", ours, theirs)
        # not determined: valid, balanced by Kafka's rule, at least as sticky
        subs = {m.member_id: set(m.topics) for m in rows}
        wanted = {(t, p) for ts in subs.values() for t in ts for p in range(sizes[t])}
        placed = [tp for tps in ours.values() for tp in tps]
        assert sorted(placed) == sorted(wanted) and all(tp[0] in subs[m] for m, tps in ours.items() for tp in tps)
        load = {m: len(ours.get(m, ())) for m in subs}
        assert not [(m, tp) for m, tps in ours.items() for tp in tps for o in subs
                    if tp[0] in subs[o] and load[o] < load[m] - 1], (gid, ours)
        before_owner = {(tp.topic, tp.partition): m.member_id for m in rows for tp in m.owned or []}

        def kept(a):
            return sum(before_owner.get(tp) == m for m, tps in a.items() for tp in tps)

        assert kept(ours) >= kept(theirs), (gid, ours, theirs)
    print(f"{remote}: equal to the broker on {len(exact)} of {len(ids)} groups: {exact}")
