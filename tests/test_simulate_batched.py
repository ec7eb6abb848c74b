"""A replay whose steps all run at once (range, roundrobin, every step a rebalance) gives
the step loop's tables, case by case (tests/cases/simulate/all_steps_at_once.yaml)."""

import logging

import pytest
import yaml
from casetable import CASES_DIR
from chispa import assert_df_equality
from pyspark.sql import Row

from spark_assign.properties import check_assignment
from spark_assign.simulation.batched import batchable
from spark_assign.simulation.replay import replay

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
    """The members after the case's last event, with their subscriptions."""
    members: dict[str, set[str]] = {}
    for _, kind, member, *more in case["events"]:
        topics = set((more[0] if more else {}).get("topics") or [])
        if kind == "join":
            members[member] = topics
        elif kind == "leave":
            del members[member]
        elif kind == "subscribe":
            members[member] |= topics
        elif kind == "unsubscribe":
            members[member] -= topics
    return members


def _replay(events, parts, lags, *, batch):
    return replay(events, parts, strategy=None, protocol_rule="static", session_timeout_ms=45_000,
                  scheduled_rebalance_max_delay_ms=0, lags=lags, keep_rows=True, max_rounds=5, validate=True,
                  batch=batch)


def test_all_steps_at_once_equal_the_step_loop(spark, caplog):
    events, parts, lags = _inputs(spark)
    with caplog.at_level(logging.INFO, logger="spark_assign.simulation.replay"):
        at_once, rows_at_once = _replay(events, parts, lags, batch=True)
    assert any("steps at once" in m for m in caplog.messages)  # the batched path ran
    loop, rows_loop = _replay(events, parts, lags, batch=False)
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
    # every generation's rows carry the lags of their partitions
    lagged = {(r.topic, r.partition): r.lag for r in rows_at_once.where("lag is not null").collect()}
    assert lagged == {_tp(tp): lag for tp, lag in TABLE["lags"].items()}
    # one generation per step here, numbered from the group's last one (from 1 again once the
    # group emptied: its members own nothing)
    gens = {(r.group_id, r.step): r.generation for r in at_once.generations.collect()}
    assert [gens[("range_joins_and_leaves", k)] for k in range(1, 6)] == [1, 2, 3, 4, 5]
    assert [gens.get(("range_group_empties", k)) for k in range(1, 5)] == [1, None, 1, 2]


@pytest.mark.parametrize("flag, value", [("all_trigger", False), ("stateless", False), ("grow", True),
                                         ("lag", True), ("delay", True)])
def test_batchable_only_when_every_step_rebalances_by_itself(flag, value):
    ok = dict(all_trigger=True, stateless=True, grow=False, lag=False, delay=False)
    assert batchable({1: Row(**ok), 2: Row(**ok)})
    assert not batchable({1: Row(**ok), 2: Row(**{**ok, flag: value})})
    assert not batchable({})
