"""simulate() / what_if(): static membership, crash detection, delayed resolution,
bad events; every generation recorded in a real AssignmentHistory."""

import dataclasses

import pytest
from pyspark.sql import functions as F

from spark_assign.errors import InvalidEventsError, NoCommonAssignorError
from spark_assign.history import AssignmentHistory
from spark_assign.simulate import compare, simulate
from spark_assign.simulation.analytics import simulation_table
from spark_assign.simulation.events import normalize_events, validate_events
from spark_assign.simulation.timing import INSTANT_CLASSIC, Timing

E = ("group_id string, at long, kind string, member_id string, group_instance_id string, "
     "topics array<string>, assignors array<string>, topic string, partitions int")

# a: dynamic, crashes at 30 (detected at 30 + 25 = 55); b: static, leaves at 40 and
# returns at 50 (within the timeout: no rebalance); t grows from 6 to 8 partitions at 60.
TIMELINE = [
    (0, "join", "a", None, ["t"], ["range"], None, None),
    (10, "join", "b", "ib", ["t"], ["range"], None, None),
    (20, "join", "c", None, ["t"], ["range"], None, None),
    (30, "crash", "a", None, None, None, None, None),
    (40, "leave", "b", None, None, None, None, None),
    (50, "join", "b", "ib", ["t"], ["range"], None, None),
    (60, "partitions_added", None, None, None, None, "t", 8),
]


def _events(spark, groups):
    return spark.createDataFrame([(g, *row) for g in groups for row in TIMELINE], E)


def _parts(spark):
    return spark.createDataFrame([("t", i) for i in range(6)], "topic string, partition int")


@pytest.mark.connect
def test_simulate_static_crash_and_delayed_resolution(spark, tmp_path):
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    events = _events(spark, ["plain", "delayed"]).withColumn(
        "_delay", F.when(F.col("group_id") == "delayed", F.lit(20)).otherwise(F.lit(0)).cast("long"))
    # the classic clock without its heartbeat and join timers: every rebalance at its event
    instant = Timing(classic=dataclasses.replace(INSTANT_CLASSIC, session_timeout_ms=25))
    r = simulate(events, _parts(spark), timing=instant, history=history)
    gens = {(g.group_id, g.generation): g for g in r.generations.collect()}
    # plain: joins at 0, 10, 20 -> generations 1-3; no rebalance at 30, 40, 50;
    # the crash expires at 55 (generation 4, a's two partitions lost); growth at 60 -> 5
    plain = sorted((g.generation, g.at.timestamp() * 1000, g.event_kinds, g.members, g.lost, g.unassigned)
                   for (gid, _), g in gens.items() if gid == "plain")
    assert [(p[0], round(p[1]), p[2], p[3], p[4], p[5]) for p in plain] == [
        (1, 0, "join", 1, 0, 0), (2, 10, "join", 2, 0, 0), (3, 20, "join", 3, 0, 0),
        (4, 55, "expire", 2, 2, 0), (5, 60, "partitions_added", 2, 0, 0)]
    # delayed: a's partitions stay unassigned from 55 until the deadline at 75
    delayed = sorted((g.generation, round(g.at.timestamp() * 1000), g.unassigned)
                     for (gid, _), g in gens.items() if gid == "delayed")
    assert delayed == [(1, 0, 0), (2, 10, 0), (3, 20, 0), (4, 55, 2), (5, 60, 2), (6, 75, 0)]
    # final assignments: range over b (static, first) and c on 8 partitions
    final = {(a.group_id, a.member_id, a.partition) for a in r.assignment.collect()}
    expect = {(g, "b", p) for g in ("plain", "delayed") for p in range(4)} | {
        (g, "c", p) for g in ("plain", "delayed") for p in range(4, 8)}
    assert final == expect
    # b came back as the same static member without a rebalance: generation 3 kept it
    steps = {(s.group_id, s.at): s for s in r.steps.collect()}
    assert not steps[("plain", 50)].rebalanced and not steps[("plain", 40)].rebalanced
    assert steps[("plain", 30)].idle == 2  # a crashed, its partitions idle until 55
    # recorded: every generation, lost partitions, simulated times
    h = {(g.group_id, g.generation): g for g in history.history().collect()}
    assert len(h) == 11 and h[("plain", 4)].lost == 2 and h[("plain", 4)].unassigned == 0
    assert h[("delayed", 4)].unassigned == 2
    assert history.revocations(group_id="plain", kind="lost").select("member_id").distinct().collect()[0][0] == "a"
    assert simulation_table(history).count() == 11
    cmp = {c.variant: c for c in compare(_rename_as_variants(r)).collect()}
    assert {v: c.rebalances for v, c in cmp.items()} == {"plain": 5, "delayed": 6}
    assert {v: c.lost for v, c in cmp.items()} == {"plain": 2, "delayed": 2}
    # availability gap (ms): a's 2 partitions idle 30..55, b's 2 idle 40..50 (static leave);
    # delayed: a's 2 also unassigned 55..75
    assert cmp["plain"].unassigned_partition_seconds == pytest.approx(0.070)
    assert cmp["delayed"].unassigned_partition_seconds == pytest.approx(0.110)


