"""The simulator against the real broker: the sample scenario (data/scenario/events.csv) acted out
on the Apache Kafka test broker with Kafka's Java consumer (tests/live_replay.py), then replayed by
``simulate()`` from the times the harness recorded, on the same clock (Kafka's timers over ten).
What must agree:

* classic: the generations (from the members' rebalance callbacks), each at its time within one
  heartbeat interval, and each generation's sizes (cooperative-sticky breaks ties between
  equally loaded members in the hash order of their member ids, which are random: who gets the
  extra partition is not determined);
* KIP-848: the targets, as ConsumerGroupDescribe reports their epochs, each within one heartbeat
  interval of one of the model's, both ways; the final assignment's sizes; the model runs on the
  member ids the consumers drew (the broker's ``uniform`` breaks ties by them);
* how many partitions nobody consumes, at every moment, within one heartbeat interval of the
  model's: each unassigned interval's start and end (under KIP-848 both ways: every change of the
  model's has a live one too).

In CI: classic cooperative-sticky through the rolling upgrade's restarts (a crash inside the
session timeout, a static member's bounce, restarts a second apart), and the whole sample under
KIP-848. Before
a release (``-m release``): the whole sample under classic EAGER range, and its rolling upgrade as
an online migration to KIP-848, member by member (the classic generations before the conversion,
the targets after it, and the classic members' revocations on its epochs).
docs/simulation.md says what the rest of the classic sample found that the model does not follow
yet.
"""

from __future__ import annotations

import pytest
from kafka_broker import GROUP_TIMERS
from live_replay import CLASSIC, LiveRun, consumed, holdings, replay_live, timing
from pyspark.sql import functions as F

from spark_assign.cli.simulate import read_events, read_partitions
from spark_assign.history import AssignmentHistory
from spark_assign.simulate import simulate
from spark_assign.simulation.timing import Timing

SCENARIO = "data/scenario"
#: scenarios of the suite's own (tests/cases/live/): ``free_partitions``: a join burst, a later
#: join, a crash never replaced while a subscription change waits for it, a static member bouncing
#: within its session, a topic growing, a leave
OWN_SCENARIOS = {"free_partitions": "tests/cases/live/free_partitions"}
#: how close to the initial delay's wait boundary a join races the coordinator's timer (ms)
RACE_MS = 10
#: how far the model's partition-seconds unassigned may be from the broker's (a fraction), where a
#: check holds the totals: the sample's KIP-848 replays measured +3.5%, +4.8% and +20%
#: (docs/simulation.md), too wide for one run in CI. The members' next heartbeats after a target
#: fall together (they reset their timers when they acknowledge the last one), so a run's
#: pick-ups are early or late together
TOTAL_TOLERANCE = 0.05
EVENTS_SCHEMA = ("group_id string, at long, kind string, member_id string, group_instance_id string, "
                 "topics array<string>, assignors array<string>, topic string, partitions int, lag long, "
                 "group_protocol string")


def scenario(spark, prefix: str, until: int, folder: str = SCENARIO) -> tuple[list[dict], dict[str, int]]:
    """A scenario's events up to ``until`` (ms), read as the CLI reads them, and its topic sizes,
    its topics and group named after ``prefix`` (``folder``: the sample's, or one of
    :data:`OWN_SCENARIOS`)."""
    from test_readme import ROOT

    def named(r) -> dict:
        out = r.asDict()
        out["group_id"] = prefix + out["group_id"]
        out["topic"] = prefix + out["topic"] if out["topic"] else None
        out["topics"] = [prefix + t for t in out["topics"]] if out["topics"] else None
        return out

    rows = read_events(spark, str(ROOT / folder / "events.csv")).where(F.col("at") <= until).orderBy("at", "kind", "member_id").collect()
    sizes = read_partitions(spark, str(ROOT / folder / "partitions.csv")).groupBy("topic").count().collect()
    return [named(r) for r in rows], {prefix + r.topic: r["count"] for r in sizes}


