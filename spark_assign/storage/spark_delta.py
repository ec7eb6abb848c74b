"""The ``spark-delta`` backend: Spark's own Delta reads, writes and commits (Databricks, or
Delta's Spark jars on the session)."""

from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import ConcurrentWriteError, HistoryError
from ..locations import is_delta_path, local_path
from .base import SPARK_DELTA, DeltaStore, check_columns, check_writable_folder, conform, marked

CONDITIONAL_APP_ID = "spark-assign:append-new"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _not_a_table(exc: BaseException) -> bool:
    text = str(exc)
    return any(m in text for m in ("DELTA_MISSING_DELTA_TABLE", "is not a Delta table", "DELTA_PATH_DOES_NOT_EXIST",
                                   "doesn't exist", "does not exist", "PATH_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND"))


def _concurrent(exc: BaseException) -> bool:
    """Whether ``exc`` is Delta refusing a commit because another one landed meanwhile."""
    text = str(exc)
    return any(m in text for m in ("DELTA_CONCURRENT", "Concurrent", "DELTA_PROTOCOL_CHANGED", "ProtocolChanged",
                                   "DELTA_METADATA_CHANGED", "MetadataChanged"))



class SparkDeltaStore(DeltaStore):
    """A Delta table read and written by Spark's own Delta (``format("delta")``, catalog
    tables through ``saveAsTable``); idempotent through the ``txnAppId`` write option.

    Every question about the table goes to Spark (the session may be a remote Connect
    server), but whether a local folder holds a table, which its ``_delta_log`` answers. Writes
    are plain Delta appends; the one
    that must not race, :meth:`append_new`, is a conditional commit: Delta itself refuses it
    when another writer committed into the table since the rows were checked.

    >>> open_table(spark, "main.kafka_ops.assignments", schema).read()  # doctest: +SKIP
    """

    backend = SPARK_DELTA

    def _target(self) -> str:
        """The table in SQL: ``delta.`<path>``` or its catalog name."""
        return f"delta.`{self.location}`" if self.by_path else self.location

    def exists(self) -> bool:
        if not self.by_path:
            return bool(self.spark.catalog.tableExists(self.location))
        if local_path(self.location) is not None:  # a folder this process sees: its Delta log
            return is_delta_path(self.location)
        return self.version() is not None

    def version(self) -> int | None:
        """The table's latest version, None before it exists."""
        try:
            latest = self.spark.sql(f"DESCRIBE HISTORY {self._target()} LIMIT 1").select("version").take(1)
        except Exception as exc:  # AnalysisException, over Connect too: no Delta table there
            if _not_a_table(exc):
                return None
            raise HistoryError(f"cannot read the Delta log of {self.location!r}: {_first_line(exc)}") from None
        return int(latest[0][0]) if latest else None

    def check_writable(self) -> None:
        """Raise HistoryError, before anything is written, when the table cannot take this
        version's rows (:func:`~.base.check_writable_folder`): a local folder or a catalog table."""
        if not self.by_path:
            if self.exists():
                check_columns(self, self._read_columns)
            return
        check_writable_folder(self, self._read_columns)

    def _read_columns(self) -> list[str]:
        try:
            df = self.spark.read.format("delta").load(self.location) if self.by_path else self.spark.table(self.location)
            return list(df.schema.fieldNames())
        except Exception as exc:  # a damaged log: Spark's error while replaying it
            raise HistoryError(f"cannot read the Delta log of {self.location!r}: {_first_line(exc)}") from None

    def committed(self, app_id: str) -> bool:
        if not self.exists():
            return False
        # the txn marker is applied by the writer itself (txnAppId); look for it in
        # the commit log through the userMetadata we also write
        hist = self.history()
        marked = hist.where(F.col("userMetadata").contains(json.dumps(app_id))).select("version")
        # a RESTORE to a version before the marked commit undid it
        undone = hist.where(F.col("operation") == "RESTORE").select(
            F.col("version").alias("_restore"), F.col("operationParameters")["version"].cast("long").alias("_to"))
        live = marked.join(undone, (undone._restore > marked.version) & (undone._to < marked.version), "left_anti")
        return bool(live.take(1))

    def read(self, version: int | None = None) -> DataFrame:
        if not self.exists():
            return self._empty()
        if not self.by_path:
            clause = f" VERSION AS OF {int(version)}" if version is not None else ""
            df = self.spark.sql(f"SELECT * FROM {self.location}{clause}")
        else:
            reader = self.spark.read.format("delta")
            if version is not None:
                reader = reader.option("versionAsOf", version)
            df = reader.load(self.location)
        return self._all_columns(df)

    def history(self) -> DataFrame:
        self._require_table()
        return self.spark.sql(f"DESCRIBE HISTORY {self._target()}")

    def append(self, df: DataFrame, *, app_id: str, metadata: dict[str, Any] | None = None) -> bool:
        df = conform(df, self.schema)
        if self.committed(app_id):
            return False
        try:
            return self._write(df, app_id=app_id, version=1, metadata=marked(metadata, app_id))
        except ConcurrentWriteError:
            if self.committed(app_id):  # another writer of this app id landed first: the caller compares
                return False
            raise

    def append_new(self, df: DataFrame, keys: tuple[str, ...], *, app_id: str,
                   metadata: dict[str, Any] | None = None, tries: int = 10) -> bool:
        """Append ``df`` unless one of its ``keys`` is in the table, as one commit that Delta
        refuses when another append of this method landed in between: exactly one of two
        writers of the same keys commits, and both of two writers of different keys do.

        The check reads the table at its latest version *v*; the commit carries Delta's
        transaction marker :data:`CONDITIONAL_APP_ID` at *v* + 1, the table version it is to
        get (0 for the commit that creates the table). A commit that landed
        after *v* carries it at a version at least as high, so Delta skips this one (it did
        land before this commit started) or refuses it (it landed while this one ran): both
        are seen here, and the check runs again on the newer version. Returns False when a
        commit marked ``app_id`` is in the table already. Raises
        :class:`~spark_assign.errors.ConcurrentWriteError` when some key was committed
        meanwhile, or other writers won ``tries`` times in a row.
        """
        df = conform(df, self.schema)
        for _ in range(tries):
            if self.committed(app_id):
                return False
            version = self.version() if self.exists() else None
            if version is not None:
                taken = df.select(*keys).join(self.read(version).select(*keys), list(keys), "left_semi").take(3)
                if taken:
                    raise ConcurrentWriteError(
                        f"{self.location}: {[tuple(r) for r in taken]} ({', '.join(keys)}) committed by another "
                        "writer meanwhile; nothing of this call is visible: retry it")
            try:
                if self._write(df, app_id=CONDITIONAL_APP_ID, version=0 if version is None else version + 1,
                               metadata=marked(metadata, app_id)):
                    return True
            except ConcurrentWriteError:
                pass
            time.sleep(random.uniform(0.05, 0.5))
        raise ConcurrentWriteError(f"{self.location}: other writers committed first {tries} times in a row; "
                                   "nothing of this call is visible: retry it")

    def _write(self, df: DataFrame, *, app_id: str, version: int, metadata: dict[str, Any]) -> bool:
        """One Delta append with transaction marker ``app_id`` at ``version``; False when Delta
        skipped it (a commit with that marker at that version or later is in the table)."""
        writer_id = uuid.uuid4().hex  # finds this commit in the log: its app id may be another writer's too
        writer = (
            df.write.format("delta").mode("append")
            .option("txnAppId", app_id).option("txnVersion", version)
            .option("userMetadata", json.dumps({**metadata, "spark_assign_writer": writer_id}, sort_keys=True))
        )
        try:
            if self.by_path:
                writer.save(self.location)
            else:
                self._create_table()
                writer.saveAsTable(self.location)
        except Exception as exc:
            if _concurrent(exc):
                raise ConcurrentWriteError(f"{self.location}: another writer committed at the same time "
                                           f"({_first_line(exc)}); nothing of this call is visible: retry it") from None
            raise
        # the commits since: a few, unless many writers raced this one
        latest = self.spark.sql(f"DESCRIBE HISTORY {self._target()} LIMIT 20")
        return bool(latest.where(F.col("userMetadata").contains(writer_id)).take(1))

    def _create_table(self) -> None:
        """Create the catalog table, empty, when it does not exist: Delta keeps no
        ``userMetadata`` (this store's commit markers) in the commit that creates a table
        from a write, so a catalog table's version 0 is its creation."""
        if self.spark.catalog.tableExists(self.location):
            return
        try:
            self.spark.catalog.createTable(self.location, source="delta", schema=self.schema)
        except Exception:
            if not self.spark.catalog.tableExists(self.location):  # not another writer creating it
                raise

    def compact(self) -> None:
        if self.exists():
            self.spark.sql(f"OPTIMIZE {self._target()}")

