"""Small DataFrame helpers the modules share: the key column names, the union of
frames, the row of a global aggregate, and binding a value once inside a column
expression."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .lineage import in_small_call

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


def union_all(dfs: Sequence[DataFrame], *, allow_missing: bool = False) -> DataFrame:
    """The rows of ``dfs`` (at least one frame, matched by column name) in one DataFrame;
    ``allow_missing``: a column missing from some frames is null in their rows. In a small
    call, one partition (:func:`one_partition`), so that a join or aggregation over it
    shuffles nothing.

    >>> union_all([spark.createDataFrame([("g", 1)], "group_id string, generation int"),
    ...            spark.createDataFrame([(2, "g")], "generation int, group_id string")]).count()
    2
    """
    out = dfs[0]
    for df in dfs[1:]:
        out = out.unionByName(df, allowMissingColumns=allow_missing)
    return one_partition(out) if len(dfs) > 1 else out


def one_partition(df: DataFrame) -> DataFrame:
    """``df`` in a small call (:func:`~spark_assign.lineage.in_small_call`) put into one
    partition (``coalesce(1)``: no shuffle), unchanged otherwise. For the result of a join or
    union that another join reads: Spark joins two sides without shuffling them only when
    each side is planned as exactly one partition, and a sort-merge join of two one-partition
    sides is planned as "either side's partitioning" (a union as unknown), so without it every
    join after the first shuffles both its sides, a stage of its own each.

    >>> chains = one_partition(starts.join(holders, ["group_id", "topic"])).join(members, "group_id")  # doctest: +SKIP
    """
    return df.coalesce(1) if in_small_call() else df


def empty(spark: SparkSession, schema: str | StructType) -> DataFrame:
    """A frame of no rows with ``schema`` (a DDL string or a StructType), planned as an empty local
    relation: nothing runs to read it (an empty ``createDataFrame`` on classic Spark is a
    Python RDD, which a job reads by starting a Python worker).

    >>> empty(spark, "group_id string, generation int").count()
    0
    """
    return spark.createDataFrame([], schema).limit(0)  # Spark's optimizer: an empty local relation


def per_group(df: DataFrame) -> DataFrame:
    """``df``, a frame of at most one row per group (a step's groups, their flags),
    hinted for broadcast: the other side of a join with it is not shuffled for it (each
    such join saves a shuffle stage, a fixed cost per step whatever the data; 10,000
    groups of a few columns are well under a megabyte). Not hinted in a small call
    (:func:`~spark_assign.lineage.in_small_call`): both sides are one partition there, so
    the join shuffles nothing, where a broadcast is a Spark job of its own.

    >>> owned.join(per_group(step_groups), GROUP, "left_semi")  # doctest: +SKIP
    """
    return df if in_small_call() else F.broadcast(df)


def join_small(df: DataFrame, small: DataFrame, on: str | list[str], how: str = "inner") -> DataFrame:
    """``df.join(small, on, how)``, ``small`` being a few rows per group, member or topic,
    hinted as :func:`per_group` hints it: broadcast outside a small call
    (:func:`~spark_assign.lineage.in_small_call`), so ``df`` is not shuffled for it; not in a
    small call, where a broadcast is a Spark job of its own and both sides are one partition.
    The result is put into one partition there (:func:`one_partition`) for the joins that read it.

    >>> members = spark.createDataFrame([("g", "a"), ("g", "b")], "group_id string, member_id string")
    >>> ranks = spark.createDataFrame([("g", "b", 1)], "group_id string, member_id string, m_rank int")
    >>> [tuple(r) for r in join_small(members, ranks, ["group_id", "member_id"]).collect()]
    [('g', 'b', 1)]
    """
    return one_partition(df.join(per_group(small), on, how))


def merge_side(df: DataFrame) -> DataFrame:
    """``df`` as a side of a join in a plan a strategy returns: in a small call
    (:func:`~spark_assign.lineage.in_small_call`), hinted for a sort-merge join; unchanged
    otherwise. A small call's plans join one-partition relations, so the join shuffles
    nothing; but the caller runs the returned plan after the call has given the session's
    settings back, when Spark's automatic broadcast would make the join's small side a job
    of its own (one job more per call). The hint holds under any settings.
    For range and roundrobin, whose plans join once; the other strategies' small calls store
    their results instead (:func:`~spark_assign.lineage.small_call_result`).

    >>> members.join(merge_side(metadata), "topic")  # doctest: +SKIP
    """
    return df.hint("merge") if in_small_call() else df


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
