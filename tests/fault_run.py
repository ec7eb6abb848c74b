"""Run by tests/test_faults.py in its own process: a local-cluster Spark (two executor
JVMs), one executor killed (SIGKILL, by its pid) in the middle of an ``assign()`` and
of a ``rebalance()`` that records history, under each materialization policy in turn
(the policy is read at every call, so one cluster serves both). Prints one JSON line
per policy and call.

What the calls start from (the result of the call without a kill, the history and the
rebalance's members) is made beforehand by :func:`prepare`, in the test run's own warm session:
in this process's three new JVMs the same work took about a third of the run.

usage: python tests/fault_run.py WORKDIR [reliable] [local]   (WORKDIR prepared by prepare())
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from pyspark.sql import functions as F
from short_run import C1_ONLY, INTERPRETED

from spark_assign import AssignmentHistory, assign, check_assignment, rebalance
from spark_assign.lineage import local_relation
from spark_assign.lost_executors import executor_ids
from spark_assign.session import local_session

#: the kill comes once this many Spark jobs of the call have started: for assign() (about 23
#: jobs), after its first checkpoints; for rebalance() (about 200 jobs, two rounds), once the
#: first round's state is checkpointed (by job 30-50) and before the rounds are recorded, which
#: reads it (an earlier kill can miss every block the call reads afterwards: under a loaded
#: machine it landed a few jobs late and the call completed)
KILL_AFTER_JOBS = {"assign": 8, "rebalance": 60}


def main(workdir: str, modes: list[str]) -> None:
    extra = {
        "spark.executor.memory": "512m",
        # what is under test is the loss of an executor's blocks, not how the code runs: the
        # three JVMs compile with C1 only and every plan runs interpreted (tests/short_run.py: no
        # generated classes for each JVM to compile). The executors' took this run from 197-202 s
        # to 110 s on 2 cores (their compilers had been competing for the cores); with its
        # starting state made by prepare() it took 98.6 s, and with the driver's too 83 s
        "spark.executor.extraJavaOptions": C1_ONLY,
        "spark.driver.extraJavaOptions": C1_ONLY,
        **INTERPRETED,
        # every shuffle keeps its 4 partitions, so each executor stores blocks of each checkpoint
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.checkpoint.dir": os.path.join(workdir, "checkpoints"),
        # the calls here are small: without this they would keep most of their state on the
        # driver (spark_assign.lineage.decide_small_call), and the kill could miss every block
        "spark.assign.smallCallRows": "0",
    }
    spark = local_session(master="local-cluster[2,1,1024]", shuffle_partitions=4, extra=extra)
    sc = spark.sparkContext

    def executor_pids() -> list[int]:
        out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
        return [int(line.split()[0]) for line in out.splitlines()
                if "CoarseGrainedExecutorBackend" in line and sc.applicationId in line]  # -ww: whole lines

    def jobs() -> int:
        return len(sc.statusTracker().getJobIdsForGroup(None))

    def with_a_kill(call, after_jobs: int):
        deadline = time.monotonic() + 120
        # a lost one is relaunched: its process, then the driver's registration of it (the call
        # names a lost executor from the ids the driver lists when it starts)
        while (len(executor_pids()) < 2 or len(executor_ids(spark) or ()) < 2) and time.monotonic() < deadline:
            time.sleep(0.2)
        start, killed = jobs(), []

        def killer():
            while not killed and time.monotonic() < deadline:
                if jobs() - start >= after_jobs:
                    pid = executor_pids()[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                time.sleep(0.01)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            outcome = {"result": call()}
        except Exception as exc:
            outcome = {"error": type(exc).__name__, "message": str(exc)[:2000]}
        killed.append(0)  # stops the killer if it has not fired
        thread.join()
        return {**outcome, "killed": [pid for pid in killed if pid]}

    members, partitions = inputs(spark)
    with open(os.path.join(workdir, EXPECTED)) as saved:
        expected = [tuple(r) for r in json.load(saved)]
    # the rebalance's members on the driver (a local relation): no block of theirs can be lost
    # with the executor, so what the kill takes is the call's own state
    joined = local_relation(spark.read.parquet(os.path.join(workdir, JOINED)))
    for mode in modes:
        spark.conf.set("spark.assign.materialization", mode)  # explicit: the session has a checkpoint dir
        history_path = os.path.join(workdir, f"history-{mode}")
        shutil.copytree(os.path.join(workdir, BASE_HISTORY), history_path)
        run_calls(spark, mode, members, partitions, joined, history_path, with_a_kill, expected)
    spark.stop()


#: what :func:`prepare` writes into the work folder
EXPECTED, BASE_HISTORY, JOINED = "expected.json", "history-base", "joined.parquet"


def inputs(spark):
    """The calls' members (40 groups of 10, topics t and u) and partitions (100 of each topic)."""
    members = spark.range(0, 400, numPartitions=4).select(
        F.concat(F.lit("g"), (F.col("id") % 40).cast("string")).alias("group_id"),
        F.concat(F.lit("m"), F.col("id").cast("string")).alias("member_id"),
        F.array(F.lit("t"), F.lit("u")).alias("topics"))
    partitions = spark.range(0, 100, numPartitions=4).select(
        F.explode(F.array(F.lit("t"), F.lit("u"))).alias("topic"), F.col("id").cast("int").alias("partition"))
    return members, partitions


