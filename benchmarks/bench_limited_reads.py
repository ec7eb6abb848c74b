"""Benchmark: a small call's limited reads of its inputs, through one partition or not.

Every call first reads its inputs with a limit (``spark_assign.lineage.rows_within``) to
decide whether it is small. Over a frame of several partitions (one made from Python rows
has one per core), ``df.limit(n)`` takes each partition's first rows and then shuffles
them into one: a job of two stages. ``rows_within`` reads through one partition instead
(``df.coalesce(1).limit(n)``): one stage, whose one task stops once it has enough rows.

Both reads are timed in one warm session, alternating (A B, then B A), on inputs made from
Python rows: a read of the members of ``bench_small.py``'s one group, and one small
``assign()`` of that group per strategy, with the library's read swapped for the two-stage
one in the A runs.

    python benchmarks/bench_limited_reads.py
    python benchmarks/bench_limited_reads.py --repeat 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_small import one_group
from common import SparkJobs, session, write_results

from spark_assign import assign, lineage, small_inputs

MODES = ("two stages: df.limit(n)", "one stage: df.coalesce(1).limit(n)")
STRATEGIES = ("range", "sticky", "cooperative-sticky")


def _two_stage_read(df, max_rows):
    """The read before: a limit over the frame's own partitions."""
    if max_rows < 0:
        return None
    rows = df.limit(max_rows + 1).toArrow()
    return rows if rows.num_rows <= max_rows else None


#: the library's read (one stage)
ONE_STAGE_READ = lineage.rows_within


def _use(mode: str) -> None:
    read = _two_stage_read if mode == MODES[0] else ONE_STAGE_READ
    lineage.rows_within = read
    small_inputs.rows_within = read


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=12, help="timed runs per mode and measure")
    parser.add_argument("--warmups", type=int, default=3)
    args = parser.parse_args(argv)
    spark = session()
    members, partitions = one_group(spark)
    jobs = SparkJobs(spark)
    measures = {"a limited read of the members (11 rows, 2 partitions)": lambda: lineage.rows_within(members, 1000)}
    for strategy in STRATEGIES:
        measures[f"assign() {strategy}, one group (10 members + 1 joiner, 100 partitions)"] = (
            lambda s=strategy: assign(members, partitions, s).write.format("noop").mode("overwrite").save())
    times: dict[tuple[str, str], list[float]] = {}
    job_counts: dict[tuple[str, str], int] = {}
    for name, run in measures.items():
        for i in range(args.warmups + args.repeat):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                _use(mode)
                with jobs:
                    t0 = time.perf_counter()
                    run()
                    dt = time.perf_counter() - t0
                job_counts[(name, mode)] = jobs.count
                if i >= args.warmups:
                    times.setdefault((name, mode), []).append(dt)
    _use(MODES[1])
    rows = []
    for name in measures:
        a, b = (statistics.median(times[(name, m)]) for m in MODES)
        rows.append([name, f"{a * 1000:.0f} ms", f"{b * 1000:.0f} ms",
                     f"{job_counts[(name, MODES[0])]} / {job_counts[(name, MODES[1])]}", f"{a / b:.2f}x"])
    write_results(
        "limited_reads",
        "A small call's limited reads through one partition",
        ["what (inputs made from Python rows)", MODES[0], MODES[1], "Spark jobs", "ratio"],
        rows,
        notes=(f"Medians of {args.repeat} timed runs per mode after {args.warmups} untimed ones, in one warm "
               "local[2] session, the modes alternating (A B, then B A). The Spark jobs are the same: the "
               "two-stage read's shuffle is a stage of the same job, not a job of its own."),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
