"""The storage switch: the embedded (delta-rs) backend, and input reading."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import types as T

from spark_assign.errors import HistoryError, InvalidInputError
from spark_assign.history import AssignmentHistory
from spark_assign.input_files import detect_format, read_input
from spark_assign.inputs import normalize_members, normalize_partitions
from spark_assign.locations import is_path, spark_delta_configured
from spark_assign.storage import EMBEDDED, SPARK_DELTA, choose_backend, open_table

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("lag", T.LongType()),
    T.StructField("at", T.TimestampType()),
])


def test_backend_choice(spark):
    # the test session has Delta configured, as Databricks and spark-submit sessions do: the
    # jar-less choice (embedded) is checked by the subprocess runs (tests/test_packaging.py)
    assert spark_delta_configured(spark)
    assert choose_backend(spark) == SPARK_DELTA and choose_backend(spark, "embedded") == EMBEDDED
    with pytest.raises(HistoryError, match=r"unknown storage backend 'delta-rs': expected one of"):
        choose_backend(spark, "delta-rs")
    assert is_path("out/history") and is_path("/tmp/x") and is_path("s3://b/x") and is_path("./h")
    assert not is_path("main.kafka_ops")
    with pytest.raises(HistoryError, match="catalog table name"):
        open_table(spark, "main.kafka_ops.assignments", SCHEMA, backend="embedded")


def test_append_commit_read_and_idempotence(spark, tmp_path):
    loc = str(tmp_path / "t")
    store = open_table(spark, loc, SCHEMA, backend="embedded")
    empty = store.read()
    assert empty.count() == 0 and empty.schema == SCHEMA  # before the table exists

    df = spark.sql("SELECT 'g' AS group_id, 1 AS generation, CAST(NULL AS BIGINT) AS lag, "
                   "TIMESTAMP'2026-01-02 03:04:05.123456' AS at")
    assert store.append(df, app_id="app-1", metadata={"k": "v"}) is True
    assert store.append(df, app_id="app-1") is False  # same transaction marker: skipped
    assert store.committed("app-1") and not store.committed("app-2")

    dt = DeltaTable(loc)
    assert dt.version() == 0 and dt.transaction_version("app-1") == 1
    arrow = dt.to_pyarrow_table()
    assert arrow.num_rows == 1
    assert str(arrow.schema.field("at").type) == "timestamp[us, tz=UTC]"  # micros, not INT96
    assert arrow.column("at")[0].as_py().isoformat() == "2026-01-02T03:04:05.123456+00:00"
    assert_df_equality(store.read(), df, ignore_nullable=True)

    # committed paths are relative to the table root, with size and numRecords
    adds = [json.loads(line)["add"] for line in open(os.path.join(loc, "_delta_log", "0" * 20 + ".json"))
            if '"add"' in line]
    for add in adds:
        assert "/" not in add["path"]
        assert add["size"] == os.path.getsize(os.path.join(loc, add["path"]))
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == 1

    # Parquet files written but never committed are never read
    store.write_files(df.selectExpr("'other' AS group_id", "2 AS generation", "5L AS lag", "at"))
    assert [r.group_id for r in store.read().collect()] == ["g"]
    assert DeltaTable(loc).to_pyarrow_table().num_rows == 1

    log = store.history().collect()
    assert [r.version for r in log] == [0]
    assert '"k": "v"' in log[0].userMetadata and "app-1" in log[0].userMetadata


def test_a_table_of_many_local_files_is_read_without_a_listing_job(spark, tmp_path):
    """Spark lists more than 32 paths with a Spark job of its own; a history's table gains files
    with every recorded call, and is read several times per call. The sessions spark-assign
    builds (the test run's too) list them on the driver, and a read leaves the setting as it is."""
    from spark_assign.session import LISTING_THRESHOLD

    store = open_table(spark, str(tmp_path / "t"), SCHEMA, backend="embedded")
    rows = spark.range(0, 40, 1, numPartitions=40).selectExpr(  # a file each
        "CAST(id AS STRING) AS group_id", "CAST(id AS INT) AS generation", "id AS lag",
        "TIMESTAMP'2026-01-02 03:04:05' AS at")
    files = store.write_files(rows)
    store.commit(files, app_id="app-1")
    assert len(DeltaTable(store.location).file_uris()) == len(files) > 32
    setting = spark.conf.get(LISTING_THRESHOLD)
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    read = store.read()
    assert set(tracker.getJobIdsForGroup(None)) == before  # no job to list the files
    assert spark.conf.get(LISTING_THRESHOLD) == setting
    assert_df_equality(read, rows, ignore_row_order=True, ignore_nullable=True)


def test_the_embedded_backend_writes_microsecond_timestamps_leaving_the_session_as_it_is(spark, tmp_path):
    """Delta's timestamps are INT64 microseconds (Spark writes INT96 by default): the embedded
    backend asks for them in its write's options, and the session's setting stays unset."""
    import pyarrow.parquet as pq

    key = "spark.sql.parquet.outputTimestampType"
    assert spark.conf.get(key, None) is None
    store = open_table(spark, str(tmp_path / "t"), SCHEMA, backend="embedded")
    files = store.write_files(spark.sql(
        "SELECT 'g' AS group_id, 1 AS generation, 7L AS lag, TIMESTAMP'2026-01-02 03:04:05' AS at"))
    column = pq.ParquetFile(tmp_path / "t" / files[0]).schema.column(3)
    assert (column.name, column.physical_type) == ("at", "INT64") and "microseconds" in str(column.logical_type)
    assert spark.conf.get(key, None) is None


def test_relative_location_is_where_it_was_opened(spark, tmp_path, monkeypatch):
    # the session's JVM keeps the working directory it started in: a relative table folder
    # opened after a chdir must still be written, committed and read in one place
    monkeypatch.chdir(tmp_path)
    store = open_table(spark, "rel/t", SCHEMA, backend="embedded")
    assert store.location == str(tmp_path / "rel" / "t")
    df = spark.sql("SELECT 'g' AS group_id, 1 AS generation, 7L AS lag, TIMESTAMP'2026-01-02 03:04:05' AS at")
    assert store.append(df, app_id="app-1") is True
    history = AssignmentHistory("out/history", spark, backend="embedded")  # its lock and checks, and its tables, in one folder
    assert history.location == str(tmp_path / "out" / "history")
    assert {s.location for s in history.stores.values()} == {str(tmp_path / "out" / "history" / n)
                                                              for n in history.stores}
    monkeypatch.chdir(ROOT)  # a later chdir moves nothing either
    assert DeltaTable(str(tmp_path / "rel" / "t")).to_pyarrow_table().num_rows == 1
    assert_df_equality(store.read(), df, ignore_nullable=True)


def test_read_input_formats(spark, tmp_path):
    members = read_input(spark, str(ROOT / "data" / "sample" / "members.jsonl"))
    m = normalize_members(members)
    assert m.where("group_id = 'orders-service'").count() == 3
    owned = m.where("member_id = 'orders-c1-5f2a'").select("owned").first().owned
    assert [(o.topic, o.partition) for o in owned] == [("orders", 0), ("orders", 1), ("payments", 0)]

    csv = tmp_path / "members.csv"
    csv.write_text("group_id,member_id,topics,owned,generation\n"
                   "g1,m1,orders;payments,orders:0;payments:2,3\n"
                   "g1,m2,orders,,\n")
    got = normalize_members(read_input(spark, str(csv))).orderBy("member_id").collect()
    assert [r.topics for r in got] == [["orders", "payments"], ["orders"]]
    assert [(o.topic, o.partition) for o in got[0].owned] == [("orders", 0), ("payments", 2)]
    assert got[1].owned == [] and got[0].generation == 3

    parts = tmp_path / "parts.csv"
    parts.write_text("topic,partition,racks\norders,0,r1;r2\norders,1,\n")
    p = normalize_partitions(read_input(spark, str(parts))).orderBy("partition").collect()
    assert [r.racks for r in p] == [["r1", "r2"], []]

    # a Delta folder written by the embedded backend is an input too
    schema = T.StructType([T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType())])
    store = open_table(spark, str(tmp_path / "pdelta"), schema, backend="embedded")
    store.append(spark.createDataFrame([("t", 0), ("t", 1)], schema), app_id="x")
    assert detect_format(str(tmp_path / "pdelta")) == "delta"
    assert read_input(spark, str(tmp_path / "pdelta")).count() == 2

    assert detect_format("a/b.jsonl") == "json" and detect_format("x.csv") == "csv"
    assert detect_format("x.parquet") == "parquet" and detect_format("main.ops.members") == "table"
    with pytest.raises(InvalidInputError, match="nothing-here' does not exist"):
        detect_format(str(tmp_path / "nothing-here"))
    (tmp_path / "odd").mkdir()
    with pytest.raises(InvalidInputError, match="cannot tell the format"):
        detect_format(str(tmp_path / "odd"))
