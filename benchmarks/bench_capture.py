"""capture() at the size of a real cluster, against Kafka's own ``kafka-consumer-groups``.

An Apache Kafka 4.4.0 broker (tests/kafka_broker.py, from the cached jars) holds ``--topics``
topics of ``--partitions`` partitions and ``--groups`` groups with committed offsets on
``--per-group`` partitions each, ``--live`` of them with a live kafka-python member. Then, in
the same run, A B A B:

* ``capture(spark, bootstrap)`` of every group, timed, with the admin requests it sent
  (counted at kafka-python's connection manager);
* the peer: ``kafka-consumer-groups --bootstrap-server ... --describe --all-groups``
  (``kafka.admin.ConsumerGroupCommand``'s 4.x class, from the cached jars), timed as a process.

    python benchmarks/bench_capture.py --groups 1000 --topics 100 --partitions 100
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import ROOT, session, write_results

sys.path.insert(0, str(ROOT / "tests"))


def populate(broker, args) -> list:
    """The topics, the committed offsets, and the live members (returned, to be closed)."""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata
    from kafka_broker import ConsumerGroup

    topics = {f"bench-t{i:03d}": args.partitions for i in range(args.topics)}
    names = sorted(topics)
    for i in range(0, len(names), 10):  # the controller refuses one batch of 10,000 partitions
        broker.create_topics({t: topics[t] for t in names[i:i + 10]})
    admin = broker.admin()
    try:
        for g in range(args.groups):
            offsets = {TopicPartition(names[(g + k) % len(names)], (g * 7 + k) % args.partitions):
                       OffsetAndMetadata(0, None, -1) for k in range(args.per_group)}
            admin.alter_group_offsets(f"bench-g{g:04d}", offsets)
    finally:
        admin.close()
    live = [ConsumerGroup(broker.bootstrap, f"bench-g{g:04d}", [names[g % len(names)]], 1)
            for g in range(args.live)]
    for group in live:
        group.__enter__()
    return live


def counted_capture(spark, bootstrap: str):
    from kafka.net.manager import KafkaConnectionManager

    from spark_assign.kafka import capture

    sent = []
    real = KafkaConnectionManager.send

    def send(self, request, *a, **k):  # per connection manager: the live members send theirs too
        sent.append((id(self), type(request).__name__))
        return real(self, request, *a, **k)

    KafkaConnectionManager.send = send
    try:
        began = time.perf_counter()
        snap = capture(spark, bootstrap, timeout_s=60)
        groups = snap.groups.count()
        seconds = time.perf_counter() - began
    finally:
        KafkaConnectionManager.send = real
    ours = {m for m, name in sent if name == "ListGroupsRequest"}  # the capture's own admin client
    return seconds, groups, [name for m, name in sent if m in ours]


def peer(bootstrap: str) -> tuple[float, int]:
    from kafka_broker import classpath

    began = time.perf_counter()
    done = subprocess.run(["java", "-Xmx1g", "-cp", classpath("kafka"),
                           "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", bootstrap, "--describe", "--all-groups"],
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return seconds, sum(1 for line in done.stdout.splitlines() if line.startswith("bench-g"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--per-group", type=int, default=10)
    parser.add_argument("--live", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from kafka_broker import KAFKA_VERSION, Broker

    spark = session(shuffle_partitions=4)
    broker = Broker()
    try:
        began = time.perf_counter()
        live = populate(broker, args)
        setup = time.perf_counter() - began
        ours, theirs, requests = [], [], {}
        for _ in range(args.runs):
            seconds, groups, sent = counted_capture(spark, broker.bootstrap)
            ours.append(seconds)
            requests = {name: sent.count(name) for name in sorted(set(sent))}
            seconds, rows = peer(broker.bootstrap)
            theirs.append(seconds)
        for group in live:
            group.__exit__()
    finally:
        broker.stop()
    a, b = statistics.median(ours), statistics.median(theirs)
    write_results(
        "capture", f"capture() of a cluster: {args.groups} groups, {args.topics * args.partitions} partitions",
        ["what", "median s", "runs (s)"],
        [["capture(spark, bootstrap), every group", f"{a:.2f}", ", ".join(f"{x:.2f}" for x in ours)],
         [f"peer: kafka-consumer-groups --describe --all-groups (a new JVM, {rows} rows)", f"{b:.2f}",
          ", ".join(f"{x:.2f}" for x in theirs)]],
        notes=f"Apache Kafka {KAFKA_VERSION}, one KRaft broker on loopback. {args.groups} groups ({groups} captured) "
              f"with committed offsets on {args.per_group} partitions each, {args.live} with a live member; setup "
              f"{setup:.1f} s; {args.runs} runs, A B A B. capture / peer: {a / b:.2f}. Admin requests of one capture "
              f"({sum(requests.values())}, batched per coordinator): "
              + ", ".join(f"{k} {v}" for k, v in requests.items()) + ".")


if __name__ == "__main__":
    main()
