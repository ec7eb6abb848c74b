"""simulate() on the classic clock: join phases, the initial delay, a join that waits for a
member that crashed or left statically, cooperative follow-up rounds, metadata refreshes
and an online migration to KIP-848 (tests/cases/simulate/classic_clock.yaml, each case's
expectation worked from Kafka's code)."""

import dataclasses

import pytest
import yaml
from casetable import CASES_DIR
from pyspark.sql import functions as F

from spark_assign.errors import InvalidOptionError
from spark_assign.properties import check_assignment
from spark_assign.simulate import compare, simulate
from spark_assign.simulation.timing import INSTANT_CLASSIC, TIMING_COLUMNS, Timing

TABLE = yaml.safe_load((CASES_DIR / "simulate" / "classic_clock.yaml").read_text())
E = ("group_id string, at long, kind string, member_id string, group_instance_id string, topics array<string>, "
     "assignors array<string>, topic string, partitions int, _strategy string, _gp string, _timeout long, _hb long, _rt long, _init long, "
     "_js long, _mma long, _ai long, _up_timeout long, _up_hb long, _up_ai long, _delay long, group_protocol string")
GROUP = "{}@clock"  # compare() reads <group>@<variant>


def _events(spark):
    rows = []
    for c in TABLE["cases"]:
        gp = c.get("group_protocol", "classic")
        clock = Timing.of(c.get("timing")).settings_of(gp)
        for at, kind, member, *more in c["events"]:
            x = more[0] if more else {}
            rows.append((GROUP.format(c["name"]), at, kind, member, x.get("group_instance_id"), x.get("topics"),
                         x.get("assignors"), x.get("topic"), x.get("partitions"), c["strategy"], gp,
                         *[clock[k] for k in TIMING_COLUMNS],
                         c.get("scheduled_rebalance_max_delay_ms", 0), x.get("group_protocol")))
    return spark.createDataFrame(rows, E)


def _subscriptions(case):
    """Each member's topics after the case's events (a join sets them, subscribe adds)."""
    subs: dict[str, set] = {}
    for _, kind, member, *more in case["events"]:
        topics = set((more[0] if more else {}).get("topics") or [])
        if kind == "join":
            subs[member] = topics
        elif kind == "subscribe":
            subs[member] |= topics
    return subs


@pytest.fixture(scope="module")
def replayed(spark):
    parts = spark.createDataFrame([(t, p) for t, n in TABLE["partitions"].items() for p in range(n)],
                                  "topic string, partition int")
    return simulate(_events(spark), parts), parts


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["name"] for c in TABLE["cases"]])
def test_classic_clock(replayed, case):
    result, parts = replayed
    group = GROUP.format(case["name"])
    gens = result.generations.where(F.col("group_id") == group).orderBy("generation").collect()
    got = [[g.generation, g.round, round(g.at.timestamp() * 1000), g.members, g.lost] for g in gens]
    assert got == case["generations"], case["source"]
    if "revoked" in case:
        assert [g.revoked for g in gens] == case["revoked"], case["source"]
    row = compare(result).where(F.col("group_id") == case["name"]).collect()
    assert [round(r.unassigned_partition_seconds, 3) for r in row] == [case["unassigned_partition_seconds"]]
    # the final assignment: every subscribed partition once, to a member of the last generation
    # that subscribes to it
    final = result.assignment.where(F.col("group_id") == group)
    owners = {r.member_id for r in final.select("member_id").distinct().collect()}
    subs = _subscriptions(case)
    spark = parts.sparkSession
    members = spark.createDataFrame([(group, m, sorted(subs[m])) for m in sorted(owners)],
                                    "group_id string, member_id string, topics array<string>")
    grown = max([e[3]["partitions"] for e in case["events"] if e[1] == "partitions_added"], default=0)
    subscribed = sorted(set().union(*(subs[m] for m in owners)))
    topic = parts.where(F.col("topic").isin(subscribed)).unionByName(spark.range(6, max(grown, 6)).selectExpr(
        "'t' AS topic", "CAST(id AS INT) AS partition"))
    # range balances each topic among its subscribers; the others, Kafka's general rule
    check_assignment(final, members, topic, balance="topic" if case["strategy"] == "range" else "kafka").count()
    assert len(owners) == case["generations"][-1][3]