def modelled(spark, tmp_path, run: LiveRun, sizes: dict[str, int], *, live_ids: bool = False, **settings):
    """``simulate()`` of the events as the harness acted them out, on the live clock. ``live_ids``:
    each member incarnation under the member id it had (a KIP-848 consumer draws its own): the
    broker's ``uniform`` breaks ties in the order of the ids (docs/kafka.md)."""
    cols = [c.split()[0] for c in EVENTS_SCHEMA.split(", ")]
    rows = [dict(e) for e in run.events]
    if live_ids:
        ids = {(c.member, c.incarnation): c.member_id for c in run.callbacks if c.member_id}
        joined: dict[str, int] = {}
        for e in rows:
            name = e.get("member_id")
            if name is None:
                continue
            if e["kind"] == "join":
                joined[name] = joined.get(name, -1) + 1
            e["member_id"] = ids.get((name, joined.get(name, 0)), name)
    events = spark.createDataFrame([tuple(e.get(c) for c in cols) for e in rows], EVENTS_SCHEMA)
    parts = spark.createDataFrame([(t, p) for t, n in sizes.items() for p in range(n)], "topic string, partition int")
    history = AssignmentHistory(str(tmp_path / "history"), spark, backend="embedded")
    result = simulate(events, parts, timing=timing(), history=history, **settings)
    return result, history


def live_generations(run: LiveRun) -> dict[int, int]:
    """A classic group's generations: generation -> when its first member was assigned."""
    gens: dict[int, int] = {}
    for c in run.callbacks:
        if c.ev == "assigned" and c.gen is not None and c.gen > 0:
            gens.setdefault(c.gen, c.at)
    return gens


def live_unassigned(run: LiveRun, sizes: dict[str, int]) -> list[tuple[int, int]]:
    """``(at, partitions nobody consumes from then on)`` at every change."""
    grown = sorted((e["at"], e["topic"], e["partitions"]) for e in run.events if e["kind"] == "partitions_added")
    owned: dict = {}
    points = ([(h.at, "owned", (h.member, h.incarnation), h.tps) for h in consumed(run)]
              + [(at, "grow", t, n) for at, t, n in grown])
    total, out = sum(sizes.values()), [(0, sum(sizes.values()))]
    size = dict(sizes)
    for at, what, key, value in sorted(points, key=lambda p: p[0]):
        if what == "grow":
            total += value - size[key]
            size[key] = value
        else:
            owned[key] = value
        held = len(set().union(*owned.values())) if owned else 0
        out.append((at, total - held))
    return out


def model_moments(result) -> list[int]:
    """When the model changes what is consumed: each generation (its rounds included) and each
    step after which the partitions unassigned or idle are not as before."""
    moments = [int(g.at.timestamp() * 1000) for g in result.generations.collect()]
    before = None
    for st in result.steps.orderBy("at").collect():  # a step's ``at``: the events' milliseconds
        if st.unassigned + st.idle != before:
            moments.append(int(st.at))
        before = st.unassigned + st.idle
    return sorted(moments)


def model_unassigned(result) -> list[tuple[int, int]]:
    """The model's partitions nobody consumes (unassigned or idle), ``(at, count from then on)`` at
    every change, as ``compare()`` counts them: each step's count after it until the next step,
    plus, between a rebalance's rounds, what a round left over the last one, and, before a consumer
    group's first round, what its members did not hold."""
    spans: list[tuple[int, int, int]] = []  # (from, to, partitions)
    steps = sorted(result.steps.collect(), key=lambda r: r.step)
    for st, nxt in zip(steps, steps[1:] + [None]):
        spans.append((st.at, nxt.at if nxt else st.at, st.unassigned + st.idle))
    rounds: dict[int, list] = {}
    for g in result.generations.collect():
        rounds.setdefault(g.step, []).append(g)
    ms = lambda g: int(g.at.timestamp() * 1000)  # noqa: E731
    for st in steps:
        rs = sorted(rounds.get(st.step, []), key=lambda g: g.round)
        if not rs:
            continue
        last = rs[-1].unassigned
        for r, nxt in zip(rs, rs[1:]):
            spans.append((ms(r), ms(nxt), r.unassigned - last))
        if st.held_before is not None and rs[0].protocol == "CONSUMER":
            spans.append((st.at, ms(rs[0]), rs[0].unassigned + rs[0].assigned - st.held_before - last))
    points = sorted({t for a, b, _ in spans for t in (a, b)})
    out, before = [], None
    for t in points:
        n = sum(v for a, b, v in spans if a <= t < b)
        if n != before:
            out.append((t, n))
        before = n
    return out


