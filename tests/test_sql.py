"""The queries in sql/, run through ``spark.sql`` against a real history (temp views from
register_views) on each backend: embedded, Spark's Delta at a path, and catalog tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql.utils import is_remote

from spark_assign.history import AssignmentHistory
from spark_assign.simulation.analytics import bind_parameters

pytestmark = pytest.mark.connect  # run again over Spark Connect (conftest.py)

SQL = Path(__file__).resolve().parents[1] / "sql"
ASSIGNMENT = "group_id string, member_id string, topic string, partition int"

# generation 1 and 2 of two groups (g2 recorded once): the data the queries run on
GEN1 = [("g1", "a", "t", 0), ("g1", "a", "t", 1), ("g1", "b", "t", 2), ("g1", "b", "u", 0),
        ("g2", "x", "t", 0)]
GEN2 = [("g1", "a", "t", 0), ("g1", "c", "t", 1), ("g1", "b", "t", 2), ("g1", "c", "u", 1)]
LAGS = [("g1", "t", 0, 10), ("g1", "t", 1, 20), ("g1", "t", 2, 5)]


@pytest.fixture(scope="module", params=["embedded", "spark-delta", "catalog"])
def views(request, spark, tmp_path_factory):
    """The history the queries read: on the embedded backend, on Spark's Delta at a path, and as
    managed tables of a database in the session's catalog."""
    if request.param == "catalog":
        spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.kafka_ops_sql")
        request.addfinalizer(lambda: spark.sql("DROP DATABASE IF EXISTS spark_catalog.kafka_ops_sql CASCADE"))
        h = AssignmentHistory("spark_catalog.kafka_ops_sql", spark, backend="spark-delta")
    else:
        h = AssignmentHistory(str(tmp_path_factory.mktemp("sql") / "h"), spark, backend=request.param)
    lags = spark.createDataFrame(LAGS, "group_id string, topic string, partition int, lag long")
    h.record(spark.createDataFrame(GEN1, ASSIGNMENT), strategy="range", lags=lags)
    h.record(spark.createDataFrame(GEN2, ASSIGNMENT), strategy="roundrobin", lags=lags)
    h.register_views()
    return h


def query(name: str) -> str:
    return (SQL / name).read_text()


def run(spark, sql: str, args: dict):
    """``sql`` with its parameters: Spark binds them in a classic session (Delta's parser drops
    them unless ``spark.sql.legacy.parameterSubstitution.constantsOnly`` is set: the test session
    sets it, as docs/production.md says); over Spark Connect with Delta's parser nothing gets
    them back, so they are bound into the text (:func:`bind_parameters`)."""
    if not is_remote():
        return spark.sql(sql, args=args)
    return spark.sql(bind_parameters(sql, args))


def test_current_assignment(spark, views):
    got = spark.sql(query("current_assignment.sql"))
    rows = [(g, 2, m, t, p) for g, m, t, p in GEN2] + [(g, 1, m, t, p) for g, m, t, p in GEN1 if g == "g2"]
    exp = spark.createDataFrame(rows, "group_id string, generation int, member_id string, topic string, partition int")
    assert_df_equality(got.select("group_id", "generation", "member_id", "topic", "partition"), exp,
                       ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(got.drop("lag"), views.latest().select(*got.drop("lag").columns),
                       ignore_row_order=True, ignore_nullable=True)
    assert {r.strategy for r in got.where("group_id = 'g1'").collect()} == {"roundrobin"}


def test_partitions_per_member(spark, views):
    got = spark.sql(query("partitions_per_member.sql"))
    exp = spark.createDataFrame(
        [("g1", 2, "a", 1, ["t"], 10, 0), ("g1", 2, "b", 1, ["t"], 5, 0), ("g1", 2, "c", 2, ["t", "u"], 20, 1),
         ("g2", 1, "x", 1, ["t"], None, 0)],
        "group_id string, generation int, member_id string, partitions long, topics array<string>, "
        "lag long, above_group_min long")
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def test_moved_between_generations(spark, views):
    sql = query("moved_between_generations.sql")
    got = run(spark, sql, {"group_id": "g1", "from_generation": 1, "to_generation": 2})
    exp = spark.createDataFrame(
        [("g1", "t", 1, "a", "c"), ("g1", "u", 0, "b", None), ("g1", "u", 1, None, "c")],
        "group_id string, topic string, partition int, from_member string, to_member string")
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)
    # the same as the history handle's moves()
    assert_df_equality(got, views.moves("g1", 1, 2), ignore_row_order=True, ignore_nullable=True)
    none = run(spark, sql, {"group_id": "g2", "from_generation": 1, "to_generation": 1})
    assert none.count() == 0
