"""Benchmark: Python workers over Unix domain sockets or local TCP (``spark.python.unix.domain.socket.enabled``).

A frame made by ``spark.createDataFrame`` from Python rows is read through Python worker
tasks. Over local TCP each such task waited about 40 ms for the kernel's delayed
acknowledgement of its last small write; :func:`spark_assign.session.local_session` now
sets the Unix sockets where the platform has them. The setting is fixed when the JVM
starts, so each mode runs in a new process, the two alternating (``--pairs`` times):

* a read of a two-row frame made from Python rows (``collect``; ``limit(3).toArrow()``,
  the limited read a small call makes of each input);
* one small ``assign()`` (``bench_small.py``'s one group: 10 members + 1 joiner, 2 x 50
  partitions) on such inputs, range and sticky, computed to the end (noop write).

Medians of ``--repeat`` timed runs after ``--warmups`` untimed ones per process.

    python benchmarks/bench_python_sockets.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = {"TCP": "false", "Unix sockets": "true"}
MEASURES = ("collect", "limited read", "assign range", "assign sticky")


def measure(setting: str, repeat: int, warmups: int) -> dict[str, float]:
    """In this process: the median seconds of each of :data:`MEASURES`."""
    from bench_small import one_group
    from common import SparkJobs

    from spark_assign import assign
    from spark_assign.session import UNIX_SOCKETS, local_session

    spark = local_session("spark-assign-bench", extra={UNIX_SOCKETS: setting})
    assert spark.sparkContext.getConf().get(UNIX_SOCKETS) == setting
    rows = spark.createDataFrame([("a", 1), ("b", 2)], "k string, v int")
    members, partitions = one_group(spark)
    calls = {
        "collect": rows.collect,
        "limited read": lambda: rows.limit(3).toArrow(),
        "assign range": lambda: assign(members, partitions, "range").write.format("noop").mode("overwrite").save(),
        "assign sticky": lambda: assign(members, partitions, "sticky").write.format("noop").mode("overwrite").save(),
    }
    out = {}
    for name, call in calls.items():
        times = []
        for i in range(warmups + repeat):
            with SparkJobs(spark) as jobs:
                t0 = time.perf_counter()
                call()
                dt = time.perf_counter() - t0
            if i >= warmups:
                times.append(dt)
        out[name] = statistics.median(times)
        out[name + " jobs"] = jobs.count
    spark.stop()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="processes per mode, alternating")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--warmups", type=int, default=5)
    parser.add_argument("--child", choices=list(MODES.values()), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.repeat, args.warmups)))
        return 0
    from common import write_results

    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.pairs):
        for mode, setting in MODES.items():
            out = subprocess.run([sys.executable, __file__, "--child", setting, "--repeat", str(args.repeat),
                                  "--warmups", str(args.warmups)], capture_output=True, text=True, check=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for name in MEASURES:
        tcp = [r[name] for r in runs["TCP"]]
        uds = [r[name] for r in runs["Unix sockets"]]
        rows.append([name, " / ".join(f"{t * 1000:.0f} ms" for t in tcp), " / ".join(f"{t * 1000:.0f} ms" for t in uds),
                     runs["TCP"][-1][name + " jobs"], f"{statistics.median(tcp) / statistics.median(uds):.2f}x"])
    write_results(
        "python_sockets",
        "Python workers over Unix domain sockets",
        ["what (inputs made from Python rows)", "TCP (per process)", "Unix sockets (per process)", "Spark jobs",
         "TCP / Unix sockets"],
        rows,
        notes=(f"Each cell is the median of {args.repeat} timed runs after {args.warmups} untimed ones in one warm "
               f"local[2] session; {args.pairs} processes per mode, the modes alternating (a new JVM each, since the "
               "setting is read when the JVM starts). The last column compares the medians of the processes' "
               "medians."),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