def total_ms(levels: list[tuple[int, int]], start: int, end: int) -> int:
    """Partition-milliseconds of ``levels`` (``(at, count from then on)``) from ``start`` to ``end``."""
    total = 0
    for (at, n), nxt in zip(levels, [lv[0] for lv in levels[1:]] + [end]):
        a, b = max(at, start), min(nxt, end)
        total += n * max(b - a, 0)
    return total


def check_unassigned_both_ways(run: LiveRun, result, sizes: dict[str, int], heartbeat_ms: int,
                               tolerance: float | None) -> None:
    """The partitions nobody consumes, live and modelled, held both ways: every live change has a
    change of the model's within a heartbeat, every change of the model's a live one, and, unless
    ``tolerance`` is None, the partition-seconds from the first join to the end agree within it
    (a fraction)."""
    live_u, model_u = live_unassigned(run, sizes), model_unassigned(result)
    start = min(e["at"] for e in run.events if e["kind"] == "join")
    live_total, model_total = total_ms(live_u, start, run.ended), total_ms(model_u, start, run.ended)
    shown = f"live {live_total / 1000:.1f} partition-s, model {model_total / 1000:.1f}; live {live_u}, model {model_u}"
    lone = unexplained(live_u, [at for at, _ in model_u], heartbeat_ms)
    assert not lone, f"{len(lone)} live changes, first {lone[:5]}, have no model change within {heartbeat_ms} ms: {shown} ({run.logs})"
    extra = unexplained([(0, -1), *model_u], [at for at, _ in live_u], heartbeat_ms)
    assert not extra, f"{len(extra)} model changes, first {extra[:5]}, have no live change within {heartbeat_ms} ms: {shown} ({run.logs})"
    if tolerance is not None:
        assert abs(model_total - live_total) <= tolerance * live_total, f"partition-seconds unassigned: {shown} ({run.logs})"


def unexplained(live: list[tuple[int, int]], moments: list[int], tolerance: int) -> list[tuple[int, int]]:
    """The live changes of the partitions nobody consumes with no change of the model's within
    ``tolerance`` either side: each unassigned interval's start and end, held to the model's."""
    changes = [(at, n) for (at, n), (_, before) in zip(live[1:], live) if n != before]
    return [(at, n) for at, n in changes if not any(abs(at - m) <= tolerance for m in moments)]


def live_assignments(run: LiveRun) -> dict[int, dict[str, frozenset]]:
    """A classic group's assignment at each generation: member -> what it holds once its
    callbacks of that generation ran (a member without partitions left out)."""
    out: dict[int, dict[str, frozenset]] = {}
    for h in holdings(run):
        if h.ev == "assigned":
            out.setdefault(h.gen, {})[h.member] = h.tps
    return {g: {m: tps for m, tps in a.items() if tps} for g, a in out.items()}


def model_assignments(history: AssignmentHistory, group_id: str) -> dict[int, dict[str, frozenset]]:
    out: dict[int, dict[str, set]] = {}
    for r in history.assignments(group_id).collect():
        # a restarted member's closed incarnation is "<m> (until its restart at <t> ms)"
        out.setdefault(r.generation, {}).setdefault(r.member_id.split(" (")[0], set()).add((r.topic, r.partition))
    return {g: {m: frozenset(tps) for m, tps in a.items()} for g, a in out.items()}


