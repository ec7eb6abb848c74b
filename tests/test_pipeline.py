"""spark-assign rebalance (pipelines/rebalance.py), run in-process through its main(argv) with the shared session."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import functions as F

from spark_assign import check_assignment
from spark_assign.history import AssignmentHistory
from spark_assign.input_files import read_input

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GROUPS = ["analytics", "billing", "orders-service"]
COLS = ["group_id", "member_id", "topic", "partition"]


@pytest.fixture(scope="module")
def pipeline():
    return importlib.import_module("spark_assign.cli.rebalance")


def test_sample_rerun_leaves_one_copy_then_a_membership_export_carries_ownership(spark, pipeline, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    hist = str(tmp_path / "history")
    argv = ["--config", "conf/sample.yaml", "--history", hist, "--generation", "5"]
    assert pipeline.main(argv) == 0
    first = capsys.readouterr().out
    assert pipeline.main(argv) == 0
    second = capsys.readouterr().out
    for group in SAMPLE_GROUPS:
        assert group in first
    assert first == second  # the re-run reports the generations recorded before
    assert "owned partitions from the input" in first

    h = AssignmentHistory(hist, spark, backend="embedded")
    # Kafka's selection from each group's assignors; the cooperative group needs two rounds
    assert sorted((r.group_id, r.generation, r.strategy, r.protocol) for r in h.history().collect()) == [
        ("analytics", 5, "sticky", "eager"), ("billing", 5, "range", "eager"),
        ("orders-service", 5, "cooperative-sticky", "cooperative"),
        ("orders-service", 6, "cooperative-sticky", "cooperative")]
    members = read_input(spark, "data/sample/members.jsonl")
    partitions = read_input(spark, "data/sample/partitions.jsonl")
    final = h.latest().select(*COLS)
    ranged = F.col("group_id") == "billing"  # range balances per topic; the sticky family by Kafka's rule
    check_assignment(final.where(ranged), members.where(ranged), partitions, balance="topic")
    check_assignment(final.where(~ranged), members.where(~ranged), partitions, balance="kafka")
    for table in ("assignments", "revocations", "members", "generations"):
        assert len(DeltaTable(f"{hist}/{table}").history()) == 1, table
    # lags from the sample were recorded; the deleted topic's claim is counted
    billing = h.history("billing").first()
    assert billing.total_lag == 10 + 20 + 30 + 40 + 0 + 7
    assert h.history("analytics").first().ignored_owned_claims == 1
    assert sorted((r.generation, r.member_id) for r in h.members("billing").collect()) == [
        (5, "billing-0-aa01"), (5, "billing-1-bb02")]

    # the README's second run: a membership export without owned lists; the static member
    # back with a new member id keeps its partitions, the departed member's are revoked
    assert pipeline.main(["--config", "conf/sample.yaml", "--history", hist,
                          "--members", "data/sample/members-next.jsonl"]) == 0
    assert "owned partitions from the history" in capsys.readouterr().out
    gens = {(r.group_id, r.generation): r for r in h.history().collect()}
    # orders-service: 5-6 (the first run, --generation 5), then 7-8 (cooperative, two rounds)
    assert gens_of(gens, "orders-service") == [5, 6, 7, 8]
    assert gens[("orders-service", 8)].unassigned == 0

    def held(group, generation, member):
        return {(r.topic, r.partition) for r in h.generation(group, generation).where(
            F.col("member_id") == member).collect()}

    # the same static member (orders-c2): it keeps its own partitions or gives some up
    before, after = held("orders-service", 6, "orders-c2-9b1c"), held("orders-service", 7, "orders-c2-d40e")
    assert before and after and after <= before
    # billing-1 left: what it held is revoked in the next generation
    prev, last = gens_of(gens, "billing")
    revoked = {(r.topic, r.partition) for r in h.revocations("billing", last, "revoked").where(
        F.col("member_id") == "billing-1-bb02").collect()}
    assert revoked == held("billing", prev, "billing-1-bb02") != set()


def gens_of(gens, group):
    return sorted(n for g, n in gens if g == group)


@pytest.mark.connect
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
    assert "with range, owned partitions from the input" in out
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    rows = sorted((r.group_id, r.generation, r.strategy, r.members, r.partitions, r.partitions_moved)
                  for r in h.history().collect())
    # the next generation: one more than the latest recorded or the members' own (g1's m1: 1)
    assert rows == [("g1", 2, "range", 2, 6, None), ("g1", 3, "range", 2, 6, 0),
                    ("g2", 1, "range", 1, 2, None), ("g2", 2, "range", 1, 2, 0)]


def test_bad_strategy_is_reported(pipeline, capsys):
    assert pipeline.main(["--members", "m.jsonl", "--partitions", "p.jsonl", "--strategy", "nope"]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err


def test_quickstart_runs_the_sample_jobs_in_order_and_stops_at_the_first_failure(capsys):
    """pipelines/quickstart.py: the README's jobs in one process; a failing job ends the run
    with its exit code, and the jobs after it do not start."""
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "pipelines" / "quickstart.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    assert [job for job, _ in quickstart.QUICKSTART] == ["rebalance", "rebalance", "simulate"]
    for _, argv in quickstart.QUICKSTART:  # every file it names is in the checkout
        for flag, value in zip(argv[::2], argv[1::2]):
            assert (ROOT / value).is_file(), (flag, value)
    # a scenario run replaces its own history: the rebalances' history must survive the quick start
    sample, scenario = (yaml.safe_load((ROOT / "conf" / name).read_text()) for name in ("sample.yaml", "scenario.yaml"))
    rebalanced, simulated = Path(sample["history"]), Path(scenario["out"]) / "history"
    assert not (rebalanced.is_relative_to(simulated) or simulated.is_relative_to(rebalanced)), (rebalanced, simulated)
    bad = ["--members", "m.jsonl", "--partitions", "p.jsonl", "--strategy", "nope"]
    assert quickstart.main([("rebalance", bad), ("simulate", ["--config", "conf/scenario.yaml"])]) == 2
    out, err = capsys.readouterr()
    assert "unknown strategy 'nope'" in err
    assert "== spark-assign rebalance --members m.jsonl" in out and "simulate" not in out


# --------------------------------------------------------------------------- successive runs (issue #18)

RUN_COLUMNS = "group_id string, run int, first_generation int, generation int, rounds long, partitions_moved long, " \
              "revoked long, lost long, unassigned long, min_partitions long, max_partitions long"


def _run_inputs(cases: list[dict], k: int, tmp_path: Path) -> tuple[Path, Path]:
    """The members and partitions files of run ``k`` of ``cases`` (JSON Lines)."""
    members, partitions = [], []
    for case in cases:
        run = case["runs"][k]
        name = case["name"]
        for m in run["members"]:
            m = {"member_id": m} if isinstance(m, str) else m
            members.append({
                "group_id": name, "member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                "topics": [f"{name}/{t}" for t in m.get("topics", case["topics"])], "assignors": case["assignors"]})
        for topic, count in run.get("partitions", case["partitions"]).items():
            partitions += [{"topic": f"{name}/{topic}", "partition": p} for p in range(count)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = tmp_path / f"members-{k}.jsonl", tmp_path / f"partitions-{k}.jsonl"
    for path, rows in zip(paths, (members, partitions)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def test_successive_runs_carry_ownership_from_the_history(spark, pipeline, tmp_path):
    """tests/cases/pipeline/runs.yaml: membership exports without owned lists, run after
    run; ownership, departures and generations come from the history."""
    cases = yaml.safe_load((ROOT / "tests" / "cases" / "pipeline" / "runs.yaml").read_text())["cases"]
    history = str(tmp_path / "history")
    by_flags: dict[str, list[dict]] = {}
    for case in cases:
        by_flags.setdefault(case.get("departed", "leave"), []).append(case)
    got, expected = [], []
    for departed, group in sorted(by_flags.items()):
        for k in range(max(len(c["runs"]) for c in group)):
            running = [c for c in group if k < len(c["runs"])]
            members, partitions = _run_inputs(running, k, tmp_path / departed)
            argv = ["--members", str(members), "--partitions", str(partitions), "--history", history,
                    "--departed", departed, "--check"]
            summary = pipeline.run(pipeline.load_config(pipeline.parse_args(argv)), spark)
            assert {r.owned_from for r in summary.select("owned_from").distinct().collect()} == {"history"}
            got.append(summary.withColumn("run", F.lit(k + 1)))
            for c in running:
                e = c["runs"][k]["expected"]
                expected.append((c["name"], k + 1, *e["generations"], e["rounds"], e["moved"], e["revoked"],
                                 e["lost"], e["unassigned"], e["min"], e["max"]))
    actual = got[0]
    for df in got[1:]:
        actual = actual.unionByName(df)
    cols = [f.split()[0] for f in RUN_COLUMNS.split(", ")]
    assert_df_equality(actual.select(*cols), spark.createDataFrame(expected, RUN_COLUMNS),
                       ignore_row_order=True, ignore_nullable=True)
    # each generation's recorded partitions_moved (given by the rebalance when it knows
    # it, else counted by the writer) equals a recount from the recorded rows
    h = AssignmentHistory(history, spark, backend="embedded")
    gens = h.history().select("group_id", "generation", "previous_generation", "partitions_moved")
    a = h.assignments().select("group_id", "generation", "member_id", "topic", "partition")
    prev = a.select("group_id", F.col("generation").alias("previous_generation"), F.col("member_id").alias("_prev"),
                    "topic", "partition")
    recount = (
        gens.where(F.col("previous_generation").isNotNull()).join(a, ["group_id", "generation"])
        .join(prev, ["group_id", "previous_generation", "topic", "partition"])
        .groupBy("group_id", "generation").agg(F.count(F.when(F.col("member_id") != F.col("_prev"), 1)).alias("n")))
    checked = gens.join(recount, ["group_id", "generation"], "left").select(
        "group_id", "generation", "partitions_moved",
        F.when(F.col("previous_generation").isNotNull(), F.coalesce("n", F.lit(0))).alias("n"))
    assert checked.count() > len(cases)
    assert checked.where(~F.col("partitions_moved").eqNullSafe(F.col("n"))).collect() == []
