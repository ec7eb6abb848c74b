"""The history contract, once, on both storage backends: Spark's own Delta (``spark-delta``, the
Databricks and spark-submit path) and the embedded one (Spark's Parquet, delta-rs's commit).

Every test (snapshots included) runs on each backend (those marked ``over_connect`` over Spark Connect too) and asserts the same values: the same rows, the same Delta table
versions after each call, and the same idempotence (a call repeated writes nothing). Tables
written by one backend are read and extended by the other, and a catalog history (managed
tables in ``spark_catalog.kafka_ops``) keeps Delta's own SQL working: ``DESCRIBE HISTORY``,
``VERSION AS OF`` and ``RESTORE``.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from spark_assign import HistoryError, assign, simulate
from spark_assign.errors import ConcurrentWriteError
from spark_assign.history import TABLES, AssignmentHistory
from spark_assign.simulation.analytics import simulation_store
from spark_assign.storage import EMBEDDED, SPARK_DELTA

#: the tests that run over Spark Connect too (its server has Delta's jars, conftest.py): a record,
#: its reads and time travel, a catalog history; the rest of the contract is the same code there
over_connect = pytest.mark.connect

BACKENDS = (EMBEDDED, SPARK_DELTA)
MEMBERS = "group_id string, member_id string, topics array<string>, owned array<struct<topic:string,partition:int>>"
PARTITIONS = "topic string, partition int"
# generation 1: g1 has a and b on t (4 partitions) and u (2); g2 has x on t. Generation 2: c joins g1
GEN1 = [("g1", "a", ["t", "u"], []), ("g1", "b", ["t", "u"], []), ("g2", "x", ["t"], [])]
PARTS = [("t", p) for p in range(4)] + [("u", p) for p in range(2)]
TP = ("topic", "partition")


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def members(spark, rows):
    return spark.createDataFrame(rows, MEMBERS)


def parts(spark):
    return spark.createDataFrame(PARTS, PARTITIONS)


def versions(history: AssignmentHistory) -> dict[str, int | None]:
    """Each table's latest Delta version (None: not created)."""
    return {name: (store.history().agg(F.max("version")).first()[0] if store.exists() else None)
            for name, store in history.stores.items()}


def record_two_generations(spark, history: AssignmentHistory):
    """Generation 1 (range) and generation 2 of g1 (c joins, sticky) into ``history``: their assignments."""
    m1, p = members(spark, GEN1), parts(spark)
    a1 = assign(m1, p, "range")
    history.record(a1, members=m1, partitions=p, strategy="range")
    m2 = gen2_members(spark, a1)
    a2 = assign(m2, p, "sticky")
    history.record(a2, members=m2, partitions=p, strategy="sticky")
    return a1, a2


def failing_generations_commit(history: AssignmentHistory, monkeypatch) -> None:
    """Make the commit of ``history``'s generations table (the commit marker) fail."""
    generations = history.stores["generations"]
    stage = generations.stage

    def failing_stage(df):
        staged = stage(df)

        def commit(**kwargs):
            raise OSError("the generations commit failed")
        staged.commit = commit
        return staged

    monkeypatch.setattr(generations, "stage", failing_stage)


def rows(df, *cols) -> set[tuple]:
    return {tuple(r) for r in df.select(*cols).collect()}


def gen2_members(spark, first):
    """Generation 2's members: g1's two owning what generation 1 gave them, and c joining."""
    owned: dict[str, list] = {}
    for r in first.where("group_id = 'g1'").collect():
        owned.setdefault(r.member_id, []).append((r.topic, r.partition))
    return members(spark, [("g1", m, ["t", "u"], owned.get(m, [])) for m in ("a", "b")]
                   + [("g1", "c", ["t", "u"], [])])