def check_agreement(run: LiveRun, result, history, sizes: dict[str, int], heartbeat_ms: int) -> None:
    """The live run and the model agree (the module doc); an AssertionError shows both."""
    group_id = run.events[0]["group_id"]
    live = live_generations(run)
    model = {g.generation: int(g.at.timestamp() * 1000) for g in result.generations.collect()
             if g.at.timestamp() * 1000 <= run.ended}
    assert sorted(live) == sorted(model), f"generations: live {live}, model {model} ({run.logs})"
    late = {g: (live[g], model[g]) for g in live if abs(live[g] - model[g]) > heartbeat_ms}
    # a join added within a few ms of the initial delay's wait boundary races the coordinator's
    # timer (its firing and the JoinGroup queue on one event loop): either outcome is Kafka's,
    # one wait apart (tryCompleteInitialRebalanceElseSchedule)
    wait = GROUP_TIMERS["group.initial.rebalance.delay.ms"]
    joins = sorted(e["at"] for e in run.events if e["kind"] == "join")
    # how far each later join of the first two waits lies from the nearest wait boundary
    raced = any(min((j - joins[0]) % wait, wait - (j - joins[0]) % wait) <= RACE_MS
                for j in joins[1:] if j - joins[0] <= 2 * wait)
    if raced and 1 in late and abs(abs(live[1] - model[1]) - wait) <= heartbeat_ms:
        late.pop(1)
    assert not late, f"generations more than a heartbeat ({heartbeat_ms} ms) apart: {late} ({run.logs})"
    # balanced alike: the same sizes (which member gets the extra partition is a tie Kafka breaks
    # in its member map's hash order, so how many move when that member leaves differs too)
    ours, theirs = model_assignments(history, group_id), live_assignments(run)
    shape = {g: sorted(map(len, a.values())) for g, a in theirs.items()}
    model_shape = {g: sorted(map(len, a.values())) for g, a in ours.items()}
    differ = {g: (model_shape.get(g), shape[g]) for g in shape if model_shape.get(g) != shape[g]}
    assert not differ, (f"sizes differ at generations {sorted(differ)}: {differ}; model {ours}, "
                        f"live {theirs} ({run.logs})")
    live_u, moments = live_unassigned(run, sizes), model_moments(result)
    if raced:  # the other outcome of the race: the first generation one wait earlier or later
        moments = sorted(moments + [model[1] - wait, model[1] + wait])
    bad = unexplained(live_u, moments, heartbeat_ms)
    assert not bad, (f"{len(bad)} live changes of the unassigned partitions, first {bad[:5]}, have no change "
                     f"of the model's within {heartbeat_ms} ms: live {live_u}, model {moments} ({run.logs})")


#: the part of the sample the live replay in CI acts out: through the rolling upgrade's restarts
#: of c1, c3 and c4 and c5's close (docs/simulation.md, "Checked against the broker", says why not
#: further yet)
CI_UNTIL_MS = 150_000


def test_classic_cooperative_sticky_matches_the_broker(spark, broker, tmp_path):
    """The sample under classic cooperative-sticky, through the rolling upgrade's restarts: the
    initial delay's joins (one generation), c4's join (two rounds), c2's crash held until its
    session expires, c5's join, s1's bounce inside its session (no rebalance), the restarts of
    c1, c3 and c4 a second apart (each restart's join and the next one's close in one
    rebalance) and c5's close."""
    events, sizes = scenario(spark, "live-coop.", CI_UNTIL_MS)
    broker.create_topics(sizes)
    run = replay_live(broker, events[0]["group_id"], events, strategy="cooperative-sticky")
    result, history = modelled(spark, tmp_path, run, sizes, strategy="cooperative-sticky")
    # cooperative-sticky breaks ties between equally loaded members in its member map's hash
    # order, and the members' ids are random: who gets the extra partition is not determined
    check_agreement(run, result, history, sizes, Timing.of(timing()).classic.heartbeat_interval_ms)



