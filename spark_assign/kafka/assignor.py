"""A kafka-python partition assignor that records the rebalances it leads and can follow a plan.

Give it to every consumer of a group (``partition_assignment_strategy=[SparkAssignAssignor(...)]``).
The group's leader runs it; it delegates to ``strategy``:

* ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``: kafka-python's own assignor of
  that name (so the group behaves exactly as it would without spark-assign, and members
  running the plain kafka-python assignor of that name can share the group);
* ``plan``: the assignment recorded for the group's latest generation in the history at
  ``history`` (say, a lag-aware assignment computed and recorded by spark-assign), under the
  cooperative rule: a partition another live member still holds is withheld this round, and
  its holder, having lost it, rejoins, so the next round hands it over. When the live group
  differs from the plan (other members, other partitions, a partition planned for a member
  that does not subscribe to its topic), or no plan is recorded or readable, it falls back
  to cooperative-sticky, and records why. Its protocol name is ``spark-assign-plan``.

Whatever the strategy, each rebalance it leads is appended to ``<history>/rebalances``
(:mod:`spark_assign.kafka.live_tables`) with deltalake, in a background thread: the inputs
(each member's subscription, owned partitions and the generation it sent), the assignment
and the generation the coordinator gave it. The cost on the consumer is bounded (at most
``queue_size`` rebalances wait for their write; beyond that a record is dropped and
counted), and a failure to record is logged and counted, never raised into the rebalance.

>>> from kafka import KafkaConsumer                                             # doctest: +SKIP
>>> assignor = SparkAssignAssignor("orders", "out/history", strategy="plan")   # doctest: +SKIP
>>> KafkaConsumer("t", group_id="orders", partition_assignment_strategy=[assignor])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from ..errors import InvalidOptionError
from .live_tables import append_rebalance, latest_plan

log = logging.getLogger(__name__)

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "plan")
PLAN_PROTOCOL_NAME = "spark-assign-plan"


def _delegate(strategy: str):
    return {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor,
            "plan": CooperativeStickyAssignor}[strategy]()


def _assignment(partitions) -> Any:
    A = ConsumerProtocolAssignment
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        by_topic[topic].append(partition)
    return A(version=0, user_data=b"", assigned_partitions=[
        A.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())])


def _owned(subscription) -> list[tuple[str, int]]:
    return sorted((tp.topic, p) for tp in (getattr(subscription, "owned_partitions", None) or ())
                  for p in tp.partitions)


def _assigned(assignment) -> list[tuple[str, int]]:
    """The partitions of an assignment, whether its entries are containers or the
    ``(topic, partitions)`` tuples some kafka-python assignors build."""
    entries = [(e.topic, e.partitions) if hasattr(e, "topic") else tuple(e) for e in assignment.assigned_partitions]
    return sorted((topic, p) for topic, partitions in entries for p in partitions)


class SparkAssignAssignor(AbstractPartitionAssignor):
    """kafka-python assignor for ``group_id``: records the rebalances it leads into
    ``history`` (a folder or a URI deltalake writes) and runs ``strategy`` (see the module
    doc). ``flush(timeout_s)`` waits for the pending records; ``records_written``,
    ``records_failed``, ``records_dropped`` and ``last_error`` say how recording went,
    ``last_fallback`` why the latest plan was not followed (None when it was)."""

    name = ""  # the delegate's protocol name, set per instance

    def __init__(self, group_id: str, history: str, *, strategy: str = "cooperative-sticky", queue_size: int = 16):
        if strategy not in STRATEGIES:
            raise InvalidOptionError(f"strategy={strategy!r}: expected one of {list(STRATEGIES)}")
        if "://" not in history and "/" not in history and not history.startswith("."):
            raise InvalidOptionError(f"history={history!r}: expected a folder or URI (a live consumer writes "
                                     "with deltalake, which does not take catalog names)")
        self.group_id, self.history, self.strategy = group_id, history, strategy
        self._inner = _delegate(strategy)
        self.name = PLAN_PROTOCOL_NAME if strategy == "plan" else self._inner.name
        self._pending: dict[str, Any] | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._writer: threading.Thread | None = None
        self.records_written = self.records_failed = self.records_dropped = 0
        self.last_error: str | None = None
        self.last_fallback: str | None = None

    # ------------------------------------------------ kafka-python's assignor interface

    def supported_protocols(self):
        return self._inner.supported_protocols()

    def metadata(self, topics):
        return self._inner.metadata(topics)

    def assign(self, cluster, members):
        plan_generation, reason = None, None
        if self.strategy == "plan":
            try:
                plan_generation, result, reason = self._follow_plan(cluster, members)
            except Exception as e:  # an inconsistent plan never breaks the rebalance
                result, reason = None, f"the plan could not be followed: {type(e).__name__}: {e}"
            self.last_fallback = reason
            if result is None:
                log.warning("group %s: not following the plan (%s): cooperative-sticky instead", self.group_id, reason)
                result = self._inner.assign(cluster, members)
        else:
            result = self._inner.assign(cluster, members)
        try:
            self._pending = self._record(cluster, members, result, plan_generation, reason)
        except Exception as e:  # never let recording break the rebalance
            self._failed(e)
        return result

    def on_assignment(self, assignment, generation):
        self._inner.on_assignment(assignment, generation)
        if self._pending is not None:
            record, self._pending = {**self._pending, "generation": generation}, None
            self._enqueue(record)

    # ------------------------------------------------ the plan

    def _follow_plan(self, cluster, members):
        """``(plan generation, assignment or None, reason it was not followed)``."""
        try:
            found = latest_plan(self.history, self.group_id)
        except Exception as e:
            return None, None, f"the plan could not be read: {type(e).__name__}: {e}"
        if found is None:
            return None, None, f"no generation of group {self.group_id} recorded in {self.history}"
        generation, plan, planned = found
        live = {m.member_id: set(m.metadata.topics) for m in members}
        if planned != set(live):
            return generation, None, (f"membership differs from generation {generation}: live {sorted(live)}, "
                                      f"planned {sorted(planned)}")
        subscribed = {(t, p) for topics in live.values() for t in topics for p in cluster.partitions_for_topic(t) or ()}
        if set(plan) != subscribed:
            return generation, None, (f"partitions differ from generation {generation}: "
                                      f"{len(subscribed - set(plan))} unplanned, {len(set(plan) - subscribed)} gone")
        for (topic, partition), member in sorted(plan.items()):
            if topic not in live[member]:
                return generation, None, f"generation {generation} gives {topic}-{partition} to {member}, " \
                                         f"which does not subscribe to {topic}"
        holders = {tp: m.member_id for m in members for tp in _owned(m.metadata)}
        result: dict[str, list[tuple[str, int]]] = {m: [] for m in live}
        for tp, member in plan.items():
            holder = holders.get(tp)
            if holder is None or holder == member or holder not in live:
                result[member].append(tp)
            # else: withheld until its holder has given it up (the cooperative rule)
        return generation, {m: _assignment(tps) for m, tps in result.items()}, None

    # ------------------------------------------------ recording

    def _record(self, cluster, members, result, plan_generation, reason) -> dict[str, Any]:
        topics = sorted({t for m in members for t in m.metadata.topics})
        rows = []
        for m in members:
            sub = m.metadata
            generation = getattr(sub, "generation_id", -1)
            rows.append({
                "member_id": m.member_id, "group_instance_id": getattr(m, "group_instance_id", None),
                "rack": getattr(sub, "rack_id", None), "topics": sorted(sub.topics),
                "owned": [{"topic": t, "partition": p} for t, p in _owned(sub)],
                "owned_generation": None if generation is None or generation < 0 else generation,
                "subscription_version": getattr(sub, "version", None),
                "assigned": [{"topic": t, "partition": p} for t, p in _assigned(result[m.member_id])]
                if m.member_id in result else [],
            })
        return {
            "group_id": self.group_id, "strategy": self.strategy,
            "protocol": self.supported_protocols()[0].name, "plan_generation": plan_generation,
            "fallback_reason": reason, "members": rows,
            "partitions": [{"topic": t, "partition": p} for t in topics
                           for p in sorted(cluster.partitions_for_topic(t) or ())],
        }

    def _enqueue(self, record: dict[str, Any]) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name=f"spark-assign-record-{self.group_id}",
                                            daemon=True)
            self._writer.start()
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.records_dropped += 1
            log.warning("group %s: %d rebalances already wait to be recorded; generation %s not recorded",
                        self.group_id, self._queue.maxsize, record["generation"])

    def _write_loop(self) -> None:
        while True:
            record = self._queue.get()
            try:
                append_rebalance(self.history, record)
                self.records_written += 1
            except Exception as e:
                self._failed(e)
            finally:
                self._queue.task_done()

    def _failed(self, e: Exception) -> None:
        self.records_failed += 1
        self.last_error = f"{type(e).__name__}: {e}"
        log.warning("group %s: a rebalance was not recorded in %s: %s", self.group_id, self.history, self.last_error)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every rebalance queued so far is written (or failed); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True
