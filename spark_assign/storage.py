"""Delta tables with or without Delta's Spark jars: the one storage switch.

Two backends write and read the same standard Delta tables:

``spark-delta``
    The Spark session has Delta configured (Databricks, or ``spark-submit
    --packages io.delta:delta-spark_2.13:<version>`` with Delta's SQL extension
    or catalog): Spark's own ``format("delta")`` writes and reads, catalog
    tables through ``saveAsTable`` / ``spark.table``. Idempotence uses Delta's
    ``txnAppId`` / ``txnVersion`` write options.

``embedded`` (the default here, no Delta jars)
    Spark writes the Parquet files in parallel into ``<table>/_staging/<uuid>/``;
    on a local file system they are then renamed into the table folder under
    unique names. The ``deltalake`` package (delta-rs) commits them as ONE
    Delta transaction of ``add`` actions (paths relative to the table root,
    with size, modification time and ``numRecords`` stats) carrying an
    app-id/version transaction marker, so a commit retried with the same app
    id is skipped. Reads go through the table's active files only
    (``DeltaTable(path).file_uris()``): Parquet files written but never
    committed are never read.

A run killed between the Parquet write and the commit leaves Parquet files
that no commit references: readers never see them, ``VACUUM`` removes them,
and ``_staging`` folders may be deleted whenever no write is running.

Everything above this module (:mod:`spark_assign.history`, the pipelines)
calls :class:`DeltaStore` and does not care which backend runs.

Test hook: with ``SPARK_ASSIGN_PAUSE_BEFORE_COMMIT=<table name>`` in the
environment, the embedded backend stops between the Parquet write of that
table and its commit: it creates the file named by
``SPARK_ASSIGN_PAUSE_FILE`` (if set) and sleeps, so a test can kill the process
there.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import HistoryError, InvalidInputError

SPARK_DELTA = "spark-delta"
EMBEDDED = "embedded"
BACKENDS = (SPARK_DELTA, EMBEDDED)

STAGING_DIR = "_staging"
PAUSE_ENV = "SPARK_ASSIGN_PAUSE_BEFORE_COMMIT"
PAUSE_FILE_ENV = "SPARK_ASSIGN_PAUSE_FILE"


# --------------------------------------------------------------------------- backend choice


def spark_delta_configured(spark: SparkSession) -> bool:
    """True when Spark itself can read and write Delta (Databricks, or Delta's
    extension or catalog configured on the session).

    >>> spark_delta_configured(spark)  # doctest: +SKIP
    False
    """
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    except Exception:  # pragma: no cover - conf not readable (restricted Connect server)
        return False
    return "DeltaSparkSessionExtension" in extensions or "DeltaCatalog" in catalog


def choose_backend(spark: SparkSession, backend: str | None = None) -> str:
    """The backend to use: ``backend`` if given, else ``spark-delta`` when Spark has
    Delta configured, else ``embedded``."""
    if backend is not None:
        if backend not in BACKENDS:
            raise HistoryError(f"unknown storage backend {backend!r}: expected one of {BACKENDS}")
        return backend
    return SPARK_DELTA if spark_delta_configured(spark) else EMBEDDED


def is_path(location: str) -> bool:
    """True if ``location`` is a file system path or URI, False if it is a catalog
    name such as ``main.kafka_ops`` (no slash, no scheme)."""
    return "/" in location or "\\" in location or location.startswith(".") or ":" in location


def local_path(location: str) -> str | None:
    """The local file system path of ``location``, or None for remote URIs."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # '' / file: / windows drive
        return os.path.abspath(parsed.path if parsed.scheme == "file" else location)
    return None


def is_delta_path(location: str) -> bool:
    """True if ``location`` holds a Delta table (has a ``_delta_log``)."""
    local = local_path(location)
    if local is not None:
        return os.path.isdir(os.path.join(local, "_delta_log"))
    try:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(location)
    except Exception:
        return False


# --------------------------------------------------------------------------- schema helpers