@pytest.mark.release
def test_classic_eager_range_matches_the_broker(spark, broker, tmp_path):
    """The whole sample under classic EAGER range (every member lists only ``range``): every
    rebalance one round in which every member revokes everything, the crash held until its
    session expires, the static member's bounce and restart (no rebalance: the selected assignor
    stays ``range``), the grown topic noticed on the leader's metadata refresh."""
    events, sizes = scenario(spark, "live-range.", 200_000)
    broker.create_topics(sizes)
    run = replay_live(broker, events[0]["group_id"], events, strategy="range")
    result, history = modelled(spark, tmp_path, run, sizes, strategy="range")
    check_agreement(run, result, history, sizes, Timing.of(timing()).classic.heartbeat_interval_ms)


def live_targets(run: LiveRun) -> list[tuple[int, int]]:
    """A KIP-848 group's targets as ConsumerGroupDescribe reported them: ``(first seen at,
    target epoch)`` at each change (the watcher asks every 50 ms: a target is seen a little
    after the coordinator computed it)."""
    out: list[tuple[int, int]] = []
    for at, _, target_epoch, _ in run.epochs:
        if target_epoch > 0 and (not out or out[-1][1] != target_epoch):
            out.append((at, target_epoch))
    return out


def model_targets(result, until: int) -> list[int]:
    """The model's targets of a consumer group: the steps at which it computed one (its epoch)."""
    return sorted(st.at for st in result.steps.where("held_before IS NOT NULL").collect() if st.at <= until)


def final_holdings(run: LiveRun) -> dict[tuple[str, int], frozenset]:
    """What each member incarnation consumed when the replay ended (the empty ones left out)."""
    last: dict[tuple[str, int], frozenset] = {}
    for h in holdings(run):
        last[(h.member, h.incarnation)] = h.tps
    return {k: v for k, v in last.items() if v}


def consumed_once_at_the_end(run: LiveRun, sizes: dict[str, int]) -> dict[tuple[str, int], frozenset]:
    """:func:`final_holdings`, asserted to hold every partition (the grown topics' new ones
    included) exactly once."""
    final = final_holdings(run)
    held = [tp for tps in final.values() for tp in tps]
    grown = {**sizes, **{e["topic"]: e["partitions"] for e in run.events if e["kind"] == "partitions_added"}}
    assert len(held) == len(set(held)) == sum(grown.values()), f"final live assignment {final} ({run.logs})"
    return final


def check_consumer_agreement(run: LiveRun, result, sizes: dict[str, int], heartbeat_ms: int,
                             tolerance: float | None = None) -> None:
    """A KIP-848 replay and the model agree: every target the broker reported has one of the
    model's within a heartbeat, and every one of the model's has the broker's; how many
    partitions nobody consumes, at every moment, as :func:`check_agreement`; and the final
    assignment: every partition consumed once, the same sizes as the model's."""
    live, model = live_targets(run), model_targets(result, run.ended)
    assert live, f"ConsumerGroupDescribe reported no target ({run.logs})"
    check_targets_and_the_end(run, result, sizes, live, model, heartbeat_ms, tolerance)


def check_targets_and_the_end(run: LiveRun, result, sizes: dict[str, int], live: list[tuple[int, int]],
                              model: list[int], heartbeat_ms: int, tolerance: float | None = None) -> None:
    """The consumer group's targets, the broker's (``live``) and the model's, each within a
    heartbeat of one of the other's; then the partitions nobody consumes, and the final sizes."""
    lone = [(at, epoch) for at, epoch in live if not any(abs(at - m) <= heartbeat_ms for m in model)]
    assert not lone, f"broker targets with no model target within {heartbeat_ms} ms: {lone}; model {model} ({run.logs})"
    extra = [m for m in model if not any(abs(at - m) <= heartbeat_ms for at, _ in live)]
    assert not extra, f"model targets with no broker target within {heartbeat_ms} ms: {extra}; live {live} ({run.logs})"
    check_unassigned_both_ways(run, result, sizes, heartbeat_ms, tolerance)
    final = consumed_once_at_the_end(run, sizes)
    ours = sorted(r["count"] for r in result.assignment.groupBy("member_id").count().collect())
    assert ours == sorted(map(len, final.values())), f"final sizes: model {ours}, live {final} ({run.logs})"


