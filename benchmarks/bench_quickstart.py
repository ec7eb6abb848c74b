"""The README's quick start under other JVM options, and the scenario under other small-call settings.

    python benchmarks/bench_quickstart.py jvm "" "-XX:TieredStopAtLevel=1"   # a new process per variant
    python benchmarks/bench_quickstart.py settings spark.sql.ui.explainMode=simple
    python benchmarks/bench_quickstart.py settings --job rebalance spark.sql.adaptive.enabled=
    python benchmarks/bench_quickstart.py revs HEAD~1 .                      # two versions of the library
    python benchmarks/bench_quickstart.py revs --job rebalance --repeat 3 HEAD~1 .

``jvm``: each variant ("" is Spark's own options) runs ``pipelines/quickstart.py`` in a new
process, in a fresh copy of ``conf/`` and ``data/`` whose ``conf/spark-local.conf`` gives the
driver those options (Spark's launcher ignores an option the JVM does not know, so the run
checks that the JVM got them); it prints the wall time, the Spark jobs, the driver JVM's CPU
time and the CPU time of its JIT compiler threads still alive at the end (a lower bound: the
JVM stops idle compiler threads). ``settings``: one process runs the sample scenario (``pipelines/simulate.py
--config conf/scenario.yaml``, in the session that job opens itself: not the quick start's,
which the rebalance opens with ``conf/spark-local.conf``) once to warm up, then with the
library's small-call settings (A) and with the given ones (B: ``key=value`` added, ``key=``
left out) in the order A B B A, ``--pairs`` times; it prints each run's time and Spark jobs
(``--job rebalance``: the quick start's two sample rebalances instead, ``pipelines/rebalance.py
--config conf/sample.yaml`` then the same with ``--members data/sample/members-next.jsonl``, in
the session the quick start opens, timed together). ``revs``:
the scenario (``--job rebalance``: the two sample rebalances) with the library of two revisions (a git
revision, or ``.`` for the working tree; ``conf/`` and ``data/`` are the working tree's for both), a new
process per run (its JVM cold, as a user's is), ``--pairs`` processes of each in the order A B B A, each
running the job ``--repeat`` times (the first cold, then warm); per run its seconds, Spark jobs and py4j
round trips (the driver's calls into the JVM, a count that does not drift with the machine). This is
the A/B of a change against the code before it (``revs main .``): its figures go into the change's
commit message, not into BENCHMARKS.md, whose tables are the other scripts' current results.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SparkJobs, machine  # common puts the checkout's package on sys.path

#: run inside the child process: the quick start, then the JVM's CPU time by thread name
CHILD = """
import collections, os, re, sys, time
sys.path.insert(0, {pipelines!r})
import quickstart
from pyspark.sql import SparkSession
t = time.time(); code = quickstart.main(); wall = time.time() - t
jvm = SparkSession.getActiveSession()._jvm
pid = jvm.java.lang.ProcessHandle.current().pid()
print("ARGS", " ".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
tick = os.sysconf("SC_CLK_TCK"); by = collections.Counter()
total = sum(int(v) for v in open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[11:13]) / tick
for tid in os.listdir(f"/proc/{{pid}}/task"):
    try:
        stat = open(f"/proc/{{pid}}/task/{{tid}}/stat").read()
    except FileNotFoundError:  # a thread that ended meanwhile
        continue
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()
    by[re.sub(r"\\d+", "N", name)] += (int(rest[11]) + int(rest[12])) / tick
jobs = max(SparkSession.getActiveSession().sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1
print(f"RESULT code={{code}} wall={{wall:.1f}} jobs={{jobs}} jvm={{total:.1f}} jit={{by['CN CompilerThre']:.1f}}")
"""


def copy_inputs(dest: Path) -> None:
    """The checkout's ``conf/`` and ``data/`` copied under ``dest``: every run starts from them."""
    for folder in ("conf", "data"):
        shutil.copytree(ROOT / folder, dest / folder)


def alternating(runs: int) -> list[str]:
    """``runs`` labels of each of A and B in the order A B B A (then A B for an odd number)."""
    return ["A", "B", "B", "A"] * (runs // 2) + ["A", "B"] * (runs % 2)


def jvm_variants(variants: list[str]) -> None:
    """Each variant's quick start in a new process (see the module doc)."""
    print(f"Machine: {machine()}\n")
    print("| driver JVM options | wall | Spark jobs | driver JVM CPU | of it, JIT compiler threads (at least) |\n"
          "|---|---|---|---|---|")
    for options in variants:
        with tempfile.TemporaryDirectory() as tmp:
            copy_inputs(Path(tmp))
            if options:
                with open(Path(tmp) / "conf" / "spark-local.conf", "a") as fh:
                    fh.write(f"\nspark.driver.extraJavaOptions {options}\n")
            child = CHILD.format(pipelines=str(ROOT / "pipelines"))
            done = subprocess.run([sys.executable, "-c", child], cwd=tmp, capture_output=True, text=True)
        found = re.search(r"RESULT code=(\d+) wall=([\d.]+) jobs=(\d+) jvm=([\d.]+) jit=([\d.]+)", done.stdout)
        if not found or found.group(1) != "0":
            raise SystemExit(f"the quick start failed with {options!r}:\n{done.stderr[-3000:]}")
        given = re.search(r"^ARGS (.*)$", done.stdout, re.M)
        missing = [o for o in options.split() if not given or o not in given.group(1).split()]
        if missing:
            raise SystemExit(f"the driver JVM did not get {missing}")
        wall, jobs, cpu, jit = found.group(2, 3, 4, 5)
        print(f"| `{options or '(Spark defaults)'}` | {wall} s | {jobs} | {cpu} s | {jit} s |", flush=True)


#: the quick start's two sample rebalances (``settings --job rebalance``)
REBALANCES = (["--config", "conf/sample.yaml"],
              ["--config", "conf/sample.yaml", "--members", "data/sample/members-next.jsonl"])


def settings_ab(extra: dict[str, str], pairs: int, job: str = "scenario") -> None:
    """The scenario (or, ``job="rebalance"``, the two sample rebalances) with the small-call
    settings (A) and with ``extra`` (B: added, or, where a value is empty, left out), alternating."""
    import contextlib
    import io
    import logging

    from spark_assign.cli import rebalance, simulate
    from spark_assign.execution import policy
    from spark_assign.session import local_session

    runs = [["--config", "conf/scenario.yaml"]] if job == "scenario" else list(REBALANCES)
    main = simulate.main if job == "scenario" else rebalance.main

    logging.disable(logging.INFO)
    print(f"Machine: {machine()}")
    base = dict(policy.SMALL_CALL_SETTINGS)
    work = tempfile.TemporaryDirectory()
    os.chdir(work.name)  # before Spark starts: its JVM resolves the scenario's relative paths from its own
    copy_inputs(Path(work.name))
    # the session the job opens itself, opened first to count jobs
    spark = local_session("spark-assign-simulate") if job == "scenario" else rebalance.get_session(
        "conf/spark-local.conf")
    times: dict[str, list[float]] = collections.defaultdict(list)
    jobs: dict[str, list[int]] = collections.defaultdict(list)
    for label in ["warm-up"] + alternating(pairs):
        policy.SMALL_CALL_SETTINGS.clear()
        chosen = {**base, **(extra if label == "B" else {})}
        policy.SMALL_CALL_SETTINGS.update({k: v for k, v in chosen.items() if v != ""})
        shutil.rmtree("out", ignore_errors=True)
        t = time.time()
        with SparkJobs(spark) as counted, contextlib.redirect_stdout(io.StringIO()):
            if any(main(argv) != 0 for argv in runs):
                raise SystemExit(f"the {job} failed ({label})")
        times[label].append(time.time() - t)
        jobs[label].append(counted.count)
        print(f"{label}: {times[label][-1]:.1f} s, {counted.count} Spark jobs", flush=True)
    os.chdir(ROOT)
    work.cleanup()
    changes = ", ".join(f"with {k}={v}" if v else f"without {k}" for k, v in extra.items())
    for label, what in (("A", "the library's small-call settings"), ("B", changes)):
        print(f"{label} ({what}): {', '.join(f'{t:.1f}' for t in times[label])} s, "
              f"{', '.join(map(str, jobs[label]))} Spark jobs")


#: run inside the child process: the job (the scenario, or the two sample rebalances) with the
#: library found first on sys.path, ``repeat`` times in its one JVM (the first run cold); per
#: run its seconds, Spark jobs and py4j round trips (the driver's calls into the JVM)
REV_CHILD = """
import contextlib, io, shutil, sys, time
sys.path.insert(0, {root!r})
import spark_assign
assert spark_assign.__file__.startswith({root!r}), spark_assign.__file__
import py4j.clientserver as cs
from spark_assign.cli import rebalance, simulate
from spark_assign.session import local_session
sent, send = [0], cs.ClientServerConnection.send_command
def counted(self, command):
    sent[0] += 1
    return send(self, command)
cs.ClientServerConnection.send_command = counted
scenario = {job!r} == "scenario"
spark = local_session("spark-assign-simulate") if scenario else rebalance.get_session("conf/spark-local.conf")
main, runs = (simulate.main, {scenario!r}) if scenario else (rebalance.main, {rebalances!r})
tracker = spark.sparkContext.statusTracker()
for _ in range({repeat}):
    shutil.rmtree("out", ignore_errors=True)
    j0, c0, t = max(tracker.getJobIdsForGroup(None), default=-1), sent[0], time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = max(main(list(argv)) for argv in runs)
    wall, trips = time.time() - t, sent[0] - c0
    jobs = max(tracker.getJobIdsForGroup(None), default=-1) - j0
    print(f"RESULT code={{code}} wall={{wall:.1f}} jobs={{jobs}} trips={{trips}}", flush=True)
"""


def revisions_ab(revs: tuple[str, str], pairs: int, job: str = "scenario", repeat: int = 1) -> None:
    """The job with the library of revision A and of revision B, alternating (see the module doc)."""
    print(f"Machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        roots: list[str] = []
        times: dict[str, list[str]] = collections.defaultdict(list)
        try:
            for label, rev in zip("AB", revs):
                if rev == ".":
                    roots.append(str(ROOT))
                    continue
                tree = Path(tmp) / f"rev-{label}"
                subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
                roots.append(str(tree))
            for label in alternating(pairs):
                work = Path(tmp) / "run"
                copy_inputs(work)
                child = REV_CHILD.format(root=roots["AB".index(label)], job=job, repeat=repeat,
                                         scenario=[["--config", "conf/scenario.yaml"]], rebalances=list(REBALANCES))
                done = subprocess.run([sys.executable, "-c", child], cwd=work, capture_output=True, text=True)
                shutil.rmtree(work)
                found = re.findall(r"RESULT code=(\d+) wall=([\d.]+) jobs=(\d+) trips=(\d+)", done.stdout)
                if len(found) != repeat or any(code != "0" for code, *_ in found):
                    raise SystemExit(f"the {job} failed with {revs['AB'.index(label)]!r}:\n{done.stderr[-3000:]}")
                times[label].append(" / ".join(f"{wall} s ({jobs} Spark jobs, {trips} py4j round trips)"
                                               for _, wall, jobs, trips in found))
                print(f"{label}: {times[label][-1]}", flush=True)
        finally:
            for root in roots:
                if root != str(ROOT):
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", root], check=True)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=True)
    for label, rev in zip("AB", revs):
        print(f"{label} ({rev}): {'; '.join(times[label])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    jvm = sub.add_parser("jvm", help="the quick start per driver JVM options, a new process each")
    jvm.add_argument("variants", nargs="+", help='driver Java options per run ("" for none)')
    ab = sub.add_parser("settings", help="the scenario with and without extra small-call settings")
    ab.add_argument("extra", nargs="+", help="key=value: added to the small-call settings; key=: left out")
    ab.add_argument("--pairs", type=int, default=2)
    ab.add_argument("--job", choices=("scenario", "rebalance"), default="scenario",
                    help="the sample scenario, or the quick start's two sample rebalances")
    rv = sub.add_parser("revs", help="the scenario with the library of two revisions, a new process each")
    rv.add_argument("revs", nargs=2, metavar="REV", help='a git revision, or "." for the working tree')
    rv.add_argument("--pairs", type=int, default=2, help="processes of each revision (2: A B B A)")
    rv.add_argument("--job", choices=("scenario", "rebalance"), default="scenario",
                    help="the sample scenario, or the quick start's two sample rebalances")
    rv.add_argument("--repeat", type=int, default=1, help="runs of the job in each process (the first cold)")
    args = parser.parse_args()
    if args.mode == "revs":
        revisions_ab(tuple(args.revs), args.pairs, args.job, args.repeat)
        return
    if args.mode == "jvm":
        jvm_variants(args.variants)
        return
    bad = [kv for kv in args.extra if "=" not in kv]
    if bad:
        parser.error(f"expected key=value or key=, found {bad}")
    settings_ab(dict(kv.split("=", 1) for kv in args.extra), args.pairs, args.job)


if __name__ == "__main__":
    main()
