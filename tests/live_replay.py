"""Live replays: a scenario's events driven for real on the Apache Kafka test broker, with Kafka's
Java consumer (``tests/live/ReplayMember.java``, one JVM per member incarnation), and what the
members saw, to compare with ``simulate()`` (tests/test_live_replay.py).

Each event is acted out at its time on the scaled clock (:data:`SCALE` of the scenario's):

* ``join``: a member's JVM, started and ready beforehand, subscribes (``group.instance.id``
  for a static member);
* ``crash``: SIGKILL of its process (no callback, no LeaveGroup);
* ``leave``: ``close()``; a static member's close sends no LeaveGroup;
* ``config_change``: a restart: ``close()``, then, :data:`RESTART_MS` later, the member's next
  incarnation subscribes with the new ``partition.assignment.strategy``, or the new
  ``group.protocol`` when the event has a ``group_protocol`` (a member-by-member migration),
  and the same ``group.instance.id``. It is recorded as what it was, a ``leave`` and a ``join``;
* ``subscribe``: ``subscribe()`` with the new topics; ``partitions_added``: CreatePartitions;
* ``lag_change``: nothing (no assignor of a live replay reads lags).

:class:`LiveRun` keeps what happened, with wall-clock times: the events as acted out (the times
``simulate()`` is fed, since a JVM's start-up does not scale with the clock), each member's
rebalance callbacks, and for a group with KIP-848 members the group's type and epochs as the
admin client described them. A classic member's join is timed when the coordinator added it, as
the broker's log says (:func:`broker_joins`): its first wait of
``group.initial.rebalance.delay.ms`` runs from the first member's, and the sample puts s1's join
at its very end, so the few milliseconds between a ``subscribe()`` and the JoinGroup that adds the
member decide whether the wait is extended.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kafka_broker import GROUP_TIMERS, classpath
from kafka_oracle import compiled

SOURCE = Path(__file__).resolve().parent / "live" / "ReplayMember.java"
#: the live clock against the scenario's: Kafka's timers over ten (the broker's GROUP_TIMERS)
SCALE = 0.1
#: the classic consumer's timers on the live clock: Kafka's defaults over ten, but the metadata's
#: age. A leader sees a grown topic at its next refresh, a moment no event sets, unless it
#: (re)joined since the growth (its metadata is fresh; which member leads is the coordinator's
#: hash order): an age of a heartbeat makes that moment the growth's, within a heartbeat
CLASSIC = {"heartbeat.interval.ms": 300, "session.timeout.ms": 4500, "max.poll.interval.ms": 30000,
           "metadata.max.age.ms": 300}
#: Kafka's class of each client assignor
ASSIGNORS = {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
             "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
             "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
             "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}
#: one JoinGroup + SyncGroup exchange as the live replays measure it on the test machine (the
#: leader's assignment included), from the broker's stabilizing the group to the callbacks
JOIN_SYNC_MS = 50
#: how long after the last event the replay keeps running, on the live clock
SETTLE_MS = 4000
#: how long a restart (a ``config_change``) keeps a member out, on the live clock: its JVM's
#: stop and start, longer than a heartbeat, so that its close and its join are two rebalances
RESTART_MS = 1000


def timing() -> dict:
    """``simulate()``'s ``timing`` for the live clock: the consumers' and the broker's settings."""
    return {"classic": {"heartbeat_interval_ms": CLASSIC["heartbeat.interval.ms"],
                        "session_timeout_ms": CLASSIC["session.timeout.ms"],
                        "rebalance_timeout_ms": CLASSIC["max.poll.interval.ms"],
                        "initial_rebalance_delay_ms": GROUP_TIMERS["group.initial.rebalance.delay.ms"],
                        "metadata_max_age_ms": CLASSIC["metadata.max.age.ms"], "join_sync_ms": JOIN_SYNC_MS},
            "consumer": {"heartbeat_interval_ms": GROUP_TIMERS["group.consumer.heartbeat.interval.ms"],
                         "session_timeout_ms": GROUP_TIMERS["group.consumer.session.timeout.ms"],
                         "assignment_interval_ms": GROUP_TIMERS["group.consumer.assignment.interval.ms"]}}