def _arrow_type(dtype: T.DataType):
    import pyarrow as pa

    simple = {
        T.StringType: pa.string(), T.IntegerType: pa.int32(), T.LongType: pa.int64(),
        T.ShortType: pa.int16(), T.ByteType: pa.int8(), T.DoubleType: pa.float64(),
        T.FloatType: pa.float32(), T.BooleanType: pa.bool_(), T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", tz="UTC"), T.TimestampNTZType: pa.timestamp("us"),
        T.BinaryType: pa.binary(),
    }
    for cls, arrow in simple.items():
        if isinstance(dtype, cls):
            return arrow
    if isinstance(dtype, T.ArrayType):
        return pa.list_(pa.field("element", _arrow_type(dtype.elementType), True))
    if isinstance(dtype, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, T.DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    raise HistoryError(f"column type {dtype.simpleString()} is not supported by the embedded Delta backend")


def arrow_schema(schema: T.StructType):
    """The Arrow schema (all columns nullable) that delta-rs gets for a Spark schema."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), True) for f in schema.fields])


def conform(df: DataFrame, schema: T.StructType) -> DataFrame:
    """``df`` with exactly the columns of ``schema``, in order, cast to its types."""
    missing = [f.name for f in schema.fields if f.name not in df.columns]
    if missing:
        raise HistoryError(f"cannot write: missing column(s) {missing}; expected {schema.fieldNames()}, found {df.columns}")
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


# --------------------------------------------------------------------------- one table


class DeltaStore:
    """One Delta table, at a path or under a catalog name, on either backend.

    >>> store = DeltaStore(spark, "/tmp/history/assignments", schema)  # doctest: +SKIP
    >>> store.append(df, app_id="spark-assign:assignments:abc")        # doctest: +SKIP
    >>> store.read().count()                                            # doctest: +SKIP
    """

    def __init__(self, spark: SparkSession, location: str, schema: T.StructType, *, backend: str | None = None):
        self.spark = spark
        self.location = location
        self.schema = schema
        self.backend = choose_backend(spark, backend)
        self.by_path = is_path(location)
        if not self.by_path and self.backend != SPARK_DELTA:
            raise HistoryError(
                f"{location!r} looks like a catalog table name, which needs a Spark session with Delta "
                "configured (Databricks or --packages io.delta:delta-spark_2.13:<version>); "
                "found none: use a folder path instead"
            )
        self.name = location.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1]

    # ---------------------------------------------------------------- state

    def exists(self) -> bool:
        """True if the table has been created."""
        if not self.by_path:
            return bool(self.spark.catalog.tableExists(self.location))
        return is_delta_path(self.location)

    def _delta_table(self, version: int | None = None):
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.location, version=version)
        except Exception as exc:  # delta-rs: a corrupt or unreadable _delta_log
            raise HistoryError(f"cannot read the Delta log of {self.location!r}: {exc}") from None

    def check_writable(self) -> None:
        """Raise HistoryError, before anything is written, when the table cannot take this
        version's rows: its folder holds something that is not a Delta table, its Delta
        log cannot be read, or its columns differ from this version's (a column missing,
        or one added by a newer spark-assign). Embedded backend on a path only (Spark's
        Delta checks its own writes)."""
        local = local_path(self.location) if self.by_path else None
        if self.backend != EMBEDDED or local is None or not os.path.exists(local):
            return
        if not os.path.isdir(local):
            raise HistoryError(f"history table {self.location!r} is a file, not a Delta table folder")
        if not os.path.isdir(os.path.join(local, "_delta_log")):
            found = sorted(n for n in os.listdir(local) if n != STAGING_DIR)
            if found:
                raise HistoryError(f"history table {self.location!r} is not a Delta table: the folder holds "
                                   f"{found[:5]} and no _delta_log; expected an empty or missing folder")
            return
        try:
            columns = [f.name for f in self._delta_table().schema().fields]
        except HistoryError:
            raise
        except Exception as exc:
            raise HistoryError(f"cannot read the Delta schema of {self.location!r}: {exc}") from None
        expected = self.schema.fieldNames()
        missing = [c for c in expected if c not in columns]
        extra = [c for c in columns if c not in expected]
        if missing or extra:
            raise HistoryError(
                f"history table {self.location!r} has columns {columns}, expected {expected}"
                + (f": missing {missing} (not a spark-assign history, or damaged)" if missing else "")
                + (f": extra {extra} (written by a newer spark-assign? upgrade to record into it)" if extra else ""))

    def committed(self, app_id: str) -> bool:
        """True if a commit with transaction marker ``app_id`` is in the table."""
        if not self.exists():
            return False
        if self.backend == EMBEDDED:
            return self._delta_table().transaction_version(app_id) is not None
        # Spark Delta: the txn marker is applied by the writer itself (txnAppId);
        # look for it in the commit log through the userMetadata we also write.
        hist = self.history().where(F.col("userMetadata").contains(json.dumps(app_id)))
        return bool(hist.take(1))

    # ---------------------------------------------------------------- reads

    def read(self, version: int | None = None) -> DataFrame:
        """The table's rows (at ``version`` if given), or no rows with the table's
        schema when the table does not exist yet."""
        if not self.exists():
            return self.spark.createDataFrame([], self.schema)
        if self.backend == SPARK_DELTA:
            if not self.by_path:
                clause = f" VERSION AS OF {int(version)}" if version is not None else ""
                df = self.spark.sql(f"SELECT * FROM {self.location}{clause}")
            else:
                reader = self.spark.read.format("delta")
                if version is not None:
                    reader = reader.option("versionAsOf", version)
                df = reader.load(self.location)
        else:
            files = self._delta_table(version).file_uris()
            if not files:
                return self.spark.createDataFrame([], self.schema)
            df = self.spark.read.schema(self.schema).parquet(*files)
        # tables written by older versions may lack newer columns: add them as nulls
        cols = [F.col(f.name) if f.name in df.columns else F.lit(None).cast(f.dataType).alias(f.name)
                for f in self.schema.fields]
        return df.select(*cols)

    def history(self) -> DataFrame:
        """Delta's commit log of the table, newest first: ``version, timestamp,
        operation, operation_parameters, user_metadata, engine`` (plus every column of
        ``DESCRIBE HISTORY`` on the spark-delta backend)."""
        if not self.exists():
            raise HistoryError(f"table {self.location!r} does not exist yet: nothing recorded")
        if self.backend == SPARK_DELTA:
            target = f"delta.`{self.location}`" if self.by_path else self.location
            return self.spark.sql(f"DESCRIBE HISTORY {target}")
        rows = []
        for h in self._delta_table().history():
            known = {"version", "timestamp", "operation", "operationParameters", "engineInfo",
                     "clientVersion", "operationMetrics", "isBlindAppend", "readVersion"}
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

    # ---------------------------------------------------------------- writes

    def append(self, df: DataFrame, *, app_id: str, metadata: dict[str, Any] | None = None) -> bool:
        """Append ``df`` as one Delta commit marked with transaction ``app_id``.

        Returns False (and writes nothing) if a commit with that app id is already
        in the table, True otherwise.
        """
        df = conform(df, self.schema)
        if self.committed(app_id):
            return False
        meta = dict(metadata or {})
        meta["spark_assign_app_id"] = app_id
        if self.backend == SPARK_DELTA:
            writer = (
                df.write.format("delta").mode("append")
                .option("txnAppId", app_id).option("txnVersion", 1)
                .option("userMetadata", json.dumps(meta, sort_keys=True))
            )
            if self.by_path:
                writer.save(self.location)
            else:
                writer.saveAsTable(self.location)
            return True
        staged = self.write_files(df)
        self.commit(staged, app_id=app_id, metadata=meta)
        return True

    def stage(self, df: DataFrame) -> Staged:
        """Prepare ``df``'s rows for a later :meth:`Staged.commit`.

        Embedded backend: the Parquet files are written now, into the table folder,
        invisible until the commit, and ``Staged.rows`` reads them back (a file scan:
        the writer derives the ``generations`` summary from them without computing
        ``df`` again). spark-delta backend: nothing is written before the commit, and
        ``rows`` is ``df`` itself.

        >>> staged = store.stage(rows); staged.commit(app_id="spark-assign:x")  # doctest: +SKIP
        """
        rows = conform(df, self.schema)
        if self.backend != EMBEDDED:
            return Staged(self, rows, None)
        files = self.write_files(rows)
        root = self.location.rstrip("/")
        read = (self.spark.read.schema(self.schema).parquet(*[f"{root}/{f}" for f in files]) if files
                else self.spark.createDataFrame([], self.schema))
        return Staged(self, read, files)

    def write_files(self, df: DataFrame) -> list[str]:
        """Embedded backend, step 1: write ``df`` as Parquet files inside the table
        folder (not yet part of the table); return their paths relative to the table root."""
        df = conform(df, self.schema)
        staging = f"{self.location.rstrip('/')}/{STAGING_DIR}/{uuid.uuid4().hex}"
        key = "spark.sql.parquet.outputTimestampType"
        previous = self.spark.conf.get(key, None)
        self.spark.conf.set(key, "TIMESTAMP_MICROS")  # Delta timestamps are microseconds, not INT96
        try:
            df.write.mode("error").parquet(staging)  # "errorifexists" is not accepted by Spark Connect
        finally:
            if previous is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, previous)
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
        """Embedded backend, step 2: commit ``files`` (relative paths from
        :meth:`write_files`) as one Delta transaction with marker ``app_id``."""
        from deltalake import DeltaTable
        from deltalake.transaction import (
            CommitProperties,
            Transaction,
            create_table_with_add_actions,
        )

        _maybe_pause(self.name)
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
        """Rewrite the table's small files into larger ones (Delta OPTIMIZE)."""
        if not self.exists():
            return
        if self.backend == SPARK_DELTA:
            target = f"delta.`{self.location}`" if self.by_path else self.location
            self.spark.sql(f"OPTIMIZE {target}")
        else:
            self._delta_table().optimize.compact()


