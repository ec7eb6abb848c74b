"""Writing generations into the history: one Delta commit per table per call.

:class:`HistoryWriter` is the writing half of
:class:`~spark_assign.history.AssignmentHistory`: its
:meth:`~HistoryWriter.record` (one generation per group) and
:meth:`~HistoryWriter.record_generations` (any number of generations per group: a
rebalance's rounds, a whole simulation) both end in :func:`write_generations`,
which costs a fixed handful of Spark actions whatever the number of groups and
generations:

1. one aggregation over the call's ``(group_id, generation)`` pairs, joined with
   the pairs already recorded: the number of groups, the pairs that are missing,
   repeated or already recorded, and the record id of the new ones (one row to
   the driver, never the pairs);
2. the ``assignments``, ``revocations`` (and, when given, ``members``) rows, staged
   (Parquet files written, not yet visible) and committed, then the ``generations`` summary computed
   from the staged rows (:mod:`spark_assign.generation_stats`) and committed last:
   the commit marker (see :mod:`spark_assign.history`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .assign import ALIASES, SERVER_ALIASES
from .errors import ConcurrentWriteError, HistoryError, describe_rows
from .frames import one_row, per_group
from .generation_stats import generation_stats
from .history_reader import HistoryReader
from .history_tables import COOPERATIVE_STRATEGIES, MEMBER_ROW, PAIR, TP
from .inputs import ignored_claims, normalize_members, normalize_partitions
from .lineage import in_small_call, materialize
from .locking import history_lock
from .lost_executors import explains_lost_executors
from .properties import revocations as owned_revocations
from .properties import subscribed_partitions
from .storage import EMBEDDED, is_path, local_path

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
    with history_lock(history.lock_root()):  # one writer at a time (spark_assign.locking)
        history.check_writable(locked=True)  # a history that cannot take the rows fails before any write
        # a few rows, read by every step below: cut from its lineage (stored by its first reader
        # under local materialization; a checkpoint job under reliable).
        # Often a union of per-round or per-step pieces, into each of which the optimizer
        # would push every semi join below, once per piece of the other side: a simulation's
        # generations write planned 692 exchanges (11 s) where this plans 68 (2 s)
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
    # (in a small call both sides are one partition: no hint, :func:`~spark_assign.frames.per_group`)
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


class HistoryWriter(HistoryReader):
    """The writing half of :class:`~spark_assign.history.AssignmentHistory`: record
    generations into its ``stores``, one commit per table per call, idempotently.

    >>> history.record(assignment, strategy="range").show()  # doctest: +SKIP
    """

    def check_writable(self, *, locked: bool = False) -> None:
        """Raise HistoryError, before anything is written, when the history cannot take
        new generations: its folder is a file or a Delta table itself (not a folder of
        them), or one of its tables fails :meth:`~spark_assign.storage.DeltaStore.check_writable`.

        It holds the history's commit lock (``locked``: the caller holds it already), so it
        never looks at a table another writer is creating: a first commit's files land in
        the table folder a moment before its Delta log does. A history whose folder does not
        exist yet is checked without the lock, which would create the folder."""
        root = self._local_root()
        if root is not None and os.path.exists(root) and not os.path.isdir(root):
            raise HistoryError(f"history {self.location!r} is a file: expected a folder of Delta tables")
        if not locked and root is not None and self.lock_root() is not None and os.path.isdir(root):
            with history_lock(root):
                self.check_writable(locked=True)
            return
        if root is not None and os.path.isdir(root):
            if os.path.isdir(os.path.join(root, "_delta_log")):
                raise HistoryError(f"history {self.location!r} is a Delta table itself: expected the folder that "
                                   f"holds its tables {sorted(self.stores)}")
        for store in self.stores.values():
            store.check_writable()

    def lock_root(self) -> str | None:
        """The local folder that holds the history's commit lock (:mod:`spark_assign.locking`):
        the embedded backend's writers take turns there. None for the ``spark-delta`` backend,
        whose generations commit is conditional (:meth:`~spark_assign.delta_backends.SparkDeltaStore.append_new`),
        and for object stores."""
        return self._local_root() if self.backend == EMBEDDED else None

    def _local_root(self) -> str | None:
        """The history's local folder, None for catalog tables and object stores."""
        return local_path(self.location) if is_path(self.location) else None

    @explains_lost_executors
    def record(
        self,
        assignment: DataFrame,
        *,
        members: DataFrame | None = None,
        partitions: DataFrame | None = None,
        strategy: str,
        generation: int | DataFrame | None = None,
        protocol: str | None = None,
        round: int | None = None,
        revoked: DataFrame | None = None,
        lost: DataFrame | None = None,
        lags: DataFrame | None = None,
        recorded_at: datetime | None = None,
    ) -> DataFrame:
        """Record one generation of every group in ``assignment`` (and ``members``).

        All groups of the call are recorded, or none. ``generation``: an int for
        every group, a DataFrame ``group_id, generation``, or None for the group's
        next generation (the rule of :mod:`spark_assign.history`: one more than the
        higher of its latest recorded generation and its members' ``generation``; 1
        for a new group).
        ``members`` / ``partitions`` (the rebalance's inputs) add members without
        partitions, revocations from owned partitions, unassigned and ignored-claim
        counts, and the members' rows of the ``members`` table.
        ``revoked`` / ``lost``: ``group_id, member_id, topic, partition`` rows
        (``revoked`` defaults to owned minus assigned when ``members`` is given).
        ``lags``: ``group_id, topic, partition, lag``. ``protocol`` defaults to
        ``cooperative`` for cooperative-sticky, ``consumer`` for the broker's ``uniform``,
        else ``eager``.

        Returns the ``generations`` rows of the call's groups and generations
        (also when they were recorded before and the call was a no-op).

        Cost: a fixed handful of Spark actions and one commit per table
        (:mod:`spark_assign.recording`); ``assignment`` is computed once.

        >>> history.record(assignment, members=members, partitions=parts,
        ...                strategy="range", generation=5).show()  # doctest: +SKIP
        """
        strategy = ALIASES.get(strategy, SERVER_ALIASES.get(strategy, strategy))
        if protocol is None:
            protocol = ("cooperative" if strategy in COOPERATIVE_STRATEGIES
                        else "consumer" if strategy == "uniform" else "eager")
        recorded_at = recorded_at or datetime.now(timezone.utc)
        a = assignment.select(
            F.col("group_id").cast("string"), F.col("member_id").cast("string"),
            F.col("topic").cast("string"), F.col("partition").cast("int"),
        )
        if lags is not None:
            lag_rows = lags.select("group_id", *TP, F.col("lag").cast("long")).dropDuplicates(["group_id", *TP])
            a = a.join(lag_rows, ["group_id", *TP], "left")
        else:
            a = a.withColumn("lag", F.lit(None).cast("long"))
        a = materialize(a)  # the caller's plan (often a whole assign()) computed once
        m = normalize_members(members) if members is not None else None
        p = normalize_partitions(partitions) if partitions is not None else None

        pairs = self._pairs(a, m, generation)
        meta = pairs.select(
            "group_id", "generation", F.lit(strategy).alias("strategy"), F.lit(protocol).alias("protocol"),
            F.lit(round).cast("int").alias("round"), F.lit(recorded_at).cast("timestamp").alias("recorded_at"))
        if m is not None:
            roster = m.select("group_id", "member_id").unionByName(a.select("group_id", "member_id")).distinct()
            meta = meta.join(roster.groupBy("group_id").agg(F.count("*").alias("members")), "group_id", "left")
        else:
            meta = meta.withColumn("members", F.lit(None).cast("long"))
        if m is not None and p is not None:
            unassigned = (
                subscribed_partitions(m, p).join(a.select("group_id", *TP), ["group_id", *TP], "left_anti")
                .groupBy("group_id").agg(F.count("*").alias("_u")))
            ignored = ignored_claims(m, p).withColumnRenamed("ignored_owned_claims", "_i")
            meta = meta.join(unassigned, "group_id", "left").join(ignored, "group_id", "left").select(
                *meta.columns, F.coalesce("_u", F.lit(0)).alias("unassigned"),
                F.coalesce("_i", F.lit(0)).alias("ignored_owned_claims"))
        else:
            meta = meta.withColumn("unassigned", F.lit(None).cast("long")).withColumn(
                "ignored_owned_claims", F.lit(None).cast("long"))
        meta = meta.withColumn("partitions_moved", F.lit(None).cast("long"))

        if revoked is None and m is not None:
            revoked = owned_revocations(m, a.select("group_id", "member_id", *TP), p)
        rev = None
        for df, kind in ((revoked, "revoked"), (lost, "lost")):
            if df is not None:
                rows = df.select(
                    F.col("group_id").cast("string"), F.col("member_id").cast("string"),
                    F.col("topic").cast("string"), F.col("partition").cast("int"),
                ).distinct().withColumn("kind", F.lit(kind))
                rev = rows if rev is None else rev.unionByName(rows)
        with_gen = lambda df: df.join(pairs, "group_id")  # noqa: E731
        member_rows = None
        if m is not None:
            member_rows = with_gen(m.select(
                "group_id", "member_id", "group_instance_id", "rack", "topics", "assignors",
                F.lit(protocol).alias("protocol")))
        return write_generations(
            self, with_gen(a), meta, revocations=with_gen(rev) if rev is not None else None,
            members=member_rows, revoked_known=revoked is not None, lost_known=lost is not None,
            lags_known=lags is not None, one_per_group=True, label=strategy)

    @explains_lost_executors
    def record_generations(
        self,
        assignments: DataFrame,
        generations: DataFrame,
        *,
        revocations: DataFrame | None = None,
        members: DataFrame | None = None,
        lags_known: bool = False,
    ) -> DataFrame:
        """Record any number of generations of any number of groups in one commit per
        table: a rebalance's rounds, or a whole simulation.

        ``assignments``: ``group_id, generation, member_id, topic, partition`` and
        optionally ``lag``. ``generations``: one row per generation to record:
        ``group_id, generation, strategy, protocol, round, recorded_at`` and optionally
        ``members`` (counting members without partitions), ``unassigned``,
        ``ignored_owned_claims``, ``partitions_moved`` (the partitions held by another
        member in the previous generation, when the caller knows them: null, or absent,
        counts them from the rows). ``revocations``: ``group_id, generation, member_id,
        topic, partition, kind`` (``revoked`` or ``lost``); when given, the
        generations' ``revoked`` and ``lost`` counts are known (0 without rows).
        ``members``: the members of each generation (:data:`~spark_assign.history_tables.MEMBER_ROW`), for the
        ``members`` table. ``lags_known``: the ``lag`` column holds the partitions' lags.
        Idempotent like :meth:`record`: generations already recorded with the same
        assignment are skipped. Returns their ``generations`` rows.

        >>> history.record_generations(rounds, per_round, revocations=revs)  # doctest: +SKIP
        """
        a = assignments if "lag" in assignments.columns else assignments.withColumn("lag", F.lit(None).cast("long"))
        g = generations
        for c in ("members", "unassigned", "ignored_owned_claims", "partitions_moved"):
            if c not in g.columns:
                g = g.withColumn(c, F.lit(None).cast("long"))
        g = g.select(*GENERATION_META)
        known = revocations is not None
        return write_generations(
            self, a, g, revocations=revocations, members=members, revoked_known=known, lost_known=known,
            lags_known=lags_known, label=None)

    def _pairs(self, a: DataFrame, m: DataFrame | None, generation) -> DataFrame:
        """The ``(group_id, generation)`` rows of a :meth:`record` call: one per group
        of the assignment or the members (more, or a null generation, when the
        ``generation`` DataFrame repeats or misses a group: the writer names them)."""
        groups = a.select("group_id")
        if m is not None:
            groups = groups.unionByName(m.select("group_id"))
        groups = groups.where(F.col("group_id").isNotNull()).distinct()
        if generation is None:
            top = self._raw("generations").select("group_id", "generation")
            if m is not None:
                top = top.unionByName(m.select("group_id", "generation"))
            top = top.groupBy("group_id").agg(F.max("generation").alias("_top"))
            return groups.join(top, "group_id", "left").select(
                "group_id", (F.coalesce("_top", F.lit(0)) + 1).cast("int").alias("generation"))
        if isinstance(generation, bool) or not isinstance(generation, (int, DataFrame)):
            raise HistoryError(f"generation must be an int, a DataFrame (group_id, generation) or None; "
                               f"found {type(generation).__name__}")
        if isinstance(generation, int):
            return groups.withColumn("generation", F.lit(generation).cast("int"))
        given = generation.select(F.col("group_id").cast("string"), F.col("generation").cast("int"))
        return groups.join(given, "group_id", "left")
