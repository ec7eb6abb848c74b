"""Apache Kafka for the tests: a KRaft broker (broker and controller in one ``kafka.Kafka``
process) started from the jars ``jars/fetch.py`` caches, on loopback, and real consumers
in groups on it: kafka-python for classic groups, confluent-kafka (librdkafka) for classic
and KIP-848 (``group.protocol=consumer``) groups.

The group timers are set once, here (:data:`GROUP_TIMERS`), a tenth of Kafka's defaults, so
that a group forms in about a second and a live replay of the simulator can run on the same
clock (``tests/test_live_replay.py`` reads them from here). The broker's log is a file
(:attr:`Broker.log`); a failing test that used the broker prints its tail (tests/conftest.py).

``SPARK_ASSIGN_TEST_BOOTSTRAP=host:port`` points the live tests at a broker already running
instead (it must allow the same timers, per group where it does not).

Past 400 lines on purpose for now: the broker and the group helpers of both Python clients share
its timers and settings. The Java consumer's members, for the simulator's live replays, are in
tests/live_replay.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jars"))
from fetch import KAFKA_VERSION, cache_dir, classpath  # noqa: E402

#: the broker's group timers: Kafka's defaults over ten, the minimums low enough for them
GROUP_TIMERS = {
    # classic: JoinGroup waits this long after the first member joins, extended by each join
    "group.initial.rebalance.delay.ms": 300,
    "group.min.session.timeout.ms": 1000,
    # KIP-848 (the consumer protocol): the heartbeat the broker asks for, and the session
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": 4500,
    "group.consumer.min.session.timeout.ms": 1000,
    # how often the coordinator computes a new target: epochs bumped meanwhile share one
    "group.consumer.assignment.interval.ms": 100,
}
#: the rack the broker reports (``broker.rack``): every partition's replica is on it
RACK = "rack-a"
#: the SASL/PLAIN user of the broker's second listener
SASL_USER, SASL_PASSWORD = "ops", "right"

#: kafka-python consumer settings for a classic group on the test broker
FAST_GROUP = {"heartbeat_interval_ms": 100, "session_timeout_ms": 3000, "max_poll_interval_ms": 10000,
              "enable_auto_commit": False, "auto_offset_reset": "earliest"}
#: how long the broker may take to start before the fixture gives up
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOG4J = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""


class Broker:
    """One Apache Kafka broker process on free loopback ports, in a folder of its own.

    ``settings`` adds to or overrides the broker's configuration. ``external``: the
    bootstrap address of a broker already running (nothing is started or stopped)."""

    def __init__(self, settings: dict | None = None, *, external: str | None = None):
        self.process: subprocess.Popen | None = None
        if external:
            self.bootstrap, self.sasl_bootstrap, self.log = external, None, None
            return
        self.folder = Path(tempfile.mkdtemp(prefix="kafka-"))
        self.log = self.folder / "broker.log"
        port, sasl_port, controller = free_port(), free_port(), free_port()
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
        jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'user_{SASL_USER}="{SASL_PASSWORD}";')
        config = {
            "process.roles": "broker,controller", "node.id": 1,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                         f"CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "log.dirs": str(self.folder / "data"), "broker.rack": RACK,
            "num.partitions": 1, "auto.create.topics.enable": "false", "delete.topic.enable": "true",
            "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            **GROUP_TIMERS, **(settings or {}),
        }
        properties = self.folder / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (self.folder / "log4j2.properties").write_text(_LOG4J.format(log=self.log))
        self._java = ["java", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                      f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
                      "-cp", classpath("kafka")]
        formatted = subprocess.run(
            [*self._java, "kafka.tools.StorageTool", "format", "--standalone",
             # one argument: an id may start with "-"
             f"--cluster-id={_cluster_id()}", "-c", str(properties)], capture_output=True, text=True, timeout=120)
        if formatted.returncode != 0:
            raise RuntimeError(f"formatting the Kafka storage failed: {formatted.stdout}{formatted.stderr}")
        with open(self.folder / "stdout.log", "w") as out:
            self.process = subprocess.Popen([*self._java, "kafka.Kafka", str(properties)],
                                            stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Until the broker answers a metadata request and has a group coordinator."""
        from kafka import KafkaAdminClient

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.process.returncode} while starting:\n{self.tail()}")
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
                try:
                    admin.list_groups()
                    admin.describe_groups(["spark-assign-probe"])
                    return
                finally:
                    admin.close()
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Kafka did not start on {self.bootstrap} within {START_TIMEOUT_S} s:\n"
                                       f"{self.tail()}") from None
                time.sleep(0.3)

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the broker's log (and of what the JVM printed)."""
        out = []
        for f in (self.log, getattr(self, "folder", None) and self.folder / "stdout.log"):
            if f and Path(f).exists():
                out.append(f"--- {f}\n" + "\n".join(Path(f).read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    def admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)

    def create_topics(self, sizes: dict[str, int]) -> None:
        """Topics of ``sizes[name]`` partitions, once each is in the metadata."""
        from kafka.admin import NewTopic

        admin = self.admin()
        try:
            admin.create_topics([NewTopic(t, n, 1) for t, n in sizes.items()])
            wait_until(lambda: all(len(d.get("partitions") or ()) == sizes[d.get("name") or d.get("topic")]
                                   for d in admin.describe_topics(list(sizes))), 30, f"topics {sorted(sizes)}")
        finally:
            admin.close()

    def add_partitions(self, topic: str, total: int) -> None:
        from kafka.admin import NewPartitions

        admin = self.admin()
        try:
            admin.create_partitions({topic: NewPartitions(total)})
        finally:
            admin.close()

    def produce(self, records: dict[tuple[str, int], int]) -> None:
        """``records[(topic, partition)]`` records into each partition."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        try:
            futures = [producer.send(topic, b"x", partition=partition)
                       for (topic, partition), n in records.items() for _ in range(n)]
            producer.flush(30)
            for f in futures:
                f.get(10)
        finally:
            producer.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _die_with_parent() -> None:
    """In the broker's process before Java starts: on Linux, SIGTERM when the test process dies
    (a killed pytest leaves no broker behind)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def session_broker() -> Broker:
    """The test session's broker: ``SPARK_ASSIGN_TEST_BOOTSTRAP``'s, else a new one."""
    external = os.environ.get("SPARK_ASSIGN_TEST_BOOTSTRAP")
    return Broker(external=external) if external else Broker()


def wait_until(done, seconds: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {seconds} s")
        time.sleep(0.1)


class ConsumerGroup:
    """``members`` kafka-python consumers in ``group_id``, each polling in its own thread
    (a classic group forms only while every member keeps polling). Use as a context:
    on entry it waits until the group has assigned every partition of ``topics``; on
    exit the consumers stop polling and close (leaving the group). :meth:`leave` closes
    one consumer before that. :meth:`call` runs a function on one consumer between its
    polls. ``assignors``: one partition assignor per consumer (kafka-python's defaults
    when None); ``racks``: one ``client_rack`` per consumer."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], members: int, *, assignors=None,
                 racks=None, **config):
        from kafka import KafkaConsumer

        settings = {**FAST_GROUP, **config}
        self.group_id, self.topics = group_id, topics
        own = [{**({} if assignors is None else {"partition_assignment_strategy": [assignors[i]]}),
                **({} if racks is None else {"client_rack": racks[i]})} for i in range(members)]
        self.consumers = [KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group_id,
                                        client_id=f"{group_id}-c{i}", **settings, **own[i]) for i in range(members)]
        self.active = list(range(members))
        self._calls: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in self.consumers]
        self._stops = [threading.Event() for _ in self.consumers]
        self._threads = [threading.Thread(target=self._poll, args=(i,), daemon=True) for i in range(members)]

    def _poll(self, i: int) -> None:
        consumer, calls = self.consumers[i], self._calls[i]
        while not self._stops[i].is_set():
            consumer.poll(100)
            while not calls.empty():  # the calls queued meanwhile, in order, between two polls
                fn, done = calls.get()
                try:
                    done.set_result(fn(consumer))
                except BaseException as exc:  # handed to the caller
                    done.set_exception(exc)

    def call(self, i: int, fn):
        """``fn(consumer i)`` run by that consumer's polling thread between two polls (a
        consumer is not thread-safe), or here when the consumer does not poll."""
        if not self._threads[i].is_alive():
            return fn(self.consumers[i])
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._calls[i].put((fn, done))
        return done.result(timeout=60)

    def member_ids(self) -> list[str]:
        """The active consumers' member ids, in the order of :attr:`active`."""
        return [self.call(i, lambda c: c._coordinator._generation.member_id) for i in self.active]

    def generations(self) -> list[int]:
        """The active consumers' generations, in the order of :attr:`active`."""
        return [self.call(i, lambda c: c._coordinator._generation.generation_id) for i in self.active]

    def assignments(self) -> list[set]:
        """The active consumers' assignments, in the order of :attr:`active`."""
        return [self.call(i, lambda c: set(c.assignment())) for i in self.active]

    def partitions(self) -> int:
        return sum(len(self.consumers[0].partitions_for_topic(t) or ()) for t in self.topics)

    def settled(self, partitions: int | None = None) -> bool:
        """True when every active consumer owns something, together they own ``partitions``
        (default: every partition of the topics), and they agree on the generation."""
        owned = self.assignments()
        return (all(owned) and sum(len(a) for a in owned) == (self.partitions() if partitions is None else partitions)
                and len(set(self.generations())) == 1)

    def leave(self, i: int) -> None:
        """Consumer ``i`` stops polling and closes: it leaves the group."""
        self._stops[i].set()
        self._threads[i].join(10)
        self.consumers[i].close()
        self.active.remove(i)

    def __enter__(self) -> ConsumerGroup:
        for t in self._threads:
            t.start()
        try:
            wait_until(self.settled, 60, f"group {self.group_id} assigning every partition")
        except AssertionError:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for i in list(self.active):
            self.leave(i)


#: a consumer in its own process, to be killed (a crash: no LeaveGroup, no more heartbeats)
_CRASHER = """
import sys
from kafka import KafkaConsumer
from spark_assign.kafka.assignor import SparkAssignAssignor
bootstrap, group_id, history, strategy, *topics = sys.argv[1:]
c = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
                  heartbeat_interval_ms=100, session_timeout_ms=3000, max_poll_interval_ms=10000,
                  partition_assignment_strategy=[SparkAssignAssignor(group_id, history, strategy=strategy)])
while True:
    c.poll(100)
"""


def consumer_process(bootstrap: str, group_id: str, topics: list[str], history: str, strategy: str):
    """A kafka-python consumer with spark-assign's assignor in a process of its own."""
    return subprocess.Popen([sys.executable, "-c", _CRASHER, bootstrap, group_id, history, strategy, *topics],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class KIP848Group:
    """``members`` confluent-kafka consumers in KIP-848 group ``group_id``
    (``group.protocol=consumer``), each polling in its own thread; the broker computes the
    assignment with ``remote_assignor`` (``uniform`` or ``range``). ``instance_ids``: one
    ``group.instance.id`` per member (None: dynamic). Use as a context, like
    :class:`ConsumerGroup`; :meth:`add` starts one more member and :meth:`leave` closes one."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], members: int, *,
                 remote_assignor: str = "uniform", instance_ids=None, subscriptions=None):
        self.bootstrap, self.group_id, self.remote_assignor = bootstrap, group_id, remote_assignor
        self.members: list[_Member] = []
        for i in range(members):
            self.add(subscriptions[i] if subscriptions else topics,
                     instance_id=instance_ids[i] if instance_ids else None, start=False)

    def add(self, topics: list[str], *, instance_id: str | None = None, start: bool = True) -> _Member:
        member = _Member(self, topics, instance_id)
        self.members.append(member)
        if start:
            member.start()
        return member

    def settings(self, index: int) -> dict:
        """Member ``index``'s group settings."""
        return {"group.protocol": "consumer", "group.remote.assignor": self.remote_assignor}

    @property
    def active(self) -> list[_Member]:
        return [m for m in self.members if not m.closed]

    def assignments(self) -> dict[str, set[tuple[str, int]]]:
        """Member id -> the partitions it holds, per its rebalance callbacks."""
        return {m.member_id(): set(m.owned) for m in self.active}

    def leave(self, member: _Member) -> None:
        member.close()

    def __enter__(self) -> KIP848Group:
        for m in self.members:
            m.start()
        return self

    def __exit__(self, *exc) -> None:
        for m in self.active:
            m.close()


class LibrdkafkaClassicGroup(KIP848Group):
    """``members`` confluent-kafka consumers in a *classic* group (``group.protocol=classic``),
    with librdkafka's own ``partition.assignment.strategy`` and ``client.rack``: a second
    encoder of the consumer protocol's bytes beside kafka-python's."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], members: int, *, strategy: str,
                 racks=None):
        self.strategy, self.racks = strategy, racks
        super().__init__(bootstrap, group_id, topics, members)

    def settings(self, index: int) -> dict:
        return {"group.protocol": "classic", "partition.assignment.strategy": self.strategy,
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                **({"client.rack": self.racks[index]} if self.racks else {})}


class _Member:
    """One confluent-kafka consumer of a :class:`KIP848Group`, polling in a thread; what it
    holds follows its assign and revoke callbacks (incremental under KIP-848)."""

    def __init__(self, group: KIP848Group, topics: list[str], instance_id: str | None):
        from confluent_kafka import Consumer

        config = {"bootstrap.servers": group.bootstrap, "group.id": group.group_id,
                  **group.settings(len(group.members)),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3,
                  "client.id": f"{group.group_id}-{len(group.members)}"}
        if instance_id:
            config["group.instance.id"] = instance_id
        self.consumer = Consumer(config)
        self.topics, self.instance_id = topics, instance_id
        self.owned: set[tuple[str, int]] = set()
        self.closed = False
        self._member_id: str | None = None
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _on_assign(self, consumer, partitions) -> None:
        with self._lock:  # incremental (KIP-848, cooperative), or the whole assignment after a revoke-all
            self.owned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        with self._lock:
            self.owned -= {(p.topic, p.partition) for p in partitions}

    def start(self) -> None:
        self.consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
            # read here: a call from another thread waits on the polling one
            self._member_id = self.consumer.memberid()
            while not self._calls.empty():
                self._calls.get()()

    def subscribe(self, topics: list[str]) -> None:
        """Subscribe to ``topics`` instead (run by the polling thread)."""
        self.topics = topics
        self._calls.put(lambda: self.consumer.subscribe(topics, on_assign=self._on_assign,
                                                        on_revoke=self._on_revoke, on_lost=self._on_revoke))

    def member_id(self) -> str | None:
        """The id the broker gave this member (its polling thread's latest reading)."""
        return self._member_id

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        self.closed = True


def stable_capture(spark, bootstrap: str, group_ids: list[str], members: dict[str, int], seconds: float = 60):
    """A capture of KIP-848 groups once each is stable: ``members[group]`` members, every one
    at the group epoch with its current assignment equal to its target."""
    from spark_assign.kafka import capture

    deadline = time.monotonic() + seconds
    while True:
        snap = capture(spark, bootstrap, group_ids, timeout_s=10)
        groups = {r.group_id: r for r in snap.groups.collect()}
        owned = {(r.group_id, r.member_id): (r.generation, {(tp.topic, tp.partition) for tp in r.owned})
                 for r in snap.members.collect()}
        target: dict = {}
        for r in snap.targets.collect():
            target.setdefault((r.group_id, r.member_id), set()).add((r.topic, r.partition))
        settled = [g for g, r in groups.items()
                   if r.captured and r.state == "Stable" and r.generation == r.assignment_epoch
                   and r.members == members[g]
                   and all(e == r.generation and tps == target.get(k, set()) for k, (e, tps) in owned.items()
                           if k[0] == g)]
        if len(settled) == len(group_ids):
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"KIP-848 groups {sorted(set(group_ids) - set(settled))} not stable within "
                                 f"{seconds} s: {[groups[g] for g in group_ids if g not in settled]}")
        time.sleep(0.5)


__all__ = ["cache_dir", "classpath", "stable_capture", "LibrdkafkaClassicGroup", "KAFKA_VERSION", "GROUP_TIMERS", "RACK", "Broker", "ConsumerGroup", "KIP848Group", "free_port",
           "session_broker", "wait_until", "consumer_process"]
