"""The rebalance job: one generation for every consumer group in the input.

Reads members and partitions (and optional lags), assigns the partitions of
every group with one strategy, records the generation in the Delta history
(:class:`spark_assign.history.AssignmentHistory`) and prints a per-group
summary.

Runs locally, under spark-submit, or as a Databricks Python task::

    python pipelines/rebalance.py --config conf/sample.yaml
    python pipelines/rebalance.py --members m.jsonl --partitions p.jsonl \\
        --history out/history --strategy range --generation 5
    spark-submit pipelines/rebalance.py --config conf/sample.yaml

Inputs may be Delta folders, Parquet, JSON Lines or CSV paths, or catalog table
names (detected from the name, or set with ``--format``). JSON Lines carry the
array columns natively; CSV needs a header, array cells separated by ``;``
(``topics``: ``orders;payments``) and ``owned`` as ``topic:partition;...``.
Lags: ``group_id, topic, partition, lag``.

Flags override the YAML config. ``--generation N`` records generation N for
every group; re-running with the same N leaves exactly one copy.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import yaml
from pyspark.sql import DataFrame, SparkSession

from spark_assign.assign import assign, strategy_name
from spark_assign.errors import SparkAssignError
from spark_assign.history import AssignmentHistory
from spark_assign.inputs import diagnostics
from spark_assign.properties import check_assignment
from spark_assign.storage import read_input

DEFAULTS: dict[str, Any] = {
    "inputs": {"members": None, "partitions": None, "lags": None, "format": None},
    "strategy": "range",
    "options": {},
    "history": "out/history",
    "generation": None,
    "check": False,
    "spark_conf": None,
}

#: groups listed in the printed summary (the generations table has them all)
MAX_PRINTED = 50

SUMMARY_COLUMNS = [
    "group_id", "generation", "strategy", "members", "partitions", "unassigned",
    "partitions_moved", "min_partitions", "max_partitions", "max_min", "revoked",
    "total_lag", "max_mean_lag_ratio", "missing_topics", "ignored_owned_claims",
]


def _option_value(text: str) -> Any:
    return yaml.safe_load(text)


def _resolve(path: str | None, base: str) -> str | None:
    """``path`` as given if it exists (or is absolute, a URI or a catalog name), else
    relative to ``base`` (the folder holding the config's folder: the repo root for conf/)."""
    if not path or os.path.isabs(path) or ":" in path or os.path.exists(path):
        return path
    candidate = os.path.join(base, path)
    return candidate if os.path.exists(candidate) else path


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (every flag optional when ``--config`` gives it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML config (see conf/sample.yaml)")
    p.add_argument("--members", help="members input (path or catalog table)")
    p.add_argument("--partitions", help="partitions (cluster metadata) input")
    p.add_argument("--lags", help="optional lags input: group_id, topic, partition, lag")
    p.add_argument("--format", dest="input_format",
                   choices=["delta", "parquet", "json", "csv", "table"],
                   help="format of every input (default: detected from the names)")
    p.add_argument("--strategy", help="assignor: range, roundrobin, sticky, cooperative-sticky, lag-aware")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy option (repeatable), e.g. --option rack_aware=true")
    p.add_argument("--history", help="history location: a folder or a catalog prefix (main.kafka_ops)")
    p.add_argument("--generation", type=int, help="generation to record for every group "
                   "(default: each group's latest recorded generation + 1)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                   help="check the assignment's validity before recording it")
    p.add_argument("--spark-conf", help="Spark settings file (key value lines) for a local session")
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: defaults, then the YAML config, then the flags."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    if args.config:
        with open(args.config) as fh:
            loaded = yaml.safe_load(fh) or {}
        unknown = set(loaded) - set(DEFAULTS)
        if unknown:
            raise SystemExit(f"unknown key(s) {sorted(unknown)} in {args.config}: expected {sorted(DEFAULTS)}")
        for key, value in loaded.items():
            if isinstance(cfg[key], dict) and isinstance(value, dict):
                cfg[key].update(value)
            elif value is not None or key == "generation":
                cfg[key] = value
    for flag, key in (("members", "members"), ("partitions", "partitions"), ("lags", "lags"),
                      ("input_format", "format")):
        if getattr(args, flag):
            cfg["inputs"][key] = getattr(args, flag)
    for flag in ("strategy", "history", "generation", "check", "spark_conf"):
        if getattr(args, flag) is not None:
            cfg[flag] = getattr(args, flag)
    for item in args.option:
        if "=" not in item:
            raise SystemExit(f"--option expects KEY=VALUE, found {item!r}")
        key, value = item.split("=", 1)
        cfg["options"][key.strip()] = _option_value(value)
    if args.config:  # config-relative inputs work from any directory
        base = os.path.dirname(os.path.dirname(os.path.abspath(args.config)))
        for key in ("members", "partitions", "lags"):
            cfg["inputs"][key] = _resolve(cfg["inputs"].get(key), base)
        cfg["spark_conf"] = _resolve(cfg.get("spark_conf"), base)
    if not cfg["inputs"].get("members") or not cfg["inputs"].get("partitions"):
        raise SystemExit("members and partitions inputs are required (--members/--partitions or inputs: in --config)")
    cfg["strategy"] = strategy_name(cfg["strategy"])
    return cfg


def read_spark_conf(path: str | None) -> dict[str, str]:
    """``key value`` lines (spark-defaults format; ``#`` comments) as a dict."""
    if not path:
        return {}
    settings = {}
    with open(path) as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if line:
                key, _, value = line.partition(" ")
                settings[key.strip()] = value.strip()
    return settings


def get_session(spark_conf: str | None) -> SparkSession:
    """The active session (spark-submit, Databricks), else a local one with ``spark_conf``."""
    from spark_assign.session import local_session

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = read_spark_conf(spark_conf)
    master = settings.pop("spark.master", "local[2]")
    shuffle = int(settings.pop("spark.sql.shuffle.partitions", "8"))
    memory = settings.pop("spark.driver.memory", None)
    return local_session("spark-assign-rebalance", master=master, shuffle_partitions=shuffle,
                         driver_memory=memory, extra=settings)


def run(cfg: dict[str, Any], spark: SparkSession) -> DataFrame:
    """One rebalance of every group; returns the per-group summary DataFrame."""
    inputs = cfg["inputs"]
    fmt = inputs.get("format")
    members = read_input(spark, inputs["members"], fmt)
    partitions = read_input(spark, inputs["partitions"], fmt)
    lags = read_input(spark, inputs["lags"], fmt) if inputs.get("lags") else None
    strategy = cfg["strategy"]

    assignment = assign(members, partitions, strategy, lags=lags, **(cfg.get("options") or {}))
    if cfg.get("check"):
        cooperative = strategy == "cooperative-sticky"
        assignment = check_assignment(assignment, members, partitions, balance=None, cooperative=cooperative)

    history = AssignmentHistory(cfg["history"], spark)
    recorded = history.record(assignment, members=members, partitions=partitions, strategy=strategy,
                              generation=cfg.get("generation"), lags=lags)
    diag = diagnostics(members, partitions).select("group_id", "missing_topics")
    return recorded.join(diag, "group_id", "left").select(*SUMMARY_COLUMNS).orderBy("group_id")


def print_summary(summary: DataFrame, cfg: dict[str, Any]) -> None:
    rows = summary.limit(MAX_PRINTED + 1).collect()  # one row per group
    total = summary.count() if len(rows) > MAX_PRINTED else len(rows)
    print(f"recorded {total} group(s) with strategy {cfg['strategy']} in {cfg['history']}")
    header = f"{'group_id':<24} {'gen':>4} {'members':>7} {'parts':>6} {'moved':>6} {'min':>4} {'max':>4} {'revoked':>7} {'lag':>8}  notes"
    print(header)
    print("-" * len(header))
    for r in rows[:MAX_PRINTED]:
        notes = []
        if r.missing_topics:
            notes.append("missing topics: " + ",".join(r.missing_topics))
        if r.ignored_owned_claims:
            notes.append(f"ignored owned claims: {r.ignored_owned_claims}")
        if r.unassigned:
            notes.append(f"unassigned: {r.unassigned}")
        moved = "-" if r.partitions_moved is None else r.partitions_moved
        revoked = "-" if r.revoked is None else r.revoked
        lag = "-" if r.total_lag is None else r.total_lag
        print(f"{r.group_id:<24} {r.generation:>4} {r.members:>7} {r.partitions:>6} {moved!s:>6} "
              f"{r.min_partitions:>4} {r.max_partitions:>4} {revoked!s:>7} {lag!s:>8}  {'; '.join(notes)}")
    if total > MAX_PRINTED:
        print(f"... and {total - MAX_PRINTED} more group(s): see the generations table")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse flags, run, print the summary. Returns the exit code."""
    args = parse_args(argv)
    try:
        cfg = load_config(args)
        spark = get_session(cfg.get("spark_conf"))
        summary = run(cfg, spark)
        print_summary(summary, cfg)
    except SparkAssignError as exc:
        print(f"rebalance failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
