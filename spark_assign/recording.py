"""Writing generations into the history: one Delta commit per table per call.

:meth:`~spark_assign.history.AssignmentHistory.record` (one generation per group)
and :meth:`~spark_assign.history.AssignmentHistory.record_generations` (any number
of generations per group: a rebalance's rounds, a whole simulation) both end in
:func:`write_generations`, which costs a fixed handful of Spark actions whatever
the number of groups and generations:

1. one aggregation over the call's ``(group_id, generation)`` pairs, joined with
   the pairs already recorded: the number of groups, the pairs that are missing,
   repeated or already recorded, and the record id of the new ones (one row to
   the driver, never the pairs);
2. the ``assignments``, ``revocations`` (and, when given, ``members``) rows, staged
   (Parquet files written, not yet visible) and committed, then the ``generations`` summary computed
   from the staged rows and committed last: the commit marker (see
   :mod:`spark_assign.history`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .errors import HistoryError, describe_rows
from .history_tables import MEMBER_ROW
from .locking import history_lock

PAIR = ["group_id", "generation"]
KEY = ["group_id", "generation", "record_id"]
TP = ["topic", "partition"]

#: the per-generation columns a writer call gives (one row per recorded generation);
#: ``members``, ``unassigned`` and ``ignored_owned_claims`` may be null (``members``:
#: then the members holding a partition)
GENERATION_META = ("group_id", "generation", "strategy", "protocol", "round", "recorded_at",
                   "members", "unassigned", "ignored_owned_claims")

#: record ids sum per-pair SHA-256 prefixes in ``_RID_CHUNKS`` chunks of 15 hex digits
#: (60 bits), each sum taken modulo 2**60: order-independent, so Spark computes it in
#: one aggregation without bringing the pairs to the driver
_RID_CHUNKS = 2
_RID_MOD = 1 << 60


def _pair_text(group_id, generation) -> str:
    return f"{group_id}\t{generation}"


def record_id(pairs: Iterable[tuple[str, int]]) -> str:
    """The id of a call recording ``pairs`` of ``(group_id, generation)``: a hash
    of the set of pairs, the same whatever their order (the Python twin of the
    aggregation in :func:`write_generations`, which computes it in Spark).

    >>> record_id([("g2", 1), ("g1", 3)]) == record_id([("g1", 3), ("g2", 1)])
    True
    """
    pairs = set(pairs)
    sums = [0] * _RID_CHUNKS
    for g, n in pairs:
        digest = hashlib.sha256(_pair_text(g, n).encode("utf-8")).hexdigest()
        for i in range(_RID_CHUNKS):
            sums[i] = (sums[i] + int(digest[15 * i:15 * (i + 1)], 16)) % _RID_MOD
    return _format_record_id(len(pairs), sums)


def _format_record_id(count: int, sums) -> str:
    return f"{count:x}-" + "".join(f"{x:015x}" for x in sums)


def _rid_chunks() -> list:
    """The record id's per-pair chunks (decimal: their sums never overflow)."""
    digest = F.sha2(F.concat(F.col("group_id"), F.lit("\t"), F.col("generation").cast("string")), 256)
    return [F.conv(F.substring(digest, 15 * i + 1, 15), 16, 10).cast("decimal(38,0)") for i in range(_RID_CHUNKS)]


