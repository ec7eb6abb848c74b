"""Kafka's own assignors as the oracle (tests/kafka_oracle.py): a seeded generator of a few
hundred groups, each strategy run once over all of them by spark-assign (one ``assign()``)
and by Kafka 4.4.0's own assignor (one JVM), compared group by group.

* ``range``, ``roundrobin`` and the broker's ``range``: equal to Kafka's, member for member;
* ``sticky``, ``cooperative-sticky`` and ``uniform``: valid, balanced by Kafka's rule for the
  group's subscriptions, at least as sticky as Kafka (as many partitions kept by a member
  that held them), and, for ``cooperative-sticky``, no partition handed over while another
  member still holds it.

The groups: equal and mixed subscriptions, racks on some topics and members, static members,
owned lists from a previous generation (over fewer partitions where a topic grew, some
members owning none), and for the client assignors claims that are stale, contested at one
generation, conflicting across generations on mixed subscriptions, or beyond the topic's size.
A failing group is printed as a case-table row (tests/cases/ format) with Kafka's result.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
import yaml
from casetable import SEP, Case, inputs

from spark_assign import assign

#: the generator's seed and size (kept here: a failure is reproduced by this seed)
SEED = 20261201
GROUPS = 300
RACKS = ("r0", "r1", "r2")
CLAIMS = ("none", "previous", "stale", "contested", "conflicting", "beyond")


def generate(seed: int, groups: int, *, server: bool) -> list[dict]:
    """``groups`` cases in the case-table format. ``server``: owned lists as the broker keeps
    them (each partition at most once: a current assignment), no generations."""
    rng = random.Random(seed)
    cases = []
    for g in range(groups):
        sizes = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 4))}
        racked = rng.random() < 0.3
        partitions = {t: {"count": n, "racks": [sorted(rng.sample(RACKS, rng.randint(1, 2))) for _ in range(n)]}
                      if racked else n for t, n in sizes.items()}
        equal = rng.random() < 0.5
        members = []
        for i in range(rng.randint(1, 6)):
            m: dict = {"member_id": f"m{rng.randrange(1000):03d}-{i}",
                       "topics": sorted(sizes) if equal else sorted(rng.sample(sorted(sizes), rng.randint(1, len(sizes))))}
            if rng.random() < 0.25:
                m["group_instance_id"] = f"i{rng.randrange(100):02d}-{i}"
            if racked and rng.random() < 0.8:
                m["rack"] = rng.choice(RACKS)
            members.append(m)
        claim = rng.choice(CLAIMS[:2] if server else CLAIMS)
        if claim != "none":
            _owned(rng, members, sizes, claim, server)
        cases.append({"name": f"g{g:03d}-{claim}-{'equal' if equal else 'mixed'}", "members": members,
                      "partitions": partitions})
    return cases


def _owned(rng: random.Random, members: list[dict], sizes: dict[str, int], claim: str, server: bool) -> None:
    """A previous generation's assignment as the members' owned lists, then the claim's twist."""
    generation = rng.randint(3, 9)
    owners = {m["member_id"]: [] for m in members}
    for t, n in sizes.items():
        before = n if rng.random() < 0.7 else rng.randint(1, n)  # the topic grew since
        subscribers = [m["member_id"] for m in members if t in m["topics"]] or [members[0]["member_id"]]
        for p in range(before):
            if rng.random() < 0.85:  # else its owner left the group
                who = rng.choice(subscribers) if rng.random() < 0.9 else rng.choice(members)["member_id"]
                owners[who].append(f"{t}-{p}")
    claimed = [m for m in members if rng.random() < 0.85]
    for m in claimed:
        m["owned"] = owners[m["member_id"]]
        if not server:
            m["generation"] = generation
    if server or len(claimed) < 2:
        return
    a, b = rng.sample(claimed, 2)
    theirs = [tp for tp in a["owned"]] or [f"{t}-0" for t in sizes]
    if claim == "stale":  # b still lists what a holds now, from an older generation
        b["owned"] = sorted(set(b["owned"]) | set(rng.sample(theirs, max(1, len(theirs) // 2))))
        b["generation"] = generation - 1
    elif claim == "contested":  # both list the same partitions at the same generation
        b["owned"] = sorted(set(b["owned"]) | set(rng.sample(theirs, max(1, len(theirs) // 3))))
    elif claim == "conflicting":  # across generations: each member's claims from a different one
        b["owned"] = sorted(set(b["owned"]) | set(rng.sample(theirs, max(1, len(theirs) // 2))))
        b["generation"], a["generation"] = generation - 2, generation - 1
    elif claim == "beyond":  # a partition number past the topic's size
        t = rng.choice(sorted(sizes))
        a["owned"] = sorted(set(a["owned"]) | {f"{t}-{sizes[t] + rng.randint(0, 3)}"})


def _oracle_case(case: dict, assignor: str) -> dict:
    def tp(text):
        t, _, p = text.rpartition("-")
        return [t, int(p)]

    return {"id": case["name"], "assignor": assignor, "topics": case["partitions"],
            "members": [{"id": m["member_id"], "topics": m["topics"], "instance_id": m.get("group_instance_id"),
                         "rack": m.get("rack"), "generation": m.get("generation"),
                         "owned": None if "owned" not in m else [tp(x) for x in m["owned"]]}
                        for m in case["members"]]}


def _ours(spark, cases: list[dict], strategy: str, **options) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """spark-assign's assignment of every case, in one assign() call."""
    members, partitions = inputs(spark, [Case(c["name"], None, {}, c["members"], c["partitions"], None)
                                         for c in cases])
    out: dict[str, dict[str, list]] = {c["name"]: {} for c in cases}
    for r in assign(members, partitions, strategy, **options).collect():
        out[r.group_id].setdefault(r.member_id, []).append((r.topic.split(SEP, 1)[1], r.partition))
    return {g: {m: sorted(tps) for m, tps in a.items()} for g, a in out.items()}


def _row(case: dict, kafka: dict, ours: dict, why: str) -> str:
    """The failing group as a case-table row, Kafka's result as ``expected``."""
    row = {**case, "source": f"tests/test_kafka_oracle.py, seed {SEED}: {why}",
           "expected": {m: [f"{t}-{p}" for t, p in tps] for m, tps in sorted(kafka.items()) if tps}}
    return yaml.safe_dump([row], sort_keys=False) + "spark-assign gave: " + repr(ours)


@pytest.fixture(scope="module")
def client_cases():
    return generate(SEED, GROUPS, server=False)


@pytest.fixture(scope="module")
def server_cases():
    return generate(SEED + 1, GROUPS, server=True)


@pytest.mark.parametrize("strategy, oracle, options", [
    ("range", "range", {}),
    ("roundrobin", "roundrobin", {}),
    ("range", "server-range", {"group_protocol": "consumer"}),
])
def test_exactly_kafkas_assignment(spark, client_cases, server_cases, strategy, oracle, options):
    from kafka_oracle import run

    cases = server_cases if oracle == "server-range" else client_cases
    kafka = run([_oracle_case(c, oracle) for c in cases])
    ours = _ours(spark, cases, strategy, **options)
    wrong = [c for c in cases if {m: sorted(t) for m, t in kafka[c["name"]].items() if t} != ours[c["name"]]]
    assert not wrong, (f"{len(wrong)} of {len(cases)} groups differ from Kafka's {oracle}; the first:\n"
                       + _row(wrong[0], kafka[wrong[0]["name"]], ours[wrong[0]["name"]], f"Kafka's {oracle}"))


# ----------------------------------------------------------------------------- the properties


def _holders(case: dict) -> dict[tuple[str, int], set[str]]:
    """Each claimed partition's holders: the members listing it at its highest claimed
    generation (under the broker's protocol every claim is current)."""
    best: dict[tuple[str, int], int] = {}
    claims = []
    for m in case["members"]:
        for text in m.get("owned") or ():
            t, _, p = text.rpartition("-")
            g = m.get("generation") if m.get("generation") is not None else -1
            claims.append(((t, int(p)), m["member_id"], g))
            best[(t, int(p))] = max(best.get((t, int(p)), g), g)
    held: dict[tuple[str, int], set[str]] = defaultdict(set)
    for tp, member, g in claims:
        if g == best[tp]:
            held[tp].add(member)
    return held


def _problems(case: dict, got: dict[str, list[tuple[str, int]]], *, whole: bool) -> list[tuple[tuple[str, int], str]]:
    """What breaks validity (``whole``: every subscribed partition assigned) and Kafka's balance rule:
    ``(topic-partition, what)`` pairs."""
    sizes = {t: (s if isinstance(s, int) else s["count"]) for t, s in case["partitions"].items()}
    subs = {m["member_id"]: set(m["topics"]) for m in case["members"]}
    wanted = {(t, p) for ts in subs.values() for t in ts if t in sizes for p in range(sizes[t])}
    counts = Counter(tp for tps in got.values() for tp in tps)
    problems = [(tp, f"{tp} assigned {n} times") for tp, n in counts.items() if n > 1]
    problems += [(tp, f"{tp} to {m}, not subscribed") for m, tps in got.items() for tp in tps if tp[0] not in subs[m]]
    problems += [(tp, f"{tp} does not exist") for tp in counts if tp not in wanted]
    if whole:
        problems += [(tp, f"{tp} unassigned") for tp in wanted - set(counts)]
        load = {m: len(got.get(m, ())) for m in subs}
        # Kafka's rule (AbstractStickyAssignor.isBalanced): no partition could move to a member
        # subscribed to its topic that holds two or more fewer
        problems += [(tp, f"{tp} on {m} ({load[m]}) could go to {o} ({load[o]})") for m, tps in got.items() for tp in tps
                     for o in subs if tp[0] in subs[o] and load[o] < load[m] - 1]
    return problems


#: per assignor, the generated groups (seed SEED) on which Kafka 4.4.0's own assignor throws,
#: and those on which its result breaks validity or balance: claims past a topic's size kept
#: (a partition that does not exist), or a partition handed to a member not subscribed to
#: its topic that listed it at an older generation. Pinned, so that a change shows
_KAFKA_REFUSES = [
    'g111-beyond-mixed', 'g134-beyond-equal',
]
_KAFKA_BREAKS = [
    'g016-beyond-mixed', 'g024-stale-mixed', 'g033-beyond-mixed', 'g038-conflicting-mixed', 'g063-beyond-mixed',
    'g072-beyond-equal', 'g079-beyond-equal', 'g086-beyond-equal', 'g103-beyond-equal', 'g108-beyond-mixed',
    'g125-beyond-equal', 'g127-stale-mixed', 'g129-conflicting-mixed', 'g141-beyond-mixed', 'g159-beyond-equal',
    'g163-beyond-mixed', 'g181-stale-mixed', 'g187-beyond-equal', 'g189-beyond-mixed', 'g213-beyond-mixed',
    'g253-beyond-mixed', 'g279-beyond-equal', 'g290-stale-mixed',
]
KAFKA_DEFECTS: dict[str, tuple[list[str], list[str]]] = {
    "sticky": (_KAFKA_REFUSES, _KAFKA_BREAKS),
    "cooperative-sticky": (_KAFKA_REFUSES, _KAFKA_BREAKS),
    "uniform": ([], []),
}
#: per strategy, the generated groups on which spark-assign keeps fewer partitions with their
#: holder than Kafka: strict, like a strict xfail (the test fails when this list changes, for
#: better or worse), and listed in docs/kafka.md. All but g061 use racks: where an owned
#: partition has no replica on its member's rack, both drop the claim, and Kafka's fill order
#: happens to give some back to their holder (spark-assign's rack-aware fill is its own);
#: g061's partition contested at one generation goes to a non-claimant (Kafka: a claimant)
_LESS_STICKY = [
    'g009-previous-equal', 'g038-conflicting-mixed', 'g061-contested-mixed', 'g107-beyond-mixed',
    'g115-previous-equal', 'g149-conflicting-equal', 'g196-stale-mixed', 'g200-previous-mixed',
    'g211-previous-equal', 'g214-previous-mixed', 'g235-beyond-mixed', 'g273-beyond-mixed',
]
OUR_DEFECTS: dict[str, list[str]] = {"sticky": _LESS_STICKY, "cooperative-sticky": _LESS_STICKY, "uniform": []}


def _kept(case: dict, got: dict[str, list[tuple[str, int]]]) -> int:
    held = _holders(case)
    return sum(1 for m, tps in got.items() for tp in tps if m in held.get(tp, ()))


@pytest.mark.parametrize("strategy, oracle, options", [
    ("sticky", "sticky", {}),
    ("cooperative-sticky", "cooperative-sticky", {}),
    ("uniform", "uniform", {}),
])
def test_valid_balanced_and_as_sticky_as_kafka(spark, client_cases, server_cases, strategy, oracle, options):
    from kafka_oracle import run

    cases = server_cases if oracle == "uniform" else client_cases
    refused: dict[str, str] = {}
    kafka = run([_oracle_case(c, oracle) for c in cases], refused=refused)
    ours = _ours(spark, cases, strategy, **options)
    whole = strategy != "cooperative-sticky"  # a cooperative round withholds what changes owner
    # Kafka's sticky assignors throw on some claims past a topic's size (IllegalStateException:
    # "No more unfilled consumers to be assigned"): there spark-assign's result is held to
    # validity and balance alone
    failures: list = []
    broken: dict[str, list[str]] = {}
    for c in cases:
        o = ours[c["name"]]
        if c["name"] in refused:
            why = [what for _, what in _problems(c, o, whole=whole)]
            if why:
                failures.append((c, {}, o, why))
            continue
        k = kafka[c["name"]]
        theirs = _problems(c, k, whole=whole)
        if theirs:  # Kafka's own result breaks a property: the bar is its result less those placements
            broken[c["name"]] = [what for _, what in theirs]
            placed = {tp for tp, _ in theirs}
            k = {m: [tp for tp in tps if tp not in placed] for m, tps in k.items()}
        why = [what for _, what in _problems(c, o, whole=whole)]
        if _kept(c, o) < _kept(c, k):
            why.append(f"keeps {_kept(c, o)} partitions with a holder, Kafka {_kept(c, k)}")
        if strategy == "cooperative-sticky":
            held = _holders(c)
            why += [f"{tp} to {m} while {sorted(held[tp])} hold it" for m, tps in o.items() for tp in tps
                    if held.get(tp) and m not in held[tp]]
        if why:
            failures.append((c, k, o, why))
    # where Kafka's own result breaks a property (KAFKA_DEFECTS), spark-assign's must not
    assert (sorted(refused), sorted(broken)) == KAFKA_DEFECTS[oracle], (refused, broken)
    new = [f for f in failures if f[0]["name"] not in OUR_DEFECTS[strategy]]
    assert not new, (f"{len(new)} of {len(cases)} groups fail against Kafka's {oracle}; the first "
                     f"({new[0][3][:5]}):\n" + _row(*new[0][:3], "; ".join(new[0][3][:5])))
    assert sorted(f[0]["name"] for f in failures) == OUR_DEFECTS[strategy], "a known difference is gone: unpin it"


def test_kafka_uniform_ignores_racks(server_cases):
    """Kafka 4.4.0's UniformAssignor gives the same assignment with the member and replica racks
    taken away, on every generated group that has them (as spark-assign's uniform: no racks)."""
    from kafka_oracle import run

    racked = [c for c in server_cases if any(isinstance(s, dict) for s in c["partitions"].values())]
    plain = [{**c, "members": [{k: v for k, v in m.items() if k != "rack"} for m in c["members"]],
              "partitions": {t: s if isinstance(s, int) else s["count"] for t, s in c["partitions"].items()}}
             for c in racked]
    assert len(racked) > 50
    assert run([_oracle_case(c, "uniform") for c in racked]) == run([_oracle_case(c, "uniform") for c in plain])
