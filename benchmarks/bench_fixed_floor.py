"""Benchmark: what a small call's fixed cost is made of, against the cheapest Spark job.

In one warm session (local[2]), on ``bench_small.py``'s one group (10 members and a joiner,
2 x 50 partitions, frames made from Python rows), the median of ``--repeat`` runs each of:

- the cheapest Spark job: ``spark.range(1)`` written to Spark's ``noop`` sink;
- one limited read of the members (``spark_assign.execution.rows_within``, as
  ``decide_small_inputs`` reads them first);
- the members' and the partitions' limited reads as a small call makes them, two actions, and the
  same rows read by one action (the two limited reads packed as struct columns, in one union),
  alternating A B B A;
- one warm ``assign()`` of each strategy: its seconds, Spark jobs and the seconds the driver spent
  waiting on its py4j calls into the JVM (the JVM's analysis of each DataFrame call, and the actions
  started through py4j; not the Arrow collects, which stream over a socket of their own), counted over
  ``--repeat`` more calls, after ``--warmups`` untimed calls that let the JIT settle.

    python benchmarks/bench_fixed_floor.py
    python benchmarks/bench_fixed_floor.py --repeat 30 --warmups 60
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
from py4j import clientserver
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_assign import assign
from spark_assign.execution import SMALL_CALL_ROWS, rows_within
from spark_assign.frames import sql_name

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "uniform")


class Py4jWait:
    """The seconds the driver spends waiting on its py4j calls into the JVM inside a ``with``
    block (``seconds`` after it)."""

    def __init__(self):
        self.seconds = 0.0

    def __enter__(self) -> Py4jWait:
        original = self._original = clientserver.ClientServerConnection.send_command

        def timed(conn, command, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(conn, command, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        clientserver.ClientServerConnection.send_command = timed
        return self

    def __exit__(self, *exc) -> None:
        clientserver.ClientServerConnection.send_command = self._original


def combined_read(reads: list[tuple[DataFrame, int]]) -> list:
    """The rows of each ``(frame, max_rows)`` as ``rows_within`` reads them, by one action: each
    limited read packed as one struct column, the reads in one union."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [f"_read{i}" for i in range(len(reads))]
    packed = [df.coalesce(1).limit(n + 1).select(F.struct(*[F.col(sql_name(c)) for c in df.columns]).alias(name))
              for (df, n), name in zip(reads, names)]
    union = packed[0]
    for part in packed[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    table = union.toArrow()
    out = []
    for (_, n), name in zip(reads, names):
        column = table[name].combine_chunks()
        rows = pa.Table.from_struct_array(column.filter(pc.is_valid(column)))
        out.append(rows if rows.num_rows <= n else None)
    return out


def median_of(spark: SparkSession, fn, repeat: int) -> tuple[float, int]:
    """The median seconds of ``repeat`` runs of ``fn()`` and the Spark jobs of the last."""
    times, jobs = [], 0
    for _ in range(repeat):
        with SparkJobs(spark) as counted:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        jobs = counted.count
    return statistics.median(times), jobs


def main(spark: SparkSession) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmups", type=int, default=60)
    args = ap.parse_args()
    members, partitions = one_group(spark)
    reads = [(members, SMALL_CALL_ROWS), (partitions, SMALL_CALL_ROWS)]

    def noop(df: DataFrame) -> None:
        df.write.format("noop").mode("overwrite").save()

    for _ in range(args.warmups // 6):  # the reads' plans compiled by the JIT first
        [rows_within(df, n) for df, n in reads], combined_read(reads), noop(spark.range(1))
    rows = []
    seconds, jobs = median_of(spark, lambda: noop(spark.range(1)), args.repeat)
    rows.append(["the cheapest job: spark.range(1) to the noop sink", f"{seconds * 1000:.0f} ms", jobs, ""])
    seconds, jobs = median_of(spark, lambda: rows_within(members, SMALL_CALL_ROWS), args.repeat)
    rows.append(["one limited read of the members (11 rows from Python)", f"{seconds * 1000:.0f} ms", jobs, ""])
    apart, together = [], []
    for order in ("AB", "BA"):
        for mode in order:
            if mode == "A":
                apart.append(median_of(spark, lambda: [rows_within(df, n) for df, n in reads], args.repeat))
            else:
                together.append(median_of(spark, lambda: combined_read(reads), args.repeat))
    for label, runs in (("the members' and the partitions' reads, two actions (as a small call reads them)", apart),
                        ("the same rows by one action (a union of the two reads)", together)):
        rows.append([label, " / ".join(f"{s * 1000:.0f} ms" for s, _ in runs), runs[-1][1], ""])
    for strategy in STRATEGIES:
        def call(strategy=strategy) -> None:
            noop(assign(members, partitions, strategy))

        for _ in range(args.warmups):
            call()
        seconds, jobs = median_of(spark, call, args.repeat)
        with Py4jWait() as waited:  # apart: the job count reads the status tracker through py4j
            for _ in range(args.repeat):
                call()
        rows.append([f"one warm assign(), {strategy}", f"{seconds:.3f} s", jobs, f"{waited.seconds / args.repeat:.3f} s"])
    write_results(
        "fixed_floor", "What a small call's fixed cost is made of",
        ["what", "median (warm)", "Spark jobs", "waiting on py4j calls (mean per call)"], rows,
        notes=f"Medians of {args.repeat} runs in one warm local[2] session (`bench_fixed_floor.py`), after "
              f"{args.warmups} untimed calls of each strategy; the two ways of reading both inputs ran in the "
              "order A B B A. The py4j column: the seconds per call the driver waited on its py4j calls into the "
              "JVM (the analysis of each DataFrame call, the actions started through py4j), over as many calls "
              "again; the Arrow collects of a small call stream over a socket of their own and are not in it.")


if __name__ == "__main__":
    spark = session(shuffle_partitions=8)
    spark.sparkContext.setLogLevel("ERROR")
    main(spark)
