"""The pipelines under ``spark-submit`` (the one in PySpark's ``bin/``), with Delta's jars, as
docs/production.md runs them: the history is written by Spark's own Delta and read back with
plain Spark SQL.

- ``pipelines/rebalance.py --config conf/sample.yaml`` into a Delta-on-Spark history folder,
  and ``pipelines/simulate.py`` into another, side by side;
- then three rebalance runs at once into the first history, their generations commits held at
  a barrier (tests/barrier_run.py) so that they land together: two record generation 10 of every
  group (with range and with roundrobin), one generation 12. Exactly one of the first two
  commits, the other exits with a retryable ConcurrentWriteError; generation 7 lands too. No
  lock is taken: the generations commit is conditional (docs/production.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
import yaml
from pyspark.sql import functions as F
from short_run import C1_ONLY, INTERPRETED, delta_conf

from spark_assign import check_assignment
from spark_assign.cli import RETRY_EXIT
from spark_assign.cli.simulate import replace_history
from spark_assign.history import AssignmentHistory
from spark_assign.input_files import read_input
from spark_assign.storage import SPARK_DELTA

ROOT = Path(__file__).resolve().parents[1]
SPARK_SUBMIT = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
SAMPLE_GROUPS = ("analytics", "billing", "orders-service")


def spark_submit(script: str, *args: str, log: Path) -> subprocess.Popen:
    """Start ``spark-submit`` of ``script`` with Delta's jars and settings (docs/production.md)."""
    conf = {**delta_conf(), **INTERPRETED, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    jars = conf.pop("spark.jars")
    command = [str(SPARK_SUBMIT), "--master", "local[2]", "--driver-memory", "1g", "--jars", jars,
               "--driver-java-options", f"{C1_ONLY} -XX:ReservedCodeCacheSize=256m", *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
               script, *args]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    out = open(log, "w")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def finished(runs: dict[str, tuple[subprocess.Popen, Path]]) -> dict[str, tuple[int, str]]:
    """Each run's exit code and output, once all have ended."""
    done = {}
    for name, (proc, log) in runs.items():
        try:
            code = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        done[name] = (code, log.read_text())
    return done


def generation_rows(spark, history: str):
    """The recorded generations, read with Spark SQL from the Delta folder."""
    return {tuple(r) for r in spark.sql(
        f"SELECT group_id, generation, strategy, protocol FROM delta.`{history}/generations`").collect()}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    """The sample rebalance and the sample scenario, each in a spark-submit of its own."""
    work = tmp_path_factory.mktemp("submit")
    scenario = yaml.safe_load((ROOT / "conf" / "scenario.yaml").read_text())
    scenario.update(out=str(work / "scenario"), events=str(ROOT / scenario["events"]),
                    partitions=str(ROOT / scenario["partitions"]))
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    runs = {
        "rebalance": (spark_submit("pipelines/rebalance.py", "--config", "conf/sample.yaml", "--history",
                                   str(work / "history"), log=work / "rebalance.log"), work / "rebalance.log"),
        "simulate": (spark_submit("pipelines/simulate.py", "--config", str(work / "scenario.yaml"), "--history",
                                  str(work / "scenario-history"), log=work / "simulate.log"), work / "simulate.log"),
    }
    done = finished(runs)
    for name, (code, out) in done.items():
        assert code == 0, f"{name}:\n{out[-4000:]}"
    return work, done


def test_the_sample_rebalance_under_spark_submit_writes_spark_delta(spark, submitted):
    work, done = submitted
    history = str(work / "history")
    for group in SAMPLE_GROUPS:
        assert group in done["rebalance"][1]
    # Kafka's selection from each group's assignors, at the generation after the members' own;
    # the cooperative group needs two rounds
    assert generation_rows(spark, history) == {
        ("analytics", 3, "sticky", "eager"), ("billing", 8, "range", "eager"),
        ("orders-service", 5, "cooperative-sticky", "cooperative"),
        ("orders-service", 6, "cooperative-sticky", "cooperative")}
    # written by Spark's Delta: each commit carries the Spark-Delta store's writer id
    commits = spark.sql(f"DESCRIBE HISTORY delta.`{history}/assignments`").collect()
    assert len(commits) == 1 and "spark_assign_writer" in commits[0].userMetadata
    assert commits[0].engineInfo.startswith("Apache-Spark")
    # plain SQL over the tables gives what the history handle gives
    latest = spark.sql(f"""
        SELECT a.group_id, a.member_id, a.topic, a.partition
        FROM delta.`{history}/assignments` a
        JOIN (SELECT group_id, max(generation) AS generation FROM delta.`{history}/generations` GROUP BY group_id) g
          ON a.group_id = g.group_id AND a.generation = g.generation""")
    h = AssignmentHistory(history, spark, backend=SPARK_DELTA)
    cols = ("group_id", "member_id", "topic", "partition")
    assert {tuple(r) for r in latest.collect()} == {tuple(r) for r in h.latest().select(*cols).collect()}
    members = read_input(spark, str(ROOT / "data/sample/members.jsonl"))
    partitions = read_input(spark, str(ROOT / "data/sample/partitions.jsonl"))
    ranged = F.col("group_id") == "billing"
    check_assignment(latest.where(ranged), members.where(ranged), partitions, balance="topic")
    check_assignment(latest.where(~ranged), members.where(~ranged), partitions, balance="kafka")


def test_the_sample_scenario_under_spark_submit(spark, submitted):
    work, _ = submitted
    history = str(work / "scenario-history")
    generations = spark.sql(f"SELECT * FROM delta.`{history}/generations`")
    simulation = spark.sql(f"SELECT * FROM delta.`{history}/simulation`")
    h = AssignmentHistory(history, spark, backend=SPARK_DELTA)
    assert generations.count() == h.history().count() > 0
    # every recorded generation has its simulated time, and its assignment rows
    pairs = {(r.group_id, r.generation) for r in generations.collect()}
    assert {(r.group_id, r.generation) for r in simulation.collect()} == pairs
    assert {(r.group_id, r.generation) for r in spark.sql(
        f"SELECT DISTINCT group_id, generation FROM delta.`{history}/assignments`").collect()} >= pairs
    assert (work / "scenario" / "report.html").stat().st_size > 0


def test_concurrent_spark_submit_writers(spark, submitted, tmp_path):
    work, _ = submitted
    history = str(work / "history")
    barrier = tmp_path / "barrier"
    flags = ("--config", "conf/sample.yaml", "--history", history, "--owned-from", "none")
    runs = {
        name: (spark_submit("tests/barrier_run.py", str(barrier), name, "3", *flags, "--strategy", strategy,
                            "--generation", generation, log=tmp_path / f"{name}.log"), tmp_path / f"{name}.log")
        for name, strategy, generation in (("range-10", "range", "10"), ("roundrobin-10", "roundrobin", "10"),
                                           ("range-12", "range", "12"))}
    done = finished(runs)
    assert done["range-12"][0] == 0, done["range-12"][1][-4000:]
    codes = sorted(done[name][0] for name in ("range-10", "roundrobin-10"))
    assert codes == [0, RETRY_EXIT], {name: out[-3000:] for name, (_, out) in done.items()}
    winner = "range" if done["range-10"][0] == 0 else "roundrobin"
    loser = "roundrobin-10" if winner == "range" else "range-10"
    assert "ConcurrentWriteError" in done[loser][1] and "retry it" in done[loser][1]
    rows = generation_rows(spark, history)
    assert {r for r in rows if r[1] == 10} == {(g, 10, winner, "eager") for g in SAMPLE_GROUPS}
    assert {r for r in rows if r[1] == 12} == {(g, 12, "range", "eager") for g in SAMPLE_GROUPS}
    # never a duplicate, never a generation without its assignment rows
    h = AssignmentHistory(history, spark, backend=SPARK_DELTA)
    recorded = h.history()
    assert recorded.count() == recorded.select("group_id", "generation").distinct().count() == len(rows)
    shown = h.assignments()
    assert recorded.join(shown, ["group_id", "generation"], "left_anti").count() == 0
    assert shown.count() == shown.select("group_id", "generation", "topic", "partition").distinct().count()


def test_a_scenario_replaces_its_catalog_tables_only(spark):
    """In a catalog database a scenario run drops the history's own tables first: no other."""
    spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.scenario_ops")
    try:
        h = AssignmentHistory("spark_catalog.scenario_ops", spark, backend=SPARK_DELTA)
        h.record(spark.createDataFrame([("g", "m", "t", 0)], "group_id string, member_id string, topic string, "
                                       "partition int"), strategy="range")
        spark.sql("CREATE TABLE spark_catalog.scenario_ops.kept (x int) USING delta")

        def tables():  # the database's tables (SHOW TABLES lists the session's temporary views too)
            return {r.tableName for r in spark.sql("SHOW TABLES IN spark_catalog.scenario_ops").collect()
                    if not r.isTemporary}

        assert {"generations", "assignments", "revocations", "kept"} <= tables()
        replace_history(spark, "spark_catalog.scenario_ops")
        assert tables() == {"kept"}
    finally:
        spark.sql("DROP DATABASE IF EXISTS spark_catalog.scenario_ops CASCADE")
