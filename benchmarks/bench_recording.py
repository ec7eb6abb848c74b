"""Benchmark: what recording a rebalance costs as its history grows.

Runs the rebalance pipeline on the README's sample groups (``conf/sample.yaml``: three groups,
four generations a run, one of them a two-round cooperative rebalance) ``--runs`` times in one
warm session, each run recording into the same fresh history. Per run: the pipeline's seconds
and Spark jobs, and those of its recording (``record_rounds``: the checks against the recorded
generations, the four tables' files written and committed, the generations' summary), next to
how many files the history's ``assignments`` table holds before the run. Every recording reads
the history's tables; Spark lists more than 32 files with a Spark job of its own, which the
embedded backend avoids for local files (``storage.embedded.LISTING_THRESHOLD``).

    python benchmarks/bench_recording.py --runs 36      # from the project root
    python benchmarks/bench_recording.py --runs 8 --delta   # on Spark's Delta (spark-delta backend)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SparkJobs, session, write_results

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=36,
                   help="pipeline runs into the one history (a file a run: past 32 after 33)")
    p.add_argument("--warmups", type=int, default=2, help="untimed runs first, into a history of their own")
    p.add_argument("--delta", action="store_true", help="a session with Delta's jars: the spark-delta backend")
    args = p.parse_args(argv)
    spark = session(delta=args.delta)
    backend = "spark-delta" if args.delta else "embedded"
    from spark_assign.cli.rebalance import main as pipeline

    rebalance_module = sys.modules["spark_assign.rebalance"]
    record_rounds = rebalance_module.record_rounds
    recorded: list[tuple[float, int]] = []

    def timed_record(*a, **k):
        with SparkJobs(spark) as jobs:
            t0 = time.perf_counter()
            out = record_rounds(*a, **k)
            seconds = time.perf_counter() - t0
        recorded.append((seconds, jobs.count))
        return out

    rebalance_module.record_rounds = timed_record
    os.chdir(ROOT)  # the sample config names its inputs from the project root
    rows, early, late = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        def run(history: str) -> tuple[float, int]:
            with SparkJobs(spark) as jobs, contextlib.redirect_stdout(io.StringIO()):
                t0 = time.perf_counter()
                assert pipeline(["--config", "conf/sample.yaml", "--history", history]) == 0
                seconds = time.perf_counter() - t0
            return seconds, jobs.count

        for _ in range(args.warmups):
            run(os.path.join(tmp, "warmup"))
        history = os.path.join(tmp, "history")
        for i in range(args.runs):
            table = os.path.join(history, "assignments")
            files = len([f for f in os.listdir(table) if f.endswith(".parquet")]) if os.path.isdir(table) else 0
            seconds, jobs = run(history)
            rec_seconds, rec_jobs = recorded[-1]
            rows.append([i + 1, files, f"{seconds:.2f} s", jobs, f"{rec_seconds:.2f} s", rec_jobs])
            (late if files > 32 else early).append(rec_seconds)
    rebalance_module.record_rounds = record_rounds
    notes = (f"Backend {backend}. One warm local[2] session, {args.warmups} untimed runs first. The recording's median: "
             f"{statistics.median(early):.2f} s while the table holds at most 32 files"
             + (f", {statistics.median(late):.2f} s past 32" if late else "") + ".")
    write_results("recording" if backend == "embedded" else "recording-spark-delta",
                  f"Recording a rebalance as its history grows ({backend})",
                  ["run", "files in `assignments` before", "pipeline", "Spark jobs", "recording", "its Spark jobs"],
                  rows, notes)
    print(notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
