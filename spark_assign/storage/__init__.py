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

Everything above this package (:mod:`spark_assign.history`, the pipelines) opens its tables
with :func:`open_table` and calls :class:`~.base.DeltaStore`, whichever backend runs:
:mod:`.base` is what both share, :mod:`.spark_delta` and :mod:`.embedded` one backend each.

Concurrent writers: the ``spark-delta`` backend needs no lock (its
:meth:`~.spark_delta.SparkDeltaStore.append_new` is a conditional commit); the embedded
backend's writers take turns under the history's lock file (:mod:`.locking`), so it is for a
local or network file system that every writer sees.

>>> store = open_table(spark, "/tmp/history/assignments", schema, backend="embedded")  # doctest: +SKIP
>>> type(store).__name__                                                                # doctest: +SKIP
'EmbeddedStore'
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from .base import BACKENDS, EMBEDDED, SPARK_DELTA, DeltaStore, Staged, arrow_schema, choose_backend
from .embedded import EmbeddedStore
from .spark_delta import SparkDeltaStore

__all__ = ["BACKENDS", "EMBEDDED", "SPARK_DELTA", "DeltaStore", "Staged", "arrow_schema", "choose_backend",
           "open_table"]


def open_table(spark: SparkSession, location: str, schema: T.StructType, *, backend: str | None = None) -> DeltaStore:
    """The Delta table at ``location`` (a path or a catalog name) with ``schema``, on ``backend``
    (``"spark-delta"`` or ``"embedded"``; by default :func:`~.base.choose_backend`'s choice)."""
    impl = SparkDeltaStore if choose_backend(spark, backend) == SPARK_DELTA else EmbeddedStore
    return impl(spark, location, schema)
