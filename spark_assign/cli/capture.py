"""The capture job: live consumer groups from a Kafka cluster into the history's ``snapshots`` table.

For scheduled capture (a Databricks job, cron with spark-submit): each run asks the cluster
for its groups' members, partitions and lags (:func:`spark_assign.kafka.capture`) and records
them as one Delta commit, idempotent per ``--capture-id`` (a retried run with the same id
records nothing twice). ``spark-assign rebalance --snapshot <capture id>`` plans on it.

    spark-assign capture --bootstrap-servers broker:9092 --groups orders,payments --history out/history
    python pipelines/capture.py --bootstrap-servers broker:9092 --client security_protocol=SASL_SSL ...
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import SparkAssignError
from . import failed, id_list, key_values


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark-assign capture", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...]")
    p.add_argument("--groups", help="comma-separated group ids (default: every group the brokers list)")
    p.add_argument("--history", default="out/history", help="history location (default out/history)")
    p.add_argument("--capture-id", help="the capture's id (default: a new one); a re-run with it records nothing")
    p.add_argument("--auto-offset-reset", default="latest", choices=("latest", "earliest"),
                   help="the lag of a partition with no committed offset: latest 0, earliest end - start")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to reach the cluster (default 10)")
    p.add_argument("--client", action="append", default=[], metavar="KEY=VALUE",
                   help="a kafka-python client setting (security_protocol, sasl_mechanism, ...), repeatable")
    p.add_argument("--spark-conf", help="Spark settings file (key value lines) for a local session")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: capture, record, print the groups. Returns the exit code."""
    args = parse_args(argv)
    try:
        from ..kafka import capture
        from .rebalance import get_session

        spark = get_session(args.spark_conf)
        snap = capture(spark, args.bootstrap_servers, id_list(args.groups), auto_offset_reset=args.auto_offset_reset,
                       timeout_s=args.timeout, capture_id=args.capture_id, history=args.history,
                       **key_values(args.client, "--client"))
        rows = snap.groups.orderBy("group_id").collect()
        print(f"captured {sum(r.captured for r in rows)} of {len(rows)} group(s) from {args.bootstrap_servers} "
              f"as {snap.capture_id}, recorded in {args.history}/snapshots")
        for r in rows:
            what = (f"{r.state}, {r.members} of {r.members_described} member(s), generation {r.generation}"
                    if r.captured else f"not captured: {r.reason}")
            print(f"  {r.group_id}: {what}")
        for p in snap.problems.orderBy("group_id", "member_id", "topic").limit(20).collect():
            print(f"  problem in {p.group_id}: {p.member_id or p.topic or ''} {p.problem}")
        return 0
    except SparkAssignError as exc:
        return failed("capture", exc)
