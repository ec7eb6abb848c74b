"""sql/analytics/*.sql against a real AssignmentHistory (five recorded generations)."""

from datetime import datetime, timedelta, timezone

import pytest

from spark_assign.history import AssignmentHistory
from spark_assign.simulate import as_of_generation, generation_version, register_analytics_views, run_analytics

pytestmark = pytest.mark.connect  # run again over Spark Connect (conftest.py)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

LAGS = {0: 100, 1: 0, 2: 50, 3: 10}
# generation -> (seconds after T0, round, {member: partitions of topic t}, members present)
GENERATIONS = {
    1: (0, 1, {"a": [0, 1], "b": [2, 3]}, ["a", "b"]),
    2: (60, 1, {"a": [0, 1], "b": [2], "c": [3]}, ["a", "b", "c"]),        # c joins: t-3 moves b -> c
    3: (120, 1, {"a": [0, 1], "c": [2, 3]}, ["a", "c"]),                   # b leaves: t-2 moves b -> c
    4: (180, 1, {"a": [0], "c": [2, 3]}, ["a", "c"]),                      # round 1: t-1 revoked, pending
    5: (190, 2, {"a": [0], "c": [1, 2, 3]}, ["a", "c"]),                   # round 2: t-1 handed to c
}


def build_history(spark, path) -> AssignmentHistory:
    """Record the five generations of group ``g`` (topic ``t``, 4 partitions)."""
    history = AssignmentHistory(str(path), spark, backend="embedded")
    parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    lags = spark.createDataFrame([("g", "t", p, lag) for p, lag in LAGS.items()],
                                 "group_id string, topic string, partition int, lag long")
    for gen, (secs, rnd, owners, present) in GENERATIONS.items():
        rows = [("g", m, "t", p) for m, ps in owners.items() for p in ps]
        a = spark.createDataFrame(rows, "group_id string, member_id string, topic string, partition int")
        members = spark.createDataFrame([("g", m, ["t"]) for m in present],
                                        "group_id string, member_id string, topics array<string>")
        revoked = spark.createDataFrame([("g", "a", "t", 1)] if gen == 4 else [],
                                        "group_id string, member_id string, topic string, partition int")
        history.record(a, members=members, partitions=parts, strategy="range" if gen < 4 else
                       "cooperative-sticky", generation=gen, round=rnd, lags=lags, revoked=revoked,
                       recorded_at=T0 + timedelta(seconds=secs))
    return history


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    h = build_history(spark, tmp_path_factory.mktemp("analytics") / "history")
    register_analytics_views(h)
    return h


def test_moves_per_generation(history):
    rows = run_analytics(history, "moves_per_generation", register=False).collect()
    got = [(r.generation, r.previous_generation, r.assigned, r.partitions_moved, r.newly_assigned) for r in rows]
    assert got == [(1, None, 4, 0, 0), (2, 1, 4, 1, 0), (3, 2, 4, 1, 0), (4, 3, 3, 0, 0), (5, 4, 4, 0, 1)]


def test_partition_ownership_timeline(history):
    rows = run_analytics(history, "partition_ownership_timeline", register=False,
                         group_id="g", topic="t", partition=1).collect()
    assert [(r.generation, r.owner, r.owner_changed) for r in rows] == [
        (1, "a", False), (2, "a", False), (3, "a", False), (4, None, True), (5, "c", True)]
    assert rows[3].revocation == "revoked"
    assert rows[4].at == datetime(2026, 1, 1, 0, 3, 10)


def test_unassigned_partition_seconds(history):
    (row,) = run_analytics(history, "unassigned_partition_seconds", register=False).collect()
    assert (row.group_id, row.generations, row.unassigned_partitions) == ("g", 5, 1)
    assert row.unassigned_partition_seconds == pytest.approx(10.0)


def test_rounds_per_rebalance(history):
    rows = run_analytics(history, "rounds_per_rebalance", register=False).collect()
    assert [(r.rebalance, r.first_generation, r.last_generation, r.rounds) for r in rows] == [
        (1, 1, 1, 1), (2, 2, 2, 1), (3, 3, 3, 1), (4, 4, 5, 2)]


def test_balance_and_lag_per_generation(history):
    rows = {r.generation: r for r in run_analytics(history, "balance_and_lag_per_generation", register=False).collect()}
    assert (rows[1].max_member_lag, rows[1].mean_member_lag) == (100, 80.0)
    assert (rows[2].min_partitions, rows[2].max_partitions, rows[2].max_min) == (1, 2, 1)
    assert (rows[5].min_partitions, rows[5].max_partitions, rows[5].max_min) == (1, 3, 2)


def test_as_of_generation_time_travel(history):
    v2 = generation_version(history, "g", 2)
    assert generation_version(history, "g", 1) < v2
    rows = as_of_generation(history, "g", 2).collect()
    assert {(r.generation, r.member_id, r.partition) for r in rows} == {
        (2, "a", 0), (2, "a", 1), (2, "b", 2), (2, "c", 3)}
    assert generation_version(history, "g", 5) > v2
