"""Assignor selection and rebalance protocol: table-driven cases under tests/cases/protocol/."""

import pytest
from casetable import inputs, load_cases
from chispa import assert_df_equality
from pyspark.sql import functions as F

from spark_assign.errors import NoCommonAssignorError
from spark_assign.protocol import group_protocols, member_protocols, select_assignor

SCHEMA = "group_id string, assignor string, votes long, static string, dynamic string"


def test_selection_and_protocol_cases(spark):
    cases = load_cases("protocol/selection.yaml")
    members, _ = inputs(spark, cases)
    sel = select_assignor(members)
    static = group_protocols(members, sel, protocol_rule="static").select("group_id", F.col("protocol").alias("static"))
    dynamic = group_protocols(members, sel, protocol_rule="dynamic").select("group_id", F.col("protocol").alias("dynamic"))
    actual = sel.join(static, "group_id").join(dynamic, "group_id").select("group_id", "assignor", "votes", "static", "dynamic")
    expected = spark.createDataFrame(
        [(c.group_id, c.raw["expected_assignor"], c.raw["expected_votes"], c.raw["expected_static"],
          c.raw["expected_dynamic"]) for c in cases], SCHEMA)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_member_protocols_static_rule_per_member(spark):
    cases = [c for c in load_cases("protocol/selection.yaml") if c.name == "rolling_upgrade_midway"]
    members, _ = inputs(spark, cases)
    got = {r.member_id: r.protocol for r in member_protocols(members, protocol_rule="static").collect()}
    assert got == {"c0": "COOPERATIVE", "c1": "EAGER", "c2": "EAGER"}


def test_no_common_assignor_names_groups_and_members(spark):
    cases = load_cases("protocol/no_common.yaml", "protocol/selection.yaml")
    members, _ = inputs(spark, cases)
    with pytest.raises(NoCommonAssignorError) as err:
        select_assignor(members)
    msg = str(err.value)
    assert "2 problem row(s)" in msg
    assert "disjoint_lists" in msg and "c0=[range]; c1=[cooperative-sticky]" in msg
    assert "three_way" in msg and "c2=[sticky, range]" in msg
    assert "all_cooperative" not in msg


def test_unknown_protocol_rule(spark):
    members, _ = inputs(spark, load_cases("protocol/selection.yaml")[:1])
    with pytest.raises(ValueError, match="protocol_rule"):
        member_protocols(members, protocol_rule="sometimes")
