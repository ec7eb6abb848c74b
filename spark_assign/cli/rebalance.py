"""The rebalance job: one full rebalance of every consumer group in the input.

Reads members and partitions (and optional lags) and runs
:func:`spark_assign.rebalance` over every group: the assignor Kafka would select
from the members' ``assignors`` (or ``--strategy`` for all), EAGER or COOPERATIVE
by the protocol rule, and rounds until nothing is pending, each round a generation
recorded in the Delta history (:class:`spark_assign.history.AssignmentHistory`).
Prints a per-group summary: rounds, moved, revoked and lost.

Where the members' owned partitions come from (``--owned-from``):

* ``history``: each member's partitions in its group's latest recorded generation
  (:func:`spark_assign.ownership.owned_from_history`: by ``member_id``, static
  members by ``group_instance_id``); members gone from the input have departed,
  their partitions ``revoked`` (``--departed leave``) or ``lost`` (``crash``);
* ``input``: the input's own ``owned`` / ``generation`` columns;
* ``none``: a fresh assignment;
* ``auto`` (default): ``input`` when the members input has an ``owned`` or
  ``generation`` column, else ``history`` (a membership export).

Runs locally, under spark-submit, or as a Databricks Python task::

    spark-assign rebalance --config conf/sample.yaml
    python pipelines/rebalance.py --config conf/sample.yaml
    python pipelines/rebalance.py --members m.jsonl --partitions p.jsonl \\
        --history out/history --strategy range --generation 5
    spark-submit pipelines/rebalance.py --config conf/sample.yaml

Or the input is a live cluster: ``--bootstrap-servers host:port`` (with ``--groups``)
captures its groups first (:func:`spark_assign.kafka.capture`, recorded in the
history's ``snapshots`` table), and ``--snapshot <capture id>`` (or ``latest``) runs on
a stored capture; either gives members with the owned partitions they hold now.

Inputs may be Delta folders, Parquet, JSON Lines or CSV paths, or catalog table
names (detected from the name, or set with ``--format``). JSON Lines carry the
array columns natively; CSV needs a header, array cells separated by ``;``
(``topics``: ``orders;payments``) and ``owned`` as ``topic:partition;...``.
Lags: ``group_id, topic, partition, lag``.

Flags override the YAML config. Generations follow the history's rule (the
group's highest generation so far + 1, then one per round). ``--generation N``
makes the first round generation N for every group, with ownership from the
latest generation below N: re-running with the same N and input leaves exactly one
copy of each round.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..errors import InvalidConfigError, SparkAssignError
from ..history import AssignmentHistory
from ..input_files import read_input
from ..inputs import diagnostics
from ..ownership import DEPARTURES, CarriedOwnership, owned_from_history
from ..protocol import PROTOCOL_RULES
from ..rebalance import rebalance
from ..strategies.registry import strategy_name, strategy_options
from . import failed, id_list, key_values, one_line

DEFAULTS: dict[str, Any] = {
    "inputs": {"members": None, "partitions": None, "lags": None, "format": None},
    "snapshot": None,
    "bootstrap_servers": None,
    "groups": None,
    "strategy": None,
    "options": {},
    "history": "out/history",
    "generation": None,
    "owned_from": "auto",
    "departed": "leave",
    "protocol_rule": "static",
    "max_rounds": 5,
    "check": False,
    "spark_conf": None,
}

#: what each config key holds (``--help`` lists them)
CONFIG_KEYS: dict[str, str] = {
    "inputs": "members, partitions, lags (optional): paths or catalog tables; format: delta|parquet|json|csv|table",
    "snapshot": "a capture id in the history's snapshots table (or latest) to run on, instead of inputs",
    "bootstrap_servers": "a Kafka cluster to capture the groups from first, instead of inputs",
    "groups": "the group ids to capture (a list; null: every group the brokers list)",
    "strategy": "assignor for every group (null: Kafka's selection from the members' assignors)",
    "options": "strategy options, e.g. {rack_aware: true} (see spark_assign.strategies.registry)",
    "history": "history location: a folder or a catalog prefix",
    "generation": "generation of the first round for every group (null: latest recorded + 1)",
    "owned_from": "auto | history | input | none",
    "departed": "leave (revoked) | crash (lost): members in the history but not in the input",
    "protocol_rule": "static (Kafka's rule) | dynamic (KIP-726's proposal, not in Kafka's client)",
    "max_rounds": "bound on the rounds of a rebalance",
    "check": "check validity and balance before recording",
    "spark_conf": "Spark settings file (key value lines) for a local session",
}

#: groups listed in the printed summary (the generations table has them all)
MAX_PRINTED = 50

#: where the members' owned partitions come from
OWNED_FROM = ("auto", "history", "input", "none")

SUMMARY_COLUMNS = [
    "group_id", "first_generation", "generation", "rounds", "strategy", "protocol", "members", "partitions",
    "unassigned", "partitions_moved", "revoked", "lost", "min_partitions", "max_partitions", "max_min",
    "total_lag", "max_mean_lag_ratio", "missing_topics", "ignored_owned_claims", "owned_from",
]


def _resolve(path: str | None, base: str) -> str | None:
    """``path`` as given if it exists (or is absolute, a URI or a catalog name), else
    relative to ``base`` (the folder holding the config's folder: the repo root for conf/)."""
    if not path or os.path.isabs(path) or ":" in path or os.path.exists(path):
        return path
    candidate = os.path.join(base, path)
    return candidate if os.path.exists(candidate) else path


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (every flag optional when ``--config`` gives it)."""
    keys = "\n".join(f"  {k:<14} {v}" for k, v in CONFIG_KEYS.items())
    p = argparse.ArgumentParser(prog="spark-assign rebalance", description=__doc__.split("\n\n")[0],
                                epilog=f"config keys (YAML, --config; flags override them):\n{keys}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML config (see conf/sample.yaml)")
    p.add_argument("--members", help="members input (path or catalog table)")
    p.add_argument("--partitions", help="partitions (cluster metadata) input")
    p.add_argument("--lags", help="optional lags input: group_id, topic, partition, lag")
    p.add_argument("--format", dest="input_format",
                   choices=["delta", "parquet", "json", "csv", "table"],
                   help="format of every input (default: detected from the names)")
    p.add_argument("--snapshot", help="run on a stored capture: its id, or latest")
    p.add_argument("--bootstrap-servers", help="capture the groups from this Kafka cluster first (host:port,...)")
    p.add_argument("--groups", help="with --bootstrap-servers: comma-separated group ids (default: all)")
    p.add_argument("--strategy", help="assignor for every group: range, roundrobin, sticky, cooperative-sticky, "
                   "lag-aware (default: Kafka's selection from the members' assignors)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy option (repeatable), e.g. --option rack_aware=true")
    p.add_argument("--history", help="history location: a folder or a catalog prefix (main.kafka_ops)")
    p.add_argument("--generation", type=int, help="generation of the first round for every group "
                   "(default: each group's highest generation so far + 1)")
    p.add_argument("--owned-from", choices=OWNED_FROM,
                   help="owned partitions from the history, the input, or none (default auto: the input's "
                   "owned/generation columns when it has them, else the history)")
    p.add_argument("--departed", choices=sorted(DEPARTURES),
                   help="members in the history but not in the input left (revoked, default) or crashed (lost)")
    p.add_argument("--protocol-rule", choices=PROTOCOL_RULES,
                   help="EAGER/COOPERATIVE by Kafka's static rule (default) or KIP-726's dynamic rule (a proposal, not in Kafka's client)")
    p.add_argument("--max-rounds", type=int, help="bound on the rounds of a rebalance (default 5)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                   help="check the assignment's validity before recording it")
    p.add_argument("--spark-conf", help="Spark settings file (key value lines) for a local session")
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: defaults, then the YAML config, then the flags."""
    cfg: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    if args.config:
        loaded = read_config(args.config)
        unknown = set(loaded) - set(DEFAULTS)
        if unknown:
            raise InvalidConfigError(f"unknown key(s) {sorted(unknown)} in {args.config}: expected {sorted(DEFAULTS)}")
        for key in ("inputs", "options"):
            if loaded.get(key) is not None and not isinstance(loaded[key], dict):
                raise InvalidConfigError(f"{key} in {args.config}: expected a mapping, found {loaded[key]!r}")
        bad_inputs = set(loaded.get("inputs") or {}) - set(DEFAULTS["inputs"])
        if bad_inputs:
            raise InvalidConfigError(f"unknown key(s) {sorted(bad_inputs)} under inputs in {args.config}: "
                                     f"expected {sorted(DEFAULTS['inputs'])}")
        for key, value in loaded.items():
            if isinstance(cfg[key], dict) and isinstance(value, dict):
                cfg[key].update(value)
            elif value is not None or key == "generation":
                cfg[key] = value
    for flag, key in (("members", "members"), ("partitions", "partitions"), ("lags", "lags"),
                      ("input_format", "format")):
        if getattr(args, flag):
            cfg["inputs"][key] = getattr(args, flag)
    if args.groups:
        cfg["groups"] = id_list(args.groups)
    for flag in ("snapshot", "bootstrap_servers", "strategy", "history", "generation", "owned_from", "departed",
                 "protocol_rule", "max_rounds", "check", "spark_conf"):
        if getattr(args, flag) is not None:
            cfg[flag] = getattr(args, flag)
    cfg["options"].update(key_values(args.option, "--option"))
    if args.config:  # config-relative inputs work from any directory
        base = os.path.dirname(os.path.dirname(os.path.abspath(args.config)))
        for key in ("members", "partitions", "lags"):
            cfg["inputs"][key] = _resolve(cfg["inputs"].get(key), base)
        cfg["spark_conf"] = _resolve(cfg.get("spark_conf"), base)
    live = [k for k in ("snapshot", "bootstrap_servers") if cfg.get(k)]
    if len(live) > 1 or (live and cfg["inputs"].get("members")):
        given = live + (["members input"] if cfg["inputs"].get("members") else [])
        raise InvalidConfigError(f"one source of members: inputs, snapshot or bootstrap_servers; found {given}")
    if not live and (not cfg["inputs"].get("members") or not cfg["inputs"].get("partitions")):
        raise InvalidConfigError(
            "members and partitions inputs are required (--members/--partitions or inputs: in --config), "
            "or --snapshot / --bootstrap-servers")
    if cfg["strategy"] is not None:
        cfg["strategy"] = strategy_name(cfg["strategy"])
    for key, choices in (("owned_from", OWNED_FROM), ("departed", tuple(DEPARTURES)),
                         ("protocol_rule", PROTOCOL_RULES)):
        if cfg[key] not in choices:
            raise InvalidConfigError(f"{key}: expected one of {list(choices)}, found {cfg[key]!r}")
    if not isinstance(cfg["max_rounds"], int) or isinstance(cfg["max_rounds"], bool) or cfg["max_rounds"] < 1:
        raise InvalidConfigError(f"max_rounds: expected an int >= 1, found {cfg['max_rounds']!r}")
    if cfg["generation"] is not None and (not isinstance(cfg["generation"], int) or cfg["generation"] < 0):
        raise InvalidConfigError(f"generation: expected an int >= 0 or null, found {cfg['generation']!r}")
    strategy_options(cfg["strategy"], cfg["options"] or {})  # an unknown option fails before Spark starts
    return cfg


def read_config(path: str) -> dict[str, Any]:
    """A YAML config file as a dict; InvalidConfigError naming the file when it is
    missing, not YAML or not a mapping."""
    try:
        with open(path) as fh:
            loaded = yaml.safe_load(fh)
    except OSError as exc:
        raise InvalidConfigError(f"config {path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise InvalidConfigError(f"config {path}: not valid YAML ({one_line(exc)})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InvalidConfigError(f"config {path}: expected a mapping of keys, found {type(loaded).__name__}")
    return loaded


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


def owned_source(setting: str, members: DataFrame) -> str:
    """``history``, ``input`` or ``none``: ``auto`` is ``input`` when the members input
    carries ``owned`` or ``generation``, else ``history``."""
    if setting != "auto":
        return setting
    return "input" if {"owned", "generation"} & set(members.columns) else "history"


def read_members(cfg: dict[str, Any], spark: SparkSession) -> tuple[DataFrame, DataFrame, DataFrame | None]:
    """Members, partitions and lags: from the inputs, a stored capture, or a new capture."""
    if cfg.get("snapshot") or cfg.get("bootstrap_servers"):
        from ..kafka import capture, load_snapshot
        from ..lags import LAG_COLUMNS

        if cfg.get("snapshot"):
            chosen = None if cfg["snapshot"] == "latest" else str(cfg["snapshot"])
            snap = load_snapshot(spark, cfg["history"], chosen)
        else:
            snap = capture(spark, cfg["bootstrap_servers"], cfg.get("groups"), history=cfg["history"])
        # each group under its own protocol: KIP-848 groups run the broker's assignor
        members = snap.members.join(snap.groups.select("group_id", F.col("group_type").alias("group_protocol")),
                                    "group_id")
        return members, snap.partitions, snap.lags.select(*LAG_COLUMNS)
    inputs = cfg["inputs"]
    fmt = inputs.get("format")
    lags = read_input(spark, inputs["lags"], fmt) if inputs.get("lags") else None
    return read_input(spark, inputs["members"], fmt), read_input(spark, inputs["partitions"], fmt), lags


def run(cfg: dict[str, Any], spark: SparkSession) -> DataFrame:
    """One full rebalance of every group; returns the per-group summary DataFrame."""
    history = AssignmentHistory(cfg["history"], spark)
    history.check_writable()  # before reading it or computing anything
    members, partitions, lags = read_members(cfg, spark)

    source = owned_source(cfg["owned_from"], members)
    rebalancing: DataFrame | CarriedOwnership = members
    if source == "history":
        rebalancing = owned_from_history(members, history, departed=cfg["departed"],
                                         before_generation=cfg.get("generation"))
    elif source == "none":
        rebalancing = members.drop(*[c for c in ("owned", "generation", "protocol") if c in members.columns])
    result = rebalance(
        rebalancing, partitions, strategy=cfg.get("strategy"), options=cfg.get("options") or {}, lags=lags,
        protocol_rule=cfg["protocol_rule"], max_rounds=int(cfg["max_rounds"]), history=history,
        first_generation=cfg.get("generation"), check=bool(cfg.get("check")))
    return summarize(history, result.summary, members, partitions, source)


def summarize(history: AssignmentHistory, summary: DataFrame, members: DataFrame, partitions: DataFrame,
              source: str) -> DataFrame:
    """Per group: the rebalance's rounds with their totals (moved, revoked, lost: from
    :class:`~spark_assign.rebalance.RebalanceResult`'s summary), and the balance and lag
    columns of its last round's recorded generation."""
    rounds = summary.groupBy("group_id").agg(
        F.min("generation").alias("first_generation"), F.max("generation").alias("generation"),
        F.count("*").alias("rounds"), F.max_by("assignor", "round").alias("strategy"),
        F.lower(F.max_by("protocol", "round")).alias("protocol"),
        *[F.sum(c).alias(n) for c, n in (("moved", "partitions_moved"), ("revoked", "revoked"), ("lost", "lost"))])
    gens = history.history().join(summary.select("group_id", "generation"), ["group_id", "generation"], "left_semi")
    last = gens.join(rounds.select("group_id", "generation"), ["group_id", "generation"], "left_semi").select(
        "group_id", "members", "partitions", "unassigned", "min_partitions", "max_partitions", "max_min",
        "total_lag", "max_mean_lag_ratio")
    first = gens.join(rounds.select("group_id", F.col("first_generation").alias("generation")),
                      ["group_id", "generation"], "left_semi").select("group_id", "ignored_owned_claims")
    diag = diagnostics(members, partitions).select("group_id", "missing_topics")
    return (
        rounds.join(last, "group_id").join(first, "group_id").join(diag, "group_id", "left")
        .withColumn("owned_from", F.lit(source)).select(*SUMMARY_COLUMNS).orderBy("group_id")
    )


def print_summary(summary: DataFrame, cfg: dict[str, Any]) -> None:
    # one action: the first rows, each with the number of groups (one row per group)
    rows = (summary.withColumn("_groups", F.count("*").over(Window.partitionBy())).orderBy("group_id")
            .limit(MAX_PRINTED).collect())
    total = rows[0]["_groups"] if rows else 0
    source = rows[0].owned_from if rows else cfg["owned_from"]
    chosen = cfg["strategy"] or "the members' assignors (Kafka's selection)"
    print(f"rebalanced {total} group(s) with {chosen}, owned partitions from the {source}, "
          f"recorded in {cfg['history']}")
    header = (f"{'group_id':<22} {'gens':>9} {'rounds':>6} {'strategy':<18} {'protocol':<11} {'members':>7} "
              f"{'parts':>5} {'moved':>5} {'revoked':>7} {'lost':>4} {'min':>3} {'max':>3} {'lag':>7}  notes")
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
        gens = str(r.generation) if r.rounds == 1 else f"{r.first_generation}-{r.generation}"
        lag = "-" if r.total_lag is None else r.total_lag
        print(f"{r.group_id:<22} {gens:>9} {r.rounds:>6} {r.strategy:<18} {r.protocol:<11} {r.members:>7} "
              f"{r.partitions:>5} {r.partitions_moved:>5} {r.revoked:>7} {r.lost:>4} {r.min_partitions:>3} "
              f"{r.max_partitions:>3} {lag!s:>7}  {'; '.join(notes)}")
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
        return failed("rebalance", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
