"""The Delta tables a live consumer reads and writes, with deltalake only (no Spark on a consumer).

``<history>/rebalances``: one row per rebalance a :class:`~spark_assign.kafka.assignor.SparkAssignAssignor`
led: the group, the generation, the strategy that ran (and the plan it followed, or
why it fell back), and per member its subscription, owned partitions and assignment.
:func:`latest_rebalances` reads the newest per group (what :func:`~spark_assign.kafka.capture` uses);
:func:`latest_plan` reads a group's latest recorded generation from the history's ``generations``
and ``assignments`` tables, the plan a consumer in plan mode follows.

>>> latest_rebalances("out/history", ["orders"])["orders"]["generation"]   # doctest: +SKIP
7
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..locations import is_delta_path

REBALANCES = "rebalances"


def _arrow_schema():
    import pyarrow as pa

    tp = pa.struct([("topic", pa.string()), ("partition", pa.int32())])
    member = pa.struct([
        ("member_id", pa.string()), ("group_instance_id", pa.string()), ("rack", pa.string()),
        ("topics", pa.list_(pa.string())), ("owned", pa.list_(tp)), ("owned_generation", pa.int32()),
        ("subscription_version", pa.int32()), ("assigned", pa.list_(tp)),
    ])
    return pa.schema([
        ("group_id", pa.string()), ("generation", pa.int32()), ("strategy", pa.string()), ("protocol", pa.string()),
        ("plan_generation", pa.int32()), ("fallback_reason", pa.string()), ("members", pa.list_(member)), ("partitions", pa.list_(tp)),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
    ])


def table_path(history: str, name: str) -> str:
    return f"{history.rstrip('/')}/{name}"


def append_rebalance(history: str, record: dict[str, Any]) -> None:
    """Append one rebalance (a dict with the columns of the ``rebalances`` table but
    ``recorded_at``) as one Delta commit."""
    import pyarrow as pa
    from deltalake import write_deltalake

    row = {**record, "recorded_at": datetime.now(timezone.utc)}
    write_deltalake(table_path(history, REBALANCES), pa.Table.from_pylist([row], schema=_arrow_schema()),
                    mode="append")


def _table(history: str, name: str):
    from deltalake import DeltaTable

    path = table_path(history, name)
    if not is_delta_path(path):
        return None
    try:
        return DeltaTable(path)
    except Exception:  # not a table (yet)
        return None


def latest_rebalances(history: str, group_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``group_id -> `` the newest recorded rebalance of each of ``group_ids`` (highest
    generation, then latest recorded), as a dict of the table's columns."""
    import pyarrow.dataset as ds

    table = _table(history, REBALANCES)
    if table is None or not group_ids:
        return {}
    rows = table.to_pyarrow_dataset().to_table(filter=ds.field("group_id").isin(list(group_ids))).to_pylist()
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = (row["generation"] or -1, row["recorded_at"])
        best = latest.get(row["group_id"])
        if best is None or key > (best["generation"] or -1, best["recorded_at"]):
            latest[row["group_id"]] = row
    return latest


def latest_plan(history: str, group_id: str) -> tuple[int, dict[tuple[str, int], str], set[str]] | None:
    """The assignment of ``group_id``'s latest generation recorded in the history at
    ``history``: ``(generation, {(topic, partition): member_id}, members)``, or None when
    the group has none. ``members``: the generation's members as the ``members`` table
    recorded them (with those holding nothing), else those holding a partition. Only rows
    committed with their ``generations`` row count (the history's commit rule,
    :mod:`spark_assign.history`)."""
    import pyarrow.dataset as ds

    generations, assignments = _table(history, "generations"), _table(history, "assignments")
    if generations is None or assignments is None:
        return None
    rows = generations.to_pyarrow_dataset().to_table(
        columns=["generation", "record_id"], filter=ds.field("group_id") == group_id).to_pylist()
    if not rows:
        return None
    newest = max(rows, key=lambda r: r["generation"])
    key = ((ds.field("group_id") == group_id) & (ds.field("generation") == newest["generation"])
           & (ds.field("record_id") == newest["record_id"]))
    plan = {(r["topic"], r["partition"]): r["member_id"] for r in assignments.to_pyarrow_dataset().to_table(
        columns=["member_id", "topic", "partition"], filter=key).to_pylist()}
    members_table = _table(history, "members")
    members = set() if members_table is None else {
        r["member_id"] for r in members_table.to_pyarrow_dataset().to_table(columns=["member_id"], filter=key).to_pylist()}
    return newest["generation"], plan, members or set(plan.values())
