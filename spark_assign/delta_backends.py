"""The two storage backends of :class:`~spark_assign.storage.DeltaStore`, one class each.

:class:`SparkDeltaStore` (``spark-delta``) lets Spark's own Delta read, write and
commit; :class:`EmbeddedStore` (``embedded``) writes Parquet with Spark and commits
it with delta-rs (the ``deltalake`` package). :mod:`spark_assign.storage`
describes both and picks one: build stores with ``DeltaStore(...)``, not from here.

Why past 400 lines: both backends and the table checks they share (:func:`_check_writable`)
stay in one module until the storage package of issue #69 gives each backend a module.

>>> store = DeltaStore(spark, "/tmp/history/assignments", schema, backend="embedded")  # doctest: +SKIP
>>> type(store).__name__                                                               # doctest: +SKIP
'EmbeddedStore'
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .errors import ConcurrentWriteError, HistoryError
from .lineage import stored_rows
from .storage import (
    EMBEDDED,
    SPARK_DELTA,
    STAGING_DIR,
    DeltaStore,
    Staged,
    arrow_schema,
    conform,
    is_delta_path,
    local_path,
    marked,
)

#: the name of a Parquet file :meth:`EmbeddedStore.write_files` moved into a table folder
#: (Spark's part file, named after its write's uuid); committed by the write's next step
UNCOMMITTED_PART = re.compile(r"part-\d{5}-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-c\d{3}(\.\w+)?\.parquet")


class SparkDeltaStore(DeltaStore):
    """A Delta table read and written by Spark's own Delta (``format("delta")``, catalog
    tables through ``saveAsTable``); idempotent through the ``txnAppId`` write option.

    Every question about the table goes to Spark (the session may be a remote Connect
    server), but whether a local folder holds a table, which its ``_delta_log`` answers. Writes
    are plain Delta appends; the one
    that must not race, :meth:`append_new`, is a conditional commit: Delta itself refuses it
    when another writer committed into the table since the rows were checked.

    >>> DeltaStore(spark, "main.kafka_ops.assignments", schema).read()  # doctest: +SKIP
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
        version's rows (:func:`_check_writable`): a local folder or a catalog table."""
        if not self.by_path:
            if self.exists():
                _check_columns(self, self._read_columns)
            return
        _check_writable(self, self._read_columns)

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


def _check_writable(store: DeltaStore, columns: Callable[[], list[str]]) -> None:
    """Raise HistoryError when the table at ``store``'s local path cannot take this version's
    rows: its folder holds something that is not a Delta table, its Delta log cannot be read,
    or its ``columns()`` differ from this version's (a column missing, or one added by a newer
    spark-assign). Remote paths are left to Delta."""
    local = local_path(store.location)
    if local is None or not os.path.exists(local):
        return
    if not os.path.isdir(local):
        raise HistoryError(f"history table {store.location!r} is a file, not a Delta table folder")
    if not os.path.isdir(os.path.join(local, "_delta_log")):
        # a first write killed before its commit leaves its part files and no log: in no
        # table, they are overwritten by nothing and read by no one (VACUUM deletes them)
        found = sorted(n for n in os.listdir(local) if n != STAGING_DIR and not UNCOMMITTED_PART.fullmatch(n))
        if found:
            raise HistoryError(f"history table {store.location!r} is not a Delta table: the folder holds "
                               f"{found[:5]} and no _delta_log; expected an empty or missing folder")
        return
    _check_columns(store, columns)


def _check_columns(store: DeltaStore, columns: Callable[[], list[str]]) -> None:
    try:
        found = columns()
    except HistoryError:
        raise
    except Exception as exc:
        raise HistoryError(f"cannot read the Delta schema of {store.location!r}: {exc}") from None
    expected = store.schema.fieldNames()
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    if missing or extra:
        raise HistoryError(
            f"history table {store.location!r} has columns {found}, expected {expected}"
            + (f": missing {missing} (not a spark-assign history, or damaged)" if missing else "")
            + (f": extra {extra} (written by a newer spark-assign? upgrade to record into it)" if extra else ""))


#: the Delta transaction marker of :meth:`SparkDeltaStore.append_new`'s commits: its version is
#: the table version each one was checked against, plus one (0 for the table's first commit)
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
        _check_writable(self, lambda: [f.name for f in self._delta_table().schema().fields])

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
        # local files: Spark lists more than 32 paths with a Spark job of its own, 150-350 ms
        # where listing them one by one on the driver takes a few (81 files: 373 against 49 ms)
        with _setting(self.spark, LISTING_THRESHOLD, LOCAL_LISTING_THRESHOLD):
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
        call's local relation (:func:`~spark_assign.lineage.stored_rows`), from the driver."""
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
        # Delta timestamps are microseconds, not INT96
        with _setting(self.spark, "spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"):
            df.write.mode("error").parquet(staging)  # "errorifexists" is not accepted by Spark Connect
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


#: Spark's setting: above this many paths, a read lists them with a Spark job
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
#: its value for a read of local files: listed on the driver, whatever their number
LOCAL_LISTING_THRESHOLD = "1000000"

#: per (session id, setting) held by :func:`_setting`: how many blocks hold it, and the session's own value
_HELD: dict[tuple[int, str], tuple[int, str | None]] = {}
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def _setting(spark, key: str, value: str) -> Iterator[None]:
    """Spark setting ``key`` at ``value`` (always the same value for a key) for the block, a
    read or write it resolves; the session's own value back once the last block holding it, in
    any thread, ends."""
    held = (id(spark), key)
    with _HELD_LOCK:
        count, previous = _HELD.get(held, (0, None))
        if not count:
            previous = spark.conf.get(key, None)
            spark.conf.set(key, value)
        _HELD[held] = (count + 1, previous)
    try:
        yield
    finally:
        with _HELD_LOCK:
            count, previous = _HELD.pop(held)
            if count > 1:
                _HELD[held] = (count - 1, previous)
            elif previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
