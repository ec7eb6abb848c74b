"""Run a simulation scenario, record its history, write the HTML report.

    spark-assign simulate --config conf/scenario.yaml
    python pipelines/simulate.py --config conf/scenario.yaml   # from a checkout

Reads the events (CSV: ``group_id,at,kind,member_id,group_instance_id,rack,
topics,assignors,topic,partitions,partition,lag``, arrays ``|``-separated) and
the partition counts (``topic,partitions``), replays the events recording
every generation in the history (``--history``: a folder, or a catalog database such as
``spark_catalog.kafka_ops``; ``<out>/history`` by default), replaced on each run, together with
the what-if variants (one replay: :func:`spark_assign.simulate.what_if` with
``record_variant``; without variants :func:`spark_assign.simulate.simulate`)
and writes ``<out>/report.html``. Relative paths in the config are taken from the
current directory when they exist there, else from the folder above the config's.

A scenario run replaces its history: a folder is deleted first; in a catalog database the
history's own tables (:data:`~spark_assign.history.TABLES` and ``simulation``) are dropped
first, and every other table of the database is left as it is.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..errors import InvalidConfigError, InvalidOptionError, SparkAssignError
from ..execution import materialize
from ..locations import is_path, local_path
from ..simulation.timing import Timing
from ..strategies.registry import strategy_name, strategy_options
from . import failed
from .rebalance import _resolve, read_config

#: the config keys and what they hold (``--help`` lists them)
CONFIG_KEYS: dict[str, str] = {
    "events": "events CSV (required)",
    "partitions": "partition counts CSV: topic,partitions (required)",
    "out": "output folder: the report at <out>/report.html, the history under <out>/history unless "
           "history is given (default out)",
    "history": "history location, replaced on each run: a folder, or a catalog database (spark_catalog.kafka_ops)",
    "title": "the report's title",
    "strategy": "assignor for every group (null: Kafka's selection from the members' assignors)",
    "options": "strategy options, e.g. {rack_aware: true}",
    "protocol_rule": "static (Kafka's rule) | dynamic (KIP-726's proposal, not in Kafka's client)",
    "timing": "both protocols' timers: {classic: {heartbeat_interval_ms, session_timeout_ms, "
              "rebalance_timeout_ms, initial_rebalance_delay_ms, metadata_max_age_ms, join_sync_ms}, "
              "consumer: {heartbeat_interval_ms, session_timeout_ms}} (Kafka's defaults)",
    "scheduled_rebalance_max_delay_ms": "incremental cooperative rebalancing's deferred resolution "
                                        "(Connect's scheduled.rebalance.max.delay.ms; default 0: none)",
    "group_protocol": "classic | consumer (KIP-848); null: the strategy's",
    "max_rounds": "bound on the rounds of a rebalance (default 5)",
    "what_if": "variants: [{name, strategy, protocol_rule, timing, scheduled_rebalance_max_delay_ms, "
               "group_protocol, restart_protocol}] (restart_protocol: consumer, a rolling upgrade to KIP-848 "
               "member by member)",
}
REQUIRED_KEYS = ("events", "partitions")

EVENTS_CSV_SCHEMA = (
    "group_id string, at long, kind string, member_id string, group_instance_id string, rack string, "
    "topics string, assignors string, topic string, partitions int, partition int, lag long, group_protocol string"
)


def read_events(spark: SparkSession, path: str) -> DataFrame:
    """The events CSV as an events DataFrame (arrays split on ``|``; the last column,
    ``group_protocol``, may be left out)."""
    df = spark.read.csv(path, header=True, schema=EVENTS_CSV_SCHEMA)
    split = lambda c: F.when(F.col(c).isNull() | (F.trim(c) == ""), F.lit(None).cast("array<string>")).otherwise(  # noqa: E731
        F.split(F.col(c), r"\|"))
    return df.withColumn("topics", split("topics")).withColumn("assignors", split("assignors"))


def read_partitions(spark: SparkSession, path: str) -> DataFrame:
    """``topic,partitions`` counts as ``topic, partition`` rows."""
    counts = spark.read.csv(path, header=True, schema="topic string, partitions int")
    rows = counts.select("topic", F.explode(F.sequence(F.lit(0), F.col("partitions") - 1)).alias("partition"))
    return rows.select("topic", F.col("partition").cast("int").alias("partition"))


def load_config(path: str) -> dict[str, Any]:
    """The scenario config: known keys only, the required ones present, relative paths
    resolved (see the module doc); InvalidConfigError naming the key otherwise."""
    config = read_config(path)
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise InvalidConfigError(f"unknown key(s) {unknown} in {path}: expected {sorted(CONFIG_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if not config.get(k)]
    if missing:
        raise InvalidConfigError(f"missing key(s) {missing} in {path}: expected {list(REQUIRED_KEYS)}")
    try:
        Timing.of(config.get("timing"))
    except InvalidOptionError as exc:
        raise InvalidConfigError(f"{path}: {exc}") from None
    for key in ("scheduled_rebalance_max_delay_ms", "max_rounds"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidConfigError(f"{key} in {path}: expected an int >= 0, found {value!r}")
    if not isinstance(config.get("what_if") or [], list) or not isinstance(config.get("options") or {}, dict):
        raise InvalidConfigError(f"{path}: what_if must be a list of variants and options a mapping")
    if config.get("strategy"):
        config["strategy"] = strategy_name(config["strategy"])
    strategy_options(config.get("strategy"), config.get("options") or {})
    base = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    for key in ("events", "partitions", "out"):
        if config.get(key):
            config[key] = _resolve(str(config[key]), base)
    for key in REQUIRED_KEYS:
        if "://" not in config[key] and not os.path.exists(config[key]):
            raise InvalidConfigError(f"{key} in {path}: no file {config[key]!r}")
    return config


def run(config: dict, spark: SparkSession | None = None) -> dict:
    """Run the scenario of ``config`` (as :func:`load_config` returns it); return paths
    and the what-if table."""
    from ..history import AssignmentHistory
    from ..session import local_session
    from ..simulate import simulate, what_if
    from ..simulation.analytics import simulation_table
    from .report import write_report

    spark = spark or local_session("spark-assign-simulate")
    out = Path(config.get("out") or "out")
    out.mkdir(parents=True, exist_ok=True)
    location = str(config.get("history") or out / "history")
    replace_history(spark, location)
    history = AssignmentHistory(location, spark)
    events = read_events(spark, config["events"])
    partitions = read_partitions(spark, config["partitions"])
    settings = dict(
        protocol_rule=config.get("protocol_rule", "static"),
        scheduled_rebalance_max_delay_ms=int(config.get("scheduled_rebalance_max_delay_ms") or 0),
        group_protocol=config.get("group_protocol"),  # null: classic, or the strategy's (uniform: KIP-848)
    )
    timing = Timing.of(config.get("timing"))
    options, max_rounds = dict(config.get("options") or {}), int(config.get("max_rounds") or 5)
    variants = list(config.get("what_if") or [])
    comparison = None
    t0 = time.time()
    if variants:
        # the replay and its what-if variants in one replay: the variant with the
        # scenario's own settings is the one recorded (added, and left out of the
        # comparison, when no variant has them)
        main = {"strategy": config.get("strategy"), **settings, "timing": None}
        recorded = next((str(v["name"]) for v in variants
                         if {k: v.get(k, d) for k, d in main.items()} == main), None)
        hidden = recorded is None
        if hidden:
            recorded = "_scenario"
            variants.append({"name": recorded, **main})
        comparison = what_if(events, partitions, variants, history=history, record_variant=recorded,
                             timing=timing, **settings, options=options, max_rounds=max_rounds)
        if hidden:
            comparison = comparison.where(F.col("variant") != recorded)
        comparison = comparison.orderBy("group_id", "variant")
        comparison = materialize(comparison)
        logging.info("simulated with %d what-if variant(s) in %.1f s", len(variants), time.time() - t0)
    else:
        simulate(events, partitions, strategy=config.get("strategy"), history=history, timing=timing, **settings,
                 options=options, max_rounds=max_rounds)
        logging.info("simulated in %.1f s", time.time() - t0)
    report = out / "report.html"
    write_report(history, report, what_if=comparison, title=config.get("title", "spark-assign scenario"),
                 timing=timing, variants=variants)
    return {"history": location, "report": str(report), "what_if": comparison,
            "generations": simulation_table(history)}


def replace_history(spark: SparkSession, location: str) -> None:
    """Make room for a scenario's history at ``location``: delete a local folder; drop the
    history's tables of a catalog database (the database and its other tables stay)."""
    from ..history import TABLES

    if not is_path(location):
        for table in (*TABLES, "simulation"):
            spark.sql(f"DROP TABLE IF EXISTS {location}.{table}")
        return
    local = local_path(location)
    if local is None:
        raise InvalidConfigError(f"history {location!r}: a scenario replaces its history, which it does for a local "
                                 "folder or a catalog database; expected one of those, found a remote path")
    shutil.rmtree(local, ignore_errors=True)


def main(argv=None) -> int:
    """Entry point (``spark-assign simulate``): returns the exit code, 2 with one line
    on stderr for a bad config or any :class:`~spark_assign.errors.SparkAssignError`."""
    keys = "\n".join(f"  {k:<34} {v}" for k, v in CONFIG_KEYS.items())
    parser = argparse.ArgumentParser(prog="spark-assign simulate", description=__doc__.splitlines()[0],
                                     epilog=f"config keys (YAML):\n{keys}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the scenario's YAML config (see conf/scenario.yaml)")
    parser.add_argument("--history", help="history location, replaced on each run: a folder, or a catalog "
                        "database such as spark_catalog.kafka_ops (default <out>/history)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
        if args.history:
            config["history"] = args.history
        res = run(config)
    except SparkAssignError as exc:
        return failed("simulate", exc)
    print(f"history: {res['history']}\nreport:  {res['report']}")
    if res["what_if"] is not None:
        res["what_if"].show(truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
