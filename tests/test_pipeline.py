"""pipelines/rebalance.py, run in-process through its main(argv) with the shared session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from spark_assign import assign
from spark_assign.history import AssignmentHistory
from spark_assign.storage import read_input

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GROUPS = ["analytics", "billing", "orders-service"]
COLS = ["group_id", "member_id", "topic", "partition"]


def load_pipeline():
    spec = importlib.util.spec_from_file_location("rebalance_pipeline", ROOT / "pipelines" / "rebalance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pipeline():
    return load_pipeline()


def test_sample_config_rerun_same_generation_leaves_one_copy(spark, pipeline, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    hist = str(tmp_path / "history")
    argv = ["--config", "conf/sample.yaml", "--history", hist, "--generation", "5"]
    assert pipeline.main(argv) == 0
    first = capsys.readouterr().out
    assert pipeline.main(argv) == 0
    second = capsys.readouterr().out
    for group in SAMPLE_GROUPS:
        assert group in first
    assert first == second  # the re-run reports the generation recorded before

    h = AssignmentHistory(hist, spark)
    assert sorted((r.group_id, r.generation, r.strategy) for r in h.history().collect()) == \
        [(g, 5, "range") for g in SAMPLE_GROUPS]
    members = read_input(spark, "data/sample/members.jsonl")
    partitions = read_input(spark, "data/sample/partitions.jsonl")
    direct = assign(members, partitions, "range")
    assert_df_equality(h.assignments().select(*COLS), direct.select(*COLS),
                       ignore_row_order=True, ignore_nullable=True)
    for table in ("assignments", "revocations", "generations"):
        assert len(DeltaTable(f"{hist}/{table}").history()) == 1, table
    # lags from the sample were recorded; the deleted topic's claim is counted
    billing = h.history("billing").first()
    assert billing.total_lag == 10 + 20 + 30 + 40 + 0 + 7
    assert h.history("analytics").first().ignored_owned_claims == 1


def test_csv_inputs_strategy_override_and_default_generations(spark, pipeline, tmp_path, capsys):
    (tmp_path / "members.csv").write_text(
        "group_id,member_id,topics,owned,generation\n"
        "g1,m1,orders;payments,orders:0,1\n"
        "g1,m2,orders,,\n"
        "g2,x,payments,,\n")
    (tmp_path / "partitions.csv").write_text(
        "topic,partition\n" + "".join(f"orders,{p}\n" for p in range(4)) + "payments,0\npayments,1\n")
    config = tmp_path / "run.yaml"
    config.write_text(
        f"inputs: {{members: {tmp_path / 'members.csv'}, partitions: {tmp_path / 'partitions.csv'}}}\n"
        f"strategy: roundrobin\nhistory: {tmp_path / 'h'}\ncheck: true\n")
    argv = ["--config", str(config), "--strategy", "org.apache.kafka.clients.consumer.RangeAssignor"]
    assert pipeline.main(argv) == 0
    assert pipeline.main(argv) == 0
    out = capsys.readouterr().out
    assert "strategy range" in out
    h = AssignmentHistory(str(tmp_path / "h"), spark)
    rows = sorted((r.group_id, r.generation, r.strategy, r.members, r.partitions, r.partitions_moved)
                  for r in h.history().collect())
    assert rows == [("g1", 1, "range", 2, 6, None), ("g1", 2, "range", 2, 6, 0),
                    ("g2", 1, "range", 1, 2, None), ("g2", 2, "range", 1, 2, 0)]


def test_bad_strategy_is_reported(pipeline, capsys):
    assert pipeline.main(["--members", "m.jsonl", "--partitions", "p.jsonl", "--strategy", "nope"]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