@over_connect
def test_record(spark, tmp_path, backend):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    assert type(h.stores["generations"]).__name__ == {EMBEDDED: "EmbeddedStore", SPARK_DELTA: "SparkDeltaStore"}[backend]
    m, p = members(spark, GEN1), parts(spark)
    a = assign(m, p, "range")
    out = h.record(a, members=m, partitions=p, strategy="range")
    assert rows(out, "group_id", "generation", "strategy", "protocol", "members", "partitions", "unassigned") == {
        ("g1", 1, "range", "eager", 2, 6, 0), ("g2", 1, "range", "eager", 1, 4, 0)}
    # one commit per table, the first of each
    assert versions(h) == {"assignments": 0, "revocations": 0, "members": 0, "generations": 0}
    assert rows(h.assignments(), "group_id", "generation", "member_id", *TP) == {
        (r.group_id, 1, r.member_id, r.topic, r.partition) for r in a.collect()}
    assert rows(h.members(), "group_id", "generation", "member_id") == {
        ("g1", 1, "a"), ("g1", 1, "b"), ("g2", 1, "x")}
    # on Spark's path the commits are Spark's own, on the embedded one delta-rs's
    engines = {str(r[0]) for r in h.delta_history("generations").select(
        "engineInfo" if backend == SPARK_DELTA else "engine").collect()}
    assert all(("Apache-Spark" in e) if backend == SPARK_DELTA else ("delta-rs" in e) for e in engines), engines


def test_a_repeated_call_writes_nothing(spark, tmp_path, backend):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    m, p = members(spark, GEN1), parts(spark)
    a = assign(m, p, "range")
    first = {tuple(r) for r in h.record(a, members=m, partitions=p, strategy="range", generation=1).collect()}
    again = {tuple(r) for r in h.record(a, members=m, partitions=p, strategy="range", generation=1).collect()}
    assert again == first and versions(h) == {"assignments": 0, "revocations": 0, "members": 0, "generations": 0}
    # the same generation with another assignment: refused, nothing written
    other = assign(m, p, "roundrobin")
    with pytest.raises(HistoryError, match="already recorded with a different assignment") as refused:
        h.record(other, members=m, partitions=p, strategy="roundrobin", generation=1)
    assert not refused.value.retryable
    assert versions(h) == {"assignments": 0, "revocations": 0, "members": 0, "generations": 0}


def test_a_call_retried_after_failing_before_its_last_commit(spark, tmp_path, backend, monkeypatch):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    m, p = members(spark, GEN1), parts(spark)
    a = assign(m, p, "range")
    failing_generations_commit(h, monkeypatch)
    with pytest.raises(OSError, match="generations commit failed"):
        h.record(a, members=m, partitions=p, strategy="range")
    assert versions(h) == {"assignments": 0, "revocations": 0, "members": 0, "generations": None}
    assert h.assignments().count() == 0 and h.history().count() == 0  # nothing visible
    monkeypatch.undo()
    # the retry skips the three tables it committed (their app ids) and commits the marker
    h.record(a, members=m, partitions=p, strategy="range")
    assert versions(h) == {"assignments": 0, "revocations": 0, "members": 0, "generations": 0}
    assert h.assignments().count() == 10 and h.history().count() == 2


def test_another_writer_after_one_failed_before_its_last_commit(spark, tmp_path, backend, monkeypatch):
    """A writer whose generations commit failed leaves its rows under the call's record id; a
    writer of the same generations with other rows lands its own (under a record id of its
    rows), and the first one's retry then finds the generation recorded otherwise."""
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    m, p = members(spark, GEN1), parts(spark)
    failing_generations_commit(h, monkeypatch)
    with pytest.raises(OSError, match="generations commit failed"):
        h.record(assign(m, p, "range"), members=m, partitions=p, strategy="range", generation=1)
    monkeypatch.undo()
    other = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    rr = assign(m, p, "roundrobin")
    other.record(rr, members=m, partitions=p, strategy="roundrobin", generation=1)
    assert rows(h.assignments(), "group_id", "member_id", *TP) == rows(rr, "group_id", "member_id", *TP)
    assert rows(h.history(), "group_id", "generation", "strategy") == {("g1", 1, "roundrobin"), ("g2", 1, "roundrobin")}
    assert {r.record_id.count(".") for r in h.history().collect()} == {1}  # the record id of its rows
    with pytest.raises(HistoryError, match="already recorded with a different assignment"):
        h.record(assign(m, p, "range"), members=m, partitions=p, strategy="range", generation=1)


