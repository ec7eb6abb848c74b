"""Where a table or an input lives, and whether Spark reads Delta itself.

A location is a file system path or URI (``out/history``, ``s3://bucket/h``) or
a catalog name (``main.kafka_ops``); a path is local or remote, and holds a
Delta table when it has a ``_delta_log``. Shared by :mod:`spark_assign.storage`
(the Delta tables) and :mod:`spark_assign.input_files` (the input readers).

>>> is_path("out/history"), is_path("main.kafka_ops")
(True, False)
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from pyspark.sql import SparkSession


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


def is_path(location: str) -> bool:
    """True if ``location`` is a file system path or URI, False if it is a catalog
    name such as ``main.kafka_ops`` (no slash, no scheme)."""
    return "/" in location or "\\" in location or location.startswith(".") or ":" in location


def pinned(location: str) -> str:
    """``location`` with a relative local path made absolute from this process's working
    directory now: Spark resolves a relative path from its JVM's working directory (where
    the session started), Python from its own, and the two part after an ``os.chdir``.
    Other locations unchanged.

    >>> pinned("/tmp/history"), pinned("s3://bucket/h"), pinned("main.kafka_ops")
    ('/tmp/history', 's3://bucket/h', 'main.kafka_ops')
    """
    if is_path(location) and urlparse(location).scheme == "" and not os.path.isabs(location):
        return os.path.abspath(location)
    return location


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
