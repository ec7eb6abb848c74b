"""Run a simulation scenario, record its history, write the HTML report.

    python pipelines/simulate.py --config conf/scenario.yaml

Reads the events (CSV: ``group_id,at,kind,member_id,group_instance_id,rack,
topics,assignors,topic,partitions,partition,lag``, arrays ``|``-separated) and
the partition counts (``topic,partitions``), replays the events recording
every generation under ``<out>/history`` (replaced on each run) together with
the what-if variants (one replay: :func:`spark_assign.simulate.what_if` with
``record_variant``; without variants :func:`spark_assign.simulate.simulate`)
and writes ``<out>/report.html``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

EVENTS_CSV_SCHEMA = (
    "group_id string, at long, kind string, member_id string, group_instance_id string, rack string, "
    "topics string, assignors string, topic string, partitions int, partition int, lag long"
)


def _path(p: str) -> str:
    q = Path(p)
    return str(q if q.is_absolute() else ROOT / q)


def read_events(spark: SparkSession, path: str) -> DataFrame:
    """The events CSV as an events DataFrame (arrays split on ``|``)."""
    df = spark.read.csv(_path(path), header=True, schema=EVENTS_CSV_SCHEMA)
    split = lambda c: F.when(F.col(c).isNull() | (F.trim(c) == ""), F.lit(None).cast("array<string>")).otherwise(  # noqa: E731
        F.split(F.col(c), r"\|"))
    return df.withColumn("topics", split("topics")).withColumn("assignors", split("assignors"))


def read_partitions(spark: SparkSession, path: str) -> DataFrame:
    """``topic,partitions`` counts as ``topic, partition`` rows."""
    counts = spark.read.csv(_path(path), header=True, schema="topic string, partitions int")
    rows = counts.select("topic", F.explode(F.sequence(F.lit(0), F.col("partitions") - 1)).alias("partition"))
    return rows.select("topic", F.col("partition").cast("int").alias("partition"))


def run(config: dict, spark: SparkSession | None = None) -> dict:
    """Run the scenario of ``config``; return paths and the what-if table."""
    from spark_assign.history import AssignmentHistory
    from spark_assign.session import local_session
    from spark_assign.simulate import simulate, simulation_table, what_if

    from pipelines.report import write_report

    spark = spark or local_session("spark-assign-simulate")
    out = Path(_path(config.get("out", "out")))
    out.mkdir(parents=True, exist_ok=True)
    hist_dir = out / "history"
    shutil.rmtree(hist_dir, ignore_errors=True)  # a scenario run replaces its history
    history = AssignmentHistory(str(hist_dir), spark)
    events = read_events(spark, config["events"])
    partitions = read_partitions(spark, config["partitions"])
    settings = dict(
        protocol_rule=config.get("protocol_rule", "static"),
        session_timeout_ms=int(config.get("session_timeout_ms", 45000)),
        scheduled_rebalance_max_delay_ms=int(config.get("scheduled_rebalance_max_delay_ms") or 0),
        group_protocol=config.get("group_protocol"),  # null: classic, or the strategy's (uniform: KIP-848)
        heartbeat_interval_ms=int(config.get("heartbeat_interval_ms") or 5000),
    )
    variants = list(config.get("what_if") or [])
    comparison = None
    t0 = time.time()
    if variants:
        # the replay and its what-if variants in one replay: the variant with the
        # scenario's own settings is the one recorded (added, and left out of the
        # comparison, when no variant has them)
        main = {"strategy": config.get("strategy"), **settings}
        recorded = next((str(v["name"]) for v in variants
                         if {k: v.get(k, d) for k, d in main.items()} == main), None)
        hidden = recorded is None
        if hidden:
            recorded = "_scenario"
            variants.append({"name": recorded, **main})
        comparison = what_if(events, partitions, variants, history=history, record_variant=recorded, **settings)
        if hidden:
            comparison = comparison.where(F.col("variant") != recorded)
        comparison = comparison.orderBy("group_id", "variant")
        comparison = comparison.localCheckpoint(eager=True)
        logging.info("simulated with %d what-if variant(s) in %.1f s", len(variants), time.time() - t0)
    else:
        simulate(events, partitions, strategy=config.get("strategy"), history=history, **settings)
        logging.info("simulated in %.1f s", time.time() - t0)
    report = out / "report.html"
    write_report(history, report, what_if=comparison, title=config.get("title", "spark-assign scenario"))
    return {"history": str(hist_dir), "report": str(report), "what_if": comparison,
            "generations": simulation_table(history)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "conf" / "scenario.yaml"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = yaml.safe_load(Path(_path(args.config)).read_text())
    res = run(config)
    print(f"history: {res['history']}\nreport:  {res['report']}")
    if res["what_if"] is not None:
        res["what_if"].show(truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
