"""The ``embedded`` backend: Spark writes the Parquet files, delta-rs (the ``deltalake``
package) commits them as one Delta transaction; for sessions without Delta's Spark jars.
Its writers take turns under the history's lock file (:mod:`.locking`)."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import HistoryError
from ..execution import stored_rows
from ..locations import is_delta_path, local_path
from .base import EMBEDDED, STAGING_DIR, DeltaStore, Staged, arrow_schema, check_writable_folder, conform, marked


class EmbeddedStore(DeltaStore):
    """A Delta table at a path, its Parquet files written by Spark and committed by
    delta-rs as one transaction with an app-id marker (see :mod:`spark_assign.storage`).

    >>> store.write_files(df); store.commit(files, app_id="spark-assign:x")  # doctest: +SKIP
    """

    backend = EMBEDDED

    def exists(self) -> bool:
        return is_delta_path(self.location)

    def _delta_table(self, version: int | None = None):
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.location, version=version)
        except Exception as exc:  # delta-rs: a corrupt or unreadable _delta_log
            raise HistoryError(f"cannot read the Delta log of {self.location!r}: {exc}") from None

    def check_writable(self) -> None:
        """Raise HistoryError, before anything is written, when the table cannot take this
        version's rows (:func:`_check_writable`). On a local path only."""
        check_writable_folder(self, lambda: [f.name for f in self._delta_table().schema().fields])

    def committed(self, app_id: str) -> bool:
        if not self.exists():
            return False
        return self._delta_table().transaction_version(app_id) is not None

    def read(self, version: int | None = None) -> DataFrame:
        if not self.exists():
            return self._empty()
        files = self._delta_table(version).file_uris()
        if not files:
            return self._empty()
        if local_path(self.location) is None:  # remote storage: Spark lists many files with a job
            return self._all_columns(self.spark.read.schema(self.schema).parquet(*files))
        # local files: Spark lists more than 32 paths with a Spark job of its own, unless the
        # session lists them on the driver (the sessions spark-assign builds do:
        # spark_assign.session.LISTING_THRESHOLD)
        return self._all_columns(self.spark.read.schema(self.schema).parquet(*files))

    def history(self) -> DataFrame:
        self._require_table()
        known = {"version", "timestamp", "operation", "operationParameters", "engineInfo",
                 "clientVersion", "operationMetrics", "isBlindAppend", "readVersion"}
        rows = []
        for h in self._delta_table().history():
            custom = {k: v for k, v in h.items() if k not in known}
            rows.append((
                int(h["version"]),
                int(h["timestamp"]),
                h.get("operation"),
                {str(k): str(v) for k, v in (h.get("operationParameters") or {}).items()},
                json.dumps(custom, sort_keys=True, default=str) if custom else None,
                h.get("engineInfo") or h.get("clientVersion"),
            ))
        schema = ("version long, timestamp_ms long, operation string, "
                  "operation_parameters map<string,string>, userMetadata string, engine string")
        return (
            self.spark.createDataFrame(rows, schema)
            .withColumn("timestamp", F.timestamp_millis("timestamp_ms"))
            .select("version", "timestamp", "operation", "operation_parameters", "userMetadata", "engine")
            .orderBy(F.col("version").desc())
        )

    def append(self, df: DataFrame, *, app_id: str, metadata: dict[str, Any] | None = None) -> bool:
        df = conform(df, self.schema)
        if self.committed(app_id):
            return False
        self.commit(self.write_files(df), app_id=app_id, metadata=marked(metadata, app_id))
        return True

    def stage(self, df: DataFrame) -> StagedFiles:
        """Write ``df``'s files; its rows are read back from them, or, when ``df`` is a small
        call's local relation (:func:`~spark_assign.execution.stored_rows`), from the driver."""
        df_conformed = conform(df, self.schema)
        files = self.write_files(df_conformed)
        if stored_rows(df) is not None:
            return StagedFiles(self, df_conformed, files)
        root = self.location.rstrip("/")
        read = (self.spark.read.schema(self.schema).parquet(*[f"{root}/{f}" for f in files]) if files
                else self._empty())
        return StagedFiles(self, read, files)

    def write_files(self, df: DataFrame) -> list[str]:
        """Step 1: write ``df`` as Parquet files inside the table folder (not yet part
        of the table); return their paths relative to the table root."""
        df = conform(df, self.schema)
        staging = f"{self.location.rstrip('/')}/{STAGING_DIR}/{uuid.uuid4().hex}"
        # Delta timestamps are microseconds, not INT96: a write option, which Spark reads before
        # the session's setting (the session is left as it is)
        df.write.mode("error").option(OUTPUT_TIMESTAMP_TYPE, "TIMESTAMP_MICROS").parquet(
            staging)  # "errorifexists" is not accepted by Spark Connect
        local_root = local_path(self.location)
        if local_root is None:  # remote storage: keep the files where Spark wrote them
            from pyarrow import fs as pafs

            filesystem, root = pafs.FileSystem.from_uri(self.location)
            infos = filesystem.get_file_info(pafs.FileSelector(f"{root}/{STAGING_DIR}/{staging.rsplit('/', 1)[-1]}"))
            return sorted(
                os.path.relpath(i.path, root) for i in infos
                if i.path.endswith(".parquet") and not os.path.basename(i.path).startswith(("_", "."))
            )
        staging_local = os.path.join(local_root, STAGING_DIR, staging.rsplit("/", 1)[-1])
        moved = []
        for name in sorted(os.listdir(staging_local)):
            if not name.endswith(".parquet") or name.startswith(("_", ".")):
                continue
            # Spark's part names are unique per write (they carry the write's uuid)
            os.replace(os.path.join(staging_local, name), os.path.join(local_root, name))
            moved.append(name)
        shutil.rmtree(staging_local, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(staging_local))  # the _staging folder, when empty
        except OSError:
            pass
        return moved

    def commit(self, files: list[str], *, app_id: str, metadata: dict[str, Any] | None = None) -> None:
        """Step 2: commit ``files`` (relative paths from :meth:`write_files`) as one
        Delta transaction with marker ``app_id``."""
        from deltalake import DeltaTable
        from deltalake.transaction import (
            CommitProperties,
            Transaction,
            create_table_with_add_actions,
        )

        actions = [self._add_action(f) for f in files]
        props = CommitProperties(
            app_transactions=[Transaction(app_id, 1)],
            custom_metadata={k: str(v) for k, v in (metadata or {}).items()},
        )
        schema = arrow_schema(self.schema)
        if not self.exists():
            try:
                from deltalake import Schema as DeltaSchema

                create_table_with_add_actions(self.location, DeltaSchema.from_arrow(schema), actions, mode="error",
                                              commit_properties=props)
                return
            except Exception as exc:  # created meanwhile by another writer: append instead
                if not self.exists():
                    raise HistoryError(f"creating Delta table {self.location!r} failed: {exc}") from exc
        table = DeltaTable(self.location)
        if table.transaction_version(app_id) is not None:
            return
        table.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props)

    def _add_action(self, relative: str):
        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        local_root = local_path(self.location)
        if local_root is not None:
            full = os.path.join(local_root, relative)
            st = os.stat(full)
            size, mtime = st.st_size, int(st.st_mtime * 1000)
            rows = pq.read_metadata(full).num_rows
        else:
            from pyarrow import fs as pafs

            filesystem, root = pafs.FileSystem.from_uri(self.location)
            info = filesystem.get_file_info(f"{root}/{relative}")
            size = info.size
            mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
            with filesystem.open_input_file(f"{root}/{relative}") as fh:
                rows = pq.read_metadata(fh).num_rows
        return AddAction(relative, size, {}, mtime, True, json.dumps({"numRecords": rows}))

    def compact(self) -> None:
        if self.exists():
            self._delta_table().optimize.compact()



class StagedFiles(Staged):
    """Rows staged by :meth:`EmbeddedStore.stage`: their Parquet files are written,
    the commit adds them to the table."""

    store: EmbeddedStore
    files: list[str]

    def __init__(self, store: EmbeddedStore, rows: DataFrame, files: list[str]):
        super().__init__(store, rows)
        self.files = files

    def commit(self, *, app_id: str, metadata: dict[str, Any] | None = None,
               unique: tuple[str, ...] | None = None) -> bool:
        # ``unique``: the embedded backend's writers take turns under the history's lock
        if self.store.committed(app_id):
            return False
        self.store.commit(self.files, app_id=app_id, metadata=marked(metadata, app_id))
        return True




#: Spark's Parquet timestamp type setting, given to the embedded backend's writes as an option
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
