"""Plan lineage: where a multi-step transformation materializes what it reuses.

Spark plans are trees, so a DataFrame used twice is planned (and analyzed,
optimized) twice; a chain of steps that each reuse the previous result grows
exponentially. The strategies and the rebalance loop materialize such shared
intermediates with :func:`materialize`, an eager ``localCheckpoint`` (executor
storage, no checkpoint directory, and supported over Spark Connect).

A checkpoint keeps its origin's size estimate, and Spark estimates an inner or
outer join as the *product* of its sides: state carried from step to step
(rebalance rounds, simulation steps) that is joined with itself squares that
estimate at every step, until the planner spends minutes multiplying numbers of
millions of digits. :func:`materialize_state` resets the estimate (a limit of
``2**31 - 1`` rows bounds it) at the cost of one single-partition pass: use it
for loop state, which is small, and :func:`materialize` elsewhere.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

#: Spark's largest limit: bounds the size estimate, never the data
_MAX_ROWS = 2**31 - 1


def materialize(df: DataFrame, *, eager: bool = True) -> DataFrame:
    """``df`` computed once and cut from its lineage.

    ``eager=False`` cuts the lineage now (the plan is analyzed and planned once, and
    under adaptive execution its shuffle stages run now) but leaves the last stage
    to the first action that reads the result, which stores it for later reads:
    one Spark job fewer. Use it where an action follows that reads all of ``df``,
    and only for deterministic results (two concurrent reads of a partition not yet
    stored may each compute it).

    >>> members = materialize(members.where("group_id = 'g1'"))  # doctest: +SKIP
    """
    return df.localCheckpoint(eager=eager)


def materialize_state(df: DataFrame, *, eager: bool = True) -> DataFrame:
    """:func:`materialize` for state carried across loop steps: also resets Spark's
    size estimate, so that joins of state with state do not compound it.
    ``eager=False`` as in :func:`materialize`.

    >>> owned = materialize_state(owned.unionByName(new_owned))  # doctest: +SKIP
    """
    return df.limit(_MAX_ROWS).localCheckpoint(eager=eager)


#: rows per task a large hash aggregation aims at (hash tables that stay in cache)
ROWS_PER_TASK = 65_536


def shuffle_partitions(df: DataFrame, rows: int) -> int:
    """How many partitions a shuffle of ``rows`` rows gets: the session's
    ``spark.sql.shuffle.partitions``, or more so that a task aggregates at most
    :data:`ROWS_PER_TASK` rows (Spark's adaptive coalescing would otherwise merge
    them into a few large tasks, whose hash tables outgrow the CPU caches).

    >>> parts.repartition(shuffle_partitions(parts, 2_000_000), "topic")  # doctest: +SKIP
    """
    try:
        base = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    except (TypeError, ValueError):  # "auto" on some platforms
        base = 200
    return max(base, -(-int(rows) // ROWS_PER_TASK))
