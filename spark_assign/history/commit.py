"""Committing generations into the history: one Delta commit per table per call.

:class:`~.writer.HistoryWriter`'s :meth:`~.writer.HistoryWriter.record` (one generation per
group) and :meth:`~.writer.HistoryWriter.record_generations` (any number of generations per
group: a rebalance's rounds, a whole simulation) both end in :func:`write_generations`,
which costs a fixed handful of Spark actions whatever the number of groups and
generations:

1. one aggregation over the call's ``(group_id, generation)`` pairs, joined with
   the pairs already recorded: the number of groups, the pairs that are missing,
   repeated or already recorded, and the record id of the new ones (one row to
   the driver, never the pairs);
2. the ``assignments``, ``revocations`` (and, when given, ``members``) rows, staged
   (Parquet files written, not yet visible) and committed, then the ``generations`` summary computed
   from the staged rows (:mod:`spark_assign.history.stats`) and committed last:
   the commit marker (see :mod:`spark_assign.history`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import ConcurrentWriteError, HistoryError, describe_rows
from ..execution import in_small_call, materialize, per_group
from ..frames import one_row
from ..storage.locking import history_lock
from .stats import generation_stats
from .tables import MEMBER_ROW, PAIR, TP

#: the per-generation columns a writer call gives (one row per recorded generation);
#: ``members``, ``unassigned``, ``ignored_owned_claims`` and ``partitions_moved`` may be
#: null (``members``: then the members holding a partition; ``partitions_moved``: then
#: counted from the rows against the previous generation)
GENERATION_META = ("group_id", "generation", "strategy", "protocol", "round", "recorded_at",
                   "members", "unassigned", "ignored_owned_claims", "partitions_moved")

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
    return f"{count:x}-" + _hex_chunks(sums)


def _hex_chunks(sums) -> str:
    return "".join(f"{x:015x}" for x in sums)


def _rid_chunks(text=None) -> list:
    """The record id's per-row chunks of the SHA-256 of ``text`` (default: the row's pair), in
    decimal: their sums never overflow."""
    if text is None:
        text = F.concat(F.col("group_id"), F.lit("\t"), F.col("generation").cast("string"))
    digest = F.sha2(text, 256)
    return [F.conv(F.substring(digest, 15 * i + 1, 15), 16, 10).cast("decimal(38,0)") for i in range(_RID_CHUNKS)]


def _checked_pairs(history, pairs: DataFrame, *, one_per_group: bool):
    """``pairs`` (``group_id, generation``: the call's generations) flagged
    ``_present`` when already recorded, and one row of counts: ``groups``,
    ``missing`` / ``repeated`` (groups with a null generation / more than one where
    ``one_per_group``, else a pair given twice), ``present`` and ``new`` pairs and
    the new pairs' record id sums. One Spark action (two in a small call, which stores the
    flagged pairs first: every write reads them)."""
    recorded = history._raw("generations").select(*PAIR).distinct().withColumn("_present", F.lit(True))
    flagged = pairs.join(recorded, PAIR, "left").withColumn("_present", F.coalesce("_present", F.lit(False)))
    if in_small_call():  # read by the counts and by every write (the recorded pairs' files: several partitions)
        flagged = materialize(flagged)
    new = ~F.col("_present") & F.col("generation").isNotNull()
    group_counts = flagged.groupBy("group_id").agg(
        F.count("*").alias("_rows"), F.count("generation").alias("_n"),
        F.countDistinct("generation").alias("_distinct"),
        F.count(F.when(F.col("_present"), 1)).alias("_present"),
        F.count(F.when(new, 1)).alias("_new"),
        *[F.sum(F.when(new, c)).alias(f"_s{i}") for i, c in enumerate(_rid_chunks())],
    )
    repeated = (F.col("_n") > 1) if one_per_group else (F.col("_n") > F.col("_distinct"))
    missing = F.col("_rows") > F.col("_n")
    counts = one_row(group_counts.agg(
        F.count("*").alias("groups"), F.count(F.when(missing, 1)).alias("missing"),
        F.count(F.when(repeated, 1)).alias("repeated"), F.sum("_present").alias("present"),
        F.sum("_new").alias("new"), *[F.sum(f"_s{i}").alias(f"s{i}") for i in range(_RID_CHUNKS)],
    ))

    def names(cond):
        return sorted(r.group_id for r in group_counts.where(cond).orderBy("group_id").take(10))

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
    with history_lock(history.lock_root()):  # one writer at a time (spark_assign.storage.locking)
        history.check_writable(locked=True)  # a history that cannot take the rows fails before any write
        # a few rows, read by every step below: cut from its lineage (stored by its first reader
        # under local materialization; a checkpoint job under reliable).
        # Often a union of per-round or per-step pieces, into each of which the optimizer
        # would push every semi join below, once per piece of the other side: a simulation's
        # generations write planned ten times the exchanges without it
        generations = materialize(generations, eager=False)
        flagged, counts, rid = _checked_pairs(history, generations.select(*PAIR), one_per_group=one_per_group)
        if counts["present"]:
            _check_same(history, assignments, flagged.where("_present").select(*PAIR))
        if counts["new"]:
            # evaluated by the writes below, all before the generations commit that would
            # make these pairs "present"
            new = generations.join(flagged.where(~F.col("_present")).select(*PAIR), PAIR, "left_semi")
            if in_small_call():  # read by every write and the summary, and its flags off the driver
                new = materialize(new)
            write = functools.partial(_write, history, assignments, new, revocations, members, n_new=int(counts["new"]),
                                      revoked_known=revoked_known, lost_known=lost_known, lags_known=lags_known,
                                      label=label)
            try:
                write(rid)
            except _RecordIdTaken:
                # a writer of the same generations with other rows committed some of its tables
                # under this record id and not (yet) its generations: this call's rows go under a
                # record id of their own content, so only the first generations commit shows
                try:
                    write(_content_record_id(rid, assignments, revocations, new))
                except _RecordIdTaken as taken:  # a third writer, of these very rows, meanwhile
                    raise ConcurrentWriteError(f"{taken}: generations being recorded by another writer; nothing "
                                               "of this call is visible: retry it") from None
    return history.history().join(generations.select(*PAIR), PAIR, "left_semi")


def _write(history, assignments, new, revocations, members, rid, *, n_new, revoked_known, lost_known, lags_known,
           label):
    stores = history.stores
    meta = {"record_id": rid, "generations": n_new}
    if label:
        meta["strategy"] = label
    common = [F.lit(rid).alias("record_id"), F.col("recorded_at").cast("timestamp").alias("recorded_at")]
    # one row per new generation, small next to the rows: broadcast, so the rows are not shuffled
    # (in a small call both sides are one partition: no hint, :func:`~spark_assign.execution.per_group`)
    per_gen = per_group(new.select(*PAIR, "strategy", "protocol", "round", "recorded_at"))

    def staged(table: str, df: DataFrame):
        """The table's rows of this record id: staged now, or already committed by an
        earlier try of the same call (then read back, and nothing is staged)."""
        store = stores[table]
        if store.committed(f"spark-assign:{table}:{rid}"):
            committed = history._raw(table).where(F.col("record_id") == rid)
            _check_same_rows(table, df, committed, rid)
            return committed, None
        # in a small call the rows are stored on the driver first: written from there, and read
        # from there by the generations' summary (a re-read of the files is several partitions)
        s = store.stage(materialize(df) if in_small_call() else df)
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
        if s is not None and not s.commit(app_id=f"spark-assign:{table}:{rid}", metadata=meta):
            # another writer committed this record id first (the same generations): its rows stay
            _check_same_rows(table, s.rows, history._raw(table).where(F.col("record_id") == rid), rid)

    # 2. generations: the summary of the staged rows, committed only if none of its pairs was
    #    recorded meanwhile (the storage backend's conditional commit)
    stats = generation_stats(history, a_rows, r_rows, new, revoked_known=revoked_known, lost_known=lost_known,
                             lags_known=lags_known)
    _, g_stage = staged("generations", stats.withColumn("record_id", F.lit(rid)))
    if g_stage is not None:
        g_stage.commit(app_id=f"spark-assign:generations:{rid}", metadata=meta, unique=PAIR)


#: the columns that say what a table's row records: two writes of one record id must agree on them
_CONTENT = {
    "assignments": (*PAIR, "member_id", *TP),
    "revocations": (*PAIR, "member_id", *TP, "kind"),
    "members": (*PAIR, "member_id"),
}


class _RecordIdTaken(Exception):
    """A table holds rows of this call's record id that differ from the call's own."""


def _check_same_rows(table: str, rows: DataFrame, committed: DataFrame, rid: str) -> None:
    """Raise :class:`_RecordIdTaken` if ``rows`` differ from the ``committed`` rows of the same
    record id (written by another writer of the same generations; an earlier try of this call
    wrote the same rows)."""
    cols = list(_CONTENT.get(table, ()))
    if not cols:
        return
    ours, theirs = rows.select(*cols), committed.select(*cols)
    if ours.exceptAll(theirs).take(1) or theirs.exceptAll(ours).take(1):
        raise _RecordIdTaken(f"{table}: record id {rid} holds other rows")


def _content_record_id(rid: str, assignments: DataFrame, revocations: DataFrame | None, new: DataFrame) -> str:
    """``rid`` extended with a hash of the call's assignment and revocation rows of the ``new``
    pairs: the same for a retry of this call, another for a call with other rows. One Spark action."""
    content = assignments.select(*PAIR, "member_id", *TP, F.lit(None).cast("string").alias("kind"))
    if revocations is not None:
        content = content.unionByName(revocations.select(*PAIR, "member_id", *TP, "kind"))
    content = content.join(new.select(*PAIR), PAIR, "left_semi")
    text = F.concat_ws("\t", *[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in content.columns])
    sums = one_row(content.agg(*[F.sum(c).alias(f"s{i}") for i, c in enumerate(_rid_chunks(text))]))
    return f"{rid}." + _hex_chunks(int(sums[f"s{i}"] or 0) % _RID_MOD for i in range(_RID_CHUNKS))