@over_connect
def test_read(spark, tmp_path, backend):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    a1, a2 = record_two_generations(spark, h)
    before = {(r.topic, r.partition): r.member_id for r in a1.where("group_id = 'g1'").collect()}
    after = {(r.topic, r.partition): r.member_id for r in a2.collect()}
    # latest: g1 at generation 2, g2 still at 1
    assert rows(h.latest(), "group_id", "generation", "member_id", *TP) == (
        {("g1", 2, mem, t, q) for (t, q), mem in after.items()}
        | {("g2", 1, r.member_id, r.topic, r.partition) for r in a1.where("group_id = 'g2'").collect()})
    assert rows(h.generation("g1", 1), "member_id", *TP) == {(mem, t, q) for (t, q), mem in before.items()}
    assert rows(h.moves("g1", 1, 2), *TP, "from_member", "to_member") == {
        (t, q, before[(t, q)], after[(t, q)]) for (t, q) in after if before[(t, q)] != after[(t, q)]}
    assert rows(h.revocations("g1", 2), "member_id", *TP, "kind") == {
        (before[(t, q)], t, q, "revoked") for (t, q) in after if before[(t, q)] != after[(t, q)]}
    assert rows(h.members("g1"), "generation", "member_id") == {(1, "a"), (1, "b"), (2, "a"), (2, "b"), (2, "c")}
    assert versions(h) == {"assignments": 1, "revocations": 1, "members": 1, "generations": 1}


@over_connect
def test_time_travel(spark, tmp_path, backend):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    a1, _ = record_two_generations(spark, h)
    assert rows(h.as_of("assignments", 0), "group_id", "generation", "member_id", *TP) == {
        (r.group_id, 1, r.member_id, r.topic, r.partition) for r in a1.collect()}
    assert rows(h.as_of("generations", 0), "group_id", "generation") == {("g1", 1), ("g2", 1)}
    assert rows(h.as_of("generations", 1), "group_id", "generation") == {("g1", 1), ("g2", 1), ("g1", 2)}
    assert [r.version for r in h.delta_history("generations").orderBy(F.desc("version")).collect()] == [1, 0]


def test_simulate_records_its_replay(spark, tmp_path, backend):
    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    events = spark.createDataFrame(
        [("s", 0, "join", "a", ["t"], ["range"]), ("s", 60_000, "join", "b", ["t"], ["range"]),
         ("s", 120_000, "leave", "a", None, None)],
        "group_id string, at long, kind string, member_id string, topics array<string>, assignors array<string>")
    r = simulate(events, spark.createDataFrame([("t", q) for q in range(4)], PARTITIONS), history=h)
    assert rows(h.history(), "group_id", "generation", "members") == {("s", 1, 1), ("s", 2, 2), ("s", 3, 1)}
    assert rows(h.history(), "group_id", "generation", "members") == rows(r.generations, "group_id", "generation",
                                                                        "members")
    # range: a alone, then a and b halving t, then b alone
    assert rows(h.assignments(), "generation", "member_id", *TP) == (
        {(1, "a", "t", q) for q in range(4)} | {(2, "a", "t", 0), (2, "a", "t", 1), (2, "b", "t", 2), (2, "b", "t", 3)}
        | {(3, "b", "t", q) for q in range(4)})
    assert rows(h.latest(), "member_id", *TP) == rows(r.assignment, "member_id", *TP)
    sim = simulation_store(h)
    assert rows(sim.read(), "group_id", "generation", "event_kinds") == {
        ("s", 1, "join"), ("s", 2, "join"), ("s", 3, "leave")}
    recorded = {**versions(h), "simulation": 0}
    # a replay records no members table: its members are the scenario's events
    assert recorded == {"assignments": 0, "revocations": 0, "members": None, "generations": 0, "simulation": 0}
    # the same replay again: nothing new
    simulate(events, spark.createDataFrame([("t", q) for q in range(4)], PARTITIONS), history=h)
    assert {**versions(h), "simulation": sim.history().agg(F.max("version")).first()[0]} == recorded