def _checked_pairs(history, pairs: DataFrame, *, one_per_group: bool):
    """``pairs`` (``group_id, generation``: the call's generations) flagged
    ``_present`` when already recorded, and one row of counts: ``groups``,
    ``missing`` / ``repeated`` (groups with a null generation / more than one where
    ``one_per_group``, else a pair given twice), ``present`` and ``new`` pairs and
    the new pairs' record id sums. One Spark action."""
    recorded = history._raw("generations").select(*PAIR).distinct().withColumn("_present", F.lit(True))
    flagged = pairs.join(recorded, PAIR, "left").withColumn("_present", F.coalesce("_present", F.lit(False)))
    new = ~F.col("_present") & F.col("generation").isNotNull()
    per_group = flagged.groupBy("group_id").agg(
        F.count("*").alias("_rows"), F.count("generation").alias("_n"),
        F.countDistinct("generation").alias("_distinct"),
        F.count(F.when(F.col("_present"), 1)).alias("_present"),
        F.count(F.when(new, 1)).alias("_new"),
        *[F.sum(F.when(new, c)).alias(f"_s{i}") for i, c in enumerate(_rid_chunks())],
    )
    repeated = (F.col("_n") > 1) if one_per_group else (F.col("_n") > F.col("_distinct"))
    missing = F.col("_rows") > F.col("_n")
    counts = per_group.agg(
        F.count("*").alias("groups"), F.count(F.when(missing, 1)).alias("missing"),
        F.count(F.when(repeated, 1)).alias("repeated"), F.sum("_present").alias("present"),
        F.sum("_new").alias("new"), *[F.sum(f"_s{i}").alias(f"s{i}") for i in range(_RID_CHUNKS)],
    ).first()
    assert counts is not None  # a global aggregate: one row

    def names(cond):
        return sorted(r.group_id for r in per_group.where(cond).orderBy("group_id").take(10))

    if counts["missing"]:
        raise HistoryError(
            f"no generation given for {counts['missing']} group(s) of the assignment: "
            f"expected a (group_id, generation) row for each, missing {names(missing)}")
    if counts["repeated"]:
        if one_per_group:
            raise HistoryError(f"more than one generation given for group(s) {names(repeated)}: "
                               "expected one per call")
        raise HistoryError(f"a generation given twice for group(s) {names(repeated)}: expected one row each")
    sums = [int(counts[f"s{i}"] or 0) % _RID_MOD for i in range(_RID_CHUNKS)]
    rid = _format_record_id(int(counts["new"] or 0), sums)
    return flagged, counts, rid


def _check_same(history, assignments: DataFrame, present: DataFrame) -> None:
    """Raise HistoryError if already-recorded generations differ from ``assignments``."""
    cols = ["group_id", "generation", "member_id", "topic", "partition"]
    new = assignments.join(present, PAIR, "left_semi").select(*cols)
    old = history.assignments().join(present, PAIR, "left_semi").select(*cols)
    diff = new.exceptAll(old).withColumn("side", F.lit("new")).unionByName(
        old.exceptAll(new).withColumn("side", F.lit("recorded")))
    bad = diff.groupBy(*PAIR).agg(F.count("*").alias("differing_rows")).orderBy(*PAIR).take(11)
    if bad:
        raise HistoryError(
            "generation(s) already recorded with a different assignment (a recorded generation "
            "never changes; record a new generation instead):\n"
            + describe_rows([r.asDict() for r in bad])
        )


def write_generations(
    history,
    assignments: DataFrame,
    generations: DataFrame,
    *,
    revocations: DataFrame | None,
    members: DataFrame | None = None,
    revoked_known: bool,
    lost_known: bool,
    lags_known: bool,
    one_per_group: bool = False,
    label: str | None = None,
) -> DataFrame:
    """Record ``generations`` (:data:`GENERATION_META`, one row per recorded
    generation) with their ``assignments`` (``group_id, generation, member_id,
    topic, partition, lag``) and ``revocations`` (``group_id, generation,
    member_id, topic, partition, kind``) and optionally their ``members``
    (``group_id, generation, member_id, group_instance_id, rack, topics, assignors,
    protocol``) in ``history``'s tables: one commit per table, idempotent per set of
    new pairs. Returns the ``generations`` rows of
    the call's pairs (also the ones recorded before: a no-op for those)."""
    history.check_writable()  # a history that cannot take the rows fails before any write
    with history_lock(history.lock_root()):  # one writer at a time (spark_assign.locking)
        flagged, counts, rid = _checked_pairs(history, generations.select(*PAIR), one_per_group=one_per_group)
        if counts["present"]:
            _check_same(history, assignments, flagged.where("_present").select(*PAIR))
        if counts["new"]:
            # evaluated by the writes below, all before the generations commit that would
            # make these pairs "present"
            new = generations.join(flagged.where(~F.col("_present")).select(*PAIR), PAIR, "left_semi")
            _write(history, assignments, new, revocations, members, rid, int(counts["new"]),
                   revoked_known=revoked_known, lost_known=lost_known, lags_known=lags_known, label=label)
    return history.history().join(generations.select(*PAIR), PAIR, "left_semi")


