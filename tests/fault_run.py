"""Run by tests/test_faults.py in its own process: a local-cluster Spark (two executor
JVMs), one executor killed (SIGKILL, by its pid) in the middle of an ``assign()`` and
of a ``rebalance()`` that records history, on the large path (checkpoints) and on the
small-call path, under each materialization policy in turn (both are read at every call,
so one cluster serves all four). The kill comes right after the call has materialized
something it reads later (:data:`KILL_AFTER`): the harness wraps the methods that make
checkpoints and local relations for the call's duration. Prints one JSON line per path,
policy and call.

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
import time

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from short_run import C1_ONLY, INTERPRETED

from spark_assign import AssignmentHistory, assign, check_assignment, rebalance
from spark_assign.execution import local_relation
from spark_assign.execution.lost_executors import executor_ids
from spark_assign.session import local_session

#: when the kill comes, by path: on the large path (``spark.assign.smallCallRows=0``), right after
#: the call's n-th materialization returns (a checkpoint that later steps read: under ``local`` the
#: call must then fail on its lost blocks, which shows the kill landed while they were needed);
#: on the small path, right after its n-th local relation is made (its state is on the driver)
KILL_AFTER = {("large", "assign"): 2, ("large", "rebalance"): 6, ("small", "assign"): 2, ("small", "rebalance"): 6}
#: the two paths: every call large (checkpoints), and the default small-call path
PATHS = {"large": "0", "small": ""}


def main(workdir: str, modes: list[str]) -> None:
    extra = {
        "spark.executor.memory": "512m",
        # what is under test is the loss of an executor's blocks, not how the code runs: the
        # three JVMs compile with C1 only and every plan runs interpreted (tests/short_run.py: no
        # generated classes for each JVM to compile)
        "spark.executor.extraJavaOptions": C1_ONLY,
        "spark.driver.extraJavaOptions": C1_ONLY,
        **INTERPRETED,
        # every shuffle keeps its 4 partitions, so each executor stores blocks of each checkpoint
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.checkpoint.dir": os.path.join(workdir, "checkpoints"),
    }
    spark = local_session(master="local-cluster[2,1,1024]", shuffle_partitions=4, extra=extra)
    sc = spark.sparkContext

    def executor_pids() -> list[int]:
        out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
        return [int(line.split()[0]) for line in out.splitlines()
                if "CoarseGrainedExecutorBackend" in line and sc.applicationId in line]  # -ww: whole lines

    def wait_for(condition, what: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {seconds} s for {what}")
            time.sleep(0.1)

    def with_a_kill(call, path: str, after: int):
        """``call()``'s outcome with an executor killed right after the call's ``after``-th
        materialization (large path) or local relation (small path), synchronously: the kill
        and the driver's removal of the executor come before the call goes on."""
        # a lost one is relaunched: its process, then the driver's registration of it (the call
        # names a lost executor from the ids the driver lists when it starts)
        wait_for(lambda: len(executor_pids()) == 2 and len(executor_ids(spark) or ()) == 2, "two executors")
        made, killed = [], []

        def kill_after(method):
            def wrapper(*args, **kwargs):
                out = method(*args, **kwargs)
                if path == "small" and not isinstance(args[1] if len(args) > 1 else None, pa.Table):
                    return out  # a local relation is made from a pyarrow.Table
                made.append(method.__name__)
                if len(made) == after:
                    if path == "large" and method.__name__ == "localCheckpoint":
                        out.count()  # a lazy local checkpoint: its blocks stored now, on both executors
                    before = executor_ids(spark) or set()
                    pid = executor_pids()[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    wait_for(lambda: len(executor_ids(spark) or before) < len(before), "the driver to drop it")
                return out

            return wrapper

        targets = [(SparkSession, "createDataFrame")] if path == "small" else [
            (ClassicDataFrame, "localCheckpoint"), (ClassicDataFrame, "checkpoint")]
        originals = [(owner, name, getattr(owner, name)) for owner, name in targets]
        for owner, name, method in originals:
            setattr(owner, name, kill_after(method))
        try:
            outcome = {"result": call()}
        except Exception as exc:
            outcome = {"error": type(exc).__name__, "message": str(exc)[:2000]}
        finally:
            for owner, name, method in originals:
                setattr(owner, name, method)
        return {**outcome, "killed": killed, "made_after_kill": len(made) - after}

    members, partitions = inputs(spark)
    with open(os.path.join(workdir, EXPECTED)) as saved:
        expected = [tuple(r) for r in json.load(saved)]
    # the rebalance's members on the driver (a local relation): no block of theirs can be lost
    # with the executor, so what the kill takes is the call's own state
    joined = local_relation(spark.read.parquet(os.path.join(workdir, JOINED)))
    for path, rows_setting in PATHS.items():
        spark.conf.set("spark.assign.smallCallRows", rows_setting) if rows_setting else spark.conf.unset(
            "spark.assign.smallCallRows")
        for mode in modes:
            spark.conf.set("spark.assign.materialization", mode)  # explicit: the session has a checkpoint dir
            history_path = os.path.join(workdir, f"history-{path}-{mode}")
            shutil.copytree(os.path.join(workdir, BASE_HISTORY), history_path)
            run_calls(spark, path, mode, members, partitions, joined, history_path, with_a_kill, expected)
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


def run_calls(spark, path, mode, members, partitions, joined, history_path, with_a_kill, expected) -> None:
    """One path's and policy's two calls, each with an executor killed in its middle (``joined``:
    the rebalance's members, on the history at ``history_path``)."""
    # assign(): the result under a kill equals the result without one
    outcome = with_a_kill(lambda: rows(check_assignment(assign(members, partitions, "sticky"), members, partitions)),
                          path, KILL_AFTER[path, "assign"])
    if "result" in outcome:
        outcome["result"] = outcome["result"] == expected
    print(json.dumps({"path": path, "mode": mode, "call": "assign", **outcome}), flush=True)

    # rebalance() recording its rounds: a cooperative rebalance of 40 groups that each get a
    # joiner (two rounds, the first round's state read by the second and by the recording), on a
    # history holding generation 1
    history = AssignmentHistory(history_path, spark, backend="embedded")
    before = history.history().count()
    outcome = with_a_kill(lambda: rows(rebalance(joined, partitions, strategy="cooperative-sticky",
                                                 history=history).final), path, KILL_AFTER[path, "rebalance"])
    outcome["generations_before"] = before
    outcome["generations"] = history.history().count()
    outcome["assignment_rows"] = history.assignments().count()
    if "result" in outcome:
        outcome["result"] = outcome["result"] == rows(history.latest())
    print(json.dumps({"path": path, "mode": mode, "call": "rebalance", **outcome}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["reliable", "local"])