@dataclass
class Callback:
    """One line a member printed: ``ev`` (``assigned``, ``revoked``, ``lost``, ``joined``,
    ``closing``, ``closed``), ``at`` (ms since the replay began), its generation or epoch, the
    partitions."""

    member: str
    incarnation: int
    ev: str
    at: int
    gen: int | None = None
    member_id: str | None = None
    tps: frozenset = frozenset()


class _Process:
    """One JVM of the harness, its JSON lines read by a thread."""

    def __init__(self, args: list[str], log: Path):
        self.lines: list[dict] = []
        self._ready = threading.Event()
        self.log = log
        java = ["java", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={log.with_suffix('.xml')}",
                "-cp", os.pathsep.join([str(compiled(SOURCE)), classpath("kafka")]), "ReplayMember"]
        log.with_suffix(".xml").write_text(_LOG4J.format(log=log))
        self.process = subprocess.Popen([*java, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=open(log.with_suffix(".err"), "w"), text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))
                if self.lines[-1]["ev"] == "ready":
                    self._ready.set()

    def wait_ready(self, seconds: float = 60) -> None:
        if not self._ready.wait(seconds):
            raise AssertionError(f"a replay JVM was not ready within {seconds} s: {self.log.with_suffix('.err')}"
                                 f"\n{self.log.with_suffix('.err').read_text()[-2000:]}")

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def wait_for(self, ev: str, seconds: float = 30) -> dict:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in self.lines:
                if line["ev"] == ev:
                    return line
            time.sleep(0.005)
        raise AssertionError(f"no {ev!r} from a replay JVM within {seconds} s ({self.log})")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


_LOG4J = """<Configuration status="error"><Appenders><File name="f" fileName="{log}">
<PatternLayout pattern="[%d] %p %m (%c)%n"/></File></Appenders>
<Loggers><Root level="info"><AppenderRef ref="f"/></Root></Loggers></Configuration>
"""


@dataclass
class LiveRun:
    """What a live replay did and saw. ``events``: the scenario's rows with ``at`` the time each
    was acted out (ms since the replay began); ``callbacks``: every member's; ``epochs``: a
    KIP-848 group's ``(at, group_epoch, target_epoch, members)`` as ConsumerGroupDescribe
    answered; ``types``: ``(at, type)`` at each change of the group's type (``CLASSIC``,
    ``CONSUMER``), when some member used the consumer protocol; ``killed``: ``(member,
    incarnation) -> at``; ``ended``: when the replay stopped."""

    events: list[dict]
    callbacks: list[Callback] = field(default_factory=list)
    epochs: list[tuple] = field(default_factory=list)
    types: list[tuple[int, str]] = field(default_factory=list)
    killed: dict = field(default_factory=dict)
    ended: int = 0
    logs: Path | None = None


#: the coordinator's line for each member it adds to a classic group: a dynamic member at its
#: second JoinGroup (with the member id the first one gave it), a static member at its first
_ADDED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO .*?(?:"
                    r"Pending dynamic member with id (\S+) joins group (\S+) in \w+ state\. Adding to the group"
                    r"|Static member with groupInstanceId=(\S+) and unknown member id joins group (\S+) in \w+ state)")


