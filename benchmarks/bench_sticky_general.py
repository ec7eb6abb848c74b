"""Benchmark: the sticky general path (members subscribe to different topics).

One group of ``--members`` members over ``--topics`` topics x ``--partitions``
partitions, each member subscribed to a random 10-20% of the topics, nobody
owning anything (fresh). spark-assign's ``assign(members, partitions, "sticky")`` (end to end) against kafka-python's
StickyPartitionAssignor (a port of Kafka's GeneralAssignmentBuilder) on the same
input, the peer in a subprocess with a time cap.

    python benchmarks/bench_sticky_general.py                  # full size (the lead runs this)
    python benchmarks/bench_sticky_general.py --members 40 --topics 10 --partitions 10 --verify
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401  (puts the project root on sys.path)
from common import fmt_s, random_subscription_members, ratio, run_peer, session, time_spark, to_python, write_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=2000)
    ap.add_argument("--topics", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=100, help="partitions per topic")
    ap.add_argument("--low", type=float, default=0.10)
    ap.add_argument("--high", type=float, default=0.20)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs (best reported)")
    ap.add_argument("--warmups", type=int, default=3, help="runs before the timed ones (JIT warm-up; the first is the cold figure)")
    ap.add_argument("--peer-timeout", type=float, default=300.0, help="seconds before the peer is cut off")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--verify", action="store_true", help="check validity and Kafka's balance rule (small sizes)")
    ap.add_argument("--area", default="sticky_general")
    args = ap.parse_args()

    from spark_assign import assign, properties
    from spark_assign.inputs import normalize_members, normalize_partitions
    from spark_assign.strategies import sticky_general

    spark = session()
    m, p = random_subscription_members(
        spark, members=args.members, topics=args.topics, partitions_per_topic=args.partitions,
        low=args.low, high=args.high,
    )
    members = normalize_members(m).localCheckpoint()
    partitions = normalize_partitions(p).localCheckpoint()
    subs = members.selectExpr("sum(size(topics)) as n").collect()[0]["n"]

    def build():
        return assign(members, partitions, "sticky", rack_aware=False)

    t0 = time.perf_counter()
    # untimed runs first (JVM JIT and code generation warm-up; the first one is timed
    # apart as the cold figure): nothing carries over between runs, every run plans
    # and computes the whole assignment again
    cold = time_spark(build, repeat=1)  # the first run, then one more to count the rows
    for _ in range(args.warmups - 2):
        build().write.format("noop").mode("overwrite").save()
    ours = time_spark(build, repeat=args.repeat)
    rounds = sticky_general.LAST_ROUNDS
    print(f"spark-assign: {ours.seconds:.2f} s (cold first run {cold.seconds:.2f} s), {ours.rows} rows, {rounds} balancing rounds "
          f"(wall incl. verification count {time.perf_counter() - t0:.1f} s)")

    if args.verify:
        a = build().localCheckpoint()
        bad = properties.validity_violations(a, members, partitions).unionByName(
            properties.balance_violations(a, members, partitions, rule="kafka")
        )
        n = bad.count()
        print(f"verification: {n} property violations")
        assert n == 0, bad.limit(20).collect()

    peer = None
    if not args.no_peer:
        data = to_python(members, partitions)
        peer = run_peer("sticky", data, timeout_s=args.peer_timeout)
        print(f"kafka-python sticky: {fmt_s(peer) if peer else f'> {args.peer_timeout:.0f} s (cut off)'}")

    size = f"{args.members} members, {args.topics} topics x {args.partitions} partitions, {args.low:.0%}-{args.high:.0%} each ({subs} subscriptions)"
    peer_cell = "not run" if args.no_peer else (fmt_s(peer) if peer else f"> {args.peer_timeout:.0f} s (cut off)")
    write_results(
        args.area,
        "Sticky, different subscriptions (general path), fresh",
        ["input", "spark-assign", "spark-assign, cold first run", "balancing rounds",
         "kafka-python StickyPartitionAssignor", "speed-up"],
        [[size, fmt_s(ours), fmt_s(cold), rounds, peer_cell,
          "n/a" if args.no_peer else ratio(peer, ours, None if peer else args.peer_timeout)]],
        notes=(
            "spark-assign: `assign(members, partitions, \"sticky\")` end to end (input validation, the "
            "uniform/general split, then the general path: member x topic counts, fitted initial fill, "
            "balancing rounds until Kafka's balance rule holds, rank-join placement), timed to a noop write, "
            f"best of {args.repeat} runs after {max(args.warmups, 2)} warm-up runs on the same input (JIT warm-up: "
            "nothing is cached between runs, each run plans and computes the whole assignment again; "
            "successive runs in one JVM get faster for about ten runs). The cold column is the first "
            "run in a fresh JVM. "
            "kafka-python: `StickyPartitionAssignor.assign` in a subprocess, only the assign call timed. "
            "Kafka's Java client takes about 50 s on this input (issue)."
        ),
    )


if __name__ == "__main__":
    main()
