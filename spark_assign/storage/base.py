"""What both storage backends share: the backends' names and choice, the table schema in
Arrow, the rows conformed to it, a table's handle (:class:`DeltaStore`) and its checks, and
staged rows (:class:`Staged`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..errors import HistoryError
from ..frames import empty, sql_name
from ..locations import is_path, local_path, pinned, spark_delta_configured

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

    :func:`spark_assign.storage.open_table` builds the backend's subclass
    (:class:`~spark_assign.storage.spark_delta.SparkDeltaStore` or
    :class:`~spark_assign.storage.embedded.EmbeddedStore`); this class holds what both share.

    >>> store = open_table(spark, "/tmp/history/assignments", schema)  # doctest: +SKIP
    >>> store.append(df, app_id="spark-assign:assignments:abc")        # doctest: +SKIP
    >>> store.read().count()                                            # doctest: +SKIP
    """

    #: the backend of the subclass (:data:`SPARK_DELTA` or :data:`EMBEDDED`)
    backend: str

    def __init__(self, spark: SparkSession, location: str, schema: T.StructType):
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
        :func:`check_writable_folder`."""

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
        turns under the history's lock (:mod:`spark_assign.storage.locking`), so a plain append is
        already conditional there; the spark-delta backend commits conditionally
        (:meth:`~spark_assign.storage.spark_delta.SparkDeltaStore.append_new`)."""
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
    :class:`~spark_assign.storage.embedded.StagedFiles`), None when the commit writes
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


#: the name of a Parquet file :meth:`EmbeddedStore.write_files` moved into a table folder
#: (Spark's part file, named after its write's uuid); committed by the write's next step
UNCOMMITTED_PART = re.compile(r"part-\d{5}-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-c\d{3}(\.\w+)?\.parquet")


def check_writable_folder(store: DeltaStore, columns: Callable[[], list[str]]) -> None:
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
    check_columns(store, columns)


def check_columns(store: DeltaStore, columns: Callable[[], list[str]]) -> None:
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
