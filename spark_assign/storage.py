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
calls :class:`DeltaStore` and does not care which backend runs: it is the
part both backends share, and ``DeltaStore(...)`` builds the chosen backend's
subclass (:mod:`spark_assign.delta_backends`). The input readers
(:func:`read_input`, :func:`detect_format`) live in :mod:`spark_assign.input_files`
and are importable from here too.

Concurrent writers: the ``spark-delta`` backend needs no lock (its
:meth:`~spark_assign.delta_backends.SparkDeltaStore.append_new` is a conditional commit); the
embedded backend's writers take turns under the history's lock file (:mod:`spark_assign.locking`),
so it is for a local or network file system that every writer sees.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from .errors import HistoryError
from .frames import empty, sql_name
from .input_files import (  # noqa: F401  (re-exported: callers read their inputs through this module)
    CSV_ARRAY_COLUMNS,
    INPUT_FORMATS,
    detect_format,
    read_input,
)
from .locations import (  # noqa: F401  (re-exported: part of the storage switch)
    is_delta_path,
    is_path,
    local_path,
    pinned,
    spark_delta_configured,
)

SPARK_DELTA = "spark-delta"
EMBEDDED = "embedded"
BACKENDS = (SPARK_DELTA, EMBEDDED)

STAGING_DIR = "_staging"


# --------------------------------------------------------------------------- backend choice


def choose_backend(spark: SparkSession, backend: str | None = None) -> str:
    """The backend to use: ``backend`` if given, else ``spark-delta`` when Spark has
    Delta configured, else ``embedded``."""
    if backend is not None:
        if backend not in BACKENDS:
            raise HistoryError(f"unknown storage backend {backend!r}: expected one of {BACKENDS}")
        return backend
    return SPARK_DELTA if spark_delta_configured(spark) else EMBEDDED


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
    # SQL text: a column built in Python costs the driver several JVM round trips, and a
    # recorded rebalance writes and reads several tables
    return df.selectExpr(*[f"CAST({sql_name(f.name)} AS {f.dataType.simpleString()}) AS {sql_name(f.name)}"
                           for f in schema.fields])


def marked(metadata: dict[str, Any] | None, app_id: str) -> dict[str, Any]:
    """A commit's metadata: ``metadata`` plus ``spark_assign_app_id``."""
    meta = dict(metadata or {})
    meta["spark_assign_app_id"] = app_id
    return meta


# --------------------------------------------------------------------------- one table