class Staged:
    """Rows staged by :meth:`DeltaStore.stage`: ``rows`` (a DataFrame) and ``commit``."""

    def __init__(self, store: DeltaStore, rows: DataFrame, files: list[str] | None):
        self.store, self.rows, self.files = store, rows, files

    def commit(self, *, app_id: str, metadata: dict[str, Any] | None = None) -> bool:
        """Commit the staged rows as one Delta transaction marked ``app_id``; False
        (nothing committed) when a commit with that marker is already in the table."""
        if self.files is None:
            return self.store.append(self.rows, app_id=app_id, metadata=metadata)
        if self.store.committed(app_id):
            return False
        meta = dict(metadata or {})
        meta["spark_assign_app_id"] = app_id
        self.store.commit(self.files, app_id=app_id, metadata=meta)
        return True


def _maybe_pause(table_name: str) -> None:
    """The kill-test hook (see the module docstring)."""
    if os.environ.get(PAUSE_ENV) != table_name:
        return
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker:
        with open(marker, "w") as fh:
            fh.write(table_name)
    time.sleep(float(os.environ.get("SPARK_ASSIGN_PAUSE_SECONDS", "600")))


# --------------------------------------------------------------------------- reading inputs

#: the file formats :func:`read_input` understands
INPUT_FORMATS = ("delta", "parquet", "json", "csv", "table")
#: columns that hold arrays in the input contract (CSV cells use ';' between items)
CSV_ARRAY_COLUMNS = ("topics", "assignors", "racks")