def _rename_as_variants(r):
    from spark_assign.simulate import SimulationResult

    ren = lambda df: df.withColumn("group_id", F.concat(F.lit("x@"), F.col("group_id")))  # noqa: E731
    return SimulationResult(ren(r.generations), ren(r.steps), ren(r.assignment), ren(r.revocations))


BAD = [
    ("out_of_order", [(0, "join", "a", None, ["t"], None, None, None, 1),
                      (20, "join", "b", None, ["t"], None, None, None, 2),
                      (10, "join", "c", None, ["t"], None, None, None, 3)], "out of order"),
    ("unknown_leave", [(0, "join", "a", None, ["t"], None, None, None, 1),
                       (5, "leave", "zz", None, None, None, None, None, 2)], "not present"),
    ("double_join", [(0, "join", "a", None, ["t"], None, None, None, 1),
                     (5, "join", "a", None, ["t"], None, None, None, 2)], "already present"),
]


def test_bad_events_name_the_event_and_record_nothing(spark, tmp_path):
    rows = [(g, *r) for g, evs, _ in BAD for r in evs]
    events = spark.createDataFrame(rows, E + ", seq long")
    with pytest.raises(InvalidEventsError) as err:
        validate_events(normalize_events(events), _parts(spark))
    msg = str(err.value)
    for g, _, problem in BAD:
        assert g in msg and problem in msg, (g, msg)
    assert "'zz'" in msg and "event_number=3" in msg
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    # a valid group alongside a bad one: nothing at all is recorded
    ok = spark.createDataFrame([("fine", 0, "join", "a", None, ["t"], None, None, None, 1)], E + ", seq long")
    with pytest.raises(InvalidEventsError):
        simulate(ok.unionByName(events), _parts(spark), history=history)
    assert history.history().count() == 0


def test_no_common_assignor_at_a_step(spark, tmp_path):
    events = spark.createDataFrame([
        ("g", 0, "join", "a", None, ["t"], ["range"], None, None),
        ("g", 5, "join", "b", None, ["t"], ["cooperative-sticky"], None, None),
    ], E)
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    with pytest.raises(NoCommonAssignorError, match=r"g at 5 \(step 2\)"):
        simulate(events, _parts(spark), history=history)
    assert history.history().count() == 0


def test_what_if_compares_variants_with_the_lags_of_the_events(spark, tmp_path):
    """what_if(): the same events under two strategies, one replay; the member lags
    come from the lag_change events (all partitions 100, then t-2 at 1,000). With
    ``record_variant`` the history holds that variant's generations under the
    events' own group id (the pipeline's replay and what-if in one replay)."""
    from spark_assign.simulate import what_if

    schema = ("group_id string, at long, kind string, member_id string, topics array<string>, "
              "assignors array<string>, topic string, partition int, lag long")
    events = spark.createDataFrame([
        ("g", 0, "join", "a", ["t"], ["range"], None, None, None),
        ("g", 10, "join", "b", ["t"], ["range"], None, None, None),
        ("g", 20, "lag_change", None, None, None, "t", None, 100),
        ("g", 30, "lag_change", None, None, None, "t", 2, 1000),
    ], schema)
    parts = spark.createDataFrame([("t", i) for i in range(3)], "topic string, partition int")
    history = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    cmp = {r.variant: r for r in what_if(
        events, parts, [{"name": "range", "strategy": "range"}, {"name": "rr", "strategy": "roundrobin"}],
        history=history, record_variant="rr", timing=Timing(classic=INSTANT_CLASSIC)).collect()}
    assert {v: (r.group_id, r.rebalances, r.partitions_moved, r.max_min_partitions) for v, r in cmp.items()} == {
        "range": ("g", 2, 1, 1), "rr": ("g", 2, 1, 1)}
    # range: a [t-0, t-1] = 200, b [t-2] = 1,000; roundrobin: a [t-0, t-2] = 1,100, b [t-1] = 100
    assert (cmp["range"].max_member_lag, cmp["range"].mean_member_lag) == (1000, 600.0)
    assert (cmp["rr"].max_member_lag, cmp["rr"].mean_member_lag) == (1100, 600.0)
    # recorded: the roundrobin variant only, as group "g", one generation per rebalance round
    gens = [(r.group_id, r.generation, r.strategy) for r in history.history().orderBy("generation").collect()]
    assert gens == [("g", 1, "roundrobin"), ("g", 2, "roundrobin")] and cmp["rr"].rounds == 2
    final = {(r.member_id, r.partition) for r in history.assignments("g").where("generation = 2").collect()}
    assert final == {("a", 0), ("a", 2), ("b", 1)}
    assert [(r.group_id, r.generation) for r in simulation_table(history).orderBy("generation").collect()] == [
        ("g", 1), ("g", 2)]
    with pytest.raises(ValueError, match="record_variant 'nope'"):
        what_if(events, parts, [{"name": "range"}], history=history, record_variant="nope")


