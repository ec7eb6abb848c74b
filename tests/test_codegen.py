"""Spark's generated code, which the rest of the suite does not run: the test session is
interpreted (conftest.py), as every small call is. Here each strategy family runs as a large call
with whole-stage code generation on and expression code generation only (``CODEGEN_ONLY``: a
class that fails to compile fails the test instead of falling back to the interpreter), and gives
the rows it gives interpreted; a property check runs with generated code too.

Inputs: generated groups (tests/test_generated_properties.py: racks, static members, different
subscriptions, missing topics), each member owning its sticky assignment, plus a joiner per group
and lags, so that the sticky family runs its claims, its general path and its rack placement.
"""

from __future__ import annotations

import random

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from test_generated_properties import generate_groups

from spark_assign import assign, check_assignment
from spark_assign.execution import SMALL_CALL_CONF
from spark_assign.strategies.cooperative_sticky import next_round_members

#: Spark's generated code, with no fallback to the interpreter
GENERATED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "CODEGEN_ONLY"}
#: the calls: (label, strategy, options, with lags). The sticky family's code runs in
#: cooperative-sticky (claims, the uniform and general paths, racks, the cooperative holding
#: back); sticky and uniform add little code of their own
CALLS = [
    ("range", "range", {}, False),
    ("roundrobin", "roundrobin", {}, False),
    ("cooperative-sticky", "cooperative-sticky", {}, False),
    ("lag-aware", "lag-aware", {}, True),
    ("lag-aware sticky cooperative", "lag-aware", {"sticky": True, "cooperative": True}, True),
]
COLS = ["group_id", "member_id", "topic", "partition"]


@pytest.fixture(scope="module")
def inputs(spark):
    """Members owning their sticky assignment plus a joiner per group, the partitions, lags."""
    groups = generate_groups(12, seed=848)
    fresh = spark.createDataFrame(
        [(gid, m["member_id"], m["group_instance_id"], m["rack"], m["topics"]) for gid, ms, _ in groups for m in ms],
        "group_id string, member_id string, group_instance_id string, rack string, topics array<string>")
    partitions = spark.createDataFrame(
        [(t, p, r) for _, _, ts in groups for t, rs in ts.items() for p, r in enumerate(rs)],
        "topic string, partition int, racks array<string>").localCheckpoint()
    joiners = fresh.groupBy("group_id").agg(F.first("topics").alias("topics")).select(
        "group_id", F.concat(F.lit("joiner-"), "group_id").alias("member_id"),
        F.lit(None).cast("string").alias("group_instance_id"), F.lit("a").alias("rack"), "topics")
    members = next_round_members(fresh, assign(fresh, partitions, "sticky")).unionByName(
        joiners, allowMissingColumns=True).localCheckpoint()
    rnd = random.Random(5337)
    lags = spark.createDataFrame(
        [(gid, t, p, rnd.randint(0, 1000)) for gid, _, ts in groups for t, rs in ts.items() for p in range(len(rs))],
        "group_id string, topic string, partition int, lag long")
    return members, partitions, lags


def _generated(spark, fn):
    """``fn()`` run as a large call with Spark's generated code, the session's settings given
    back after."""
    settings = {**GENERATED, SMALL_CALL_CONF: "0"}
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        return fn()
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _assignments(members, partitions, lags, *, check: bool = False) -> list[tuple]:
    """Every call of :data:`CALLS`, its rows labelled, collected; with ``check``, the
    cooperative-sticky result's property check too."""
    rows = []
    for label, strategy, options, with_lags in CALLS:
        result = assign(members, partitions, strategy, lags=lags if with_lags else None, **options).select(*COLS)
        rows += [(label, *r) for r in result.collect()]
        if check and strategy == "cooperative-sticky":
            result.explain()  # the plan that ran
            check_assignment(result, members, partitions, balance="kafka", cooperative=True)
    return rows


def test_generated_code_gives_the_interpreted_rows(spark, inputs, capsys):
    """Each strategy as a large call with generated code, against the same call as a small call
    (interpreted; tests/test_execution.py holds a small call's rows equal to a large call's)."""
    members, partitions, lags = inputs
    capsys.readouterr()
    generated = _generated(spark, lambda: _assignments(members, partitions, lags, check=True))
    assert "*(" in capsys.readouterr().out  # the plan ran compiled: a whole-stage code generation stage
    interpreted = _assignments(members, partitions, lags)
    schema = "call string, group_id string, member_id string, topic string, partition int"
    assert_df_equality(spark.createDataFrame(generated, schema), spark.createDataFrame(interpreted, schema),
                       ignore_row_order=True)
    assert {r[0] for r in generated} == {label for label, *_ in CALLS}
