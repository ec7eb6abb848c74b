"""rebalance(): selection, protocol, revocations, rounds; history recording."""

import pytest
from casetable import assert_assignment_equal, expected, inputs, load_cases
from pyspark.sql import functions as F

from spark_assign import assign
from spark_assign.errors import NoCommonAssignorError
from spark_assign.execution import union_all
from spark_assign.history import AssignmentHistory
from spark_assign.ownership import owned_from_history
from spark_assign.properties import check_assignment, cooperative_violations
from spark_assign.rebalance import rebalance, rebalance_rounds


def _with_protocol(spark, cases, members):
    rows = [(c.group_id, m["member_id"], m.get("protocol")) for c in cases for m in c.members]
    proto = spark.createDataFrame(rows, "group_id string, member_id string, protocol string")
    return members.join(proto, ["group_id", "member_id"])


@pytest.mark.connect
@pytest.mark.parametrize("rule", ["static", "dynamic"])
def test_rebalance_cases(spark, rule):
    cases = load_cases("protocol/rebalance.yaml")
    members, partitions = inputs(spark, cases)
    members = _with_protocol(spark, cases, members)
    r = rebalance(members, partitions, protocol_rule=rule)
    assert_assignment_equal(r.final, expected(spark, cases))
    check_assignment(r.final, members, partitions, balance="count")
    summary = {row.group_id: row for row in r.summary.collect()}
    for c in cases:
        s = summary[c.group_id]
        assert (s.round, s.generation) == (c.raw["expected_rounds"], c.raw["expected_generation"]), c.name
        assert s.revoked == c.raw["expected_revoked"][rule], (c.name, s)
        assert s.lost == c.raw["expected_lost"][rule], (c.name, s)
        assert s.pending == 0
    # members after the rebalance own the final assignment at the last generation
    after = {(m.group_id, m.member_id): m for m in r.members.collect()}
    assert after[("eager_scale_out", "c2")].generation == 2
    assert len(after[("eager_scale_out", "c2")].owned) == 3


@pytest.mark.connect
@pytest.mark.parametrize("small_call_rows", [None, "0"], ids=["small-call", "checkpoints"], indirect=True)
def test_cooperative_two_rounds_recorded(spark, tmp_path, small_call_rows):
    """Run as a small call (its state kept as local relations, the default for inputs this
    size) and with small calls off (checkpoints, as large calls run)."""
    cases = [c for c in load_cases("protocol/rebalance.yaml") if c.name == "eager_scale_out"]
    members, partitions = inputs(spark, cases)
    members = members.withColumn("assignors", F.array(F.lit("cooperative-sticky"))).withColumn(
        "protocol", F.lit("COOPERATIVE"))
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    r = rebalance(members, partitions, history=history)
    s = {row.round: row for row in r.summary.collect()}
    assert sorted(s) == [1, 2] and r.rounds == 2
    assert s[1].protocol == "COOPERATIVE" and s[1].pending > 0 and s[1].lost == 0
    assert s[1].revoked == s[1].pending  # what is revoked in round 1 is handed out in round 2
    assert s[2].pending == 0 and s[2].revoked == 0
    round1 = r.assignments.where("round = 1")
    assert cooperative_violations(round1, members, partitions).count() == 0
    check_assignment(r.final, members, partitions, balance="count")
    gens = history.history().orderBy("generation").collect()
    assert [(g.generation, g.round, g.protocol, g.strategy) for g in gens] == [
        (2, 1, "cooperative", "cooperative-sticky"), (3, 2, "cooperative", "cooperative-sticky")]
    assert gens[0].unassigned == s[1].pending and gens[1].unassigned == 0
    assert history.revocations(kind="revoked").count() == s[1].revoked


@pytest.mark.parametrize("departed, kind", [("leave", "revoked"), ("crash", "lost")])
def test_members_carried_from_the_history(spark, tmp_path, departed, kind):
    """rebalance(owned_from_history(members, history), ...): each member owns what the
    group's latest generation gave it, a static member back under a new member id owns its
    old id's partitions (KIP-345), and the partitions of the member gone from the input are
    revoked (it left) or lost (it crashed), then handed out; nothing else moves."""
    schema = "group_id string, member_id string, group_instance_id string, topics array<string>"
    parts = spark.createDataFrame([("t", p) for p in range(6)], "topic string, partition int")
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    first = spark.createDataFrame([("g", "a", None, ["t"]), ("g", "b", "static-b", ["t"]),
                                   ("g", "c", None, ["t"])], schema)
    rebalance(first, parts, strategy="cooperative-sticky", history=history)
    held = {}
    for row in history.latest().collect():
        held.setdefault(row.member_id, set()).add(row.partition)
    assert sorted(len(v) for v in held.values()) == [2, 2, 2]

    second = spark.createDataFrame([("g", "b-restarted", "static-b", ["t"]), ("g", "c", None, ["t"])], schema)
    r = rebalance(owned_from_history(second, history, departed=departed), parts, strategy="cooperative-sticky",
                  history=history)
    final = {}
    for row in r.final.collect():
        final.setdefault(row.member_id, set()).add(row.partition)
    assert sorted(final) == ["b-restarted", "c"]
    assert final["b-restarted"] >= held["b"] and final["c"] >= held["c"]
    assert final["b-restarted"] | final["c"] == set(range(6)) and len(final["b-restarted"]) == 3
    gone = history.revocations(kind=kind).collect()
    assert sorted(row.partition for row in gone) == sorted(held["a"]) and {row.member_id for row in gone} == {"a"}
    check_assignment(r.final, second, parts, balance="count")


