"""Benchmark: the fixed cost of one small assign() call, the human-scale figure.

Two inputs, each timed in a warm session (best of ``--repeat`` after ``--warmups``
untimed calls), with the Spark jobs of one call next to the seconds, and the
kafka-python peer on the very same input (its assign calls only):

* one group of 10 members on 2 topics x 50 partitions, each member owning 10
  partitions at generation 1, plus one joiner (as ``../shared/tools/jobcount.py``);
* about a hundred small groups (3-50 members) with mixed subscriptions over 6
  topics of 24 partitions (the sticky general path), owning their previous sticky
  assignment, one joiner each.

    python benchmarks/bench_small.py
    python benchmarks/bench_small.py --materialization   # local vs reliable, one group
    python benchmarks/bench_small.py --check             # check_assignment(), small call or not

``--materialization`` times the one-group input under both materialization policies
(``spark.assign.materialization`` local, then reliable with a checkpoint directory) and
writes its own section: what a cluster that must survive lost executors pays per call.

``--check`` times ``check_assignment()`` on both inputs' sticky assignments, by each balance rule
and cooperatively, as a small call (the session's default) and with small calls off
(``spark.assign.smallCallRows=0``, how every check ran before it read small inputs to the
driver), alternating the two in one warm session; it writes its own section.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MEMBER_COLS, SparkJobs, Timing, fmt_s, run_peer, session, to_python, write_results

from spark_assign import assign, check_assignment
from spark_assign.strategies.cooperative_sticky import next_round_members

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


def one_group(spark):
    owned = {f"c{i}": [("t0", p) for p in range(i * 5, i * 5 + 5)] + [("t1", p) for p in range(i * 5, i * 5 + 5)]
             for i in range(10)}
    members = spark.createDataFrame(
        [("g", m, ["t0", "t1"], o, 1) for m, o in owned.items()] + [("g", "c99", ["t0", "t1"], [], 1)], MEMBER_COLS)
    partitions = spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(50)], "topic string, partition int")
    return members, partitions


def mixed_groups(spark, groups: int = 100, seed: int = 11):
    """``groups`` groups of 3-50 members subscribing to random 2-5 of 6 topics, owning
    the sticky assignment of the group without its joiner."""
    rnd = random.Random(seed)
    topics = [f"t{i}" for i in range(6)]
    rows, joiners = [], []
    for g in range(groups):
        n = rnd.randint(3, 50)
        for m in range(n):
            subs = sorted(rnd.sample(topics, rnd.randint(2, 5)))
            (joiners if m == n - 1 else rows).append((f"g{g:03d}", f"m{m:02d}", subs, None, None))
    partitions = spark.createDataFrame([(t, p) for t in topics for p in range(24)], "topic string, partition int")
    old = spark.createDataFrame(rows, MEMBER_COLS)
    before = next_round_members(old, assign(old, partitions, "sticky")).select(
        "group_id", "member_id", "topics", "owned", "generation")
    members = before.unionByName(spark.createDataFrame(joiners, MEMBER_COLS)).localCheckpoint()
    return members, partitions


def time_call(spark, members, partitions, strategy, repeat, warmups):
    """Best seconds of one assign() computed to the end, and the Spark jobs of one call."""
    times, jobs = [], 0
    for i in range(warmups + repeat):
        with SparkJobs(spark) as counted:
            t0 = time.perf_counter()
            assign(members, partitions, strategy).write.format("noop").mode("overwrite").save()
            dt = time.perf_counter() - t0
        if i >= warmups:
            times.append(dt)
            jobs = counted.count
    return Timing(min(times), assign(members, partitions, strategy).count()), jobs


def materialization_costs(spark, args) -> int:
    """The one-group input under ``spark.assign.materialization`` local and reliable."""
    import tempfile

    members, partitions = one_group(spark)
    spark.sparkContext.setCheckpointDir(tempfile.mkdtemp(prefix="spark-assign-bench-cp-"))
    rows = []
    for strategy in STRATEGIES:
        for policy in ("local", "reliable"):
            spark.conf.set("spark.assign.materialization", policy)
            ours, jobs = time_call(spark, members, partitions, strategy, args.repeat, args.warmups)
            rows.append(["1 group: 10 members + 1 joiner, 2 x 50 partitions", strategy, policy, fmt_s(ours), jobs])
    spark.conf.unset("spark.assign.materialization")
    write_results(
        "materialization",
        "Materialization policy: local against reliable checkpoints (issue #17)",
        ["input", "strategy", "spark.assign.materialization", "spark-assign (best, warm)", "Spark jobs per call"],
        rows,
        notes=(f"Best of {args.repeat} calls after {args.warmups} untimed ones in one warm local[2] session, "
               "each computed to the end (noop write); reliable checkpoints go to a local temporary folder. "
               "The job count is that of one call (status tracker)."),
    )
    return 0


def check_costs(spark, args) -> int:
    """check_assignment() as a small call and not, alternating in one warm session (medians)."""
    import statistics

    rows = []
    for name, (members, partitions) in (("1 group: 10 members + 1 joiner, 2 x 50 partitions", one_group(spark)),
                                        (f"{args.groups} mixed groups, 1 joiner each", mixed_groups(spark, args.groups))):
        result = assign(members, partitions, "sticky").localCheckpoint()  # stored: the check is what is timed
        for rule, kwargs in (("kafka", {"balance": "kafka"}), ("count", {"balance": "count"}),
                             ("cooperative", {"cooperative": True})):
            if "mixed" in name and rule == "count":  # mixed subscriptions: not balanced by count
                continue
            times: dict[str, list[float]] = {"small": [], "off": []}
            jobs = {}
            for i in range(args.warmups + args.repeat):
                for mode in ("small", "off"):
                    if mode == "off":
                        spark.conf.set("spark.assign.smallCallRows", "0")
                    else:  # the session's default bound
                        spark.conf.unset("spark.assign.smallCallRows")
                    with SparkJobs(spark) as counted:
                        t0 = time.perf_counter()
                        try:
                            check_assignment(result, members, partitions, **kwargs)
                        except AssertionError:  # a sticky joiner takes partitions others still hold
                            pass
                        dt = time.perf_counter() - t0
                    if i >= args.warmups:
                        times[mode].append(dt)
                        jobs[mode] = counted.count
            spark.conf.unset("spark.assign.smallCallRows")
            rows.append([name, rule, f"{statistics.median(times['small']):.3f} s", jobs["small"],
                         f"{statistics.median(times['off']):.3f} s", jobs["off"]])
    write_results(
        "small_check",
        "check_assignment() on small inputs as a small call",
        ["input (its sticky assignment)", "check", "small call (median, warm)", "Spark jobs",
         "small calls off (median, warm)", "Spark jobs"],
        rows,
        notes=(f"Medians of {args.repeat} calls after {args.warmups} untimed ones per mode, the two modes "
               "alternating call by call in one warm local[2] session. The cooperative check of a round that "
               "hands partitions over raises AssignmentPropertyError; the time is the check's, raise included. "
               "The job count is that of one call (status tracker)."),
    )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--materialization", action="store_true",
                        help="time the one-group input under local and reliable materialization instead")
    parser.add_argument("--check", action="store_true",
                        help="time check_assignment() as a small call and with small calls off instead")
    args = parser.parse_args(argv)
    spark = session()
    if args.materialization:
        return materialization_costs(spark, args)
    if args.check:
        return check_costs(spark, args)
    rows = []
    for name, (members, partitions) in (("1 group: 10 members + 1 joiner, 2 x 50 partitions", one_group(spark)),
                                        (f"{args.groups} mixed groups (3-50 members, 6 x 24 partitions), 1 joiner each",
                                         mixed_groups(spark, args.groups))):
        data = to_python(members, partitions)
        for strategy in STRATEGIES:
            if "mixed" in name and strategy in ("range", "roundrobin"):
                continue
            ours, jobs = time_call(spark, members, partitions, strategy, args.repeat, args.warmups)
            peer = run_peer(strategy, data)
            peer_s = "did not finish" if peer is None else f"{peer.seconds * 1000:.1f} ms"
            rel = "n/a" if peer is None else f"{ours.seconds / max(peer.seconds, 1e-9):,.0f}x slower"
            rows.append([name, strategy, fmt_s(ours), jobs, ours.rows, peer_s, rel])
    write_results(
        "small",
        "One small assign() call (human scale)",
        ["input", "strategy", "spark-assign (best, warm)", "Spark jobs per call", "rows", "kafka-python",
         "spark-assign vs peer"],
        rows,
        notes=(f"Best of {args.repeat} calls after {args.warmups} untimed ones in one warm local[2] session, "
               "each computed to the end (noop write); the job count is that of one call (status tracker). "
               "kafka-python runs the same input in a subprocess, timed on its assign calls only."),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
