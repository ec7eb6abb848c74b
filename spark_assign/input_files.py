"""Reading the input tables (members, partitions, lags) from files or the catalog.

:func:`read_input` reads a Delta folder, Parquet, JSON Lines, CSV or a catalog
table, in the format :func:`detect_format` tells from the source's name.

>>> detect_format("data/sample/members.csv")
'csv'
"""

from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import InvalidInputError
from .locations import is_delta_path, is_path, local_path, spark_delta_configured

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