def test_no_common_assignor_records_nothing(spark, tmp_path):
    cases = load_cases("protocol/no_common.yaml")
    members, partitions = inputs(spark, cases)
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    with pytest.raises(NoCommonAssignorError, match="disjoint_lists"):
        rebalance(members, partitions, history=history)
    assert history.history().count() == 0


def test_cooperative_sticky_under_eager_and_moves(spark):
    """Members listing [cooperative-sticky, range] follow EAGER under Kafka's static rule:
    each revoked everything before it joined, so Kafka's CooperativeStickyAssignor sees no
    owned partitions and assigns afresh, in one round (the expected final assignment is
    Kafka's own, from the oracle). Under KIP-726's dynamic rule they go COOPERATIVE: the
    moving partitions are revoked in round 1 and counted as moved in round 2, when their new
    owner gets them."""
    from kafka_oracle import run

    cases = [c for c in load_cases("protocol/rebalance.yaml") if c.name == "eager_scale_out"]
    members, partitions = inputs(spark, cases)
    members = members.withColumn("assignors", F.array(F.lit("cooperative-sticky"), F.lit("range")))
    # what the leader's assignor gets from EAGER members: their subscriptions, nothing owned
    joined = [{"id": m.member_id, "topics": list(m.topics), "owned": [], "generation": m.generation}
              for m in members.orderBy("member_id").collect()]
    topics = {t: 10 for m in joined for t in m["topics"]}  # the case's topic, scoped by the case
    kafka = run([{"id": "g", "assignor": "cooperative-sticky", "topics": topics, "members": joined}])["g"]
    eager_final = {(m, p) for m, tps in kafka.items() for _, p in tps}
    sticky_final = {("c0", p) for p in range(4)} | {("c1", p) for p in (5, 6, 7)} | {("c2", p) for p in (4, 8, 9)}
    owned = {("c0", p) for p in range(5)} | {("c1", p) for p in range(5, 10)}
    for rule, rounds, final in (
            ("static", [(1, "EAGER", 10, 0, len(eager_final - owned))], eager_final),
            ("dynamic", [(1, "COOPERATIVE", 3, 3, 0), (2, "COOPERATIVE", 0, 0, 3)], sticky_final)):
        r = rebalance(members, partitions, protocol_rule=rule)
        got = sorted((s["round"], s.protocol, s.revoked, s.pending, s.moved) for s in r.summary.collect())
        assert got == rounds, (rule, got)
        assert {(a.member_id, a.partition) for a in r.final.collect()} == final, rule


def test_sticky_family_in_one_call(spark):
    """A round runs sticky and cooperative-sticky as one sticky assignment (``sticky_runs``),
    beside the broker's uniform: each group gets what its own assignor gives it alone.
    Every case three times: a sticky group, a cooperative-sticky one and a consumer group
    (claims in several generations, uniform and general subscriptions, racks)."""
    cases = load_cases("cooperative/holders.yaml", "sticky/kafka_rack_uniform.yaml")
    members, partitions = inputs(spark, cases)
    copies = {"sticky": ("sticky", "classic"), "coop": ("cooperative-sticky", "classic"),
              "uniform": ("uniform", "consumer")}
    per_copy = {k: members.withColumn("group_id", F.concat("group_id", F.lit("#" + k))).withColumn(
        "assignors", F.array(F.lit(s))) for k, (s, _) in copies.items()}
    together = union_all([m.withColumn("group_protocol", F.lit(copies[k][1])) for k, m in per_copy.items()])
    r = rebalance(together, partitions)
    of = lambda df, k: df.where(F.col("group_id").endswith("#" + k))  # noqa: E731
    # sticky (EAGER: one round) and cooperative-sticky's first round: their assignors alone
    first = r.assignments.where("round = 1")
    for k in ("sticky", "coop"):
        assert_assignment_equal(of(first, k), assign(per_copy[k], partitions, copies[k][0]))
    # the consumer groups end at the broker's target: the uniform assignor alone
    assert_assignment_equal(of(r.final, "uniform"), assign(per_copy["uniform"], partitions, "uniform"))
    # follow-up rounds: the cooperative groups hand over what they withheld, the consumer
    # groups what their target moves; the sticky groups (EAGER) are done in one round
    assert {s.group_id.split("#")[1] for s in r.summary.where("round > 1").collect()} == {"coop", "uniform"}


@pytest.mark.parametrize("strategy", [None, "sticky"])
def test_given_owners_change_nothing_but_the_plan(spark, strategy):
    """rebalance_rounds(owners=...), as simulate() gives its carried ownership: the owners the
    members' owned lists resolve to give the same rounds, revocations and moves as resolving
    them inside the call (cooperative and eager groups, joiners and leavers; with every
    group on ``sticky``, every member EAGER, so the revocations are counted per member and
    the members that followed COOPERATIVE lose theirs)."""
    from chispa import assert_df_equality

    from spark_assign.inputs import normalize_members
    from spark_assign.owned import resolve_owned

    cases = load_cases("protocol/rebalance.yaml")
    members, partitions = inputs(spark, cases)
    members = _with_protocol(spark, cases, members)
    owners = resolve_owned(normalize_members(members), partitions, subscribed_only=False).drop("generation")
    plain = rebalance(members, partitions, protocol_rule="dynamic", strategy=strategy)
    given = rebalance_rounds(members, partitions, protocol_rule="dynamic", strategy=strategy, options={}, owners=owners)
    assert given.rounds == plain.rounds
    for name in ("summary", "final", "revocations"):
        assert_df_equality(getattr(given, name), getattr(plain, name), ignore_row_order=True)
    assert plain.summary.where("moved > 0").count() > 0  # the cases move partitions
    if strategy == "sticky":  # the cases revoke and lose partitions
        assert plain.summary.where("revoked > 0").count() > 0 and plain.summary.where("lost > 0").count() > 0
