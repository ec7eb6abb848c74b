"""Small DataFrame helpers the modules share: the key column names, SQL quoting, an empty
frame, the row of a global aggregate, binding a value once inside a column expression, and
owned lists. None reads the execution policy: the helpers that lay a plan out for it (unions,
join hints) are in :mod:`spark_assign.execution`."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

#: the column every input and output is keyed by first
GROUP = "group_id"
#: a partition's key columns
TP = ["topic", "partition"]


def sql_name(name: str) -> str:
    """A column name as a SQL identifier, for ``selectExpr`` and ``expr`` texts.

    >>> sql_name("odd`name")
    '`odd``name`'
    """
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A string as a SQL literal, for ``selectExpr`` and ``where`` texts.

    >>> sql_string("it's")
    "'it\\\\'s'"
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def empty(spark: SparkSession, schema: str | StructType) -> DataFrame:
    """A frame of no rows with ``schema`` (a DDL string or a StructType), planned as an empty local
    relation: nothing runs to read it (an empty ``createDataFrame`` on classic Spark is a
    Python RDD, which a job reads by starting a Python worker).

    >>> empty(spark, "group_id string, generation int").count()
    0
    """
    return spark.createDataFrame([], schema).limit(0)  # Spark's optimizer: an empty local relation


def one_row(df: DataFrame) -> Row:
    """The row of ``df``, a global aggregate (exactly one row), in one action. ``first()``
    plans a limit over the aggregate, a stage more for flags taken once or more per round.
    Raises ValueError for a frame of any other number of rows.

    >>> one_row(spark.range(3).agg(F.count("*").alias("rows"))).rows
    3
    >>> one_row(spark.range(2))
    Traceback (most recent call last):
    ...
    ValueError: one_row() expects a global aggregate (one row), found 2 rows
    """
    rows = df.collect()
    if len(rows) != 1:
        raise ValueError(f"one_row() expects a global aggregate (one row), found {len(rows)} rows")
    return rows[0]


def let(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body(x)`` with ``x`` bound to ``value`` once: Spark does not share repeated
    subexpressions inside lambdas, so an expensive value is evaluated once this way.

    >>> spark.range(1).select(let(F.lit(3) * 2, lambda x: x + x).alias("v")).first().v
    12
    """
    return F.get(F.transform(F.array(value), body), 0)


def owned_lists(assignment: DataFrame, name: str = "owned") -> DataFrame:
    """Each member's assigned partitions as an owned list: ``group_id, member_id,
    <name>`` (``array<struct<topic, partition>>``, sorted), the input contract's ``owned``.

    >>> assignment = spark.createDataFrame([("g", "a", "t", 1), ("g", "a", "t", 0)],
    ...                                    "group_id string, member_id string, topic string, partition int")
    >>> [(r.member_id, [tuple(tp) for tp in r.owned]) for r in owned_lists(assignment).collect()]
    [('a', [('t', 0), ('t', 1)])]
    """
    return assignment.groupBy(GROUP, "member_id").agg(F.expr(
        f"array_sort(collect_list(named_struct('topic', topic, 'partition', CAST(partition AS INT)))) AS {sql_name(name)}"))
