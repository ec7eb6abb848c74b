"""Where a pipeline run's Spark jobs and seconds go, by library call site.

Runs one of the pipelines (``rebalance`` or ``simulate``) in-process, in the embedded
local session, and attributes every DataFrame action the library takes (checkpoints,
collects, counts, flags, Parquet writes; a small call's local relations are Arrow
collects, ``toArrow``) to the two innermost ``spark_assign`` frames that called it:
seconds, Spark jobs (the DAG scheduler's job counter) and calls per site, the costliest first. A diagnostic, not a benchmark: the wrapping adds a little
to each action.

    python benchmarks/probe_sites.py simulate --config conf/scenario.yaml
    python benchmarks/probe_sites.py rebalance --config conf/sample.yaml --top 20
    python benchmarks/probe_sites.py simulate --totals-only --config conf/scenario.yaml
    python benchmarks/probe_sites.py simulate --runs 2 --executor-time --config conf/scenario.yaml

``--runs N`` runs the pipeline N times in the one session and reports the last run (the
earlier ones warm the JVM up). ``--executor-time`` also records Spark's event log and
splits the last run's wall time into the time some job was running, the executors' task
time, and the task time of single-task stages (work on one core while the other waits):
what is left of the wall is the driver's (plans, Python, commits).

Needs a classic session (it reads the job counter through the JVM gateway).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql.classic.dataframe import DataFrame
from pyspark.sql.readwriter import DataFrameWriter

from spark_assign.session import local_session

ACTIONS = ("toArrow", "localCheckpoint", "checkpoint", "collect", "first", "count", "take", "isEmpty", "toPandas", "head")
WRITES = ("save", "parquet", "saveAsTable", "insertInto")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pipeline", choices=("rebalance", "simulate"))
    p.add_argument("--top", type=int, default=30, help="call sites to print")
    p.add_argument("--totals-only", action="store_true", help="no wrapping: the run's seconds and jobs only")
    p.add_argument("--runs", type=int, default=1, help="runs in the session; the last one is reported")
    p.add_argument("--executor-time", action="store_true",
                   help="record Spark's event log and split the last run's time between the executors and the driver")
    args, rest = p.parse_known_args()
    log_dir = tempfile.mkdtemp(prefix="spark-assign-eventlog-") if args.executor_time else None
    # a rolling log (files events_1_*, events_2_*, ... as :func:`executor_time` reads them), uncompressed
    spark = local_session(extra={"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir,
                                 "spark.eventLog.rolling.enabled": "true",
                                 "spark.eventLog.compress": "false"} if log_dir else None)
    dag = spark.sparkContext._jsc.sc().dagScheduler()  # classic only: the job counter
    sites: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0, 0, 0.0])
    depth = [0]

    def site() -> str:
        frame, out = sys._getframe(2), []
        while frame is not None and len(out) < 2:
            name = frame.f_code.co_filename
            if "spark_assign" in name and not name.endswith("lineage.py"):
                out.append(f"{os.path.basename(name)}:{frame.f_lineno}:{frame.f_code.co_name}")
            frame = frame.f_back
        return " < ".join(out)

    def wrap(cls, name):
        original = getattr(cls, name)

        def wrapper(self, *a, **k):
            if depth[0]:  # an action inside an action: counted in the outer one
                return original(self, *a, **k)
            depth[0] += 1
            jobs, t0 = dag.numTotalJobs(), time.perf_counter()
            try:
                return original(self, *a, **k)
            finally:
                depth[0] -= 1
                s = sites[(name, site())]
                s[0] += 1
                s[1] += dag.numTotalJobs() - jobs
                s[2] += time.perf_counter() - t0

        setattr(cls, name, wrapper)

    if not args.totals_only:
        for name in ACTIONS:
            wrap(DataFrame, name)
        for name in WRITES:
            wrap(DataFrameWriter, name)
    if args.pipeline == "rebalance":
        from spark_assign.cli.rebalance import main as run
    else:
        from spark_assign.cli.simulate import main as run
    for _ in range(args.runs - 1):
        run(rest)
    sites.clear()
    jobs0, started = dag.numTotalJobs(), time.time()
    t0 = time.perf_counter()
    code = run(rest)
    wall = time.perf_counter() - t0
    print(f"\n{args.pipeline}: {wall:.1f} s, {dag.numTotalJobs() - jobs0} Spark jobs (run {args.runs} in this session)")
    if log_dir:
        spark.stop()  # closes the event log
        busy, tasks, single = executor_time(log_dir, int(started * 1000))
        shutil.rmtree(log_dir, ignore_errors=True)
        print(f"{busy:.1f} s with a Spark job running; executors' task time {tasks:.1f} s, of it "
              f"{single:.1f} s in single-task stages; the rest of the {wall:.1f} s is the driver's")
    if sites:
        print(f"{sum(v[2] for v in sites.values()):.1f} s and {sum(v[1] for v in sites.values())} jobs "
              "inside the library's actions")
        print(f"{'seconds':>8} {'jobs':>6} {'calls':>6}  action           site")
        for (action, where), (calls, jobs, seconds) in sorted(sites.items(), key=lambda kv: -kv[1][2])[:args.top]:
            print(f"{seconds:8.2f} {jobs:6d} {calls:6d}  {action:16s} {where}")
    return code


def executor_time(log_dir: str, since_ms: int) -> tuple[float, float, float]:
    """From the event log in ``log_dir``, for the jobs submitted from ``since_ms`` on: seconds
    with at least one job running, the tasks' executor run time, and that of the stages
    that ran as one task."""
    spans, stage_tasks, stage_ms, ours = [], collections.Counter(), collections.Counter(), set()
    submitted: dict[int, int] = {}
    paths = [p for p in glob.glob(os.path.join(log_dir, "**", "events_*"), recursive=True) if os.path.isfile(p)]
    for path in sorted(paths, key=lambda p: int(os.path.basename(p).split("_")[1])):  # a rolling log, in order
        with open(path) as log:
            for line in log:
                event = json.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerJobStart" and event["Submission Time"] >= since_ms:
                    submitted[event["Job ID"]] = event["Submission Time"]
                    ours.update(event["Stage IDs"])
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in submitted:
                    spans.append((submitted[event["Job ID"]], event["Completion Time"]))
                elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in ours:
                    stage_tasks[event["Stage ID"]] += 1
                    stage_ms[event["Stage ID"]] += (event.get("Task Metrics") or {}).get("Executor Run Time", 0)
    busy, end = 0, 0
    for start, stop in sorted(spans):  # the union of the jobs' spans
        busy += max(0, stop - max(start, end))
        end = max(end, stop)
    single = sum(ms for stage, ms in stage_ms.items() if stage_tasks[stage] == 1)
    return busy / 1000, sum(stage_ms.values()) / 1000, single / 1000


if __name__ == "__main__":
    sys.exit(main())
