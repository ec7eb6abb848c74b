"""What a call materializes and how its plans are laid out, by its execution policy
(:mod:`spark_assign.execution`): the one module whose functions read whether the call in
progress is small. Algorithm code calls them and states what it computes; whether a frame
becomes a checkpoint or a local relation, and whether a join is hinted, is decided here.

>>> materialize(spark.range(3)).count()
3
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .policy import current_policy, in_small_call, materialization

#: Spark's largest limit: bounds the size estimate, never the data
_MAX_ROWS = 2**31 - 1


def materialize(df: DataFrame, *, eager: bool = True, accumulates: bool = False) -> DataFrame:
    """``df`` computed once and cut from its lineage, by the session's
    :func:`materialization` policy.

    ``eager=False`` cuts the lineage now (the plan is analyzed and planned once, and
    under adaptive execution its shuffle stages run now) but leaves the last stage
    to the first action that reads the result, which stores it for later reads:
    one Spark job fewer. Use it where an action follows that reads all of ``df``,
    and only for deterministic results (two concurrent reads of a partition not yet
    stored may each compute it).

    ``eager`` applies to local materialization only. Inside a small call
    (:func:`~spark_assign.execution.policy.decide_small_call`) ``df`` becomes a :func:`local_relation` instead, always
    eagerly (one collect); ``accumulates=True`` (a frame the call adds one of per step,
    such as a replay's per-step outputs) keeps the session's policy even there, so
    that the driver never holds a call's whole output.

    >>> materialize(spark.range(5).where("id % 2 = 0")).count()
    3
    """
    if in_small_call() and not accumulates:
        return local_relation(df)
    if materialization(df.sparkSession) == "reliable":
        return df.checkpoint(eager=True)
    return df.localCheckpoint(eager=eager)


def materialize_state(df: DataFrame, *, eager: bool = True, accumulates: bool = False) -> DataFrame:
    """:func:`materialize` for state carried across loop steps: also resets Spark's
    size estimate, so that joins of state with state do not compound it.
    ``eager`` and ``accumulates`` as in :func:`materialize`.

    >>> materialize_state(spark.range(2).unionByName(spark.range(3))).count()
    5
    """
    if in_small_call() and not accumulates:  # a local relation's estimate is its size already
        return local_relation(df)
    return materialize(df.limit(_MAX_ROWS), eager=eager, accumulates=accumulates)


def local_relation(df: DataFrame) -> DataFrame:
    """``df``'s rows collected (Arrow) into a local relation of the same schema, in one
    partition: a plan Spark sizes exactly, and whose aggregations and windows need no
    shuffle (one partition holds every key). For small frames only (:func:`~spark_assign.execution.policy.decide_small_call`).
    The collected rows stay readable with :func:`stored_rows` while the result lives.

    >>> local_relation(spark.range(3)).collect()
    [Row(id=0), Row(id=1), Row(id=2)]
    """
    return relation_of(df, df.toArrow())


def relation_of(df: DataFrame, rows: Any) -> DataFrame:
    """A local relation (:func:`local_relation`) of ``rows``, a ``pyarrow.Table`` of
    ``df``'s rows already collected (:func:`rows_within`): no action of its own."""
    out = df.sparkSession.createDataFrame(rows, schema=df.schema).coalesce(1)
    policy = current_policy()
    if policy is not None:
        policy.keep_rows(out, rows)
    return out


def stored_union(a: DataFrame, b: DataFrame) -> DataFrame:
    """``a.unionByName(b)`` materialized (:func:`materialize`). When a small call stored both
    (:func:`stored_rows`), their rows are put together on the driver instead: a local
    relation of the union, with no Spark action.

    >>> stored_union(spark.range(2), spark.range(1)).count()
    3
    """
    union = a.unionByName(b)
    ra, rb = stored_rows(a), stored_rows(b)
    if ra is not None and rb is not None and sorted(ra.column_names) == sorted(rb.column_names):
        rb = rb.select(ra.column_names)
        if rb.schema.types == ra.schema.types:
            import pyarrow as pa

            return relation_of(union, pa.concat_tables([ra, rb.cast(ra.schema)]))
    return materialize(union)


def rows_within(df: DataFrame, max_rows: int) -> Any:
    """``df``'s rows as a ``pyarrow.Table`` when it has at most ``max_rows`` of them, else
    None: one action, which collects at most ``max_rows + 1`` rows (a call that is not
    small pays that limited read once, before it decides).

    The rows are read through one partition, by one task that stops once it has enough:
    a limit over several partitions takes each one's first rows and then shuffles them
    into one (a second stage), as for a frame made from Python rows (two partitions).

    >>> rows_within(spark.range(3), 5).num_rows, rows_within(spark.range(3), 2)
    (3, None)
    """
    if max_rows < 0:
        return None
    rows = df.coalesce(1).limit(max_rows + 1).toArrow()
    return rows if rows.num_rows <= max_rows else None


def stored_rows(df: DataFrame) -> Any:
    """``df``'s rows as a ``pyarrow.Table`` when ``df`` is a local relation a small call stored
    (:func:`materialize`), read on the driver with no Spark action; None for any other frame.
    For the flags a step reads off a small frame it has just stored (one action, not two).

    >>> from spark_assign.execution import call_scope, decide_small_call
    >>> with call_scope(spark):
    ...     small = decide_small_call(spark, lambda: 3)
    ...     stored_rows(materialize(spark.range(3))).num_rows
    3
    >>> stored_rows(spark.range(3)) is None
    True
    """
    policy = current_policy()
    return None if policy is None else policy.rows_of(df)


def stored_select(df: DataFrame, *cols: str) -> DataFrame:
    """``df.select(*cols)`` (column names only), whose rows stay readable with
    :func:`stored_rows` when ``df``'s are: for a projection of a frame a small call
    stored, read on the driver for a flag (:func:`has_rows`) without a Spark action.

    >>> stored_select(spark.sql("SELECT 'g' AS group_id, 'm' AS member_id, 1 AS n"), "group_id", "member_id").columns
    ['group_id', 'member_id']
    """
    out = df.select(*cols)
    rows, policy = stored_rows(df), current_policy()
    if rows is not None and policy is not None:
        policy.keep_rows(out, rows.select(list(cols)))
    return out


def has_rows(df: DataFrame, *, not_null: str | None = None, true: str | None = None,
             greater: tuple[str, str] | None = None) -> bool:
    """Whether ``df`` has a row (one whose column ``not_null`` is not null, whose boolean
    column ``true`` is true, or whose column ``greater[0]`` is greater than its column
    ``greater[1]``, if given): read off a small call's stored rows (:func:`stored_rows`)
    with no Spark action, else one ``isEmpty`` action.

    >>> has_rows(spark.range(0)), has_rows(spark.sql("SELECT NULL AS key"), not_null="key")
    (False, False)
    >>> has_rows(spark.sql("SELECT false AS moved"), true="moved")
    False
    >>> has_rows(spark.sql("SELECT 3 AS load, 2 AS target"), greater=("load", "target"))
    True
    """
    rows = stored_rows(df)
    if rows is not None:
        if true:
            return True in rows.column(true).to_pylist()
        if greater:
            import pyarrow.compute as pc

            return bool(pc.any(pc.greater(rows.column(greater[0]), rows.column(greater[1]))).as_py())
        return rows.num_rows > (rows.column(not_null).null_count if not_null else 0)
    if true:
        df = df.where(df[true])
    elif greater:
        df = df.where(df[greater[0]] > df[greater[1]])
    elif not_null:
        df = df.where(df[not_null].isNotNull())
    return not df.isEmpty()


#: rows per task a large hash aggregation aims at (hash tables that stay in cache)
ROWS_PER_TASK = 65_536


def shuffle_partitions(df: DataFrame, rows: int) -> int:
    """How many partitions a shuffle of ``rows`` rows gets: the session's
    ``spark.sql.shuffle.partitions``, or more so that a task aggregates at most
    :data:`ROWS_PER_TASK` rows (Spark's adaptive coalescing would otherwise merge
    them into a few large tasks, whose hash tables outgrow the CPU caches).

    >>> shuffle_partitions(spark.range(1), 2_000_000) >= 31  # 2,000,000 rows / 65,536 per task
    True
    """
    try:
        base = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)
    except (TypeError, ValueError):  # "auto" on some platforms
        base = 200
    return max(base, -(-int(rows) // ROWS_PER_TASK))


def partitioned_by(df: DataFrame, *cols: str, rows: Callable[[], int] | None = None) -> DataFrame:
    """``df`` repartitioned by ``cols`` (so that the windows and aggregations keyed by them
    that follow shuffle nothing more), into :func:`shuffle_partitions` of ``rows()`` rows
    when ``rows`` is given (an action, taken only here). Inside a small call ``df`` in one
    partition (``coalesce(1)``: no shuffle), which holds every key: a union of local
    relations is one partition each.

    >>> partitioned_by(spark.sql("SELECT 'g' AS group_id"), "group_id").count()
    1
    """
    if in_small_call():
        return df.coalesce(1)
    if rows is None:
        return df.repartition(*cols)
    return df.repartition(shuffle_partitions(df, rows()), *cols)


def count_rows(df: DataFrame, *, greater: tuple[str, str]) -> int:
    """How many rows of ``df`` have column ``greater[0]`` greater than column ``greater[1]``:
    in a small call that stored ``df`` (:func:`stored_rows`), whether any does (0 or 1, read on
    the driver with no Spark action); else one count.

    >>> count_rows(spark.sql("SELECT 3 AS load, 2 AS target"), greater=("load", "target"))
    1
    """
    if stored_rows(df) is not None:
        return int(has_rows(df, greater=greater))
    return df.where(df[greater[0]] > df[greater[1]]).count()


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
    """``df`` in a small call put into one partition (``coalesce(1)``: no shuffle), unchanged
    otherwise. For the result of a join or union that another join reads: Spark joins two sides
    without shuffling them only when each side is planned as exactly one partition, and a
    sort-merge join of two one-partition sides is planned as "either side's partitioning" (a union
    as unknown), so without it every join after the first shuffles both its sides.

    >>> one_partition(spark.range(4)).count()
    4
    """
    return df.coalesce(1) if in_small_call() else df


def per_group(df: DataFrame) -> DataFrame:
    """``df``, a frame of at most one row per group (a step's groups, their flags), hinted for
    broadcast: the other side of a join with it is not shuffled for it (10,000 groups of a few
    columns are well under a megabyte). Not hinted in a small call: both sides are one partition
    there, so the join shuffles nothing, where a broadcast is a Spark job of its own.

    >>> spark.range(4).join(per_group(spark.range(2)), "id", "left_semi").count()
    2
    """
    return df if in_small_call() else F.broadcast(df)


def broadcast_within(df: DataFrame, rows: int, max_rows: int) -> DataFrame:
    """``df`` hinted for broadcast when its ``rows`` (counted already) are at most ``max_rows``,
    as :func:`per_group` hints: never in a small call.

    >>> broadcast_within(spark.range(3), 3, 100).count()
    3
    """
    return df if in_small_call() or rows > max_rows else F.broadcast(df)


def join_small(df: DataFrame, small: DataFrame, on: str | list[str], how: str = "inner") -> DataFrame:
    """``df.join(small, on, how)``, ``small`` being a few rows per group, member or topic,
    hinted as :func:`per_group` hints it, and the result put into one partition in a small call
    (:func:`one_partition`) for the joins that read it.

    >>> members = spark.createDataFrame([("g", "a"), ("g", "b")], "group_id string, member_id string")
    >>> ranks = spark.createDataFrame([("g", "b", 1)], "group_id string, member_id string, m_rank int")
    >>> [tuple(r) for r in join_small(members, ranks, ["group_id", "member_id"]).collect()]
    [('g', 'b', 1)]
    """
    return one_partition(df.join(per_group(small), on, how))


def merge_side(df: DataFrame) -> DataFrame:
    """``df`` as a side of a join in a plan a strategy returns: in a small call, hinted for a
    sort-merge join; unchanged otherwise. A small call's plans join one-partition relations, so the
    join shuffles nothing; but the caller runs the returned plan under the session's own settings,
    where Spark's automatic broadcast would make the join's small side a job of its own. The hint
    holds under any settings. For range and roundrobin, whose plans join once; the other
    strategies' small calls store their results instead (:func:`small_call_result`).

    >>> spark.range(4).join(merge_side(spark.range(2)), "id").count()
    2
    """
    return df.hint("merge") if in_small_call() else df


def small_call_result(df: DataFrame) -> DataFrame:
    """``df``, a result an entry point returns, stored (:func:`local_relation`) when the entry
    point running is the one whose decision applied the small-call settings: its caller reads it
    after the session's settings are back, and its plan was built for the small call's (read
    under the session's, Spark broadcasts its joins of one-partition relations, a job each, and
    generates code for it). Unchanged otherwise: a call inside another returns its plan to a
    caller that reads it under the same settings.

    >>> small_call_result(spark.range(2)).count()  # outside an entry point: unchanged
    2
    """
    policy = current_policy()
    if policy is not None and policy.saved is not None and policy.settings_depth == policy.depth:
        return local_relation(df)
    return df