def test_snapshot(spark, tmp_path, backend):
    """A capture's snapshot beside the history: recorded once per capture id, read back."""
    from datetime import datetime

    from spark_assign.kafka.snapshots import SNAPSHOTS_SCHEMA, Snapshot, load_snapshot, snapshot_store

    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=backend)
    at = datetime(2026, 12, 1, 12, 0)
    member = ("a", None, "rack-1", ["t"], [("t", 0)], 3, ["range"], None)
    snap = Snapshot("cap-1", at, spark.createDataFrame(
        [("cap-1", at, "localhost:9092", "g1", "classic", "Stable", "consumer", "range", 3, 1, True, None,
          [member], [("t", 0, ["rack-1"], None), ("t", 1, ["rack-1"], None)], [("t", 0, 5, 0, 10, 5, "end - committed")], [],
          None, [])], SNAPSHOTS_SCHEMA))
    assert snap.record(h) is True
    assert snap.record(h) is False  # the same capture id again: nothing written
    store = snapshot_store(spark, h)
    assert store.backend == backend and store.history().count() == 1
    back = load_snapshot(spark, h, "cap-1")
    assert rows(back.groups, "capture_id", "group_id", "generation", "members", "captured") == {
        ("cap-1", "g1", 3, 1, True)}
    assert rows(back.members, "group_id", "member_id", "rack", "generation") == {("g1", "a", "rack-1", 3)}
    assert rows(back.partitions, *TP) == {("t", 0), ("t", 1)}
    assert rows(back.lags, "group_id", *TP, "lag") == {("g1", "t", 0, 5)}


@pytest.mark.parametrize("writer, reader", [(EMBEDDED, SPARK_DELTA), (SPARK_DELTA, EMBEDDED)])
def test_one_backend_reads_and_extends_the_others_tables(spark, tmp_path, writer, reader):
    loc = str(tmp_path / "h")
    w = AssignmentHistory(loc, spark, backend=writer)
    m1, p = members(spark, GEN1), parts(spark)
    a1 = assign(m1, p, "range")
    w.record(a1, members=m1, partitions=p, strategy="range")
    r = AssignmentHistory(loc, spark, backend=reader)
    assert rows(r.history(), "group_id", "generation") == {("g1", 1), ("g2", 1)}
    assert rows(r.assignments(), "group_id", "member_id", *TP) == rows(a1, "group_id", "member_id", *TP)
    assert rows(r.as_of("assignments", 0), "group_id", "member_id", *TP) == rows(a1, "group_id", "member_id", *TP)
    # the reader records the next generation into the writer's tables; the writer reads it
    m2 = gen2_members(spark, a1)
    a2 = assign(m2, p, "sticky")
    r.record(a2, members=m2, partitions=p, strategy="sticky")
    assert rows(w.latest().where("group_id = 'g1'"), "generation", "member_id", *TP) == {
        (2, x.member_id, x.topic, x.partition) for x in a2.collect()}
    assert versions(w) == versions(r) == {"assignments": 1, "revocations": 1, "members": 1, "generations": 1}


def test_two_writers_of_one_generation_commit_once(spark, tmp_path):
    """Spark's path has no lock: its generations commit is conditional. In one process: the first
    writer lands the whole call while the second is about to commit its generations. (The
    embedded backend's writers take turns under the lock: tests/test_history.py; two processes:
    tests/test_spark_submit.py.)"""
    loc = str(tmp_path / "h")
    m, p = members(spark, GEN1), parts(spark)
    first, second = AssignmentHistory(loc, spark, backend=SPARK_DELTA), AssignmentHistory(loc, spark, backend=SPARK_DELTA)
    generations = second.stores["generations"]
    append_new = generations.append_new

    def late(df, keys, **kwargs):  # the first writer lands the whole call between the second's checks
        first.record(assign(m, p, "range"), members=m, partitions=p, strategy="range", generation=1)
        return append_new(df, keys, **kwargs)

    generations.append_new = late
    with pytest.raises(ConcurrentWriteError, match=r"committed by another writer meanwhile") as lost:
        second.record(assign(m, p, "roundrobin"), members=m, partitions=p, strategy="roundrobin", generation=1)
    assert lost.value.retryable
    assert rows(first.history(), "group_id", "generation", "strategy") == {("g1", 1, "range"), ("g2", 1, "range")}
    assert rows(first.assignments(), "group_id", "member_id", *TP) == rows(
        assign(m, p, "range"), "group_id", "member_id", *TP)
    # the retry sees the generation recorded with another assignment
    with pytest.raises(HistoryError, match="already recorded with a different assignment"):
        second.record(assign(m, p, "roundrobin"), members=m, partitions=p, strategy="roundrobin", generation=1)


