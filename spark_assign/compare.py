"""Strategies side by side: each strategy's assignment of the same input, measured by lag.

>>> members = spark.createDataFrame([("g", "c0", ["t"]), ("g", "c1", ["t"])],
...                                 "group_id string, member_id string, topics array<string>")
>>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
>>> lags = spark.createDataFrame([("g", "t", 0, 100), ("g", "t", 1, 100), ("g", "t", 2, 0), ("g", "t", 3, 0)],
...                              "group_id string, topic string, partition int, lag long")
>>> report = compare_strategies(members, parts, lags, ["range", "lag-aware"])
>>> sorted((r.strategy, r.max_mean_ratio) for r in compare_balance(report).collect())
[('lag-aware', 1.0), ('range', 2.0)]
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .assign import assign
from .lags import balance_of, lag_report, partition_lags


def compare_strategies(
    members: DataFrame,
    partitions: DataFrame,
    lags: DataFrame | None,
    strategies: Iterable[str] = ("range", "roundrobin", "lag-aware"),
    **options,
) -> DataFrame:
    """Each strategy's assignment of the same input, measured per member:
    ``strategy, group_id, member_id, partitions, total_lag`` (members assigned
    nothing included). ``options`` go to every strategy that takes them
    (``lags`` goes to all).

    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> lags = spark.createDataFrame([("g", "t", 0, 100), ("g", "t", 1, 90), ("g", "t", 2, 10), ("g", "t", 3, 5)],
    ...                              "group_id string, topic string, partition int, lag long")
    >>> compare_strategies(members, parts, lags, ["range", "lag-aware"]).orderBy("strategy", "member_id").show()
    +---------+--------+---------+----------+---------+
    | strategy|group_id|member_id|partitions|total_lag|
    +---------+--------+---------+----------+---------+
    |lag-aware|       g|        a|         2|      105|
    |lag-aware|       g|        b|         2|      100|
    |    range|       g|        a|         2|      190|
    |    range|       g|        b|         2|       15|
    +---------+--------+---------+----------+---------+
    <BLANKLINE>
    """
    lag = partition_lags(lags) if lags is not None else None
    out: DataFrame | None = None
    for s in strategies:
        a = assign(members, partitions, s, lags=lag, **(options if s == "lag-aware" else {}))
        rep = lag_report(a, lag, members).select(F.lit(s).alias("strategy"), "*")
        out = rep if out is None else out.unionByName(rep)
    assert out is not None, "no strategies given"
    return out


def compare_balance(report: DataFrame) -> DataFrame:
    """Per strategy and group, from :func:`compare_strategies`: ``strategy, group_id,
    members, max_lag, mean_lag, max_mean_ratio``."""
    return balance_of(report, ["strategy", "group_id"])
