"""Kafka's RoundRobinAssignorTest scenarios (tests/cases/roundrobin/*.yaml) run as one
Spark job, one group per case, compared with chispa; validity checked on every result."""

from __future__ import annotations

import pytest
from casetable import assert_assignment_equal, expected, inputs, load_cases, run_cases

from spark_assign import check_assignment

CASES = load_cases("roundrobin")


@pytest.mark.connect
def test_kafka_roundrobin_assignor_cases(spark):
    assert len(CASES) >= 15
    result = run_cases(spark, CASES, validate=False).cache()
    assert_assignment_equal(result, expected(spark, CASES))
    members, partitions = inputs(spark, CASES)
    # different subscriptions: roundrobin promises validity, not Kafka's balance rule
    check_assignment(result, members, partitions, balance=None)
    uniform = [c for c in CASES if len({tuple(sorted(m["topics"])) for m in c.members}) == 1]
    um, up = inputs(spark, uniform)
    check_assignment(result.join(um.select("group_id").distinct(), "group_id", "left_semi"), um, up, balance="count")
    result.unpersist()