class DeltaStore:
    """One Delta table, at a path or under a catalog name, on either backend.

    ``DeltaStore(spark, location, schema, backend=None)`` returns the subclass of
    the backend :func:`choose_backend` picks (:class:`~spark_assign.delta_backends.SparkDeltaStore`
    or :class:`~spark_assign.delta_backends.EmbeddedStore`); this class holds what both share.

    >>> store = DeltaStore(spark, "/tmp/history/assignments", schema)  # doctest: +SKIP
    >>> store.append(df, app_id="spark-assign:assignments:abc")        # doctest: +SKIP
    >>> store.read().count()                                            # doctest: +SKIP
    """

    #: the backend of the subclass (:data:`SPARK_DELTA` or :data:`EMBEDDED`)
    backend: str

    def __new__(cls, spark: SparkSession, location: str, schema: T.StructType, *,
                backend: str | None = None) -> DeltaStore:
        impl: type[DeltaStore] = cls
        if cls is DeltaStore:
            from .delta_backends import EmbeddedStore, SparkDeltaStore

            impl = SparkDeltaStore if choose_backend(spark, backend) == SPARK_DELTA else EmbeddedStore
        elif backend is not None and choose_backend(spark, backend) != cls.backend:
            raise HistoryError(f"{cls.__name__} is the {cls.backend!r} storage backend, not {backend!r}")
        return super().__new__(impl)

    def __init__(self, spark: SparkSession, location: str, schema: T.StructType, *, backend: str | None = None):
        self.spark = spark
        # the embedded backend writes with Spark (relative paths from its JVM's working
        # directory) and commits from Python (from this process's): a relative folder is
        # the one it names now for both (a later ``os.chdir`` moves neither). Spark's own
        # Delta resolves every path in Spark, which may be a remote Connect server
        self.location = pinned(location) if self.backend == EMBEDDED else location
        self.schema = schema
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
        raise NotImplementedError

    def check_writable(self) -> None:
        """Raise HistoryError, before anything is written, when the table cannot take this
        version's rows (a damaged table, or columns of another version): see
        :func:`spark_assign.delta_backends._check_writable`."""

    def committed(self, app_id: str) -> bool:
        """True if a commit with transaction marker ``app_id`` is in the table."""
        raise NotImplementedError

    # ---------------------------------------------------------------- reads

    def read(self, version: int | None = None) -> DataFrame:
        """The table's rows (at ``version`` if given), or no rows with the table's
        schema when the table does not exist yet."""
        raise NotImplementedError

    def _empty(self) -> DataFrame:
        """No rows, with the table's schema."""
        return empty(self.spark, self.schema)

    def _all_columns(self, df: DataFrame) -> DataFrame:
        """``df`` with the table's columns, in order: tables written by older versions
        may lack newer columns, added as nulls."""
        present = set(df.columns)
        return df.selectExpr(*[sql_name(f.name) if f.name in present
                               else f"CAST(NULL AS {f.dataType.simpleString()}) AS {sql_name(f.name)}"
                               for f in self.schema.fields])

    def history(self) -> DataFrame:
        """Delta's commit log of the table, newest first: ``version, timestamp,
        operation, operation_parameters, user_metadata, engine`` (plus every column of
        ``DESCRIBE HISTORY`` on the spark-delta backend)."""
        raise NotImplementedError

    def _require_table(self) -> None:
        if not self.exists():
            raise HistoryError(f"table {self.location!r} does not exist yet: nothing recorded")

    # ---------------------------------------------------------------- writes

    def append(self, df: DataFrame, *, app_id: str, metadata: dict[str, Any] | None = None) -> bool:
        """Append ``df`` as one Delta commit marked with transaction ``app_id``.

        Returns False (and writes nothing) if a commit with that app id is already
        in the table, True otherwise.
        """
        raise NotImplementedError

    def append_new(self, df: DataFrame, keys: tuple[str, ...], *, app_id: str,
                   metadata: dict[str, Any] | None = None) -> bool:
        """:meth:`append`, unless a row with the same ``keys`` was committed meanwhile: then
        :class:`~spark_assign.errors.ConcurrentWriteError`. The embedded backend's writers take
        turns under the history's lock (:mod:`spark_assign.locking`), so a plain append is
        already conditional there; the spark-delta backend commits conditionally
        (:meth:`~spark_assign.delta_backends.SparkDeltaStore.append_new`)."""
        return self.append(df, app_id=app_id, metadata=metadata)

    def stage(self, df: DataFrame) -> Staged:
        """Prepare ``df``'s rows for a later :meth:`Staged.commit`.

        Embedded backend: the Parquet files are written now, into the table folder,
        invisible until the commit, and ``Staged.rows`` reads them back (a file scan:
        the writer derives the ``generations`` summary from them without computing
        ``df`` again). spark-delta backend: nothing is written before the commit, and
        ``rows`` is ``df`` itself.

        >>> staged = store.stage(rows); staged.commit(app_id="spark-assign:x")  # doctest: +SKIP
        """
        return Staged(self, conform(df, self.schema))

    def compact(self) -> None:
        """Rewrite the table's small files into larger ones (Delta OPTIMIZE)."""
        raise NotImplementedError


class Staged:
    """Rows staged by :meth:`DeltaStore.stage`: ``rows`` (a DataFrame) and ``commit``.

    ``files``: the Parquet files already written for them (embedded backend:
    :class:`~spark_assign.delta_backends.StagedFiles`), None when the commit writes
    the rows (spark-delta backend).
    """

    files: list[str] | None = None

    def __init__(self, store: DeltaStore, rows: DataFrame):
        self.store, self.rows = store, rows

    def commit(self, *, app_id: str, metadata: dict[str, Any] | None = None,
               unique: tuple[str, ...] | None = None) -> bool:
        """Commit the staged rows as one Delta transaction marked ``app_id``; False
        (nothing committed) when a commit with that marker is already in the table.
        ``unique``: columns none of whose values may be committed meanwhile
        (:meth:`DeltaStore.append_new`)."""
        if unique:
            return self.store.append_new(self.rows, unique, app_id=app_id, metadata=metadata)
        return self.store.append(self.rows, app_id=app_id, metadata=metadata)
