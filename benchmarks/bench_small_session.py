"""Benchmark: one small group's assign() through a session's first few hundred calls.

``bench_small.py`` times a call after a few untimed ones. That session's JVM is still
compiling Spark's own code: its JIT compiler works for dozens of calls, on the other core
or on the same one, before it settles. This benchmark shows that curve. Each process (a new
JVM) runs the strategies in turn, in blocks of ``--calls`` calls each, and reports per block
and strategy: the median seconds of a call (computed to the end, noop write), the JIT
compiler's seconds per call in that block (the JVM's own count, ``CompilationMXBean``), and
the Spark jobs of one call. kafka-python assigns the same input, timed on its assign calls.

    python benchmarks/bench_small_session.py                       # 2 processes x 12 blocks
    python benchmarks/bench_small_session.py --processes 1 --blocks 6
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

from bench_small import STRATEGIES, one_group
from common import SparkJobs, run_peer, session, to_python, write_results

from spark_assign import assign


def _jit_seconds(spark) -> float:
    """The driver JVM's total JIT compilation time so far, in seconds (classic sessions)."""
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    return bean.getTotalCompilationTime() / 1000


def curve(blocks: int, calls: int) -> None:
    """In this process (a new JVM): print one JSON line per block, the strategies in turn."""
    spark = session()
    members, partitions = one_group(spark)
    counted = SparkJobs(spark)
    for block in range(blocks):
        line: dict = {"block": block}
        for strategy in STRATEGIES:
            jit, times = _jit_seconds(spark), []
            for _ in range(calls):
                with counted:
                    t0 = time.perf_counter()
                    assign(members, partitions, strategy).write.format("noop").mode("overwrite").save()
                    times.append(time.perf_counter() - t0)
            line[strategy] = {"median": statistics.median(times), "jit": (_jit_seconds(spark) - jit) / calls,
                              "jobs": counted.count}
        print(json.dumps(line), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2, help="new JVMs, one after the other")
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--calls", type=int, default=10, help="calls of each strategy per block")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        curve(args.blocks, args.calls)
        return 0
    runs = []
    for _ in range(args.processes):
        out = subprocess.run([sys.executable, __file__, "--child", "--blocks", str(args.blocks), "--calls",
                              str(args.calls)], capture_output=True, text=True, check=True).stdout
        runs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    spark = session()
    members, partitions = one_group(spark)
    data = to_python(members, partitions)
    peers = {s: run_peer(s, data) for s in STRATEGIES}
    rows = []
    for process, lines in enumerate(runs, 1):
        for line in lines:
            first = line["block"] * args.calls + 1
            rows.append([process, f"{first}-{first + args.calls - 1}",
                         *[f"{line[s]['median']:.3f} s ({line[s]['jit']:.2f})" for s in STRATEGIES],
                         " / ".join(str(line[s]["jobs"]) for s in STRATEGIES)])
    peer = " / ".join("n/a" if peers[s] is None else f"{peers[s].seconds * 1000:.1f} ms" for s in STRATEGIES)
    write_results(
        "small_session",
        "One small group through a session's first calls (JIT warm-up)",
        ["process", "calls of each strategy", *[f"{s}: median (JIT s per call)" for s in STRATEGIES],
         "Spark jobs per call"],
        rows,
        notes=(f"One group of 10 members plus a joiner, 2 x 50 partitions (`bench_small.py`'s). Each process is a "
               f"new JVM (local[2]); it runs the strategies in turn, {args.calls} calls of each per block, every "
               "call computed to the end (noop write). Per block and strategy: the median seconds of a call, in "
               "brackets the JIT compiler's seconds per call in that block (the JVM's `CompilationMXBean`), and "
               f"the Spark jobs of one call (in the order {', '.join(STRATEGIES)}). kafka-python on the same "
               f"input, its assign calls only: {peer}."),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
