"""Live consumers on a real broker (tansu) with spark-assign's kafka-python assignor (issue #16):
the rebalances the leader records against each consumer's own assignment, assign() on a
recorded group against the live assignment, and a recorded lag-aware plan followed by
the live group under the cooperative rule."""

from __future__ import annotations

import time

import pytest
from kafka_broker import ConsumerGroup, consumer_process, wait_until

from spark_assign import AssignmentHistory, assign
from spark_assign.kafka import capture
from spark_assign.kafka.assignor import SparkAssignAssignor
from spark_assign.kafka.live_tables import REBALANCES, latest_rebalances, table_path


def _live(group: ConsumerGroup) -> set[tuple[str, str, int]]:
    return {(m, tp.topic, tp.partition) for m, owned in zip(group.member_ids(), group.assignments()) for tp in owned}


def _flush(assignors) -> None:
    assert all(a.flush(20) for a in assignors)
    assert [a.records_failed for a in assignors] == [0] * len(assignors), [a.last_error for a in assignors]


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_recorded_rebalance_is_the_live_one_and_assign_reproduces_it(spark, broker, tmp_path, strategy):
    history = str(tmp_path / "history")
    group_id = f"rec-{strategy}"
    topics = {f"{group_id}-a": 5, f"{group_id}-b": 2}
    broker.create_topics(topics)
    assignors = [SparkAssignAssignor(group_id, history, strategy=strategy) for _ in range(3)]
    with ConsumerGroup(broker.bootstrap, group_id, sorted(topics), 3,
                       assignors=assignors) as group:
        live = _live(group)
        _flush(assignors)
        # the leader's record of the latest rebalance is what each consumer owns
        record = latest_rebalances(history, [group_id])[group_id]
        assert record["strategy"] == strategy and record["protocol"] == "EAGER"
        recorded = {(m["member_id"], tp["topic"], tp["partition"]) for m in record["members"] for tp in m["assigned"]}
        assert recorded == live
        assert sorted((p["topic"], p["partition"]) for p in record["partitions"]) == sorted(
            (t, p) for t, n in topics.items() for p in range(n))
        snap = capture(spark, broker.bootstrap, [group_id], history=history, timeout_s=5)
    group_row = snap.groups.first()
    assert (group_row.members, group_row.generation, group_row.protocol) == (3, record["generation"], strategy)
    assert snap.problems.count() == 0
    # spark-assign's assignor of the same name, on the captured group, gives the live assignment exactly
    ours = {(r.member_id, r.topic, r.partition) for r in assign(snap.members, snap.partitions, strategy).collect()}
    assert ours == live


def test_consumers_follow_a_recorded_lag_aware_plan_cooperatively(spark, broker, tmp_path):
    history = str(tmp_path / "history")
    broker.create_topics({"plan-t": 6})
    broker.produce({("plan-t", p): p for p in range(1, 6)})  # lag p on partition p
    assignors = [SparkAssignAssignor("plan", history, strategy="plan") for _ in range(3)]
    # FAST_GROUP's session timeout: a member that misses a rebalance on a loaded machine makes
    # the leader fall back (the membership differs from the plan), which the checks below allow;
    # the group follows the plan at the rebalance after it
    with ConsumerGroup(broker.bootstrap, "plan", ["plan-t"], 3, assignors=assignors) as group:
        _flush(assignors)
        first = latest_rebalances(history, ["plan"])["plan"]
        assert first["fallback_reason"].startswith("no generation of group plan")
        before = _live(group)
        # capture, plan with lag-aware, record the plan: the live group follows it at its next rebalance
        snap = capture(spark, broker.bootstrap, ["plan"], history=history, auto_offset_reset="earliest", timeout_s=5)
        assert sorted((r.partition, r.lag) for r in snap.lags.collect()) == [(p, p) for p in range(6)]
        plan = assign(snap.members, snap.partitions, "lag-aware", lags=snap.lags)
        AssignmentHistory(history, spark, backend="embedded").record(plan, members=snap.members, partitions=snap.partitions,
                                                 strategy="lag-aware", lags=snap.lags)
        planned = {(r.member_id, r.topic, r.partition) for r in plan.collect()}
        assert planned != before  # the plan moves partitions, so following it is observable
        group.call(0, lambda c: c._coordinator.request_rejoin())
        deadline = time.monotonic() + 60
        while _live(group) != planned:
            assert time.monotonic() < deadline, f"the group did not reach the plan: {_live(group)} != {planned}"
            time.sleep(0.2)
        _flush(assignors)
        # read while the whole group is still up: closing it makes the members left rebalance
        # without the ones closed first (a fallback, "membership differs"), after the plan's end
        from deltalake import DeltaTable

        rows = DeltaTable(table_path(history, REBALANCES)).to_pyarrow_table().to_pylist()
    # every rebalance since the plan followed it, and none handed a partition to a member
    # while another member still held it (the holders are the owned partitions each member sent)
    since = sorted((r for r in rows if r["generation"] > first["generation"]), key=lambda r: r["generation"])
    # the rebalances since the plan follow it (a moved partition withheld while its holder has it:
    # the holder rule below), the last one included; one that fell back must say the membership
    # differed (a member that missed it)
    followed = [r for r in since if r["fallback_reason"] is None]
    assert all(r["plan_generation"] is not None for r in followed) and followed and followed[-1] == since[-1]
    assert all(r["fallback_reason"].startswith("membership differs") for r in since if r not in followed)
    for r in rows:
        holder = {(tp["topic"], tp["partition"]): m["member_id"] for m in r["members"] for tp in m["owned"]}
        for m in r["members"]:
            for tp in m["assigned"]:
                assert holder.get((tp["topic"], tp["partition"]), m["member_id"]) == m["member_id"], (r, tp)


