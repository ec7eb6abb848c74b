"""The core contract: input validation, diagnostics, Kafka ordering, quotas, property checks."""

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from spark_assign import AssignmentPropertyError, SparkAssignError, assign, check_assignment
from spark_assign.errors import InvalidMembersError, InvalidPartitionsError, MissingColumnError, UnknownStrategyError
from spark_assign.inputs import diagnostics, normalize_members, normalize_partitions
from spark_assign.ordering import with_member_index
from spark_assign.owned import resolve_owned
from spark_assign.properties import revocations
from spark_assign.quota import (
    max_quota,
    min_quota,
    num_max_quota,
    quota_for_rank,
    rank_for_position,
    start_for_rank,
)
from spark_assign.strategies.registry import STRATEGIES, strategy_name

MEMBERS = "group_id string, member_id string, topics array<string>"
OWNED_MEMBERS = (
    "group_id string, member_id string, topics array<string>, "
    "owned array<struct<topic:string,partition:int>>, generation int"
)
PARTS = "topic string, partition int"


@pytest.fixture(scope="module")
def parts(spark):
    return spark.createDataFrame([("t0", p) for p in range(3)] + [("t1", p) for p in range(2)], PARTS)


def test_unknown_strategy_lists_known_ones(spark, parts):
    members = spark.createDataFrame([("g", "c0", ["t0"])], MEMBERS)
    with pytest.raises(UnknownStrategyError) as e:
        assign(members, parts, "fair-share")
    for name in STRATEGIES:
        assert repr(name) in str(e.value)
    assert isinstance(e.value, SparkAssignError)


def test_kafka_class_names_are_aliases():
    assert strategy_name("org.apache.kafka.clients.consumer.CooperativeStickyAssignor") == "cooperative-sticky"
    assert strategy_name("roundrobin") == "roundrobin"


@pytest.mark.connect
def test_missing_topics_column_names_expected_and_found(spark, parts):
    members = spark.createDataFrame([("g", "c0")], "group_id string, member_id string")
    with pytest.raises(MissingColumnError) as e:
        assign(members, parts, "range")
    msg = str(e.value)
    assert "['topics']" in msg and "found ['group_id', 'member_id']" in msg


@pytest.mark.connect
def test_bad_members_named_in_error(spark, parts):
    members = spark.createDataFrame(
        [("g1", "c0", ["t0"]), ("g1", "c0", ["t0"]), ("g2", None, ["t0"]), ("g3", "c9", None)], MEMBERS
    )
    with pytest.raises(InvalidMembersError) as e:
        assign(members, parts, "range")
    problems = {(r["problem"], r["group_id"], r["member_id"]) for r in e.value.rows}
    assert problems == {
        ("member_id repeated in group", "g1", "c0"),
        ("null group_id, member_id or topics", "g2", None),
        ("null group_id, member_id or topics", "g3", "c9"),
    }
    assert "member_id='c0'" in str(e.value) and "group_id='g1'" in str(e.value)


# each member's owned list, and the claims named as bad (topic-partition), none for a valid list
BAD_OWNED_CASES = [
    ([("t0", -1)], ["t0--1"]),
    ([("t0", 5), ("t0", -7)], ["t0--7"]),
    ([(None, 0)], ["null-0"]),
    ([("t0", None), ("t0", 1)], ["t0-null"]),
    ([None, ("t0", 1)], ["null-null"]),
    ([("", 0), (None, 1)], ["null-1"]),
    ([("", 0), ("t0", 1)], []),
]


def test_bad_owned_claims_named(spark, parts):
    rows = [("g1", f"c{i}", ["t0"], owned, 1) for i, (owned, _) in enumerate(BAD_OWNED_CASES)]
    with pytest.raises(InvalidMembersError) as e:
        assign(spark.createDataFrame(rows, OWNED_MEMBERS), parts, "range")
    found = sorted((r["member_id"], r["detail"]) for r in e.value.rows)
    assert found == sorted((f"c{i}", d) for i, (_, bad) in enumerate(BAD_OWNED_CASES) for d in bad)


def test_bad_partitions_named_in_error(spark):
    members = spark.createDataFrame([("g", "c0", ["t0"])], MEMBERS)
    bad = spark.createDataFrame([("t0", 0), ("t0", 0), ("t0", -2), (None, 1), ("t1", None), ("t1", 0)], PARTS)
    with pytest.raises(InvalidPartitionsError) as e:
        assign(members, bad, "range")
    problems = {(r["problem"], r["topic"], r["partition"]) for r in e.value.rows}
    assert problems == {
        ("null topic/partition or negative partition", None, 1),
        ("null topic/partition or negative partition", "t0", -2),
        ("null topic/partition or negative partition", "t1", None),
        ("topic partition repeated", "t0", 0),
    }


