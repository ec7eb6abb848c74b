"""Consumer lag: the input of the ``lag-aware`` strategy, and lag measures of any assignment.

A lags DataFrame comes in one of two shapes (KAFKA-5337):

* ``group_id, topic, partition, lag``: the lag of each partition for each group;
* offsets: ``group_id, topic, partition, log_start_offset, log_end_offset,
  committed_offset`` (nullable) and optionally ``auto_offset_reset`` (the
  group's ``auto.offset.reset``; else the ``auto_offset_reset=`` argument,
  default ``latest``). The lag is ``max(log_end - committed, 0)``; with no
  committed offset, ``latest`` (any case) gives 0 and anything else
  ``log_end - log_start`` (the records a reset to the earliest offset would read).

:func:`partition_lags` turns either shape into ``group_id, topic, partition, lag``
(the schema the generation history stores). Partitions with no lag row count as
lag 0. Negative lags or offsets, a log start above the log end, null keys and a
partition listed twice for a group raise :class:`~spark_assign.errors.InvalidLagsError`
naming the rows.

Measures: :func:`lag_report` (per member) and :func:`lag_balance` (per group);
:func:`~spark_assign.compare.compare_strategies` runs several strategies on the same input.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import InvalidLagsError, MissingColumnError, raise_if_rows
from .frames import empty
from .inputs import conform_columns

#: the normalized lag schema (also what history.record(..., lags=) stores)
LAG_COLUMNS = ("group_id", "topic", "partition", "lag")
OFFSET_COLUMNS = ("group_id", "topic", "partition", "log_start_offset", "log_end_offset", "committed_offset")
_KEY_TYPES: dict[str, T.DataType] = {"group_id": T.StringType(), "topic": T.StringType(), "partition": T.IntegerType()}
_LAG_TYPES: dict[str, T.DataType] = {**_KEY_TYPES, "lag": T.LongType()}
_OFFSET_TYPES: dict[str, T.DataType] = {**_KEY_TYPES, **{c: T.LongType() for c in OFFSET_COLUMNS[3:]}, "auto_offset_reset": T.StringType()}


def _offsets_lag(reset) -> F.Column:
    end, start, committed = F.col("log_end_offset"), F.col("log_start_offset"), F.col("committed_offset")
    no_commit = F.when(F.lower(F.trim(reset)) == "latest", F.lit(0)).otherwise(end - start)
    return F.when(committed.isNull(), no_commit).otherwise(F.greatest(end - committed, F.lit(0))).cast("long")


def partition_lags(lags: DataFrame, auto_offset_reset: str = "latest", *, validate: bool = True) -> DataFrame:
    """The lag of each partition for each group: ``group_id, topic, partition, lag``.

    ``lags`` holds either a ``lag`` column or the offsets columns (see the module
    doc); ``auto_offset_reset`` applies where no ``auto_offset_reset`` column
    (or a null one) gives the group's setting.

    >>> offsets = spark.createDataFrame(
    ...     [("g", "t", 0, 1111, 9999, None)],
    ...     "group_id string, topic string, partition int, log_start_offset long, "
    ...     "log_end_offset long, committed_offset long")
    >>> partition_lags(offsets, "earliest").first().lag
    8888
    """
    cols = set(lags.columns)
    if "lag" in cols:
        missing = [c for c in LAG_COLUMNS if c not in cols]
        if missing:
            raise MissingColumnError(
                f"lags is missing column(s) {missing}: expected {list(LAG_COLUMNS)} "
                f"or {list(OFFSET_COLUMNS)}, found {sorted(cols)}")
        # typed as the contract says: a column that cannot be (strings that are not numbers) named
        raw = conform_columns(lags, _LAG_TYPES, LAG_COLUMNS, "lags", MissingColumnError)
        if validate:
            bad = raw.where(
                F.col("group_id").isNull() | F.col("topic").isNull() | F.col("partition").isNull()
                | (F.col("partition") < 0) | F.col("lag").isNull() | (F.col("lag") < 0)
            ).select(F.lit("null key, negative partition, or null/negative lag").alias("problem"), *LAG_COLUMNS)
            _check(bad, raw)
        return raw
    missing = [c for c in OFFSET_COLUMNS if c not in cols]
    if missing:
        raise MissingColumnError(
            f"lags is missing column(s) {missing}: expected {list(LAG_COLUMNS)} "
            f"or {list(OFFSET_COLUMNS)} (+ optional auto_offset_reset), found {sorted(cols)}")
    off = conform_columns(lags, _OFFSET_TYPES, OFFSET_COLUMNS, "lags", MissingColumnError).withColumn(
        "auto_offset_reset", F.coalesce("auto_offset_reset", F.lit(auto_offset_reset)))
    if validate:
        s, e, c = F.col("log_start_offset"), F.col("log_end_offset"), F.col("committed_offset")
        problem = (
            F.when(F.col("group_id").isNull() | F.col("topic").isNull() | F.col("partition").isNull()
                   | (F.col("partition") < 0), F.lit("null key or negative partition"))
            .when(s.isNull() | e.isNull(), F.lit("null log_start_offset or log_end_offset"))
            .when((s < 0) | (e < 0) | (c < 0), F.lit("negative offset"))
            .when(s > e, F.lit("log_start_offset above log_end_offset"))
        )
        bad = off.withColumn("problem", problem).where(F.col("problem").isNotNull()).select(
            "problem", *OFFSET_COLUMNS, "auto_offset_reset")
        _check(bad, off)
    return off.select("group_id", "topic", "partition", _offsets_lag(F.col("auto_offset_reset")).alias("lag"))


def _check(bad: DataFrame, rows: DataFrame) -> None:
    dupes = (
        rows.groupBy("group_id", "topic", "partition").count().where("count > 1")
        .select(F.lit("partition listed more than once for the group").alias("problem"),
                "group_id", "topic", "partition", F.col("count").cast("string").alias("count"))
    )
    # the two problem kinds have different columns: report each on its own, bad rows first
    raise_if_rows(bad, InvalidLagsError, "invalid lags (expected lag >= 0, offsets >= 0, log start <= log end)")
    raise_if_rows(dupes, InvalidLagsError, "invalid lags (expected one row per group, topic and partition)")


def _lags(lags: DataFrame | None, spark_df: DataFrame) -> DataFrame:
    if lags is None:
        return empty(spark_df.sparkSession, "group_id string, topic string, partition int, lag long")
    if "lag" in lags.columns and set(LAG_COLUMNS) <= set(lags.columns):
        return lags.select(*LAG_COLUMNS)
    return partition_lags(lags)


def with_lags(assignment: DataFrame, lags: DataFrame | None) -> DataFrame:
    """``assignment`` with a ``lag`` column (0 where ``lags`` has no row)."""
    lag = _lags(lags, assignment)
    return assignment.join(lag, ["group_id", "topic", "partition"], "left").withColumn(
        "lag", F.coalesce("lag", F.lit(0)).cast("long"))


def lag_report(assignment: DataFrame, lags: DataFrame | None, members: DataFrame | None = None) -> DataFrame:
    """Per member: ``group_id, member_id, partitions, total_lag``.

    ``lags`` in either shape (see :func:`partition_lags`). With ``members``,
    members assigned nothing are listed with 0 partitions and 0 lag.

    >>> a = spark.createDataFrame([("g", "c0", "t", 0), ("g", "c0", "t", 1), ("g", "c1", "t", 2)],
    ...                           "group_id string, member_id string, topic string, partition int")
    >>> lags = spark.createDataFrame([("g", "t", 0, 10), ("g", "t", 1, 5), ("g", "t", 2, 40)],
    ...                              "group_id string, topic string, partition int, lag long")
    >>> sorted(tuple(r) for r in lag_report(a, lags).collect())
    [('g', 'c0', 2, 15), ('g', 'c1', 1, 40)]
    """
    rep = with_lags(assignment, lags).groupBy("group_id", "member_id").agg(
        F.count("*").cast("long").alias("partitions"), F.sum("lag").cast("long").alias("total_lag"))
    if members is not None:
        rep = members.select("group_id", "member_id").join(rep, ["group_id", "member_id"], "left").select(
            "group_id", "member_id",
            F.coalesce("partitions", F.lit(0)).cast("long").alias("partitions"),
            F.coalesce("total_lag", F.lit(0)).cast("long").alias("total_lag"))
    return rep


def lag_balance(assignment: DataFrame, lags: DataFrame | None, members: DataFrame | None = None) -> DataFrame:
    """Per group: ``group_id, members, max_lag, mean_lag, max_mean_ratio``.

    ``max_mean_ratio`` is max member lag / mean member lag (1.0 is perfect
    balance; 1.0 too when every lag is 0). The mean is over the members in the
    assignment, or over all of ``members`` when given.

    >>> a = spark.createDataFrame([("g", "c0", "t", 0), ("g", "c1", "t", 1)],
    ...                           "group_id string, member_id string, topic string, partition int")
    >>> lags = spark.createDataFrame([("g", "t", 0, 30), ("g", "t", 1, 10)],
    ...                              "group_id string, topic string, partition int, lag long")
    >>> row = lag_balance(a, lags).first()
    >>> (row.members, row.max_lag, row.mean_lag, row.max_mean_ratio)
    (2, 30, 20.0, 1.5)
    """
    return balance_of(lag_report(assignment, lags, members), ["group_id"])


def balance_of(report: DataFrame, keys: list[str]) -> DataFrame:
    """Per ``keys`` of a :func:`lag_report` (with those columns): ``members, max_lag, mean_lag,
    max_mean_ratio``."""
    return report.groupBy(*keys).agg(
        F.count("*").cast("long").alias("members"),
        F.max("total_lag").cast("long").alias("max_lag"),
        F.avg("total_lag").alias("mean_lag"),
    ).withColumn(
        "max_mean_ratio",
        F.when(F.col("mean_lag") > 0, F.col("max_lag") / F.col("mean_lag")).otherwise(F.lit(1.0)),
    )