def detect_format(source: str) -> str:
    """The format of an input ``source`` from its name: ``delta`` (a folder with a
    ``_delta_log``), ``parquet``, ``json`` (``.jsonl``/``.ndjson``/``.json``),
    ``csv``, or ``table`` (a catalog name such as ``main.ops.members``).

    >>> detect_format("data/sample/members.jsonl")
    'json'
    """
    lowered = source.lower().rstrip("/")
    if lowered.endswith((".jsonl", ".ndjson", ".json", ".jsonl.gz", ".json.gz")):
        return "json"
    if lowered.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    if lowered.endswith(".parquet"):
        return "parquet"
    if not is_path(source):
        return "table"
    if is_delta_path(source):
        return "delta"
    local = local_path(source)
    if local is not None and os.path.isdir(local):
        names = os.listdir(local)
        if any(n.endswith(".parquet") for n in names):
            return "parquet"
        if any(n.endswith((".json", ".jsonl")) for n in names):
            return "json"
        if any(n.endswith(".csv") for n in names):
            return "csv"
    if local is not None and not os.path.exists(local):
        raise InvalidInputError(f"input {source!r} does not exist")
    raise InvalidInputError(
        f"cannot tell the format of input {source!r}: expected a Delta folder, a .parquet, "
        ".jsonl/.json, .csv path or a catalog table name; pass the format explicitly"
    )