@pytest.mark.parametrize("small_call_rows", [None, "0"], ids=["small-call", "checkpoints"], indirect=True)
def test_what_if_migration_to_kip848(spark, tmp_path, small_call_rows):
    """A migration plan: the same events under classic cooperative-sticky and under
    KIP-848 (consumer protocol, the broker's uniform assignor), one replay. Under
    KIP-848 a join bumps the group epoch (a generation: the members revoke what the
    new target takes from them, nothing else) and the revoked partitions reach their
    new owner one heartbeat later (the next generation, at that time): unassigned for
    5 s each. A leaver's partitions go at once (nobody holds them). Run as a small
    call (state kept as local relations, the default for inputs this size) and with
    small calls off (state checkpointed, as large calls run)."""
    from spark_assign.simulate import what_if

    events = spark.createDataFrame([
        ("g", 0, "join", "a", None, ["t"], ["cooperative-sticky"], None, None),
        ("g", 60_000, "join", "b", None, ["t"], ["cooperative-sticky"], None, None),
        ("g", 120_000, "join", "c", None, ["t"], ["cooperative-sticky"], None, None),
        ("g", 180_000, "leave", "b", None, None, None, None, None),
    ], E)
    history = AssignmentHistory(str(tmp_path / "h"), spark, backend="embedded")
    cmp = {r.variant: r for r in what_if(
        events, _parts(spark), [{"name": "coop", "strategy": "cooperative-sticky"},
                                {"name": "kip848", "group_protocol": "consumer",
                                 "timing": {"consumer": {"heartbeat_interval_ms": 5000}}}],
        history=history, record_variant="kip848").collect()}
    got = {v: (r.rebalances, r.rounds, r.partitions_moved, r.revoked, r.unassigned_partition_seconds,
               r.max_min_partitions) for v, r in cmp.items()}
    # b joins: a gives up 3 (b gets them next); c joins: a and b give up one each; b leaves: its 2 go at once.
    # Classic, on Kafka's clock: a's initial rebalance at 3.1 s (6 unassigned until then); each
    # join's follow-up round one heartbeat and 0.1 s after the first (3 and then 2 revoked for
    # 3.1 s); b's 2 idle from its leave until the sync at the members' next heartbeat, 1.6 s
    # later on average: 18.6 + 9.3 + 6.2 + 3.2. KIP-848: the members reconcile at their next
    # heartbeat, 2.5 s after a target on average (the 6 free partitions, a's 3 and then a's and
    # b's 2 revoked, b's 2 free after its leave), and a revoked partition reaches its new owner
    # 5 s after the target: 6 x 2.5 + 3 x 2.5 + 2 x 2.5 + 2 x 2.5
    assert got == {"coop": (4, 6, 7, 7, 37.3, 0), "kip848": (4, 6, 7, 7, 32.5, 0)}
    gens = [(r.generation, r.strategy, r.protocol) for r in history.history().orderBy("generation").collect()]
    assert gens == [(g, "uniform", "consumer") for g in range(1, 7)]
    sim = simulation_table(history).orderBy("generation").collect()
    assert [(r.generation, r.unassigned) for r in sim] == [(1, 0), (2, 3), (3, 0), (4, 2), (5, 0), (6, 0)]
    assert [(r.at - sim[0].at).total_seconds() for r in sim] == [0.0, 60.0, 62.5, 120.0, 122.5, 180.0]
    # the hand-over never gives a partition to a member other than its holder in the same generation
    revoked = {(r.generation, r.member_id, r.partition) for r in history.revocations("g").collect()}
    assert revoked == {(2, "a", 3), (2, "a", 4), (2, "a", 5), (4, "a", 2), (4, "b", 5), (6, "b", 3), (6, "b", 4)}
