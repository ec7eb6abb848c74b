"""tests/cases/bad_inputs.yaml: every malformed input raises its specific error, and no
history is touched (byte-for-byte). Also two pipelines recording into one history at
the same moment: both land or one fails, never a duplicate or a lost generation."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

import spark_assign
import spark_assign.errors
from spark_assign import AssignmentHistory, assign, partition_lags, rebalance, simulate, what_if
from spark_assign.cli import rebalance as rebalance_job
from spark_assign.cli import simulate as simulate_job
from spark_assign.history import GENERATIONS_SCHEMA
from spark_assign.storage import arrow_schema

ROOT = Path(__file__).resolve().parents[1]
TABLE = yaml.safe_load((ROOT / "tests" / "cases" / "bad_inputs.yaml").read_text())
DEFAULTS = TABLE["defaults"]
CASES = TABLE["cases"]


def tree_bytes(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: relative path -> sha256 of its bytes."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def frame(spark, spec):
    return spark.createDataFrame([tuple(r) for r in spec["rows"]], spec["schema"])


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """A real history with one recorded rebalance, copied by the history cases."""
    folder = tmp_path_factory.mktemp("recorded") / "history"
    rebalance(frame(spark, DEFAULTS["members"]), frame(spark, DEFAULTS["partitions"]), strategy="range",
              history=AssignmentHistory(str(folder), spark, backend="embedded"))
    return folder


def prepare_history(kind: str | None, folder: Path, recorded: Path) -> Path:
    """The history a case records into (see the table's header)."""
    if kind is None:
        return folder
    if kind == "a_file":
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.write_text("not a history\n")
        return folder
    if kind == "not_delta":
        (folder / "generations").mkdir(parents=True)
        (folder / "generations" / "notes.csv").write_text("group_id,generation\ng,1\n")
        return folder
    shutil.copytree(recorded, folder)
    gens = folder / "generations"
    if kind == "corrupt_log":
        (gens / "_delta_log" / "00000000000000000001.json").write_text('{"add": {"path": truncated')
    elif kind == "extra_column":
        from deltalake import DeltaTable
        from deltalake.schema import Field, PrimitiveType

        DeltaTable(str(gens)).alter.add_columns([Field("added_by_a_newer_version", PrimitiveType("string"), True)])
    elif kind == "missing_column":
        from deltalake import write_deltalake

        shutil.rmtree(gens)
        schema = arrow_schema(GENERATIONS_SCHEMA)
        schema = schema.remove(schema.get_field_index("max_mean_lag_ratio"))
        write_deltalake(str(gens), pa.Table.from_pylist([], schema=schema))
    elif kind == "is_a_table":
        return gens
    else:
        raise AssertionError(f"unknown history kind {kind!r}")
    return folder


def write_jsonl(path: Path, spec) -> str:
    cols = [c.strip().split(" ")[0] for c in spec["schema"].split(",")]
    path.write_text("".join(json.dumps(dict(zip(cols, r))) + "\n" for r in spec["rows"]))
    return str(path)


def run_pipeline(job, case, tmp_path: Path, history: Path, capsys) -> tuple[int, str]:
    """The pipeline on a valid config with the case's keys merged in; exit code and stderr."""
    if job is rebalance_job:
        config = {"inputs": {"members": write_jsonl(tmp_path / "members.jsonl", DEFAULTS["members"]),
                             "partitions": write_jsonl(tmp_path / "partitions.jsonl", DEFAULTS["partitions"])},
                  "history": str(history), "check": False}
    else:
        config = {"events": str(ROOT / "data" / "scenario" / "events.csv"),
                  "partitions": str(ROOT / "data" / "scenario" / "partitions.csv"), "out": str(tmp_path / "out")}
    for key, value in (case.get("config") or {}).items():
        if value is None:
            config.pop(key, None)
        elif isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(case["raw_config"] if "raw_config" in case else yaml.safe_dump(config))
    capsys.readouterr()
    code = job.main(["--config", str(path)])
    return code, capsys.readouterr().err


def run_call(spark, case, history: AssignmentHistory):
    """The library call of a case, computed to the end."""
    get = lambda key: frame(spark, case.get(key) or DEFAULTS[key])  # noqa: E731
    strategy = case.get("strategy", DEFAULTS["strategy"])
    options, kwargs = case.get("options") or {}, case.get("kwargs") or {}
    call = case.get("call", "assign")
    if call == "assign":
        assign(get("members"), get("partitions"), strategy, **kwargs, **options).count()
    elif call == "rebalance":
        rebalance(get("members"), get("partitions"), strategy=strategy, history=history, options=options, **kwargs)
    elif call == "lags":
        partition_lags(get("lags")).count()
    elif call == "simulate":
        simulate(get("events"), get("partitions"), strategy=strategy, history=history, options=options, **kwargs)
    elif call == "what_if":
        what_if(get("events"), get("partitions"), **kwargs).count()
    else:
        raise AssertionError(f"unknown call {call!r}")


def test_the_table_covers_what_the_issue_lists():
    calls = {c.get("call", "assign") for c in CASES}
    assert len(CASES) >= 40 and {"assign", "rebalance", "lags", "simulate", "pipeline_rebalance",
                                 "pipeline_simulate"} <= calls
    assert {c.get("history") for c in CASES} >= {"not_delta", "corrupt_log", "extra_column", "missing_column"}
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_input(spark, case, tmp_path, recorded, capsys):
    folder = prepare_history(case.get("history"), tmp_path / "history", recorded)
    before = tree_bytes(folder)
    error = getattr(spark_assign.errors, case["error"])
    call = case.get("call", "assign")
    if call.startswith("pipeline_"):
        job = rebalance_job if call == "pipeline_rebalance" else simulate_job
        code, err = run_pipeline(job, case, tmp_path, folder, capsys)
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"{case['error']}: " in lines[0], err
        assert case["message"] in lines[0], err
    else:
        with pytest.raises(error) as raised:
            run_call(spark, case, AssignmentHistory(str(folder), spark, backend="embedded"))
        assert type(raised.value).__name__ == case["error"], raised.value
        assert case["message"] in str(raised.value)
    assert tree_bytes(folder) == before


def test_two_pipelines_recording_at_once_never_duplicate_a_generation(spark, tmp_path):
    """Two rebalances of one group, different inputs, recording into one history at the
    same moment (threads: two jobs on one Spark session): each generation lands once,
    and a writer that lost the race fails with HistoryError, never half-recorded."""
    members = frame(spark, DEFAULTS["members"])
    joined = members.unionByName(spark.createDataFrame([("g", "m3", ["t"])], members.schema))
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    outcomes: dict[str, object] = {}

    def run(name, m):
        try:
            rebalance(m, frame(spark, DEFAULTS["partitions"]), strategy="range", history=history)
            outcomes[name] = "recorded"
        except spark_assign.HistoryError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(n, m)) for n, m in (("two", members), ("three", joined))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gens = history.history().select("group_id", "generation", "members", "record_id").collect()
    assert len({(r.group_id, r.generation) for r in gens}) == len(gens), gens  # never a duplicate
    rows = history.assignments().groupBy("generation").count().collect()
    assert {r.generation: r["count"] for r in rows} == {r.generation: 3 for r in gens}  # every partition, once
    landed = sum(o == "recorded" for o in outcomes.values())
    assert landed == len(gens) >= 1, outcomes
    for name, outcome in outcomes.items():
        if outcome != "recorded":
            assert "already recorded with a different assignment" in str(outcome), outcome
    # the loser retries: the pipeline numbers its generation from the history, so it lands next
    if landed == 1:
        loser = "two" if outcomes["two"] != "recorded" else "three"
        run(loser, members if loser == "two" else joined)
        assert outcomes[loser] == "recorded"
        assert sorted(r.generation for r in history.history().collect()) == [1, 2]
    assert not os.path.exists(tmp_path / "history" / "_commit.lock")


def test_a_lock_held_by_a_live_writer_waits_and_one_left_by_a_dead_writer_is_broken(tmp_path):
    """The history's commit lock: a live holder (another process on this host) makes the
    next writer wait, then fail with a retryable HistoryError; the lock of a writer
    whose process is gone (killed while holding it) is broken at once."""
    import socket
    import subprocess
    import sys

    from spark_assign.storage.locking import LOCK_NAME, history_lock

    lock = tmp_path / LOCK_NAME
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "since": 0}))
        with pytest.raises(spark_assign.HistoryError, match="another writer holds .*_commit.lock"):
            with history_lock(str(tmp_path), wait_seconds=0.3):
                pass
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    with history_lock(str(tmp_path), wait_seconds=0.3):  # its writer is gone now
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()