def test_capture_follows_members_joining_crashing_and_leaving(spark, broker, tmp_path):
    """Join (a consumer in its own process), crash (that process killed: no LeaveGroup) and
    leave (a consumer closed): each capture's membership is the broker's, and its members
    and owned partitions are what the consumers report."""
    history = str(tmp_path / "history")
    broker.create_topics({"churn-t": 6})

    def captured():
        snap = capture(spark, broker.bootstrap, ["churn"], history=history, timeout_s=5)
        g = snap.groups.first()
        return g.members_described, {(r.member_id, tp.topic, tp.partition) for r in snap.members.collect()
                                     for tp in r.owned}

    def recorded_members():
        found = latest_rebalances(history, ["churn"]).get("churn")
        return None if found is None else len(found["members"])

    assignors = [SparkAssignAssignor("churn", history, strategy="range") for _ in range(2)]
    with ConsumerGroup(broker.bootstrap, "churn", ["churn-t"], 2, assignors=assignors) as group:
        crasher = consumer_process(broker.bootstrap, "churn", ["churn-t"], history, "range")
        try:
            wait_until(lambda: group.settled(4) and recorded_members() == 3, 60, "the third consumer joining")
            described, owned = captured()
            assert described == 3 and len(owned) == 6
            assert _live(group) < owned
        finally:
            crasher.kill()
            crasher.wait(10)
        # killed: the broker keeps the member until its session times out, then the group rebalances
        wait_until(lambda: group.settled() and recorded_members() == 2, 60, "the group dropping the crashed member")
        assert captured() == (2, _live(group))
        group.leave(1)
        wait_until(lambda: group.settled() and recorded_members() == 1, 60, "the group after a member left")
        assert captured() == (1, _live(group))


def test_a_failed_record_never_blocks_the_rebalance(broker, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the history should be")
    broker.create_topics({"unrecorded": 2})
    assignor = SparkAssignAssignor("unrecorded", str(blocker / "history"), strategy="range")
    with ConsumerGroup(broker.bootstrap, "unrecorded", ["unrecorded"], 1, assignors=[assignor]) as group:
        assert len(group.assignments()[0]) == 2
        assert assignor.flush(20)
    assert assignor.records_written == 0 and assignor.records_failed >= 1 and assignor.last_error


def test_capture_job_then_rebalance_jobs_on_the_snapshot_and_the_cluster(spark, broker, tmp_path, capsys):
    from spark_assign.cli import capture as capture_job
    from spark_assign.cli import rebalance as rebalance_job
    from spark_assign.kafka.snapshots import snapshot_store

    history = str(tmp_path / "history")
    broker.create_topics({"jobs-t": 4})
    assignors = [SparkAssignAssignor("jobs", history, strategy="range") for _ in range(2)]
    with ConsumerGroup(broker.bootstrap, "jobs", ["jobs-t"], 2, assignors=assignors) as group:
        live = _live(group)
        _flush(assignors)
        live_generation = latest_rebalances(history, ["jobs"])["jobs"]["generation"]
        argv = ["--bootstrap-servers", broker.bootstrap, "--groups", "jobs", "--history", history,
                "--capture-id", "nightly-1", "--timeout", "5"]
        assert capture_job.main(argv) == 0
        assert capture_job.main(argv) == 0  # the same capture id again: recorded once
        assert f"captured 1 of 1 group(s) from {broker.bootstrap} as nightly-1" in capsys.readouterr().out
        assert snapshot_store(spark, history).read().count() == 1
        # on the stored capture, then straight from the cluster (a new capture, recorded too)
        assert rebalance_job.main(["--snapshot", "nightly-1", "--history", history, "--strategy", "range"]) == 0
        assert "rebalanced 1 group(s) with range, owned partitions from the input" in capsys.readouterr().out
        assert rebalance_job.main(["--bootstrap-servers", broker.bootstrap, "--groups", "jobs",
                                   "--history", history]) == 0
        assert "rebalanced 1 group(s) with the members' assignors" in capsys.readouterr().out
    assert snapshot_store(spark, history).read().count() == 2
    recorded = AssignmentHistory(history, spark, backend="embedded")
    gens = recorded.history().where("group_id = 'jobs'").orderBy("generation").collect()
    # range is EAGER: the members give up their 4 owned partitions, then get the same ones back;
    # the second run's members (the live ones, at the live generation) come after the first run's
    assert [(g.generation, g.strategy, g.members, g.partitions, g.revoked) for g in gens] == [
        (live_generation + 1, "range", 2, 4, 4), (live_generation + 2, "range", 2, 4, 4)]
    assert {(r.member_id, r.topic, r.partition) for r in recorded.latest().where("group_id = 'jobs'").collect()} == live