@over_connect
def test_catalog_history(spark):
    """Managed tables in the session's catalog: Delta's own SQL over them, and RESTORE."""
    spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.kafka_ops")
    try:
        h = AssignmentHistory("spark_catalog.kafka_ops", spark, backend=SPARK_DELTA)
        m1, p = members(spark, GEN1), parts(spark)
        a1 = assign(m1, p, "range")
        h.record(a1, members=m1, partitions=p, strategy="range")
        m2 = gen2_members(spark, a1)
        a2 = assign(m2, p, "sticky")
        h.record(a2, members=m2, partitions=p, strategy="sticky")
        # (catalog.listTables fails to decode the catalog's Table rows with Delta's catalog in PySpark 4.2)
        assert {r.tableName for r in spark.sql("SHOW TABLES IN spark_catalog.kafka_ops").collect()} >= set(TABLES)
        detail = spark.sql("DESCRIBE DETAIL spark_catalog.kafka_ops.generations").first()
        assert detail.format == "delta"
        assert [r.version for r in spark.sql("DESCRIBE HISTORY spark_catalog.kafka_ops.generations")
                .orderBy("version").collect()] == [0, 1, 2]  # created empty, then a commit per call
        assert spark.sql("SELECT * FROM spark_catalog.kafka_ops.assignments VERSION AS OF 0").count() == 0
        assert rows(spark.sql("SELECT * FROM spark_catalog.kafka_ops.assignments VERSION AS OF 1"),
                    "group_id", "member_id", *TP) == rows(a1, "group_id", "member_id", *TP)
        # RESTORE the commit marker to generation 1: generation 2 is gone for every reader
        spark.sql("RESTORE TABLE spark_catalog.kafka_ops.generations TO VERSION AS OF 1")
        assert rows(h.history(), "group_id", "generation") == {("g1", 1), ("g2", 1)}
        assert rows(h.latest().where("group_id = 'g1'"), "generation") == {(1,)}
        assert spark.sql("DESCRIBE HISTORY spark_catalog.kafka_ops.generations").first().operation == "RESTORE"
        # and recorded again: its rows, committed before, are taken as they are
        h.record(a2, members=m2, partitions=p, strategy="sticky")
        assert rows(h.latest().where("group_id = 'g1'"), "generation", "member_id", *TP) == {
            (2, x.member_id, x.topic, x.partition) for x in a2.collect()}
        assert versions(h) == {"assignments": 2, "revocations": 2, "members": 2, "generations": 4}
    finally:
        spark.sql("DROP DATABASE IF EXISTS spark_catalog.kafka_ops CASCADE")


@over_connect
def test_over_connect_the_history_needs_no_delta_connect(spark, tmp_path):
    """The history reads and writes Delta through SQL and DataFrame readers and writers only,
    which a Connect server with Delta's jars serves. Delta's own Python API over Connect needs
    the Delta Connect server plugin, which Maven Central does not serve for Delta 4.4
    (docs/production.md): on this server its plans have no handler."""
    from delta.tables import DeltaTable
    from pyspark.sql.utils import is_remote

    h = AssignmentHistory(str(tmp_path / "h"), spark, backend=SPARK_DELTA)
    m, p = members(spark, GEN1), parts(spark)
    h.record(assign(m, p, "range"), members=m, partitions=p, strategy="range")
    assert h.history().count() == 2
    table = DeltaTable.forPath(spark, str(tmp_path / "h" / "generations"))
    if not is_remote():
        assert table.toDF().count() == 2
        return
    with pytest.raises(Exception, match="NO_HANDLER_FOR_EXTENSION.*delta.connect.DeltaRelation"):
        table.toDF().count()
