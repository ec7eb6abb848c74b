"""A replay whose steps all run at once (range, roundrobin, every step a rebalance) gives
the step loop's tables, case by case (tests/cases/simulate/all_steps_at_once.yaml)."""

import logging

import pytest
import yaml
from casetable import CASES_DIR
from chispa import assert_df_equality
from pyspark.sql import Row
from pyspark.sql import functions as F

from spark_assign.history import AssignmentHistory
from spark_assign.properties import check_assignment
from spark_assign.simulate import simulate
from spark_assign.simulation.batched import batchable
from spark_assign.simulation.replay import replay
from spark_assign.simulation.timing import INSTANT_CLASSIC, Timing

TABLE = yaml.safe_load((CASES_DIR / "simulate" / "all_steps_at_once.yaml").read_text())
E = ("group_id string, at long, kind string, member_id string, group_instance_id string, "
     "topics array<string>, _strategy string, _rule string")


def _tp(name: str) -> tuple[str, int]:
    topic, partition = name.rsplit("-", 1)
    return topic, int(partition)


def _inputs(spark):
    events = [(c["name"], at, kind, member, (extra or {}).get("group_instance_id"), (extra or {}).get("topics"),
               c["strategy"], c.get("protocol_rule", "static"))
              for c in TABLE["cases"] for at, kind, member, *more in c["events"] for extra in (more or [None])]
    parts = [(t, p) for t, n in TABLE["partitions"].items() for p in range(n)]
    lags = [(*_tp(tp), lag) for tp, lag in TABLE["lags"].items()]
    return (spark.createDataFrame(events, E), spark.createDataFrame(parts, "topic string, partition int"),
            spark.createDataFrame(lags, "topic string, partition int, lag long"))


def _members(case) -> dict[str, set[str]]:
    """The members after the case's last event (crashed ones timed out), with their subscriptions."""
    members: dict[str, set[str]] = {}
    for _, kind, member, *more in case["events"]:
        topics = set((more[0] if more else {}).get("topics") or [])
        if kind == "join":
            members[member] = topics
        elif kind in ("leave", "crash"):
            del members[member]
        elif kind == "subscribe":
            members[member] |= topics
        elif kind == "unsubscribe":
            members[member] -= topics
    return members


def _replay(events, parts, lags, *, batch):
    # the instant classic clock: every event's rebalance at its own time, the batched path's case
    return replay(events, parts, strategy=None, protocol_rule="static", timing=Timing(classic=INSTANT_CLASSIC),
                  scheduled_rebalance_max_delay_ms=0, lags=lags, keep_rows=True, max_rounds=5, validate=True,
                  batch=batch, options={})


def test_all_steps_at_once_equal_the_step_loop(spark, caplog):
    events, parts, lags = _inputs(spark)
    with caplog.at_level(logging.INFO, logger="spark_assign.simulation.replay"):
        # every case at once: two assignors, which each step's rebalance selects from the members' lists
        at_once, rows_at_once = _replay(events, parts, lags, batch=True)
        # the range cases alone: one forced assignor, which the rebalance takes without selecting
        ranged, rows_ranged = _replay(events.where(F.col("_strategy") == "range"), parts, lags, batch=True)
    assert sum("steps at once" in m for m in caplog.messages) == 2  # the batched path ran, twice
    loop, rows_loop = _replay(events, parts, lags, batch=False)
    range_groups = events.where(F.col("_strategy") == "range").select("group_id").distinct()
    for table in ("generations", "steps", "assignment", "revocations"):
        assert_df_equality(getattr(ranged, table), getattr(loop, table).join(range_groups, "group_id", "left_semi"),
                           ignore_row_order=True, ignore_nullable=True, ignore_column_order=True)
    assert_df_equality(rows_ranged, rows_loop.join(range_groups, "group_id", "left_semi"), ignore_row_order=True,
                       ignore_nullable=True, ignore_column_order=True)
    for table in ("generations", "steps", "assignment", "revocations"):
        assert_df_equality(getattr(at_once, table), getattr(loop, table), ignore_row_order=True,
                           ignore_nullable=True, ignore_column_order=True)
    assert_df_equality(rows_at_once, rows_loop, ignore_row_order=True, ignore_nullable=True, ignore_column_order=True)
    # the final assignments, as Kafka's assignors give them
    expected = spark.createDataFrame(
        [(c["name"], m, *_tp(tp)) for c in TABLE["cases"] for m, tps in c["final"].items() for tp in tps],
        "group_id string, member_id string, topic string, partition int")
    assert_df_equality(at_once.assignment, expected, ignore_row_order=True, ignore_nullable=True)
    # each partition once, only to a subscriber, balanced by topic: the members of each group's last step
    members = spark.createDataFrame([(c["name"], m, sorted(t)) for c in TABLE["cases"] for m, t in _members(c).items()],
                                    "group_id string, member_id string, topics array<string>")
    check_assignment(at_once.assignment, members, parts, balance="topic").count()
    # a crashed member's partitions idle until its session times out, then lost
    crash = "range_crash_lost_at_expiry"
    assert {s.at: s.idle for s in at_once.steps.where(F.col("group_id") == crash).collect()} == {
        0: 0, 10: 0, 20: 2, 45_020: 0}
    assert sorted((r.member_id, r.partition) for r in at_once.revocations.where(
        (F.col("group_id") == crash) & (F.col("kind") == "lost")).collect()) == [("a", 0), ("a", 1)]
    # every generation's rows carry the lags of their partitions
    lagged = {(r.topic, r.partition): r.lag for r in rows_at_once.where("lag is not null").collect()}
    assert lagged == {_tp(tp): lag for tp, lag in TABLE["lags"].items()}
    # one generation per step with members, numbered on from the group's last one, also
    # once the group emptied (nobody owns anything then)
    gens = {(r.group_id, r.step): r.generation for r in at_once.generations.collect()}
    assert [gens[("range_joins_and_leaves", k)] for k in range(1, 6)] == [1, 2, 3, 4, 5]
    assert [gens.get(("range_group_empties", k)) for k in range(1, 5)] == [1, None, 2, 3]


def test_a_group_that_empties_is_recorded_with_its_generations_numbered_on(spark, tmp_path):
    events, parts, _ = _inputs(spark)
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    r = simulate(events.where("group_id = 'range_group_empties'").drop("_strategy", "_rule"), parts,
                 strategy="range", history=history, timing=Timing(classic=INSTANT_CLASSIC))
    assert sorted(g.generation for g in r.generations.collect()) == [1, 2, 3]
    recorded = history.history().where("group_id = 'range_group_empties'")
    assert sorted((g.generation, g.members) for g in recorded.collect()) == [(1, 1), (2, 1), (3, 2)]


@pytest.mark.parametrize("flag, value", [("all_trigger", False), ("stateless", False), ("grow", True),
                                         ("lag", True), ("delay", True), ("restart", True)])
def test_batchable_only_when_every_step_rebalances_by_itself(flag, value):
    ok = dict(all_trigger=True, stateless=True, grow=False, lag=False, delay=False, restart=False)
    assert batchable({1: Row(**ok), 2: Row(**ok)})
    assert not batchable({1: Row(**ok), 2: Row(**{**ok, flag: value})})
    assert not batchable({})
