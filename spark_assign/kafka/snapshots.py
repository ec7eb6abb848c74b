"""A capture of live consumer groups: the :class:`Snapshot` handle and its Delta table.

The ``snapshots`` table, next to the generation history's tables (``<history>/snapshots``),
holds one row per captured group per capture, with the group's members, partitions,
lags and problems as arrays; one capture is one Delta commit whose transaction marker
is ``spark-assign:snapshots:<capture_id>``, so a capture is recorded whole or not at
all, and recording it again is a no-op. A :class:`Snapshot`'s DataFrames are views of
these rows, whether they come straight from the broker or back from the table.

>>> snap = load_snapshot(spark, "out/history")   # doctest: +SKIP
>>> assign(snap.members, snap.partitions, "range", lags=snap.lags)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import HistoryError
from ..inputs import MEMBER_COLUMNS
from ..lags import LAG_COLUMNS
from ..locations import is_path
from ..storage import DeltaStore, open_table

if TYPE_CHECKING:
    from ..history import AssignmentHistory

_STR, _INT, _LONG = T.StringType(), T.IntegerType(), T.LongType()

SNAPSHOT_MEMBER = T.StructType([T.StructField(name, dtype) for name, dtype in MEMBER_COLUMNS.items()
                                if name != "group_id"])
SNAPSHOT_PARTITION = T.StructType([T.StructField("topic", _STR), T.StructField("partition", _INT),
                                   T.StructField("racks", T.ArrayType(_STR)), T.StructField("topic_id", _STR)])
#: a partition's lag, its offsets, and the rule that gave the lag (see ``capture``)
SNAPSHOT_LAG = T.StructType([T.StructField("topic", _STR), T.StructField("partition", _INT),
                             T.StructField("lag", _LONG), T.StructField("log_start_offset", _LONG),
                             T.StructField("log_end_offset", _LONG), T.StructField("committed_offset", _LONG),
                             T.StructField("lag_rule", _STR)])
SNAPSHOT_PROBLEM = T.StructType([T.StructField("member_id", _STR), T.StructField("topic", _STR),
                                 T.StructField("problem", _STR)])
#: a partition of a KIP-848 member's target assignment
SNAPSHOT_TARGET = T.StructType([T.StructField("member_id", _STR), T.StructField("topic", _STR),
                                T.StructField("partition", _INT)])

#: the columns of ``Snapshot.groups`` (the group columns of the table)
GROUP_COLUMNS = ("capture_id", "captured_at", "group_id", "group_type", "state", "protocol_type", "protocol",
                 "generation", "assignment_epoch", "members_described", "members", "captured", "reason")

SNAPSHOTS_SCHEMA = T.StructType([
    T.StructField("capture_id", _STR),
    T.StructField("captured_at", T.TimestampType()),
    T.StructField("bootstrap_servers", _STR),
    T.StructField("group_id", _STR),
    T.StructField("group_type", _STR),
    T.StructField("state", _STR),
    T.StructField("protocol_type", _STR),
    T.StructField("protocol", _STR),
    T.StructField("generation", _INT),
    T.StructField("members_described", _INT),
    T.StructField("captured", T.BooleanType()),
    T.StructField("reason", _STR),
    T.StructField("member_rows", T.ArrayType(SNAPSHOT_MEMBER)),
    T.StructField("partition_rows", T.ArrayType(SNAPSHOT_PARTITION)),
    T.StructField("lag_rows", T.ArrayType(SNAPSHOT_LAG)),
    T.StructField("problem_rows", T.ArrayType(SNAPSHOT_PROBLEM)),
    # KIP-848 groups: the epoch of the target assignment, and each member's target
    T.StructField("assignment_epoch", _INT),
    T.StructField("target_rows", T.ArrayType(SNAPSHOT_TARGET)),
])


def _explode(rows: DataFrame, column: str, keys: tuple[str, ...] = ("group_id",)) -> DataFrame:
    return rows.select(*keys, F.explode(column).alias("_row")).select(*keys, "_row.*")


@dataclass(frozen=True)
class Snapshot:
    """What one capture saw. ``members``, ``partitions`` and ``lags`` are in the schemas
    :func:`~spark_assign.assign` takes (``lags`` in its ``lag`` shape, with the offsets
    and the ``lag_rule`` beside); ``groups``: one row per group asked for, captured or
    not (``captured``, ``reason``; ``members_described``: the members the broker listed,
    ``members``: those in ``members``); ``problems``: ``group_id, member_id, topic, problem``,
    what could not be captured and why; ``targets``: ``group_id, member_id, topic, partition``,
    the target assignment of KIP-848 groups' members (``groups.assignment_epoch`` is its
    epoch; ``members.generation`` is a KIP-848 member's epoch, ``groups.generation`` the
    group epoch); ``rows``: the ``snapshots`` table's rows.

    >>> snap.groups.select("group_id", "state", "captured").show()  # doctest: +SKIP
    """

    capture_id: str
    captured_at: datetime
    rows: DataFrame

    @property
    def groups(self) -> DataFrame:
        return self.rows.select(*[F.size("member_rows").cast("long").alias("members") if c == "members" else c
                                  for c in GROUP_COLUMNS])

    @property
    def members(self) -> DataFrame:
        return _explode(self.rows.where("captured"), "member_rows").select(*MEMBER_COLUMNS)

    @property
    def partitions(self) -> DataFrame:
        return _explode(self.rows.where("captured"), "partition_rows").drop("group_id").dropDuplicates(
            ["topic", "partition"])

    @property
    def lags(self) -> DataFrame:
        lags = _explode(self.rows.where("captured"), "lag_rows")
        return lags.select(*LAG_COLUMNS, *[c for c in SNAPSHOT_LAG.names if c not in LAG_COLUMNS])

    @property
    def problems(self) -> DataFrame:
        return _explode(self.rows, "problem_rows")

    @property
    def targets(self) -> DataFrame:
        return _explode(self.rows.where("captured"), "target_rows")

    def record(self, history: str | AssignmentHistory) -> bool:
        """Append this capture to ``<history>/snapshots`` as one Delta commit; False (and
        nothing written) when this capture id is already recorded. ``history``: a folder or
        catalog prefix, or an :class:`~spark_assign.history.AssignmentHistory` (its backend).

        >>> snap.record("out/history")  # doctest: +SKIP
        True
        """
        return snapshot_store(self.rows.sparkSession, history).append(
            self.rows, app_id=f"spark-assign:snapshots:{self.capture_id}",
            metadata={"capture_id": self.capture_id})


def snapshot_store(spark: SparkSession, history: str | AssignmentHistory) -> DeltaStore:
    """The ``snapshots`` table of the history at ``history`` (a folder or catalog prefix, on
    the backend the session picks), or beside an :class:`~spark_assign.history.AssignmentHistory`
    (on its backend)."""
    backend = None if isinstance(history, str) else history.backend
    location = (history if isinstance(history, str) else history.location).rstrip("/")
    return open_table(spark, f"{location}{'/' if is_path(location) else '.'}snapshots", SNAPSHOTS_SCHEMA,
                      backend=backend)


def load_snapshot(spark: SparkSession, history: str | AssignmentHistory, capture_id: str | None = None) -> Snapshot:
    """The capture ``capture_id`` (default: the latest) recorded in ``history``.

    Raises :class:`~spark_assign.errors.HistoryError` naming the capture ids found when
    there is no such capture.
    """
    store = snapshot_store(spark, history)
    table = store.read()
    captures = table.groupBy("capture_id").agg(F.max("captured_at").alias("captured_at")).orderBy(
        F.desc("captured_at"), F.desc("capture_id")).collect()
    chosen = [c for c in captures if capture_id is None or c.capture_id == capture_id][:1]
    if not chosen:
        found = [c.capture_id for c in captures[:10]]
        raise HistoryError(f"no capture {capture_id!r} in {store.location}: found {found or 'none'}"
                           if capture_id else f"no capture recorded in {store.location}")
    return Snapshot(chosen[0].capture_id, chosen[0].captured_at,
                    table.where(F.col("capture_id") == chosen[0].capture_id))

