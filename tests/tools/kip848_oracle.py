"""Write the KIP-848 case tables (tests/cases/kip848/) from Kafka's own server-side assignors.

A development tool, not run by CI: it runs the cases (hand-written ones and seeded
random groups) through the suite's oracle (tests/kafka_oracle.py: Kafka's own assignors
from the cached jars) and stores Kafka's results in the YAML tables:

* ``range.yaml``: Kafka's server ``RangeAssignor``; its order is defined, so
  ``expected`` is compared row for row;
* ``uniform.yaml``: Kafka's ``UniformAssignor``; which members get the extra
  partition follows Java hash order, so Kafka's result is stored as ``kafka`` and
  the tests compare properties (valid, balanced, partitions kept).

    python tests/tools/kip848_oracle.py
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import yaml

CASES = Path(__file__).resolve().parents[1] / "cases" / "kip848"
sys.path.insert(0, str(CASES.parents[1]))


def m(member_id, topics, owned=(), instance=None, rack=None):
    out = {"member_id": member_id, "topics": list(topics)}
    if owned:
        out["owned"] = list(owned)
    if instance:
        out["group_instance_id"] = instance
    if rack:
        out["rack"] = rack
    return out


RANGE_CASES = [
    dict(name="server_range_static_first", source="spark-assign: static members sort first, by instance id",
         members=[m("c", ["t"], instance="i2"), m("a", ["t"]), m("b", ["t"], instance="i1")], partitions={"t": 7}),
    dict(name="server_range_copartitioned", source="spark-assign: two co-partitioned topics line up",
         members=[m("m1", ["a", "b"]), m("m2", ["a", "b"]), m("m3", ["a", "b"])], partitions={"a": 8, "b": 8}),
    dict(name="server_range_heterogeneous", source="spark-assign: subscribers per topic",
         members=[m("m1", ["a"]), m("m2", ["a", "b"]), m("m3", ["b", "c"]), m("m4", ["c"], instance="s")],
         partitions={"a": 5, "b": 3, "c": 4}),
    dict(name="server_range_more_members", source="spark-assign: more members than partitions",
         members=[m(f"m{i}", ["t"]) for i in range(5)], partitions={"t": 3}),
    dict(name="server_range_owned_ignored", source="spark-assign: the server range takes no owned partitions",
         members=[m("a", ["t"], owned=["t-3", "t-4", "t-5"]), m("b", ["t"], owned=["t-0", "t-1", "t-2"]), m("c", ["t"])],
         partitions={"t": 6}),
    dict(name="server_range_racks_ignored", source="spark-assign: no KIP-881 racks under the consumer protocol",
         members=[m("a", ["t"], rack="r1"), m("b", ["t"], rack="r0")],
         partitions={"t": {"count": 4, "racks": [["r0"], ["r0"], ["r1"], ["r1"]]}}),
]

UNIFORM_CASES = [
    dict(name="uniform_fresh", source="spark-assign", members=[m(f"m{i}", ["t0", "t1"]) for i in range(3)],
         partitions={"t0": 5, "t1": 5}),
    dict(name="uniform_join", source="spark-assign: one member joins, the others keep their quota",
         members=[m("m0", ["t"], owned=[f"t-{p}" for p in range(0, 5)]), m("m1", ["t"], owned=[f"t-{p}" for p in range(5, 10)]),
                  m("m2", ["t"])], partitions={"t": 10}),
    dict(name="uniform_leave", source="spark-assign: a member left, its partitions are handed out",
         members=[m("m0", ["t"], owned=["t-0", "t-1", "t-2"]), m("m1", ["t"], owned=["t-3", "t-4", "t-5"])],
         partitions={"t": 9}),
    dict(name="uniform_extra_to_owners", source="spark-assign: the extra partitions go to members that own enough",
         members=[m("a", ["t"]), m("b", ["t"], owned=["t-0", "t-1", "t-2"]), m("c", ["t"], owned=["t-3", "t-4", "t-5"]),
                  m("d", ["t"], owned=["t-6"])], partitions={"t": 10}),
    dict(name="uniform_dropped_topic", source="spark-assign: partitions of a topic no longer subscribed are revoked",
         members=[m("a", ["t"], owned=["t-0", "u-0", "u-1"]), m("b", ["t"], owned=["t-1"])], partitions={"t": 4, "u": 2}),
    dict(name="uniform_heterogeneous_fresh", source="spark-assign",
         members=[m("a", ["t", "u"]), m("b", ["t"]), m("c", ["u", "v"])], partitions={"t": 6, "u": 4, "v": 3}),
    dict(name="uniform_heterogeneous_join", source="spark-assign",
         members=[m("a", ["t", "u"], owned=["t-0", "t-1", "t-2", "u-0", "u-1"]), m("b", ["t"], owned=["t-3", "t-4", "t-5"]),
                  m("c", ["u", "v"], owned=["u-2", "u-3", "v-0", "v-1", "v-2"]), m("d", ["t", "v"])],
         partitions={"t": 6, "u": 4, "v": 3}),
]


def random_uniform(rnd: random.Random, name: str) -> dict:
    nt, nm = rnd.randint(1, 4), rnd.randint(1, 7)
    topics = [f"t{i}" for i in range(nt)]
    sizes = {t: rnd.randint(1, 12) for t in topics}
    if rnd.random() < 0.5:
        subs = {f"m{i}": list(topics) for i in range(nm)}
    else:
        subs = {f"m{i}": sorted(rnd.sample(topics, rnd.randint(1, nt))) for i in range(nm)}
    owners = [x for x in subs if rnd.random() < 0.7] or list(subs)[:1]
    owned: dict[str, list[str]] = {x: [] for x in subs}
    for t, n in sizes.items():
        for p in range(n):
            if rnd.random() < 0.75:
                cand = [x for x in owners if t in subs[x] or rnd.random() < 0.1] or owners
                owned[rnd.choice(cand)].append(f"{t}-{p}")
    return dict(name=name, source="spark-assign: random group (seeded)",
                members=[m(x, subs[x], owned[x]) for x in subs], partitions=sizes)


def random_range(rnd: random.Random, name: str) -> dict:
    nt, nm = rnd.randint(1, 4), rnd.randint(1, 7)
    topics = [f"t{i}" for i in range(nt)]
    sizes = {t: rnd.randint(1, 12) for t in topics}
    members = []
    for i in range(nm):
        inst = f"i{rnd.randint(0, 99):02d}-{i}" if rnd.random() < 0.4 else None
        members.append(m(f"m{rnd.randint(0, 99):02d}-{i}", sorted(rnd.sample(topics, rnd.randint(1, nt))), instance=inst))
    return dict(name=name, source="spark-assign: random group (seeded)", members=members, partitions=sizes)


def run_oracle(cases: list[dict], assignor: str) -> dict[str, dict]:
    """Kafka's results through the suite's oracle (tests/kafka_oracle.py, Kafka's jars)."""
    from kafka_oracle import run

    def tp(s):
        t, _, p = s.rpartition("-")
        return [t, int(p)]

    results = run([{"id": c["name"], "assignor": "uniform" if assignor == "uniform" else "server-range",
                    "topics": {t: (s if isinstance(s, int) else s["count"]) for t, s in c["partitions"].items()},
                    "members": [{"id": x["member_id"], "topics": x["topics"], "instance_id": x.get("group_instance_id"),
                                 "owned": [tp(s) for s in x.get("owned", [])] if assignor == "uniform" else []}
                                for x in c["members"]]} for c in cases])
    return {case: {x: sorted(f"{t}-{p}" for t, p in tps) for x, tps in sorted(r.items())}
            for case, r in results.items()}


def write(path: Path, header: str, strategy: str, options: dict, cases: list[dict], key: str, results) -> None:
    for c in cases:
        c[key] = results[c["name"]]
    doc = {"strategy": strategy, "options": options, "cases": cases}
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=60, help="random groups per table")
    args = ap.parse_args()
    rnd = random.Random(848)
    ranges = RANGE_CASES + [random_range(rnd, f"server_range_random{i:02d}") for i in range(args.random)]
    uniforms = UNIFORM_CASES + [random_uniform(rnd, f"uniform_random{i:02d}") for i in range(args.random)]
    from kafka_oracle import KAFKA_VERSION

    note = ("# Written by tests/tools/kip848_oracle.py from Apache Kafka's group-coordinator assignors\n"
            "# (Kafka {}, tests/kafka_oracle.py); do not edit by hand.\n")
    rev = KAFKA_VERSION
    write(CASES / "range.yaml", note.format(rev) + "# Kafka's server RangeAssignor: `expected` is exact.\n",
          "range", {"group_protocol": "consumer"}, ranges, "expected",
          run_oracle(ranges, "range"))
    write(CASES / "uniform.yaml", note.format(rev) + "# Kafka's UniformAssignor: `kafka` is Kafka's result (Java hash\n"
          "# order decides who gets the extra partitions): compared by properties.\n",
          "uniform", {}, uniforms, "kafka", run_oracle(uniforms, "uniform"))


if __name__ == "__main__":
    main()
