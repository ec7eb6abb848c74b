"""The generation history: every recorded rebalance, in Delta tables.

``AssignmentHistory(location)`` keeps, under ``location`` (a folder, or a
catalog prefix such as ``main.kafka_ops`` when Spark has Delta configured):

``assignments``
    one row per assigned partition per generation: ``group_id, generation,
    member_id, topic, partition, strategy, protocol, round, lag, record_id,
    recorded_at``.
``revocations``
    what members gave up: ``group_id, generation, member_id, topic, partition,
    kind`` (``'revoked'``: owned before, assigned elsewhere or not at all now;
    ``'lost'``: lost without a revocation, as the caller reports), plus
    ``record_id, recorded_at``.
``members``
    who was in the group at each generation: ``group_id, generation, member_id,
    group_instance_id, rack, topics, assignors, protocol`` (members holding no
    partition too), recorded when the call gives its members; a later rebalance
    takes each member's owned partitions from here (:mod:`spark_assign.ownership`).
``generations``
    one row per group per generation, with the summary a dashboard needs (see
    :data:`GENERATIONS_SCHEMA`). It is the commit marker of the history.

**Generation numbers**, one rule everywhere (``assign`` records, ``rebalance()``,
``simulate()``, the pipelines): a group's next generation is one more than the
highest it has had, the latest recorded here or its members' own ``generation``,
whichever is higher (1 for a new group); round *r* of a rebalance is that plus
*r* - 1.

Atomicity: one :meth:`AssignmentHistory.record` (or ``record_generations``) call makes one Delta commit per
table, ``assignments`` and ``revocations`` first and ``generations`` last. Every
reader keeps only the ``assignments`` / ``revocations`` rows whose
``(group_id, generation, record_id)`` is in ``generations``, so a call killed
midway shows nothing of itself, and the generations recorded before it stay
intact.

Idempotence: each commit carries a Delta transaction marker whose app id is
``spark-assign:<table>:<record_id>``, where ``record_id`` is an
order-independent hash of the call's ``(group_id, generation)`` pairs; a retried call skips the
tables it already committed. Pairs already in ``generations`` are dropped
before writing: recording the same generation with the same assignment again
is a quiet no-op; with a different assignment it raises :class:`HistoryError`
(a generation, once recorded, never changes; record a new generation instead).

Layout: the tables are not partitioned. A call typically records every group
once (10,000 groups -> one generation each); partitioning by ``group_id`` would
write 10,000 tiny files per call and table. Unpartitioned, a call writes a few
files per table; :meth:`AssignmentHistory.optimize` compacts them.

Writers into one history take turns (:mod:`spark_assign.locking`): two pipelines recording
at the same moment never both land the same generation of a group.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .assign import ALIASES, SERVER_ALIASES
from .errors import HistoryError
from .history_tables import (  # noqa: F401  (re-exported: the schemas are part of the history's API)
    ASSIGNMENTS_SCHEMA,
    COOPERATIVE_STRATEGIES,
    GENERATIONS_SCHEMA,
    MEMBER_ROW,
    MEMBERS_SCHEMA,
    REVOCATIONS_SCHEMA,
    TABLES,
)
from .inputs import ignored_claims, normalize_members, normalize_partitions
from .lineage import explains_lost_executors, materialize
from .properties import revocations as owned_revocations
from .properties import subscribed_partitions
from .recording import (
    GENERATION_META,
    KEY,
    PAIR,
    TP,
    record_id,  # noqa: F401  (re-exported: history.record_id)
    write_generations,
)
from .storage import DeltaStore, choose_backend, is_path, local_path


class AssignmentHistory:
    """The generation history of consumer groups, kept in Delta tables.

    >>> history = AssignmentHistory("out/history")                     # doctest: +SKIP
    >>> history.record(assign(members, parts, "range"), members=members,
    ...                partitions=parts, strategy="range").show()     # doctest: +SKIP
    >>> history.latest().where("group_id = 'g1'").show()              # doctest: +SKIP
    """

    def __init__(self, location: str, spark: SparkSession | None = None, *, backend: str | None = None):
        if spark is None:
            spark = SparkSession.getActiveSession()
            if spark is None:
                from .session import local_session

                spark = local_session()
        self.spark = spark
        self.location = location.rstrip("/") if is_path(location) else location
        self.backend = choose_backend(spark, backend)
        sep = "/" if is_path(location) else "."
        self.stores = {
            name: DeltaStore(spark, f"{self.location}{sep}{name}", schema, backend=self.backend)
            for name, schema in TABLES.items()
        }

    # ------------------------------------------------------------------ readers

    def _raw(self, table: str) -> DataFrame:
        return self.stores[table].read()

    def _committed(self, table: str, generations: DataFrame | None = None) -> DataFrame:
        gens = generations if generations is not None else self._raw("generations")
        raw = self._raw(table)
        return raw.join(gens.select(*KEY), KEY, "left_semi").select(*raw.columns)

    def history(self, group_id: str | None = None) -> DataFrame:
        """The ``generations`` rows (one per group per generation), of one group if given.

        >>> history.history("g1").orderBy("generation").show()  # doctest: +SKIP
        """
        df = self._raw("generations")
        return df if group_id is None else df.where(F.col("group_id") == group_id)

    def assignments(self, group_id: str | None = None) -> DataFrame:
        """Every recorded assignment row (all generations), of one group if given."""
        df = self._committed("assignments")
        return df if group_id is None else df.where(F.col("group_id") == group_id)

    def revocations(self, group_id: str | None = None, generation: int | None = None,
                    kind: str | None = None) -> DataFrame:
        """Recorded revocations: ``group_id, generation, member_id, topic, partition, kind``."""
        df = self._committed("revocations")
        if group_id is not None:
            df = df.where(F.col("group_id") == group_id)
        if generation is not None:
            df = df.where(F.col("generation") == generation)
        if kind is not None:
            df = df.where(F.col("kind") == kind)
        return df

    def members(self, group_id: str | None = None) -> DataFrame:
        """The recorded members of every generation (:data:`MEMBERS_SCHEMA`), of one
        group if given; generations recorded without their members have no rows."""
        df = self._committed("members")
        return df if group_id is None else df.where(F.col("group_id") == group_id)

    def generation(self, group_id: str, n: int) -> DataFrame:
        """The assignment rows of generation ``n`` of ``group_id``."""
        return self.assignments(group_id).where(F.col("generation") == n)

    def latest(self) -> DataFrame:
        """The current assignment of every group: the rows of its latest recorded generation."""
        gens = self._raw("generations")
        top = gens.groupBy("group_id").agg(F.max("generation").alias("generation"))
        latest_gens = gens.join(top, PAIR, "left_semi")
        return self._committed("assignments", latest_gens)

    def moves(self, group_id: str, from_generation: int, to_generation: int) -> DataFrame:
        """Partitions whose member differs between two generations of a group:
        ``group_id, topic, partition, from_member, to_member`` (a null member: the
        partition was not assigned in that generation).
        """
        a = self.generation(group_id, from_generation).select(*TP, F.col("member_id").alias("from_member"))
        b = self.generation(group_id, to_generation).select(*TP, F.col("member_id").alias("to_member"))
        return (
            a.join(b, TP, "full_outer")
            .where(~F.col("from_member").eqNullSafe(F.col("to_member")))
            .select(F.lit(group_id).alias("group_id"), *TP, "from_member", "to_member")
        )

    def delta_history(self, table: str = "generations") -> DataFrame:
        """Delta's own commit log of one table (``assignments``, ``revocations`` or
        ``generations``), newest first: ``version, timestamp, operation, ...``."""
        return self._store(table).history()

    def as_of(self, table: str, version: int) -> DataFrame:
        """The raw rows of ``table`` at Delta ``version`` (time travel; no commit-marker filter)."""
        return self._store(table).read(version=version)

    def register_views(self, prefix: str = "") -> None:
        """Create temp views ``<prefix>assignments``, ``<prefix>generations`` and
        ``<prefix>revocations`` (committed rows only) for the queries in ``sql/``.
        The views hold the history as of this call: register again after recording.
        """
        self.history().createOrReplaceTempView(f"{prefix}generations")
        self.assignments().createOrReplaceTempView(f"{prefix}assignments")
        self.revocations().createOrReplaceTempView(f"{prefix}revocations")

    def optimize(self) -> None:
        """Compact each table's small files (Delta OPTIMIZE)."""
        for store in self.stores.values():
            store.compact()

    def check_writable(self) -> None:
        """Raise HistoryError, before anything is written, when the history cannot take
        new generations: its folder is a file or a Delta table itself (not a folder of
        them), or one of its tables fails :meth:`DeltaStore.check_writable`."""
        root = self.lock_root()
        if root is not None and os.path.exists(root):
            if not os.path.isdir(root):
                raise HistoryError(f"history {self.location!r} is a file: expected a folder of Delta tables")
            if os.path.isdir(os.path.join(root, "_delta_log")):
                raise HistoryError(f"history {self.location!r} is a Delta table itself: expected the folder that "
                                   f"holds its tables {sorted(self.stores)}")
        for store in self.stores.values():
            store.check_writable()

    def lock_root(self) -> str | None:
        """The local folder that holds the history's commit lock (:mod:`spark_assign.locking`),
        None for catalog tables and object stores."""
        return local_path(self.location) if is_path(self.location) else None

    def _store(self, table: str) -> DeltaStore:
        if table not in self.stores:
            raise HistoryError(f"unknown history table {table!r}: expected one of {sorted(self.stores)}")
        return self.stores[table]

    # ------------------------------------------------------------------ writer

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
        next generation (the module's rule: one more than the higher of its latest
        recorded generation and its members' ``generation``; 1 for a new group).
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
        ``ignored_owned_claims``. ``revocations``: ``group_id, generation, member_id,
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
        for c in ("members", "unassigned", "ignored_owned_claims"):
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
