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

Needs a classic session (it reads the job counter through the JVM gateway).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
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
    args, rest = p.parse_known_args()
    spark = local_session()
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
    t0 = time.perf_counter()
    code = run(rest)
    wall = time.perf_counter() - t0
    print(f"\n{args.pipeline}: {wall:.1f} s, {dag.numTotalJobs()} Spark jobs in this session")
    if sites:
        print(f"{sum(v[2] for v in sites.values()):.1f} s and {sum(v[1] for v in sites.values())} jobs "
              "inside the library's actions")
        print(f"{'seconds':>8} {'jobs':>6} {'calls':>6}  action           site")
        for (action, where), (calls, jobs, seconds) in sorted(sites.items(), key=lambda kv: -kv[1][2])[:args.top]:
            print(f"{seconds:8.2f} {jobs:6d} {calls:6d}  {action:16s} {where}")
    return code


if __name__ == "__main__":
    sys.exit(main())