def test_the_instant_clock_rebalances_at_each_event(spark):
    """Without its timers, the classic clock is the old instant model: one generation per
    event that calls for one, at the event's own time."""
    events = spark.createDataFrame([
        ("g", 0, "join", "a", ["t"]), ("g", 1000, "join", "b", ["t"]), ("g", 2000, "join", "c", ["t"])],
        "group_id string, at long, kind string, member_id string, topics array<string>")
    parts = spark.createDataFrame([("t", p) for p in range(6)], "topic string, partition int")
    r = simulate(events, parts, strategy="range", timing=Timing(classic=INSTANT_CLASSIC))
    assert [(g.generation, round(g.at.timestamp() * 1000), g.members) for g in
            r.generations.orderBy("generation").collect()] == [(1, 0, 1), (2, 1000, 2), (3, 2000, 3)]
    # the same joins on Kafka's clock: one initial rebalance after the joins' waits
    r = simulate(events, parts, strategy="range")
    assert [(g.generation, round(g.at.timestamp() * 1000), g.members) for g in
            r.generations.collect()] == [(1, 6100, 3)]


def test_a_grown_topic_waits_for_its_own_groups_refresh(spark):
    """Groups replay side by side, step k of each at its own time: another group's topic growing
    at a later step does not show group a's grown topic to a's rebalances before a's own leader's
    metadata refresh (ConsumerCoordinator.performAssignment on its metadata snapshot)."""
    schema = "group_id string, at long, kind string, member_id string, topics array<string>, topic string, partitions int"
    a = [("a", 0, "join", "a1", ["t"], None, None), ("a", 10_000, "partitions_added", None, None, "t", 8),
         ("a", 20_000, "join", "a2", ["t"], None, None)]
    # b's topic grows at its step 6 (7 s), the step of a's rebalance at 21.6 s
    b = [("b", 0, "join", "b1", ["u"], None, None), ("b", 5_000, "join", "b2", ["u"], None, None),
         ("b", 7_000, "partitions_added", None, None, "u", 4)]
    parts = spark.createDataFrame([("t", p) for p in range(6)] + [("u", p) for p in range(2)],
                                  "topic string, partition int")

    def generations_of_a(rows):
        r = simulate(spark.createDataFrame(rows, schema), parts, strategy="range")
        return [(g.generation, round(g.at.timestamp() * 1000), g.assigned) for g in
                r.generations.where("group_id = 'a'").orderBy("generation").collect()]

    alone = generations_of_a(a)
    assert alone == [(1, 3100, 6), (2, 21600, 6), (3, 161600, 8)]  # the refresh at 10 s + 150 s
    assert generations_of_a(a + b) == alone


@pytest.mark.parametrize("settings, message", [
    ({"classic": {"heartbeat_ms": 1}}, "timing.classic: expected keys among .*heartbeat_interval_ms.*found \\['heartbeat_ms'\\]"),
    ({"kip848": {}}, "timing: expected keys among \\['classic', 'consumer'\\], found \\['kip848'\\]"),
    ({"consumer": {"session_timeout_ms": -5}}, "timing.consumer.session_timeout_ms: expected a non-negative"),
    ({"classic": {"join_sync_ms": "fast"}}, "timing.classic.join_sync_ms: .*found 'fast'"),
])
def test_bad_timing_names_the_setting(settings, message):
    with pytest.raises(InvalidOptionError, match=message):
        Timing.of(settings)


def test_a_variant_timing_is_over_the_call_timing():
    base = Timing.of({"classic": {"session_timeout_ms": 10_000}})
    t = Timing.of({"classic": {"heartbeat_interval_ms": 1_000}}, base)
    assert (t.classic.session_timeout_ms, t.classic.heartbeat_interval_ms) == (10_000, 1_000)
    assert t.consumer == dataclasses.replace(Timing().consumer)