def _write(history, assignments, new, revocations, members, rid, n_new, *, revoked_known, lost_known, lags_known,
           label):
    stores = history.stores
    meta = {"record_id": rid, "generations": n_new}
    if label:
        meta["strategy"] = label
    common = [F.lit(rid).alias("record_id"), F.col("recorded_at").cast("timestamp").alias("recorded_at")]
    per_gen = new.select(*PAIR, "strategy", "protocol", "round", "recorded_at")

    def staged(table: str, df: DataFrame):
        """The table's rows of this record id: staged now, or already committed by an
        earlier try of the same call (then read back, and nothing is staged)."""
        store = stores[table]
        if store.committed(f"spark-assign:{table}:{rid}"):
            return history._raw(table).where(F.col("record_id") == rid), None
        s = store.stage(df)
        return s.rows, s

    # 1. assignments, revocations and members, committed before the generations (the commit marker)
    a_rows, a_stage = staged("assignments", assignments.join(per_gen, PAIR).select(
        *PAIR, "member_id", *TP, "strategy", "protocol", F.col("round").cast("int").alias("round"),
        F.col("lag").cast("long").alias("lag"), *common))
    if revocations is None:
        revocations = history.spark.createDataFrame(
            [], "group_id string, generation int, member_id string, topic string, partition int, kind string")
    r_rows, r_stage = staged("revocations", revocations.join(per_gen, PAIR).select(
        *PAIR, "member_id", *TP, "kind", *common))
    m_stage = None
    if members is not None:
        _, m_stage = staged("members", members.join(per_gen.select(*PAIR, "recorded_at"), PAIR).select(
            *MEMBER_ROW, *common))
    for table, s in (("assignments", a_stage), ("revocations", r_stage), ("members", m_stage)):
        if s is not None:
            s.commit(app_id=f"spark-assign:{table}:{rid}", metadata=meta)

    # 2. generations: the summary of the staged rows
    stats = _stats(history, a_rows, r_rows, new, revoked_known=revoked_known, lost_known=lost_known,
                   lags_known=lags_known)
    _, g_stage = staged("generations", stats.withColumn("record_id", F.lit(rid)))
    if g_stage is not None:
        g_stage.commit(app_id=f"spark-assign:generations:{rid}", metadata=meta)


def _stats(history, a_rows, r_rows, new, *, revoked_known, lost_known, lags_known) -> DataFrame:
    """Per new generation, the ``generations`` columns (see
    :data:`spark_assign.history.GENERATIONS_SCHEMA`) but the record id and time."""
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
    w = Window.partitionBy("group_id").orderBy("generation")
    prev = (
        known.unionByName(new.select(*g, F.lit(None).cast("string").alias("record_id")))
        .select(*g, F.lag("generation").over(w).alias("previous_generation"),
                F.lag("record_id").over(w).alias("_prev_rid"))
        .join(new.select(*g), g, "left_semi")
    )
    earlier = prev.where(F.col("previous_generation").isNotNull())
    prev_rows = (
        history._raw("assignments").join(
            earlier.where(F.col("_prev_rid").isNotNull()).select(
                "group_id", F.col("previous_generation").alias("generation"), F.col("_prev_rid").alias("record_id")),
            KEY, "left_semi")
        .unionByName(a_rows.join(earlier.where(F.col("_prev_rid").isNull()).select(
            "group_id", F.col("previous_generation").alias("generation")), g, "left_semi"))
        .select("group_id", F.col("generation").alias("previous_generation"), *TP,
                F.col("member_id").alias("_prev_member"))
    )
    moved = (
        a_rows.join(prev.select(*g, "previous_generation"), g)
        .join(prev_rows, ["group_id", "previous_generation", *TP])
        .where(F.col("member_id") != F.col("_prev_member"))
        .groupBy(*g).agg(F.count("*").alias("_moved"))
    )
    rev = r_rows.groupBy(*g).agg(
        F.count(F.when(F.col("kind") == "revoked", 1)).alias("_revoked"),
        F.count(F.when(F.col("kind") == "lost", 1)).alias("_lost"))

    out = (new.join(loads, g, "left").join(prev.select(*g, "previous_generation"), g, "left")
           .join(moved, g, "left").join(rev, g, "left"))
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
        F.when(F.col("previous_generation").isNotNull(), F.coalesce("_moved", zero)).alias("partitions_moved"),
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
