"""The ``generations`` summary of newly recorded generations, from their rows.

One row per generation: members, partitions and their spread, partitions moved
since the previous generation (recorded before, or earlier in the same call),
revocations and lags (:data:`~spark_assign.history.tables.GENERATIONS_SCHEMA`).
:func:`~spark_assign.history.commit.write_generations` commits it last, as the commit
marker of the call.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..execution import in_small_call, materialize, per_group, stored_rows
from .tables import KEY, TP


def generation_stats(history, a_rows, r_rows, new, *, revoked_known, lost_known, lags_known) -> DataFrame:
    """Per new generation, the ``generations`` columns (see
    :data:`spark_assign.history.GENERATIONS_SCHEMA`) but the record id and time.

    ``a_rows`` / ``r_rows``: the call's ``assignments`` / ``revocations`` rows;
    ``new``: its new generations (:data:`~spark_assign.history.commit.GENERATION_META`);
    ``*_known``: whether the revoked, lost and lag counts are known (else null).

    >>> generation_stats(history, a_rows, r_rows, new, revoked_known=True,
    ...                  lost_known=False, lags_known=False).show()  # doctest: +SKIP
    """
    g = ["group_id", "generation"]
    # SQL text throughout: a column built in Python costs the driver several JVM round trips
    per_member = a_rows.groupBy(*g, "member_id").agg(*map(F.expr, ("count(*) AS n", "sum(lag) AS member_lag")))
    loads = per_member.groupBy(*g).agg(*map(F.expr, (
        "count(*) AS _holding", "sum(n) AS _partitions", "min(n) AS _min", "max(n) AS _max",
        "max(coalesce(member_lag, 0)) AS _max_lag", "sum(member_lag) AS _total_lag")))

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
    rev = r_rows.groupBy(*g).agg(*map(F.expr, ("count(CASE WHEN kind = 'revoked' THEN 1 END) AS _revoked",
                                                "count(CASE WHEN kind = 'lost' THEN 1 END) AS _lost")))

    out = new.join(loads, g, "left").join(prev.select(*g, "previous_generation"), g, "left")
    out = out.join(moved, g, "left") if moved is not None else out.selectExpr("*", "CAST(NULL AS BIGINT) AS _moved")
    out = out.join(rev, g, "left")
    zero = "CAST(0 AS BIGINT)"
    holding = f"coalesce(_holding, {zero})"
    members = f"coalesce(CAST(members AS BIGINT), {holding})"
    total_lag = "_total_lag" if lags_known else "CAST(NULL AS BIGINT)"
    # a member holding nothing has 0 partitions
    least = f"CASE WHEN {members} > {holding} THEN {zero} ELSE coalesce(_min, {zero}) END"
    most = f"coalesce(_max, {zero})"
    mean_lag = f"({total_lag} / greatest({members}, 1))"
    return out.selectExpr(
        *g, "CAST(previous_generation AS INT) AS previous_generation",
        "strategy", "protocol", "CAST(`round` AS INT) AS `round`",
        f"{members} AS members",
        f"CAST(coalesce(_partitions, {zero}) AS BIGINT) AS partitions",
        "CAST(unassigned AS BIGINT) AS unassigned",
        "CASE WHEN previous_generation IS NOT NULL "
        f"THEN coalesce(CAST(partitions_moved AS BIGINT), _moved, {zero}) END AS partitions_moved",
        f"CAST({least} AS BIGINT) AS min_partitions",
        f"CAST({most} AS BIGINT) AS max_partitions",
        f"CAST(({most}) - ({least}) AS BIGINT) AS max_min",
        f"CAST({f'coalesce(_revoked, {zero})' if revoked_known else 'NULL'} AS BIGINT) AS revoked",
        f"CAST({f'coalesce(_lost, {zero})' if lost_known else 'NULL'} AS BIGINT) AS lost",
        # lag columns: null unless some assigned partition of the group has a lag
        f"CAST({total_lag} AS BIGINT) AS total_lag",
        f"CAST(CASE WHEN {total_lag} IS NOT NULL THEN _max_lag END AS BIGINT) AS max_member_lag",
        f"CAST({mean_lag} AS DOUBLE) AS mean_member_lag",
        f"CAST(CASE WHEN {mean_lag} > 0 THEN _max_lag / {mean_lag} END AS DOUBLE) AS max_mean_lag_ratio",
        "CAST(ignored_owned_claims AS BIGINT) AS ignored_owned_claims",
        "CAST(recorded_at AS TIMESTAMP) AS recorded_at",
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
