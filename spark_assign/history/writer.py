"""The writing half of :class:`~spark_assign.history.AssignmentHistory`: :class:`HistoryWriter`'s
:meth:`~HistoryWriter.record` (one generation per group) and :meth:`~HistoryWriter.record_generations`
(any number per group), both through :func:`~.commit.write_generations` (:mod:`.commit`)."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import HistoryError
from ..execution import entry_point, materialize
from ..inputs import ignored_claims, normalize_members, normalize_partitions
from ..locations import is_path, local_path
from ..properties import revocations as owned_revocations
from ..properties import subscribed_partitions
from ..storage import EMBEDDED
from ..storage.locking import history_lock
from ..strategies.registry import ALIASES, SERVER_ALIASES, STRATEGIES
from .commit import GENERATION_META, write_generations
from .reader import HistoryReader
from .tables import TP


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
        """The local folder that holds the history's commit lock (:mod:`spark_assign.storage.locking`):
        the embedded backend's writers take turns there. None for the ``spark-delta`` backend,
        whose generations commit is conditional (:meth:`~spark_assign.storage.spark_delta.SparkDeltaStore.append_new`),
        and for object stores."""
        return self._local_root() if self.backend == EMBEDDED else None

    def _local_root(self) -> str | None:
        """The history's local folder, None for catalog tables and object stores."""
        return local_path(self.location) if is_path(self.location) else None

    @entry_point
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
        (:mod:`spark_assign.history.writer`); ``assignment`` is computed once.

        >>> history.record(assignment, members=members, partitions=parts,
        ...                strategy="range", generation=5).show()  # doctest: +SKIP
        """
        strategy = ALIASES.get(strategy, SERVER_ALIASES.get(strategy, strategy))  # any other name as it is
        known = STRATEGIES.get(strategy)
        if protocol is None:
            protocol = ("eager" if known is None else "cooperative" if known.cooperative
                        else "eager" if "classic" in known.group_protocols else "consumer")
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

    @entry_point
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
        ``members``: the members of each generation (:data:`~spark_assign.history.tables.MEMBER_ROW`), for the
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
