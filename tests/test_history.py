"""AssignmentHistory: generations recorded in Delta, read back through Spark and delta-rs.

Cases: tests/cases/history/generations.yaml (one group per case; call k records
step k of every case in ONE record() call).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from casetable import CASES_DIR, SEP, Case, expected, inputs, lags, parse_tp, strip_topics
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import functions as F

from spark_assign.errors import HistoryError
from spark_assign.history import GENERATIONS_SCHEMA, AssignmentHistory, record_id

ROOT = Path(__file__).resolve().parents[1]
CASES = yaml.safe_load((CASES_DIR / "history" / "generations.yaml").read_text())["cases"]
ROW = ["group_id", "generation", "member_id", "topic", "partition"]
REV = ["group_id", "generation", "member_id", "topic", "partition", "kind"]
TABLES = ("assignments", "revocations", "generations")


def step_cases(k: int) -> list[Case]:
    """Step ``k`` (0-based) of every case that has one, as casetable Cases."""
    out = []
    for c in CASES:
        if len(c["steps"]) > k:
            st = c["steps"][k]
            out.append(Case(name=c["name"], strategy=None, options={}, members=st["members"],
                            partitions=st["partitions"], expected=st["assignment"],
                            lags=st.get("lags"), raw=st))
    return out


def tp_rows(cases: list[Case], key: str, extra=()) -> list[tuple]:
    """``group_id, member_id, topic, partition (+extra)`` rows of a member -> [tp] table."""
    rows = []
    for c in cases:
        for member, tps in (c.raw.get(key) or {}).items():
            for t, p in map(parse_tp, tps):
                rows.append((c.group_id, member, c.name + SEP + t, p, *extra))
    return rows


def record_step(spark, history: AssignmentHistory, k: int, generation=None):
    cases = step_cases(k)
    members, partitions = inputs(spark, cases)
    lost_rows = tp_rows(cases, "lost")
    lost = (spark.createDataFrame(lost_rows, "group_id string, member_id string, topic string, partition int")
            if lost_rows else None)
    lag_df = lags(spark, cases) if any(c.lags for c in cases) else None
    return history.record(expected(spark, cases), members=members, partitions=partitions,
                          strategy="range", generation=generation, lags=lag_df, lost=lost)


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """Call 1 (default generation), call 2 (generation as a DataFrame), call 2 again (int)."""
    location = str(tmp_path_factory.mktemp("history") / "h")
    history = AssignmentHistory(location, spark, backend="embedded")
    first = record_step(spark, history, 0)
    groups2 = [c.group_id for c in step_cases(1)]
    gen2 = spark.createDataFrame([(g, 2) for g in groups2], "group_id string, generation int")
    second = record_step(spark, history, 1, generation=gen2)
    again = record_step(spark, history, 1, generation=2)
    return {"history": history, "location": location, "first": first, "second": second, "again": again}


def expected_assignments(spark):
    rows = []
    for k in range(2):
        for c in step_cases(k):
            for member, tps in c.expected.items():
                for t, p in map(parse_tp, tps):
                    rows.append((c.group_id, k + 1, member, c.name + SEP + t, p))
    return spark.createDataFrame(rows, "group_id string, generation int, member_id string, topic string, partition int")


@pytest.mark.connect
def test_assignments_of_every_generation(spark, recorded):
    actual = recorded["history"].assignments().select(*ROW)
    assert_df_equality(strip_topics(actual), strip_topics(expected_assignments(spark)),
                       ignore_row_order=True, ignore_nullable=True)


@pytest.mark.connect
def test_generations_summary(spark, recorded):
    h = recorded["history"]
    expected_long = []
    for k in range(2):
        for c in step_cases(k):
            for col, value in c.raw["expected_generation"].items():
                if col != "generation":
                    expected_long.append((c.group_id, k + 1, col, None if value is None else str(value)))
    exp = spark.createDataFrame(expected_long, "group_id string, generation int, column string, value string")
    cols = [f.name for f in GENERATIONS_SCHEMA.fields if f.name not in ("group_id", "generation")]
    actual = h.history().select("group_id", "generation", *[F.col(c).cast("string").alias(c) for c in cols]) \
        .unpivot(["group_id", "generation"], cols, "column", "value") \
        .join(exp.select("group_id", "generation", "column"), ["group_id", "generation", "column"], "left_semi")
    assert_df_equality(actual, exp, ignore_row_order=True, ignore_nullable=True, ignore_column_order=True)
    # one generations row per group and generation, strategy and protocol recorded
    assert h.history().groupBy("group_id", "generation").count().where("count > 1").count() == 0
    assert {(r.strategy, r.protocol) for r in h.history().select("strategy", "protocol").distinct().collect()} \
        == {("range", "eager")}


@pytest.mark.connect
def test_revocations_table(spark, recorded):
    rows = []
    for k in range(2):
        cases = step_cases(k)
        rows += [(g, k + 1, m, t, p, "revoked") for g, m, t, p in tp_rows(cases, "expected_revocations")]
        rows += [(g, k + 1, m, t, p, "lost") for g, m, t, p in tp_rows(cases, "expected_lost")]
    exp = spark.createDataFrame(rows, "group_id string, generation int, member_id string, topic string, "
                                      "partition int, kind string")
    actual = recorded["history"].revocations().select(*REV)
    assert_df_equality(actual, exp, ignore_row_order=True, ignore_nullable=True)
    # the same rows through SQL
    recorded["history"].register_views(prefix="hist_")
    via_sql = spark.sql("SELECT group_id, generation, member_id, topic, partition, kind "
                        "FROM hist_revocations WHERE kind = 'revoked'")
    assert_df_equality(via_sql, exp.where("kind = 'revoked'"), ignore_row_order=True, ignore_nullable=True)


def test_record_returns_the_generation_rows(recorded):
    assert sorted((r.group_id, r.generation) for r in recorded["first"].collect()) == \
        sorted((c.group_id, 1) for c in step_cases(0))
    second = sorted((r.group_id, r.generation, r.record_id) for r in recorded["second"].collect())
    again = sorted((r.group_id, r.generation, r.record_id) for r in recorded["again"].collect())
    assert second == again  # the repeated call returns the rows recorded before
    assert {r for _, _, r in second} == {record_id([(c.group_id, 2) for c in step_cases(1)])}


@pytest.mark.connect
def test_members_of_each_generation(recorded):
    """record(members=...) writes who was in the group, members holding nothing too."""
    expected = sorted((c.group_id, k + 1, m["member_id"], m.get("group_instance_id"))
                      for k in range(2) for c in step_cases(k) for m in c.members)
    got = sorted((r.group_id, r.generation, r.member_id, r.group_instance_id)
                 for r in recorded["history"].members().collect())
    assert got == expected


@pytest.mark.connect
def test_same_generation_twice_leaves_one_copy_and_one_commit_per_call(recorded):
    loc = recorded["location"]
    for table in (*TABLES, "members"):
        dt = DeltaTable(f"{loc}/{table}")
        # two record() calls wrote; the third (same generation again) was a quiet no-op
        assert len(dt.history()) == 2, table
        assert dt.version() == 1
    # delta-rs reads the same rows as Spark: no duplicates
    arrow = DeltaTable(f"{loc}/assignments").to_pyarrow_table().select(ROW).to_pylist()
    spark_rows = [tuple(r) for r in recorded["history"].assignments().select(*ROW).collect()]
    assert sorted(tuple(d.values()) for d in arrow) == sorted(spark_rows)
    assert len(set(spark_rows)) == len(spark_rows)


def test_delta_history_dataframe(recorded):
    log = recorded["history"].delta_history("generations")
    rows = log.orderBy("version").collect()
    assert [r.version for r in rows] == [0, 1]
    assert [r.operation for r in rows] == ["CREATE TABLE", "WRITE"]
    assert all("spark-assign:generations:" in r.userMetadata for r in rows)
    # time travel: version 0 holds the first call only
    assert recorded["history"].as_of("generations", 0).count() == len(step_cases(0))


@pytest.mark.connect
def test_latest_generation_and_moves(spark, recorded):
    h = recorded["history"]
    last = {}
    for k in range(2):
        for c in step_cases(k):
            last[c.group_id] = (k + 1, c)
    rows = [(g, gen, m, c.name + SEP + t, p) for g, (gen, c) in last.items()
            for m, tps in c.expected.items() for t, p in map(parse_tp, tps)]
    exp = spark.createDataFrame(rows, "group_id string, generation int, member_id string, topic string, partition int")
    assert_df_equality(h.latest().select(*ROW), exp, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(h.generation("scale_out", 1).select(*ROW),
                       expected_assignments(spark).where("group_id = 'scale_out' AND generation = 1"),
                       ignore_row_order=True, ignore_nullable=True)
    moves = [tuple(r) for r in strip_topics(h.moves("scale_in", 1, 2)).collect()]
    assert sorted(moves) == [("scale_in", "t", 2, "b", "a"), ("scale_in", "t", 3, "b", "a")]
    assert h.moves("steady", 1, 2).count() == 0


def test_different_assignment_for_a_recorded_generation_is_refused(spark, recorded):
    h, loc = recorded["history"], recorded["location"]
    changed = spark.createDataFrame([("scale_out", "c1", "scale_out/t", 0), ("scale_out", "c0", "scale_out/t", 1),
                                     ("scale_out", "c0", "scale_out/t", 2)],
                                    "group_id string, member_id string, topic string, partition int")
    with pytest.raises(HistoryError, match="already recorded"):
        h.record(changed, strategy="range", generation=2)
    for table in TABLES:  # nothing written
        assert DeltaTable(f"{loc}/{table}").version() == 1


def test_default_generation_is_previous_plus_one_and_new_groups_start_at_one(spark, tmp_path):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    a = spark.createDataFrame([("g1", "m", "t", 0)], "group_id string, member_id string, topic string, partition int")
    h.record(a, strategy="range", generation=7)
    both = a.unionByName(spark.createDataFrame([("g2", "m", "t", 0)], a.schema))
    rows = sorted((r.group_id, r.generation, r.previous_generation, r.partitions_moved, r.members, r.revoked)
                  for r in h.record(both, strategy="range").collect())
    # no members given: members from the assignment, revoked unknown (null)
    assert rows == [("g1", 8, 7, 0, 1, None), ("g2", 1, None, None, 1, None)]


def test_generation_dataframe_must_cover_every_group(spark, tmp_path):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    a = spark.createDataFrame([("g1", "m", "t", 0), ("g2", "m", "t", 0)],
                              "group_id string, member_id string, topic string, partition int")
    gens = spark.createDataFrame([("g1", 3)], "group_id string, generation int")
    with pytest.raises(HistoryError, match="g2"):
        h.record(a, strategy="range", generation=gens)
    assert not os.path.exists(tmp_path / "h" / "generations")


def test_a_first_record_killed_before_its_first_commit_leaves_a_history_that_records(spark, tmp_path):
    """A first record killed after its Parquet files moved into the assignments folder, before
    delta-rs created the table: the stranded files are in no table; the next record creates it
    around them and reads only its own rows."""
    loc = str(tmp_path / "h")
    h = AssignmentHistory(loc, spark, backend="embedded")
    store = h.stores["assignments"]
    values = {"group_id": "'g1'", "generation": "1", "member_id": "'stranded'", "topic": "'t'", "partition": "0"}
    stranded = spark.range(1).selectExpr(*[f"CAST({values.get(f.name, 'NULL')} AS {f.dataType.simpleString()}) "
                                           f"AS `{f.name}`" for f in store.schema.fields])
    files = store.write_files(stranded)
    assert files and not os.path.isdir(f"{loc}/assignments/_delta_log")

    gen1 = spark.createDataFrame([("g1", "a", "t", 0), ("g1", "b", "t", 1)],
                                 "group_id string, member_id string, topic string, partition int")
    h.record(gen1, strategy="range", generation=1)
    assert_df_equality(h.assignments().select("group_id", "member_id", "topic", "partition"), gen1,
                       ignore_row_order=True, ignore_nullable=True)
    assert DeltaTable(f"{loc}/assignments").to_pyarrow_table().num_rows == 2
    assert all(os.path.exists(f"{loc}/assignments/{f}") for f in files)  # left for VACUUM, never read


def test_a_writer_checks_a_history_between_other_writers_commits(spark, tmp_path):
    """The check before a record waits for the history's commit lock: it never looks at a
    table another writer is creating (its Delta log folder made, its first commit not yet)."""
    from deltalake import write_deltalake

    from spark_assign.storage import arrow_schema
    from spark_assign.storage.locking import history_lock

    h = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    gens = tmp_path / "h" / "generations"
    creating = threading.Event()

    def other_writer():
        with history_lock(h.lock_root()):
            (gens / "_delta_log").mkdir(parents=True)
            creating.set()
            time.sleep(0.5)
            write_deltalake(str(gens), pa.Table.from_pylist([], schema=arrow_schema(GENERATIONS_SCHEMA)))

    writer = threading.Thread(target=other_writer)
    writer.start()
    try:
        assert creating.wait(30)
        with pytest.raises(HistoryError, match="cannot read the Delta log"):  # the half-created table, unlocked
            h.stores["generations"].check_writable()
        h.check_writable()  # waits for the lock, then finds a Delta table with the expected columns
        assert not writer.is_alive()
    finally:
        writer.join()


def test_generation_dataframe_gives_one_generation_per_group(spark, tmp_path):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    a = spark.createDataFrame([("g1", "m", "t", 0), ("g2", "m", "t", 0)],
                              "group_id string, member_id string, topic string, partition int")
    gens = spark.createDataFrame([("g1", 3), ("g2", 4), ("g2", 5)], "group_id string, generation int")
    with pytest.raises(HistoryError, match=r"more than one generation given for group\(s\) \['g2'\]"):
        h.record(a, strategy="range", generation=gens)
    assert not os.path.exists(tmp_path / "h" / "generations")


def test_record_generations_records_several_generations_per_group_in_one_commit(spark, tmp_path):
    """A rebalance's rounds (or a whole simulation) in one call: every generation of
    every group lands in one commit per table; each generation's previous one and its
    moves are found inside the call as well as in the history; the same call again is
    a no-op, and a pair given twice is refused before anything is written."""
    loc = str(tmp_path / "h")
    h = AssignmentHistory(loc, spark, backend="embedded")
    schema = "group_id string, member_id string, topic string, partition int"
    h.record(spark.createDataFrame([("g1", "a", "t", 0), ("g1", "a", "t", 1)], schema), strategy="range",
             generation=1)
    rows = spark.createDataFrame(
        [("g1", 2, "a", "t", 0), ("g1", 2, "b", "t", 1),          # t-1 moves a -> b (against the history)
         ("g1", 3, "b", "t", 0), ("g1", 3, "b", "t", 1),          # t-0 moves a -> b (against generation 2)
         ("g2", 1, "x", "t", 0)],
        "group_id string, generation int, member_id string, topic string, partition int")
    gens = spark.createDataFrame(
        [("g1", 2, "cooperative-sticky", "cooperative", 1, 3, 0), ("g1", 3, "cooperative-sticky", "cooperative", 2, 3, 1),
         ("g2", 1, "range", "eager", 1, None, None)],
        "group_id string, generation int, strategy string, protocol string, round int, members long, unassigned long"
    ).withColumn("recorded_at", F.current_timestamp())
    revs = spark.createDataFrame([("g1", 2, "a", "t", 1, "revoked"), ("g1", 3, "a", "t", 0, "lost")],
                                 "group_id string, generation int, member_id string, topic string, partition int, kind string")
    h.record_generations(rows, gens, revocations=revs)
    got = sorted(tuple(r) for r in h.history().select(
        "group_id", "generation", "previous_generation", "round", "members", "partitions", "partitions_moved",
        "min_partitions", "max_partitions", "revoked", "lost", "unassigned").collect())
    assert got == [
        ("g1", 1, None, None, 1, 2, None, 2, 2, None, None, None),
        ("g1", 2, 1, 1, 3, 2, 1, 0, 1, 1, 0, 0),   # three members, one of them holding nothing
        ("g1", 3, 2, 2, 3, 2, 1, 0, 2, 0, 1, 1),
        ("g2", 1, None, 1, 1, 1, None, 1, 1, 0, 0, None),
    ]
    assert [tuple(r) for r in h.moves("g1", 2, 3).collect()] == [("g1", "t", 0, "a", "b")]
    for table in TABLES:  # the first record() call, then this one: one commit each
        assert DeltaTable(f"{loc}/{table}").version() == 1, table
    h.record_generations(rows, gens, revocations=revs)  # the same again: nothing new
    for table in TABLES:
        assert DeltaTable(f"{loc}/{table}").version() == 1, table
    twice = gens.unionByName(gens.where("generation = 3"))
    with pytest.raises(HistoryError, match=r"a generation given twice for group\(s\) \['g1'\]"):
        h.record_generations(rows, twice)
    assert h.assignments().count() == 7
