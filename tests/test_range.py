"""Kafka's RangeAssignorTest scenarios (tests/cases/range/*.yaml) run as one Spark job,
one group per case, compared with chispa; plus the rack-mismatch counts Kafka checks
and the range properties on every result."""

from __future__ import annotations

import pytest
from casetable import assert_assignment_equal, expected, inputs, load_cases, run_cases
from pyspark.sql import functions as F

from spark_assign import assign, check_assignment
from spark_assign.strategies.range import assign_range

CASES = load_cases("range")


@pytest.fixture(scope="module")
def range_run(spark):
    result = run_cases(spark, CASES, validate=False).cache()
    yield result
    result.unpersist()


@pytest.mark.connect
def test_kafka_range_assignor_cases(spark, range_run):
    assert len(CASES) >= 90
    assert_assignment_equal(range_run, expected(spark, CASES))


def test_kafka_rack_mismatch_counts(spark, range_run):
    """Kafka's numPartitionsWithRackMismatch: partitions on a member with a rack none
    of whose replicas is on that rack, per verifyRackAssignment case that checks it."""
    checked = [c for c in CASES if "rack_mismatches" in c.raw]
    assert len(checked) >= 30
    members, partitions = inputs(spark, checked)
    mismatched = (
        range_run.join(members.select("group_id", "member_id", "rack"), ["group_id", "member_id"])
        .join(partitions, ["topic", "partition"])
        .where(F.col("rack").isNotNull() & ~F.coalesce(F.array_contains("racks", F.col("rack")), F.lit(False)))
        .groupBy("group_id").count()
    )
    want = spark.createDataFrame([(c.group_id, c.raw["rack_mismatches"]) for c in checked],
                                 "group_id string, expected long")
    got = want.join(mismatched, "group_id", "left").select(
        "group_id", F.coalesce("count", F.lit(0)).cast("long").alias("mismatches"))
    from chispa import assert_df_equality
    assert_df_equality(got, want.withColumnRenamed("expected", "mismatches"),
                       ignore_row_order=True, ignore_nullable=True)


def test_range_properties_on_kafka_cases(spark, range_run):
    members, partitions = inputs(spark, CASES)
    check_assignment(range_run, members, partitions, balance="topic")


def test_rack_aware_false_is_plain_range(spark):
    """With rack_aware=False the rack-aware cases give Kafka's non-rack-aware answer:
    the first case of each verifyRackAssignment test uses broker racks null, so its
    expected table is the plain range answer for the same subscriptions."""
    plain = [c for c in CASES if c.name.endswith("_1") and "rack_mismatches" not in c.raw]
    assert len(plain) >= 5
    members, partitions = inputs(spark, plain)
    # give every member a rack and every partition a single rack: rack_aware would change things
    racked_parts = partitions.withColumn("racks", F.array(F.when(F.col("partition") % 2 == 0, "a").otherwise("b")))
    result = assign(members.withColumn("rack", F.lit("a")), racked_parts, "range", rack_aware=False)
    assert_assignment_equal(result, expected(spark, plain))


def test_rack_aware_option_rejects_unknown_values(spark):
    members, partitions = inputs(spark, CASES[:1])
    with pytest.raises(ValueError, match="rack_aware"):
        assign_range(members, partitions, rack_aware="sometimes")
