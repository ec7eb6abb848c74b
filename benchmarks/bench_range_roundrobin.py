"""Benchmark: range and roundrobin against kafka-python's assignors on the same input.

Scenarios (full sizes by default; ``--tiny`` for an end-to-end check):

* one big group: 2,100 members on one topic of 2,100 partitions;
* many groups: 10,000 groups of 10 members on one topic of 100 partitions, in one call;
* rack-aware range (ours only: kafka-python has no rack awareness): one group of
  2,100 members on 3 racks, one topic of 2,100 partitions each with one replica
  rack, so KIP-881's matching passes run (the sequential ``aggregate`` path).

For each strategy: the time to compute the assignment (written to Spark's noop
sink), kafka-python's RangePartitionAssignor / RoundRobinPartitionAssignor timed
in the same run on the same input, and the ratio (peer time / our time; > 1 means
spark-assign is faster).

    python benchmarks/bench_range_roundrobin.py          # full sizes (quiet machine)
    python benchmarks/bench_range_roundrobin.py --tiny   # check it end to end
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import fmt_s, ratio, run_peer, session, time_spark, to_python, uniform_members, write_results
from pyspark.sql import functions as F

from spark_assign import assign

PEER_TIMEOUT = 600.0


def run_scenario(spark, name, members, partitions, *, peer: bool):
    members, partitions = members.cache(), partitions.cache()
    members.count(), partitions.count()
    data = to_python(members, partitions) if peer else None
    rows = []
    for strategy in ("range", "roundrobin"):
        build = lambda s=strategy: assign(members, partitions, s, validate=False)  # noqa: E731
        ours = time_spark(build, warmup=build)
        p = run_peer(strategy, data, timeout_s=PEER_TIMEOUT) if peer else None
        rows.append([name, strategy, fmt_s(ours), ours.rows, fmt_s(p) if peer else "not run",
                     p.rows if p else "", ratio(p, ours, PEER_TIMEOUT) if peer else ""])
        print(rows[-1], flush=True)
    members.unpersist(), partitions.unpersist()
    return rows


def rack_scenario(spark, name, members, partitions, racks: int = 3):
    """Range with KIP-881 rack matching; no peer (kafka-python has no rack awareness)."""
    members = members.withColumn(
        "rack", F.concat(F.lit("r"), (F.substring("member_id", 2, 100).cast("int") % racks).cast("string"))
    ).cache()
    partitions = partitions.withColumn(
        "racks", F.array(F.concat(F.lit("r"), (F.col("partition") % racks).cast("string")))
    ).cache()
    members.count(), partitions.count()
    rows = []
    for opt in (False, "auto"):
        build = lambda o=opt: assign(members, partitions, "range", rack_aware=o, validate=False)  # noqa: E731
        ours = time_spark(build, warmup=build)
        a = build()
        mismatched = (
            a.join(members.select("group_id", "member_id", "rack"), ["group_id", "member_id"])
            .join(partitions, ["topic", "partition"])
            .where(~F.array_contains("racks", F.col("rack"))).count()
        )
        label = "range rack_aware=auto" if opt else "range rack_aware=False"
        rows.append([name, label, fmt_s(ours), ours.rows, "not run (no rack awareness)", "",
                     f"{mismatched} cross-rack partitions"])
        print(rows[-1], flush=True)
    members.unpersist(), partitions.unpersist()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiny", action="store_true", help="small sizes, for checking the script")
    ap.add_argument("--big-members", type=int, default=2100)
    ap.add_argument("--big-partitions", type=int, default=2100)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rack-members", type=int, default=2100)
    ap.add_argument("--rack-partitions", type=int, default=2100)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--skip-rack", action="store_true")
    args = ap.parse_args(argv)
    if args.tiny:
        args.big_members, args.big_partitions = 21, 21
        args.groups, args.members, args.partitions = 10, 3, 10
        args.rack_members, args.rack_partitions = 12, 20
    spark = session()
    t0 = time.perf_counter()
    rows = []
    m, p = uniform_members(spark, groups=1, members=args.big_members, topics=1,
                           partitions_per_topic=args.big_partitions)
    rows += run_scenario(spark, f"1 group, {args.big_members} members x {args.big_partitions} partitions",
                         m, p, peer=not args.no_peer)
    m, p = uniform_members(spark, groups=args.groups, members=args.members, topics=1,
                           partitions_per_topic=args.partitions)
    rows += run_scenario(spark, f"{args.groups} groups of {args.members} members x {args.partitions} partitions",
                         m, p, peer=not args.no_peer)
    if not args.skip_rack:
        m, p = uniform_members(spark, groups=1, members=args.rack_members, topics=1,
                               partitions_per_topic=args.rack_partitions)
        rows += rack_scenario(spark, f"1 group, {args.rack_members} members on 3 racks x "
                              f"{args.rack_partitions} single-rack partitions", m, p)
    if args.tiny:  # a check run: print, do not overwrite the results
        for r in rows:
            print(r)
        return
    write_results(
        "range_roundrobin",
        "range and roundrobin vs kafka-python",
        ["scenario", "strategy", "spark-assign", "rows", "kafka-python", "peer rows", "peer / ours"],
        rows,
        notes=(
            "Times: the assignment computed to Spark's noop sink after one untimed warm-up run "
            "(inputs cached); the peer times only its assign calls, in a subprocess, capped at "
            f"{PEER_TIMEOUT:.0f} s. Total wall time {time.perf_counter() - t0:.0f} s."
        ),
    )


if __name__ == "__main__":
    main()