def broker_joins(log: Path, group_id: str) -> list[tuple[float, str]]:
    """``(epoch ms, key)`` for each member the coordinator added to ``group_id``, in order, from
    the broker's log: ``key`` is a static member's ``group.instance.id``, or a dynamic member's
    ``client.id`` (its member id less the UUID the coordinator appended)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _ADDED.match(line)
        if m and group_id in (m.group(3), m.group(5)):
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000  # the broker's local time
            out.append((at, m.group(4) or m.group(2)[:-37]))
    return out


def replay_live(broker, group_id: str, events: list[dict], *, group_protocol: str = "classic",
                strategy: str | None = None, remote_assignor: str = "uniform") -> LiveRun:
    """Act ``events`` (one group's, ordered by ``at``, the scenario's milliseconds) out on
    ``broker`` on the live clock. ``strategy``: every member lists only this assignor (a
    what-if's forced strategy); otherwise each member its event's ``assignors``. ``group_protocol``:
    every member's ``group.protocol``, unless its event names another (``group_protocol``)."""
    folder = Path(tempfile.mkdtemp(prefix=f"replay-{group_id}-"))
    t0: list[float] = [0.0]
    incarnations: dict[str, list[_Process]] = {}
    current: dict[str, int] = {}

    def protocol_of(event: dict) -> str:
        return event.get("group_protocol") or group_protocol

    def properties(name: str, k: int, event: dict) -> Path:
        protocol = protocol_of(event)
        config = {"bootstrap.servers": broker.bootstrap, "group.id": group_id, "client.id": name,
                  "enable.auto.commit": "false", "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            lists = [strategy] if strategy else list(event.get("assignors") or ["range", "cooperative-sticky"])
            config.update(CLASSIC, **{"partition.assignment.strategy": ",".join(ASSIGNORS[a] for a in lists)})
        else:
            config["group.remote.assignor"] = remote_assignor
        if event.get("group_instance_id"):
            config["group.instance.id"] = event["group_instance_id"]
        path = folder / f"{name}-{k}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        return path

    # every incarnation's JVM up front: joins and restarts then take what a subscribe takes;
    # the actions on the live clock: (at, order, action, event, member, incarnation)
    actions: list[tuple[float, int, str, dict, str | None, int | None]] = []
    last: dict[str, dict] = {}
    for e in events:
        name, at = e.get("member_id"), e["at"] * SCALE
        if e["kind"] in ("join", "config_change"):
            spec = {**last.get(name, {}), **{k: v for k, v in e.items() if v is not None}}
            last[name] = spec
            k = len(incarnations.setdefault(name, []))
            incarnations[name].append(_Process(["member", str(properties(name, k, spec)), ",".join(spec["topics"])],
                                               folder / f"{name}-{k}.log"))
            if e["kind"] == "config_change":
                actions.append((at, len(actions), "close", e, name, k - 1))
                at += RESTART_MS
            actions.append((at, len(actions), "go", {**spec, "kind": "join"}, name, k))
        else:
            actions.append((at, len(actions), e["kind"], e, name, None))
    actions.sort()
    # the group's coordinator, asked until it answers: the replay starts once it is loaded
    admin = folder / "watch.properties"
    admin.write_text(f"bootstrap.servers={broker.bootstrap}\n")
    watcher = _Process(["watch", str(admin), group_id], folder / "watch.log")
    for p in [p for ps in incarnations.values() for p in ps] + [watcher]:
        p.wait_ready()
    watcher.wait_for("epoch", 60)
    run = LiveRun(events=[], logs=folder)
    t0[0] = time.time() * 1000 + 500
    now = lambda: int(time.time() * 1000 - t0[0])  # noqa: E731
    since = lambda line: int(line["t"] - t0[0])  # noqa: E731
    topics_now: dict[str, list[str]] = {}
    joins: list[tuple[int, str]] = []  # (the join's index in run.events, its key in broker_joins)

    try:
        for at, _, action, e, name, k in actions:
            wait = t0[0] + at - time.time() * 1000
            if wait > 0:
                time.sleep(wait / 1000)
            acted = {"group_id": e["group_id"], "member_id": name, "kind": action}
            if action == "go":
                p = incarnations[name][k]
                if k > 0:  # a restart: its previous incarnation has closed first
                    incarnations[name][k - 1].wait_for("closed")
                p.send("go")
                acted = {**e, "at": since(p.wait_for("joined"))}
                if protocol_of(e) == "classic":  # timed by the broker's log below
                    joins.append((len(run.events), e.get("group_instance_id") or name))
                current[name], topics_now[name] = k, list(e["topics"])
            elif action in ("close", "leave"):  # a restart's close, or a leave: close()
                p = incarnations[name][current[name]]
                p.send("close")
                acted.update(kind="leave", at=since(p.wait_for("closing")))
            elif action == "crash":
                p = incarnations[name][current[name]]
                acted["at"] = now()
                p.process.send_signal(signal.SIGKILL)
                p.process.wait(10)
                run.killed[(name, current[name])] = acted["at"]
            elif action in ("subscribe", "unsubscribe"):  # the events' topics are added or taken away
                acted = {**e, "at": now()}
                had = topics_now[name]
                topics_now[name] = (sorted(set(had) | set(e["topics"])) if action == "subscribe"
                                    else [t for t in had if t not in e["topics"]])
                incarnations[name][current[name]].send("subscribe " + ",".join(topics_now[name]))
            elif action == "partitions_added":
                acted = {**e, "at": now()}
                broker.add_partitions(e["topic"], e["partitions"])
            else:  # lag_change: nothing to act out
                acted = {**e, "at": int(at)}
            run.events.append(acted)
        time.sleep(SETTLE_MS / 1000)
        run.ended = now()
    finally:
        for ps in incarnations.values():
            for p in ps:
                p.stop()
        watcher.stop()
    for name, ps in incarnations.items():
        for k, p in enumerate(ps):
            for line in p.lines:
                if line["ev"] == "ready":
                    continue
                run.callbacks.append(Callback(name, k, line["ev"], int(line["t"] - t0[0]), line.get("gen"),
                                              line.get("member"), frozenset(map(tuple, line.get("tps") or ()))))
    if joins and broker.log is not None:
        added = broker_joins(broker.log, group_id)
        for i, key in joins:  # each join at the first addition of its member since it subscribed
            harness = run.events[i]["at"]
            j = next((j for j, (a, k) in enumerate(added) if k == key and a - t0[0] >= harness - 5), None)
            assert j is not None, f"the broker's log ({broker.log}) has no addition of {key} to {group_id} after {harness} ms"
            run.events[i]["at"] = int(added.pop(j)[0] - t0[0])
    if group_protocol == "consumer" or any(e.get("group_protocol") == "consumer" for e in events):
        described = [x for x in watcher.lines if x["ev"] == "epoch"]
        run.epochs = [(int(x["t"] - t0[0]), x["group_epoch"], x["target_epoch"], x["members"]) for x in described]
        for x in described:  # GroupType's names: "Classic", "Consumer"
            if not run.types or run.types[-1][1] != x["type"].upper():
                run.types.append((int(x["t"] - t0[0]), x["type"].upper()))
    run.callbacks.sort(key=lambda c: c.at)
    # kept beside the members' logs, for a failing comparison's reader
    (folder / "run.json").write_text(json.dumps({"events": run.events, "ended": run.ended, "epochs": run.epochs,
                                                 "types": run.types,
                                                 "killed": [[m, k, at] for (m, k), at in run.killed.items()],
                                                 "callbacks": [[c.member, c.incarnation, c.ev, c.at, c.gen,
                                                                c.member_id, sorted(c.tps)] for c in run.callbacks]}))
    return run


@dataclass(frozen=True)
class Holding:
    """What one member incarnation consumes from ``at`` on, after one of its callbacks (``ev``,
    of generation or epoch ``gen``) or its process's kill (``ev`` ``killed``)."""

    at: int
    member: str
    incarnation: int
    ev: str
    gen: int | None
    tps: frozenset
    changed: bool


def holdings(run: LiveRun) -> list[Holding]:
    """The members' callbacks and kills folded into what each incarnation consumes, in time
    order: COOPERATIVE and KIP-848 members report what is added or taken away, EAGER ones
    revoke everything first; a killed process consumes nothing from the kill on."""
    owned: dict[tuple[str, int], frozenset] = {}
    out = []
    moments = [(c.at, 0, c) for c in run.callbacks] + [(at, 1, key) for key, at in run.killed.items()]
    for at, _, c in sorted(moments, key=lambda m: (m[0], m[1])):
        key = c if isinstance(c, tuple) else (c.member, c.incarnation)
        before = owned.get(key, frozenset())
        if isinstance(c, tuple):
            ev, gen, after = "killed", None, frozenset()
        elif c.ev == "assigned":
            ev, gen, after = c.ev, c.gen, before | c.tps
        elif c.ev in ("revoked", "lost"):
            ev, gen, after = c.ev, c.gen, before - c.tps
        else:
            continue
        owned[key] = after
        out.append(Holding(at, key[0], key[1], ev, gen, after, after != before))
    return out


def consumed(run: LiveRun) -> list[Holding]:
    """Each change of what a member incarnation consumes (:func:`holdings`)."""
    return [h for h in holdings(run) if h.changed]