def test_kip848_matches_the_broker(spark, broker, tmp_path):
    """The whole sample under KIP-848 (the consumer protocol from t=0, the broker's uniform):
    each epoch bump's target, the assignment interval's shared targets, the crash held until
    its session expires, the static member's bounces (no epoch), the rolling upgrade's
    restarts, the grown topic assigned at once."""
    events, sizes = scenario(spark, "live-kip848.", 200_000)
    broker.create_topics(sizes)
    run = replay_live(broker, events[0]["group_id"], events, group_protocol="consumer")
    result, _ = modelled(spark, tmp_path, run, sizes, live_ids=True, group_protocol="consumer")
    check_consumer_agreement(run, result, sizes, Timing.of(timing()).consumer.heartbeat_interval_ms)


@pytest.mark.release
@pytest.mark.xfail(strict=True, reason="the model leaves 17% fewer partition-seconds unassigned than the "
                   "broker: the join burst's targets (issue #82), which change who holds what later")
@pytest.mark.parametrize("name", sorted(OWN_SCENARIOS))
def test_kip848_own_scenario_matches_the_broker(spark, broker, tmp_path, name):
    """A scenario of the suite's own under KIP-848 (the broker's uniform), held as the sample is:
    free partitions (a joiner's first set, a grown topic's, a leaver's, an expired member's)
    picked up at the members' next heartbeat, revocations and hand-overs."""
    events, sizes = scenario(spark, f"live-{name}.", 200_000, OWN_SCENARIOS[name])
    broker.create_topics(sizes)
    run = replay_live(broker, events[0]["group_id"], events, group_protocol="consumer")
    result, _ = modelled(spark, tmp_path, run, sizes, live_ids=True, group_protocol="consumer")
    check_consumer_agreement(run, result, sizes, Timing.of(timing()).consumer.heartbeat_interval_ms,
                             TOTAL_TOLERANCE)


def check_migration_agreement(run: LiveRun, result, converted: int, rejoined: set[str],
                              sizes: dict[str, int]) -> None:
    """A member-by-member migration and the model agree: the group converts within a consumer
    heartbeat of the broker's conversion (``converted``, live); before it, the classic
    generations, each within a classic heartbeat; the classic members that revoked on the
    consumer group's epochs (``rejoined``, live) revoke on the model's too; and after it, the
    targets, the partitions nobody consumes and the final sizes as
    :func:`check_consumer_agreement` holds them."""
    classic_hb = Timing.of(timing()).classic.heartbeat_interval_ms
    heartbeat_ms = Timing.of(timing()).consumer.heartbeat_interval_ms
    gens = result.generations.orderBy("generation").collect()
    ms = lambda g: int(g.at.timestamp() * 1000)  # noqa: E731
    first = next(ms(g) for g in gens if g.protocol == "CONSUMER")
    assert abs(first - converted) <= heartbeat_ms, f"model converts at {first}, the broker at {converted} ({run.logs})"
    # a classic member's callbacks number the consumer group's epochs on from its generations
    first_epoch = min(target for _, _, target, _ in run.epochs if target > 0)
    live = sorted(at for g, at in live_generations(run).items() if g < first_epoch)
    model = sorted(ms(g) for g in gens if g.protocol != "CONSUMER")
    assert len(live) == len(model) and all(abs(a - b) <= classic_hb for a, b in zip(live, model)), (
        f"classic generations: live {live}, model {model} ({run.logs})")
    # the members that revoke on the consumer group's epochs while in the group (a restart's
    # closed incarnation, "<m> (until its restart at <t> ms)", departs): the classic ones, EAGER
    revoking = result.revocations.join(result.generations.where("protocol = 'CONSUMER'"), ["group_id", "generation"])
    revoked_model = {r.member_id for r in revoking.where("kind = 'revoked' AND member_id NOT LIKE '% (until %'")
                     .select("member_id").distinct().collect()}
    assert rejoined <= revoked_model, (
        f"members revoking on the consumer group's epochs: live {sorted(rejoined)}, model "
        f"{sorted(revoked_model)} ({run.logs})")
    check_targets_and_the_end(run, result, sizes, live_targets(run), model_targets(result, run.ended), heartbeat_ms)