def _csv_arrays(df: DataFrame) -> DataFrame:
    """CSV cells to the contract's arrays: ``topics``/``assignors``/``racks`` as
    ``a;b;c`` and ``owned`` as ``topic:partition;topic:partition``."""
    for name in CSV_ARRAY_COLUMNS:
        if name in df.columns and isinstance(df.schema[name].dataType, T.StringType):
            df = df.withColumn(name, F.filter(F.transform(F.split(F.coalesce(name, F.lit("")), ";"), lambda s: F.trim(s)),
                                              lambda s: s != ""))
    if "owned" in df.columns and isinstance(df.schema["owned"].dataType, T.StringType):
        items = F.filter(F.transform(F.split(F.coalesce("owned", F.lit("")), ";"), lambda s: F.trim(s)), lambda s: s != "")
        df = df.withColumn("owned", F.transform(items, lambda s: F.struct(
            F.regexp_extract(s, r"^(.*):(-?\d+)$", 1).alias("topic"),
            F.regexp_extract(s, r"^(.*):(-?\d+)$", 2).cast("int").alias("partition"))))
    return df


def read_input(spark: SparkSession, source: str, fmt: str | None = None) -> DataFrame:
    """Read an input table (members, partitions, lags) from a Delta folder, Parquet,
    JSON Lines, CSV or a catalog table name, detected from ``source`` unless ``fmt``
    is given.

    JSON Lines carry arrays natively. CSV files need a header; array cells use
    ``;`` between items (``topics``: ``t0;t1``, ``racks``: ``r1;r2``) and ``owned``
    is ``topic:partition;topic:partition``.

    >>> members = read_input(spark, "data/sample/members.jsonl")  # doctest: +SKIP
    """
    fmt = fmt or detect_format(source)
    local = local_path(source) if fmt != "table" else None
    if local is not None and not os.path.exists(local):
        raise InvalidInputError(f"input {source!r} does not exist")
    if fmt not in INPUT_FORMATS:
        raise InvalidInputError(f"unknown input format {fmt!r} of input {source!r}: expected one of {INPUT_FORMATS}")
    if fmt == "table":
        return spark.table(source)
    if fmt == "delta":
        if spark_delta_configured(spark):
            return spark.read.format("delta").load(source)
        from deltalake import DeltaTable

        files = DeltaTable(source).file_uris()
        if not files:
            raise InvalidInputError(f"input Delta table {source!r} has no rows")
        return spark.read.parquet(*files)
    if fmt == "parquet":
        return spark.read.parquet(source)
    if fmt == "json":
        return spark.read.json(source)
    return _csv_arrays(spark.read.option("header", True).option("inferSchema", True).csv(source))
