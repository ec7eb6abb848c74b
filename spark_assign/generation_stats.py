"""The ``generations`` summary of newly recorded generations, from their rows.

One row per generation: members, partitions and their spread, partitions moved
since the previous generation (recorded before, or earlier in the same call),
revocations and lags (:data:`~spark_assign.history_tables.GENERATIONS_SCHEMA`).
:func:`~spark_assign.recording.write_generations` commits it last, as the commit
marker of the call.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .frames import per_group
from .history_tables import KEY, TP
from .lineage import in_small_call, materialize, stored_rows


def generation_stats(history, a_rows, r_rows, new, *, revoked_known, lost_known, lags_known) -> DataFrame:
    """Per new generation, the ``generations`` columns (see
    :data:`spark_assign.history.GENERATIONS_SCHEMA`) but the record id and time.

    ``a_rows`` / ``r_rows``: the call's ``assignments`` / ``revocations`` rows;
    ``new``: its new generations (:data:`~spark_assign.recording.GENERATION_META`);
    ``*_known``: whether the revoked, lost and lag counts are known (else null).

    >>> generation_stats(history, a_rows, r_rows, new, revoked_known=True,
    ...                  lost_known=False, lags_known=False).show()  # doctest: +SKIP
    """
    g = ["group_id", "generation"]
    per_member = a_rows.groupBy(*g, "member_id").agg(F.count("*").alias("n"), F.sum("lag").alias("member_lag"))
    loads = per_member.groupBy(*g).agg(
        F.count("*").alias("_holding"), F.sum("n").alias("_partitions"),
        F.min("n").alias("_min"), F.max("n").alias("_max"),
        F.max(F.coalesce("member_lag", F.lit(0))).alias("_max_lag"), F.sum("member_lag").alias("_total_lag"))

    # the previous generation of each new one: recorded before (its rows are found by its
    # record id, with no commit-marker join), or earlier in this call
    known = history._raw("generations").select(*g, "record_id").join(
        new.select("group_id").distinct(), "group_id", "left_semi")
    small = in_small_call()
    if small:  # the history's files are several partitions: read once, the plans below shuffle nothing
        known = materialize(known)
    w = Window.partitionBy("group_id").orderBy("generation")
    prev = (
        known.unionByName(new.select(*g, F.lit(None).cast("string").alias("record_id")))
        .select(*g, F.lag("generation").over(w).alias("previous_generation"),
                F.lag("record_id").over(w).alias("_prev_rid"))
        .join(new.select(*g), g, "left_semi")
    )
    # the moves are counted from the rows only where the caller did not give them: a small
    # call whose new generations (on the driver) all have theirs reads no earlier rows
    given = stored_rows(new)
    moved = None if given is not None and not given.column("partitions_moved").null_count else _moves(
        history, a_rows, prev, new.where(F.col("partitions_moved").isNull()).select(*g), small)
    rev = r_rows.groupBy(*g).agg(
        F.count(F.when(F.col("kind") == "revoked", 1)).alias("_revoked"),
        F.count(F.when(F.col("kind") == "lost", 1)).alias("_lost"))

    out = new.join(loads, g, "left").join(prev.select(*g, "previous_generation"), g, "left")
    out = (out.join(moved, g, "left") if moved is not None else out.withColumn("_moved", F.lit(None).cast("long")))
    out = out.join(rev, g, "left")
    zero = F.lit(0).cast("long")
    holding = F.coalesce("_holding", zero)
    members = F.coalesce(F.col("members").cast("long"), holding)
    total_lag = F.col("_total_lag") if lags_known else F.lit(None)
    # a member holding nothing has 0 partitions
    least = F.when(members > holding, zero).otherwise(F.coalesce("_min", zero))
    most = F.coalesce("_max", zero)
    mean_lag = total_lag / F.greatest(members, F.lit(1))
    return out.select(
        *g, F.col("previous_generation").cast("int").alias("previous_generation"),
        "strategy", "protocol", F.col("round").cast("int").alias("round"),
        members.alias("members"),
        F.coalesce("_partitions", zero).cast("long").alias("partitions"),
        F.col("unassigned").cast("long").alias("unassigned"),
        F.when(F.col("previous_generation").isNotNull(), F.coalesce(F.col("partitions_moved").cast("long"), "_moved",
                                                                    zero)).alias("partitions_moved"),
        least.cast("long").alias("min_partitions"),
        most.cast("long").alias("max_partitions"),
        (most - least).cast("long").alias("max_min"),
        (F.coalesce("_revoked", zero) if revoked_known else F.lit(None)).cast("long").alias("revoked"),
        (F.coalesce("_lost", zero) if lost_known else F.lit(None)).cast("long").alias("lost"),
        # lag columns: null unless some assigned partition of the group has a lag
        total_lag.cast("long").alias("total_lag"),
        F.when(total_lag.isNotNull(), F.col("_max_lag")).cast("long").alias("max_member_lag"),
        mean_lag.cast("double").alias("mean_member_lag"),
        F.when(mean_lag > 0, F.col("_max_lag") / mean_lag).cast("double").alias("max_mean_lag_ratio"),
        F.col("ignored_owned_claims").cast("long").alias("ignored_owned_claims"),
        F.col("recorded_at").cast("timestamp").alias("recorded_at"),
    )


def _moves(history, a_rows: DataFrame, prev: DataFrame, counted: DataFrame, small: bool) -> DataFrame:
    """``group_id, generation, _moved``: per ``counted`` generation (``group_id, generation``)
    that has a previous one in ``prev``, its partitions held by another member there; that
    generation's rows are read from the history (by its record id) or from ``a_rows``."""
    g = ["group_id", "generation"]
    earlier = prev.where(F.col("previous_generation").isNotNull()).join(per_group(counted), g, "left_semi")
    recorded = history._raw("assignments").join(F.broadcast(
        earlier.where(F.col("_prev_rid").isNotNull()).select(
            "group_id", F.col("previous_generation").alias("generation"), F.col("_prev_rid").alias("record_id"))),
        KEY, "left_semi")
    prev_rows = (
        (materialize(recorded) if small else recorded)  # the history's files: several partitions
        .unionByName(a_rows.join(per_group(earlier.where(F.col("_prev_rid").isNull()).select(
            "group_id", F.col("previous_generation").alias("generation"))), g, "left_semi"))
        .select("group_id", F.col("generation").alias("previous_generation"), *TP,
                F.col("member_id").alias("_prev_member"))
    )
    return (
        a_rows.join(per_group(earlier.select(*g, "previous_generation")), g)
        .join(prev_rows, ["group_id", "previous_generation", *TP])
        .where(F.col("member_id") != F.col("_prev_member"))
        .groupBy(*g).agg(F.count("*").alias("_moved"))
    )