@pytest.mark.release
def test_member_by_member_migration_on_the_broker(spark, broker, tmp_path):
    """The sample's rolling upgrade as an online migration to KIP-848: each ``config_change``
    restarts its member with ``group.protocol=consumer``, the others still classic on
    ``[range, cooperative-sticky]``. What Kafka's coordinator does, as docs/simulation.md says
    and the model follows (``GroupMetadataManager``): the first consumer-protocol member
    converts the group (``convertToConsumerGroup``) and it stays a consumer group; every classic
    member rejoins on the new group epoch (``classicGroupJoinToConsumerGroup``) and, EAGER by its
    list (``range`` is not cooperative), revokes everything each time; the group ends on the
    broker's assignor, every partition consumed once and balanced; and the model agrees
    (:func:`check_migration_agreement`)."""
    events, sizes = scenario(spark, "live-migration.", 200_000)
    events = [{**e, "group_protocol": "consumer", "assignors": None} if e["kind"] == "config_change" else e
              for e in events]
    broker.create_topics(sizes)
    run = replay_live(broker, events[0]["group_id"], events)
    first = min(e["at"] for e in run.events if e["kind"] == "join" and e.get("group_protocol") == "consumer")
    types = [(at, kind) for at, kind in run.types if kind != "NONE"]  # before the first member
    assert [kind for _, kind in types] == ["CLASSIC", "CONSUMER"], f"the group's types {run.types} ({run.logs})"
    converted = types[1][0]
    assert first <= converted <= first + 1000, f"converted at {converted}, the first consumer join at {first} ({run.logs})"
    # each member's k-th join is its incarnation k; the consumer ones joined with the protocol
    consumer, joins, seen = set(), {}, {}
    for e in run.events:
        if e["kind"] == "join":
            k = seen[e["member_id"]] = seen.get(e["member_id"], -1) + 1
            if e.get("group_protocol") == "consumer":
                consumer.add((e["member_id"], k))
                joins[e["member_id"]] = e["at"]
    revokes = [h for h in holdings(run) if (h.member, h.incarnation) not in consumer and h.ev == "revoked"]
    partial = [h for h in revokes if h.tps]
    assert not partial, f"classic members that revoked part of what they held (EAGER revokes all): {partial} ({run.logs})"
    # every classic member still in the group a rejoin after the conversion (its restart's close
    # later than that) rejoins on the new epoch and revokes everything, then gets back what the
    # reconciliation gives it
    closes = {m: max(e["at"] for e in run.events if e["kind"] == "leave" and e["member_id"] == m and e["at"] < at)
              for m, at in joins.items()}
    present = {m for m, at in closes.items() if at > converted + 2 * CLASSIC["heartbeat.interval.ms"]}
    rejoined = {h.member for h in revokes if h.at >= converted}
    assert present and present <= rejoined, (
        f"classic members present after the conversion ({sorted(present)}) that did not revoke on its "
        f"epoch: {sorted(present - rejoined)} ({run.logs})")
    final = consumed_once_at_the_end(run, sizes)
    counts = sorted(map(len, final.values()))
    assert counts[-1] - counts[0] <= 1, f"final sizes {counts} ({run.logs})"
    # and the model of the migration (spark_assign/simulation/migration.py) agrees
    result, _ = modelled(spark, tmp_path, run, sizes)
    check_migration_agreement(run, result, converted, rejoined, sizes)
