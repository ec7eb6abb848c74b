"""Benchmark: the lag-aware strategy (KAFKA-5337) against range on the same input.

Scenarios (full sizes by default; ``--tiny`` for an end-to-end check):

* many groups: 1,000 groups, each with 20 members on one topic of 1,000
  partitions, Zipf-skewed lags per group and partition;
* one big group: 1,000,000 partitions over 2,000 members, Zipf-skewed lags.

For each strategy: the time to compute the assignment (written to Spark's noop
sink) and the lag balance (max member lag / mean member lag, mean and worst over
groups). kafka-python's RangePartitionAssignor is timed on the many-groups input
as the peer (kafka-python has no lag-aware assignor).

    python benchmarks/bench_lag_aware.py            # full sizes (quiet machine)
    python benchmarks/bench_lag_aware.py --tiny     # check it end to end
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
from spark_assign.lags import lag_balance


def zipf_lags(members, partitions, *, exponent: float = 1.1, scale: float = 1e6, seed: int = 42):
    """``group_id, topic, partition, lag``: per group and partition a lag of
    ``scale / r**exponent`` with ``r`` uniform in 1..1000 (a Zipf-like heavy tail)."""
    groups = members.select("group_id").distinct()
    # groups x partitions of their topics: every (group, partition) needs a lag (benchmark input)
    subs = members.select("group_id", F.explode("topics").alias("topic")).distinct()
    gp = subs.join(partitions, "topic")
    r = F.floor(F.rand(seed) * 1000) + 1
    return gp.join(groups, "group_id", "left_semi").select(
        "group_id", "topic", "partition", F.floor(F.lit(scale) / F.pow(r, F.lit(exponent))).cast("long").alias("lag"))


def run_scenario(spark, name, members, partitions, lags, peer: bool):
    lags = lags.cache()
    lags.count()
    rows = []
    for strategy in ("range", "lag-aware"):
        build = lambda s=strategy: assign(members, partitions, s, lags=lags, validate=False)  # noqa: E731
        t = time_spark(build)
        a = build().cache()
        bal = lag_balance(a, lags, members).agg(
            F.avg("max_mean_ratio").alias("mean_ratio"), F.max("max_mean_ratio").alias("worst_ratio"),
            F.count("*").alias("groups")).first()
        a.unpersist()
        rows.append([name, strategy, fmt_s(t), t.rows, bal.groups, f"{bal.mean_ratio:.3f}", f"{bal.worst_ratio:.3f}",
                     ""])
        print(rows[-1], flush=True)
    # no assignment beats the group's heaviest partition: max/mean >= max(1, max lag x members / total lag)
    n = members.groupBy("group_id").agg(F.count("*").alias("n"))
    bound = lags.groupBy("group_id").agg(F.max("lag").alias("mx"), F.sum("lag").alias("tot")).join(n, "group_id").select(
        F.greatest(F.lit(1.0), F.col("mx") * F.col("n") / F.col("tot")).alias("b")
    ).agg(F.avg("b").alias("mean_b"), F.max("b").alias("worst_b")).first()
    rows.append([name, "lower bound (heaviest partition)", "", "", "", f"{bound.mean_b:.3f}", f"{bound.worst_b:.3f}",
                 "max(1, heaviest partition lag / mean member lag): no assignment does better"])
    if peer:
        p = run_peer("range", to_python(members, partitions), timeout_s=600)
        ours = time_spark(lambda: assign(members, partitions, "range", validate=False))
        rows.append([name, "kafka-python range (peer)", fmt_s(p), p.rows if p else "", "", "", "",
                     f"peer time / spark-assign range time: {ratio(p, ours, 600)}"])
    lags.unpersist()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiny", action="store_true", help="small sizes, for checking the script")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--big-partitions", type=int, default=1_000_000)
    ap.add_argument("--big-members", type=int, default=2000)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args(argv)
    if args.tiny:
        args.groups, args.members, args.partitions = 5, 4, 30
        args.big_partitions, args.big_members = 2000, 20
    spark = session()
    t0 = time.perf_counter()
    rows = []
    m, p = uniform_members(spark, groups=args.groups, members=args.members, topics=1,
                           partitions_per_topic=args.partitions)
    rows += run_scenario(spark, f"{args.groups} groups x {args.partitions} partitions, {args.members} members",
                         m, p, zipf_lags(m, p), peer=not args.no_peer)
    if not args.skip_big:
        m, p = uniform_members(spark, groups=1, members=args.big_members, topics=1,
                               partitions_per_topic=args.big_partitions)
        rows += run_scenario(spark, f"1 group x {args.big_partitions} partitions, {args.big_members} members",
                             m, p, zipf_lags(m, p), peer=False)
    if args.tiny:  # a check run: print, do not overwrite the results
        for r in rows:
            print(r)
        return
    write_results(
        "lag_aware",
        "lag-aware (KAFKA-5337) vs range",
        ["scenario", "strategy", "time", "rows", "groups", "max/mean lag (mean over groups)",
         "max/mean lag (worst group)", "note"],
        rows,
        notes=(
            "Lags: per group and partition `1e6 / r^1.1`, r uniform in 1..1000 (Zipf-like). "
            "max/mean lag: the largest member lag over the mean member lag of the group (1.0 = perfect). "
            f"Total wall time {time.perf_counter() - t0:.0f} s."
        ),
    )


if __name__ == "__main__":
    main()