def rows(df):
    """``df``'s assignment rows, sorted (comparable across sessions)."""
    return sorted(tuple(r) for r in df.select("group_id", "member_id", "topic", "partition").collect())


def prepare(spark, workdir: str) -> None:
    """Into ``workdir``, with ``spark`` (the test run's session, with the default
    ``spark.assign.*`` settings; the results do not depend on its partitioning or policies):
    the sticky assignment of :func:`inputs` without a kill (the rows the killed ``assign()``
    must give), and the history both policies start from (each copies it), a cooperative
    rebalance of the 40 groups at generation 1, with its members plus a joiner per group (the
    killed rebalance's members)."""
    members, partitions = inputs(spark)
    with open(os.path.join(workdir, EXPECTED), "w") as out:
        json.dump(rows(assign(members, partitions, "sticky")), out)
    history = AssignmentHistory(os.path.join(workdir, BASE_HISTORY), spark, backend="embedded")
    first = rebalance(members, partitions, strategy="cooperative-sticky", history=history)
    first.members.select("group_id", "member_id", "topics", "owned", "generation").unionByName(
        spark.range(0, 40, numPartitions=2).select(
            F.concat(F.lit("g"), F.col("id").cast("string")).alias("group_id"),
            F.concat(F.lit("joiner"), F.col("id").cast("string")).alias("member_id"),
            F.array(F.lit("t"), F.lit("u")).alias("topics"),
            F.lit(None).cast("array<struct<topic:string,partition:int>>").alias("owned"),
            F.lit(None).cast("int").alias("generation"))).write.parquet(os.path.join(workdir, JOINED))


def run_calls(spark, mode, members, partitions, joined, history_path, with_a_kill, expected) -> None:
    """One policy's two calls, each with an executor killed in its middle (``joined``: the
    rebalance's members, on the history at ``history_path``)."""
    # assign(): the result under a kill equals the result without one
    outcome = with_a_kill(lambda: rows(check_assignment(assign(members, partitions, "sticky"), members, partitions)),
                          KILL_AFTER_JOBS["assign"])
    if "result" in outcome:
        outcome["result"] = outcome["result"] == expected
    print(json.dumps({"mode": mode, "call": "assign", **outcome}), flush=True)

    # rebalance() recording its rounds: a cooperative rebalance of 40 groups that each get a
    # joiner (two rounds, the first round's state read by the second and by the recording), on a
    # history holding generation 1
    history = AssignmentHistory(history_path, spark, backend="embedded")
    before = history.history().count()
    outcome = with_a_kill(lambda: rows(rebalance(joined, partitions, strategy="cooperative-sticky",
                                                 history=history).final), KILL_AFTER_JOBS["rebalance"])
    outcome["generations_before"] = before
    outcome["generations"] = history.history().count()
    outcome["assignment_rows"] = history.assignments().count()
    if "result" in outcome:
        outcome["result"] = outcome["result"] == rows(history.latest())
    print(json.dumps({"mode": mode, "call": "rebalance", **outcome}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["reliable", "local"])