def test_error_lists_at_most_ten_rows_and_counts_the_rest(spark, parts):
    members = spark.createDataFrame([("g", f"c{i}", None) for i in range(25)], MEMBERS)
    with pytest.raises(InvalidMembersError) as e:
        assign(members, parts, "range")
    assert "25 problem row(s)" in str(e.value) and "... and 15 more" in str(e.value)


def test_optional_columns_may_be_absent(spark):
    m = normalize_members(spark.createDataFrame([("g", "c0", ["t0", "t0", None])], MEMBERS))
    assert m.columns == [
        "group_id", "member_id", "group_instance_id", "rack", "topics", "owned", "generation", "assignors",
        "describe_position",
    ]
    # de-duplicated; a null topic stays for the validation to name (tests/cases/bad_inputs.yaml)
    assert m.first()["topics"] == ["t0", None]
    p = normalize_partitions(spark.createDataFrame([("t0", 0)], PARTS))
    assert p.columns == ["topic", "partition", "racks", "topic_id"]


def test_diagnostics_counts_ignored_claims_and_missing_topics(spark, parts):
    members = spark.createDataFrame(
        [
            ("g1", "c0", ["t0", "gone"], [("t0", 0), ("gone", 0), ("t0", 7)], 3),
            ("g1", "c1", ["t0"], None, None),
            ("g2", "c0", ["t1"], [("t1", 1)], 1),
        ],
        OWNED_MEMBERS,
    )
    actual = diagnostics(members, parts)
    expected = actual.sparkSession.createDataFrame(
        [("g1", 2, ["gone"], 3, 2), ("g2", 1, [], 1, 0)],
        "group_id string, members long, missing_topics array<string>, owned_claims long, ignored_owned_claims long",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_java_string_order_for_member_index(spark):
    # U+FF5E (a BMP char above the surrogates) sorts after U+1F600 in UTF-16 (Java),
    # before it in UTF-8 byte order (Spark's default string order).
    members = spark.createDataFrame(
        [("g", "a\uff5e", ["t"]), ("g", "a\U0001f600", ["t"]), ("g", "b", ["t"])], MEMBERS
    )
    members = normalize_members(members).withColumn(
        "group_instance_id", F.when(F.col("member_id") == "b", F.lit("static")).cast("string")
    )
    order = [r["member_id"] for r in with_member_index(members).orderBy("member_index").collect()]
    assert order == ["b", "a\U0001f600", "a\uff5e"]


@pytest.mark.parametrize("p,n", [(10, 3), (7, 7), (3, 5), (0, 2), (100, 7), (2100, 2100), (21000, 2101)])
def test_quota_arithmetic_in_python(p, n):
    assert (min_quota(p, n), max_quota(p, n), num_max_quota(p, n)) == (p // n, -(-p // n), p % n)
    sizes = [quota_for_rank(p, n, r) for r in range(n)]
    assert sum(sizes) == p and max(sizes) - min(sizes) <= 1
    for r in range(n):
        start = start_for_rank(p, n, r)
        assert start == sum(sizes[:r])
        for pos in range(start, start + sizes[r]):
            assert rank_for_position(p, n, pos) == r


def test_quota_arithmetic_on_columns_matches_python(spark):
    cases = [(p, n, pos) for p, n in [(10, 3), (7, 2), (100, 7)] for pos in range(p)]
    df = spark.createDataFrame(cases, "p long, n long, pos long").select(
        "p", "n", "pos",
        rank_for_position(F.col("p"), F.col("n"), F.col("pos")).alias("rank"),
        min_quota(F.col("p"), F.col("n")).alias("cf"),
        max_quota(F.col("p"), 3).alias("cc3"),
        num_max_quota(F.col("p"), F.col("n")).alias("cr"),
    )
    # the same quotas as SQL text (the sticky path's projections)
    df = df.selectExpr("*", f"{min_quota('p', 'n')} AS cf_sql", f"{max_quota('p', 3)} AS cc3_sql",
                       f"{num_max_quota('p', 'n')} AS cr_sql", f"{rank_for_position('p', 'n', 'pos')} AS rank_sql")
    assert dict(df.dtypes)["cf_sql"] == dict(df.dtypes)["cf"] == "bigint"
    for r in df.collect():
        assert r["rank"] == rank_for_position(r["p"], r["n"], r["pos"])
        assert (r["cf"], r["cc3"], r["cr"]) == (r["p"] // r["n"], -(-r["p"] // 3), r["p"] % r["n"])
        assert (r["cf_sql"], r["cc3_sql"], r["cr_sql"], r["rank_sql"]) == (r["cf"], r["cc3"], r["cr"], r["rank"])


def test_resolve_owned_follows_highest_generation_per_partition(spark, parts):
    members = spark.createDataFrame(
        [
            # t0-0: gen 5 beats gen 4; t0-1: two claims at gen 5 void it; t0-2: only a null-generation claim
            ("g", "a", ["t0"], [("t0", 0), ("t0", 1)], 5),
            ("g", "b", ["t0"], [("t0", 0), ("t0", 2)], 4),
            ("g", "c", ["t0"], [("t0", 1)], 5),
            ("g", "d", ["t1"], [("t0", 2), ("t1", 0)], None),  # t0 not subscribed by d: dropped
            ("g", "e", ["t0"], [("t0", 2)], None),
        ],
        OWNED_MEMBERS,
    )
    actual = resolve_owned(normalize_members(members), normalize_partitions(parts))
    expected = spark.createDataFrame(
        [("g", "a", "t0", 0, 5), ("g", "b", "t0", 2, 4), ("g", "d", "t1", 0, -1)],
        "group_id string, member_id string, topic string, partition int, generation int",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_check_assignment_names_violations(spark, parts):
    members = spark.createDataFrame([("g", "c0", ["t0"]), ("g", "c1", ["t0", "t1"])], MEMBERS)
    bad = spark.createDataFrame(
        [("g", "c0", "t0", 0), ("g", "c1", "t0", 0), ("g", "c0", "t1", 0), ("g", "c1", "t0", 1)],
        "group_id string, member_id string, topic string, partition int",
    )
    with pytest.raises(AssignmentPropertyError) as e:
        check_assignment(bad, members, parts, balance=None)
    found = {(r["problem"], r["topic"], r["partition"]) for r in e.value.rows}
    assert found == {
        ("unassigned", "t0", 2),
        ("unassigned", "t1", 1),
        ("assigned more than once", "t0", 0),
        ("member not subscribed to topic (or not in group)", "t1", 0),
    }


def test_check_assignment_balance_rules(spark, parts):
    members = spark.createDataFrame([("g", "c0", ["t0", "t1"]), ("g", "c1", ["t0", "t1"])], MEMBERS)
    skewed = spark.createDataFrame(
        [("g", "c0", "t0", p) for p in range(3)] + [("g", "c0", "t1", p) for p in range(2)],
        "group_id string, member_id string, topic string, partition int",
    )
    for rule in ("count", "topic", "kafka"):
        with pytest.raises(AssignmentPropertyError):
            check_assignment(skewed, members, parts, balance=rule)
    three = spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(3)], PARTS)
    good = assign(members, three, "range")  # c0: t0-0,t0-1,t1-0,t1-1; c1: t0-2,t1-2
    check_assignment(good, members, three, balance="topic")
    with pytest.raises(AssignmentPropertyError, match="differ by more than one"):
        check_assignment(good, members, three, balance="count")


def test_cooperative_check_and_revocations(spark, parts):
    members = spark.createDataFrame(
        [("g", "c0", ["t0"], [("t0", 0), ("t0", 1), ("t0", 2)], 1), ("g", "c1", ["t0"], None, None)],
        OWNED_MEMBERS,
    )
    handed_over = spark.createDataFrame(
        [("g", "c0", "t0", 0), ("g", "c0", "t0", 1), ("g", "c1", "t0", 2)],
        "group_id string, member_id string, topic string, partition int",
    )
    with pytest.raises(AssignmentPropertyError, match="held by c0"):
        check_assignment(handed_over, members, parts, cooperative=True)
    first_round = handed_over.where("member_id = 'c0'")
    check_assignment(first_round, members, parts, cooperative=True)
    assert_df_equality(
        revocations(members, first_round),
        spark.createDataFrame([("g", "c0", "t0", 2)], "group_id string, member_id string, topic string, partition int"),
        ignore_nullable=True,
    )


def test_the_local_session_talks_to_python_workers_over_unix_sockets(spark):
    """local_session() (the test run's classic session) sets Spark's Unix domain sockets for
    its Python workers where the platform has them: over local TCP each Python task waited
    about 40 ms for a delayed acknowledgement, and every read of a frame made from Python
    rows runs such tasks."""
    import os
    import socket

    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no Unix domain sockets on this platform")
    # what the worker daemon reads to choose its socket family (pyspark/daemon.py)
    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED")).collect()
    assert [str(v).lower() for v in seen] == ["true"]
    rows = spark.createDataFrame([("g", "m", 3)], "group_id string, member_id string, n int")
    assert [tuple(r) for r in rows.limit(2).collect()] == [("g", "m", 3)]
