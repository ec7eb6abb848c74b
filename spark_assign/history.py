"""The generation history: every recorded rebalance, in three Delta tables.

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
``generations``
    one row per group per generation, with the summary a dashboard needs (see
    :data:`GENERATIONS_SCHEMA`). It is the commit marker of the history.

Atomicity: one :meth:`AssignmentHistory.record` call makes one Delta commit per
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

One writer per group at a time is assumed (as Kafka has one leader per group).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from datetime import datetime, timezone
from typing import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .assign import ALIASES
from .errors import HistoryError, describe_rows
from .inputs import normalize_members, normalize_partitions
from .properties import revocations as owned_revocations
from .properties import subscribed_partitions
from .storage import DeltaStore, _local_path, choose_backend, is_path

PAIR = ["group_id", "generation"]
KEY = ["group_id", "generation", "record_id"]
TP = ["topic", "partition"]

ASSIGNMENTS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("member_id", T.StringType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("lag", T.LongType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

REVOCATIONS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("member_id", T.StringType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("kind", T.StringType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

#: ``generations``: one row per group per recorded generation.
#:
#: ``previous_generation``: the group's latest generation recorded before this
#: one (null for its first); ``partitions_moved``: partitions assigned in both
#: generations to different members (null without a previous generation);
#: ``members`` counts members with no partition too when ``members`` was given;
#: ``unassigned``: subscribed partitions left unassigned (a cooperative round's
#: transferring partitions; null unless members and partitions were given);
#: ``min_partitions``/``max_partitions``/``max_min``: partitions per member;
#: ``revoked``/``lost``: rows in ``revocations`` (null when unknown);
#: lag columns are null when no lag is known for the group's assigned partitions
#: (members without partitions count as lag 0); ``max_mean_lag_ratio`` is
#: ``max_member_lag / mean_member_lag`` (null when the mean is 0);
#: ``ignored_owned_claims``: owned claims on partitions missing from the
#: metadata (null unless members and partitions were given).
GENERATIONS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("previous_generation", T.IntegerType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("members", T.LongType()),
    T.StructField("partitions", T.LongType()),
    T.StructField("unassigned", T.LongType()),
    T.StructField("partitions_moved", T.LongType()),
    T.StructField("min_partitions", T.LongType()),
    T.StructField("max_partitions", T.LongType()),
    T.StructField("max_min", T.LongType()),
    T.StructField("revoked", T.LongType()),
    T.StructField("lost", T.LongType()),
    T.StructField("total_lag", T.LongType()),
    T.StructField("max_member_lag", T.LongType()),
    T.StructField("mean_member_lag", T.DoubleType()),
    T.StructField("max_mean_lag_ratio", T.DoubleType()),
    T.StructField("ignored_owned_claims", T.LongType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

TABLES = {
    "assignments": ASSIGNMENTS_SCHEMA,
    "revocations": REVOCATIONS_SCHEMA,
    "generations": GENERATIONS_SCHEMA,
}

COOPERATIVE_STRATEGIES = ("cooperative-sticky",)


#: record ids sum per-pair SHA-256 prefixes in ``_RID_CHUNKS`` chunks of 15 hex digits
#: (60 bits), each sum taken modulo 2**60: order-independent, so Spark computes it in
#: one aggregation without bringing the pairs to the driver
_RID_CHUNKS = 2
_RID_MOD = 1 << 60


def _pair_text(group_id, generation) -> str:
    return f"{group_id}\t{generation}"


def record_id(pairs: Iterable[tuple[str, int]]) -> str:
    """The id of a call recording ``pairs`` of ``(group_id, generation)``: a hash
    of the set of pairs, the same whatever their order (the Python twin of
    :func:`_record_id_of`, which computes it in Spark).

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


def _record_id_of(pairs: DataFrame) -> tuple[str, int]:
    """:func:`record_id` of distinct ``group_id, generation`` rows, and their count: one
    aggregation (decimal sums: no overflow), one row to the driver."""
    digest = F.sha2(F.concat(F.col("group_id"), F.lit("\t"), F.col("generation").cast("string")), 256)
    chunks = [F.conv(F.substring(digest, 15 * i + 1, 15), 16, 10).cast("decimal(38,0)") for i in range(_RID_CHUNKS)]
    row = pairs.agg(F.count("*").alias("n"), *[F.sum(c).alias(f"s{i}") for i, c in enumerate(chunks)]).first()
    sums = [int(row[f"s{i}"] or 0) % _RID_MOD for i in range(_RID_CHUNKS)]
    return _format_record_id(row["n"], sums), row["n"]


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

    def _store(self, table: str) -> DeltaStore:
        if table not in self.stores:
            raise HistoryError(f"unknown history table {table!r}: expected one of {sorted(self.stores)}")
        return self.stores[table]

    # ------------------------------------------------------------------ writer

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
        latest recorded generation + 1 (1 for a new group). ``members`` /
        ``partitions`` (the rebalance's inputs) add members without partitions,
        revocations from owned partitions, unassigned and ignored-claim counts.
        ``revoked`` / ``lost``: ``group_id, member_id, topic, partition`` rows
        (``revoked`` defaults to owned minus assigned when ``members`` is given).
        ``lags``: ``group_id, topic, partition, lag``. ``protocol`` defaults to
        ``cooperative`` for cooperative-sticky, else ``eager``.

        Returns the ``generations`` rows of the call's groups and generations
        (also when they were recorded before and the call was a no-op).

        Cost: the assignment is computed once (staged as Parquet under
        ``<location>/_staging``, or checkpointed for a catalog location); the
        call's ``(group_id, generation)`` pairs stay distributed (checkpointed; the
        record id is one aggregation over them).

        >>> history.record(assignment, members=members, partitions=parts,
        ...                strategy="range", generation=5).show()  # doctest: +SKIP
        """
        spark = self.spark
        strategy = ALIASES.get(strategy, strategy)
        if protocol is None:
            protocol = "cooperative" if strategy in COOPERATIVE_STRATEGIES else "eager"
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
        m = normalize_members(members) if members is not None else None
        p = normalize_partitions(partitions) if partitions is not None else None

        scratch, a = self._materialize(a)
        try:
            pairs_df, n_groups = self._pairs(a, m, generation)
            if not n_groups:
                return spark.createDataFrame([], GENERATIONS_SCHEMA)
            present = pairs_df.join(self._raw("generations").select(*PAIR), PAIR, "left_semi")
            if not present.isEmpty():
                self._check_same(a, present)
            # materialized before the write: the pairs recorded then must not drop out
            remaining = pairs_df.join(present, PAIR, "left_anti").localCheckpoint(eager=True)
            rid, n_remaining = _record_id_of(remaining)
            if n_remaining:
                self._write(a, m, p, remaining, rid, n_remaining, strategy=strategy, protocol=protocol,
                            round=round, revoked=revoked, lost=lost, lags_given=lags is not None,
                            recorded_at=recorded_at)
        finally:
            self._cleanup(scratch)
        return self.history().join(pairs_df, PAIR, "left_semi")

    def _materialize(self, df: DataFrame) -> tuple[str | None, DataFrame]:
        """Compute ``df`` once (the caller's assignment may be an expensive plan)."""
        if is_path(self.location):
            scratch = f"{self.location}/_staging/record-{uuid.uuid4().hex}"
            df.write.parquet(scratch)
            return scratch, self.spark.read.parquet(scratch)
        return None, df.localCheckpoint(eager=True)

    def _cleanup(self, scratch: str | None) -> None:
        if scratch is None:
            return
        local = _local_path(scratch)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)
            try:
                os.rmdir(os.path.dirname(local))  # the _staging folder, when empty
            except OSError:
                pass

    def _pairs(self, a: DataFrame, m: DataFrame | None, generation) -> tuple[DataFrame, int]:
        """The ``(group_id, generation)`` pairs of the call, one row per group,
        materialized (a generation derived from the history must not move when the
        call writes to it), and the number of groups. Raises HistoryError naming up to
        ten groups without a generation or with more than one."""
        groups = a.select("group_id")
        if m is not None:
            groups = groups.unionByName(m.select("group_id"))
        groups = groups.where(F.col("group_id").isNotNull()).distinct()
        if generation is None:
            top = self._raw("generations").groupBy("group_id").agg(F.max("generation").alias("_top"))
            gens = groups.join(top, "group_id", "left").select(
                "group_id", (F.coalesce("_top", F.lit(0)) + 1).cast("int").alias("generation"))
        elif isinstance(generation, int):
            gens = groups.withColumn("generation", F.lit(generation).cast("int"))
        elif isinstance(generation, DataFrame):
            given = generation.select(F.col("group_id").cast("string"), F.col("generation").cast("int"))
            gens = groups.join(given, "group_id", "left")
        else:
            raise HistoryError(f"generation must be an int, a DataFrame (group_id, generation) or None; found {type(generation).__name__}")
        gens = gens.localCheckpoint(eager=True)
        per_group = gens.groupBy("group_id").agg(
            F.count("generation").alias("n"), F.count("*").alias("rows"))
        is_missing, is_dup = F.col("rows") > F.col("n"), F.col("n") > 1
        counts = per_group.agg(  # one row: the counts, never the groups
            F.count("*").alias("groups"), F.count(F.when(is_missing, 1)).alias("missing"),
            F.count(F.when(is_dup, 1)).alias("dup"),
        ).first()
        if counts["missing"]:
            names = sorted(r.group_id for r in per_group.where(is_missing).orderBy("group_id").take(10))
            raise HistoryError(
                f"no generation given for {counts['missing']} group(s) of the assignment: "
                f"expected a (group_id, generation) row for each, missing {names}"
            )
        if counts["dup"]:
            names = sorted(r.group_id for r in per_group.where(is_dup).orderBy("group_id").take(10))
            raise HistoryError(f"more than one generation given for group(s) {names}: expected one per call")
        return gens, counts["groups"]

    def _check_same(self, a: DataFrame, present: DataFrame) -> None:
        """Raise HistoryError if already-recorded generations differ from ``a``."""
        cols = ["group_id", "generation", "member_id", "topic", "partition"]
        new = a.join(present, "group_id").select(*cols)
        old = self.assignments().join(present, PAIR, "left_semi").select(*cols)
        diff = new.exceptAll(old).withColumn("side", F.lit("new")).unionByName(
            old.exceptAll(new).withColumn("side", F.lit("recorded")))
        bad = diff.groupBy(*PAIR).agg(F.count("*").alias("differing_rows")).orderBy(*PAIR).take(11)
        if bad:
            raise HistoryError(
                "generation(s) already recorded with a different assignment (a recorded generation "
                "never changes; record a new generation instead):\n"
                + describe_rows([r.asDict() for r in bad])
            )

    def _write(self, a, m, p, rem, rid, n_groups, *, strategy, protocol, round, revoked, lost, lags_given,
               recorded_at):
        """Append the pairs ``rem`` (their record id ``rid``, ``n_groups`` of them) to every table."""
        spark = self.spark
        common = [
            F.lit(rid).alias("record_id"),
            F.lit(recorded_at).cast("timestamp").alias("recorded_at"),
        ]
        meta = {"record_id": rid, "groups": n_groups, "strategy": strategy}

        # 1. assignments
        rows = a.join(rem, "group_id").select(
            "group_id", "generation", "member_id", *TP,
            F.lit(strategy).alias("strategy"), F.lit(protocol).alias("protocol"),
            F.lit(round).cast("int").alias("round"), "lag", *common,
        )
        self.stores["assignments"].append(rows, app_id=f"spark-assign:assignments:{rid}", metadata=meta)

        # 2. revocations
        if revoked is None and m is not None:
            revoked = owned_revocations(m, a.select("group_id", "member_id", *TP), p)
        parts = []
        for df, kind in ((revoked, "revoked"), (lost, "lost")):
            if df is not None:
                parts.append(df.select(
                    F.col("group_id").cast("string"), F.col("member_id").cast("string"),
                    F.col("topic").cast("string"), F.col("partition").cast("int"),
                ).distinct().withColumn("kind", F.lit(kind)))
        if parts:
            rev = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        else:
            rev = spark.createDataFrame([], "group_id string, member_id string, topic string, partition int, kind string")
        rev_rows = rev.join(rem, "group_id").select("group_id", "generation", "member_id", *TP, "kind", *common)
        self.stores["revocations"].append(rev_rows, app_id=f"spark-assign:revocations:{rid}", metadata=meta)

        # 3. generations, the commit marker: stats from the committed rows of this call
        mine = self._raw("assignments").where(F.col("record_id") == rid)
        gens = self._stats(mine, m, p, rem, revoked is not None or m is not None, lost is not None,
                           lags_given, rid)
        gens = gens.select(
            "group_id", "generation", "previous_generation",
            F.lit(strategy).alias("strategy"), F.lit(protocol).alias("protocol"),
            F.lit(round).cast("int").alias("round"),
            "members", "partitions", "unassigned", "partitions_moved", "min_partitions", "max_partitions",
            (F.col("max_partitions") - F.col("min_partitions")).alias("max_min"),
            "revoked", "lost", "total_lag", "max_member_lag", "mean_member_lag",
            F.when(F.col("mean_member_lag") > 0, F.col("max_member_lag") / F.col("mean_member_lag"))
            .alias("max_mean_lag_ratio"),
            "ignored_owned_claims", *common,
        )
        self.stores["generations"].append(gens, app_id=f"spark-assign:generations:{rid}", metadata=meta)

    def _stats(self, mine, m, p, rem, revoked_known, lost_known, lags_given, rid) -> DataFrame:
        """Per (group_id, generation) summary of the rows just written."""
        # members and their loads (members without partitions count when known)
        per_member = mine.groupBy("group_id", "member_id").agg(
            F.count("*").alias("n"), F.sum("lag").alias("member_lag"))
        if m is not None:
            roster = m.select("group_id", "member_id").distinct().join(rem.select("group_id"), "group_id", "left_semi")
            roster = roster.unionByName(mine.select("group_id", "member_id")).distinct()
        else:
            roster = mine.select("group_id", "member_id").distinct()
        loads = roster.join(per_member, ["group_id", "member_id"], "left").select(
            "group_id", F.coalesce("n", F.lit(0)).alias("n"),
            F.coalesce("member_lag", F.lit(0)).alias("member_lag"))
        member_stats = loads.groupBy("group_id").agg(
            F.count("*").alias("members"), F.sum("n").alias("partitions"),
            F.min("n").alias("min_partitions"), F.max("n").alias("max_partitions"),
            F.max("member_lag").alias("max_member_lag"),
        )
        lag_stats = mine.groupBy("group_id").agg(F.sum("lag").alias("total_lag"))

        # previous recorded generation and moved partitions
        gens = self._raw("generations")
        prev = (
            rem.join(gens.select("group_id", F.col("generation").alias("_g")), "group_id")
            .where(F.col("_g") < F.col("generation"))
            .groupBy("group_id").agg(F.max("_g").alias("previous_generation"))
        )
        prev_rows = (
            self._committed("assignments", gens)
            .join(prev.select("group_id", F.col("previous_generation").alias("generation")), PAIR, "left_semi")
            .select("group_id", *TP, F.col("member_id").alias("_prev_member"))
        )
        moved = (
            mine.join(prev_rows, ["group_id", *TP])
            .where(F.col("member_id") != F.col("_prev_member"))
            .groupBy("group_id").agg(F.count("*").alias("_moved"))
        )

        # revocations of this call
        rev = self._raw("revocations").where(F.col("record_id") == rid).groupBy("group_id").agg(
            F.count(F.when(F.col("kind") == "revoked", 1)).alias("_revoked"),
            F.count(F.when(F.col("kind") == "lost", 1)).alias("_lost"),
        )

        out = (
            rem.join(member_stats, "group_id", "left").join(lag_stats, "group_id", "left")
            .join(prev, "group_id", "left").join(moved, "group_id", "left").join(rev, "group_id", "left")
        )
        if m is not None and p is not None:
            subscribed = subscribed_partitions(m.join(rem.select("group_id"), "group_id", "left_semi"), p)
            unassigned = (
                subscribed.join(mine.select("group_id", *TP), ["group_id", *TP], "left_anti")
                .groupBy("group_id").agg(F.count("*").alias("_unassigned"))
            )
            from .inputs import diagnostics

            ignored = diagnostics(m, p).select("group_id", F.col("ignored_owned_claims").alias("_ignored"))
            out = out.join(unassigned, "group_id", "left").join(ignored, "group_id", "left")
            unassigned_col = F.coalesce("_unassigned", F.lit(0))
            ignored_col = F.coalesce("_ignored", F.lit(0))
        else:
            unassigned_col = F.lit(None)
            ignored_col = F.lit(None)

        zero = F.lit(0).cast("long")
        lag_or_null = (lambda c: c) if lags_given else (lambda c: F.lit(None))
        return out.select(
            "group_id", "generation", F.col("previous_generation").cast("int"),
            F.coalesce("members", zero).alias("members"),
            F.coalesce("partitions", zero).alias("partitions"),
            unassigned_col.cast("long").alias("unassigned"),
            F.when(F.col("previous_generation").isNotNull(), F.coalesce("_moved", zero)).alias("partitions_moved"),
            F.coalesce("min_partitions", zero).alias("min_partitions"),
            F.coalesce("max_partitions", zero).alias("max_partitions"),
            (F.coalesce("_revoked", zero) if revoked_known else F.lit(None)).cast("long").alias("revoked"),
            (F.coalesce("_lost", zero) if lost_known else F.lit(None)).cast("long").alias("lost"),
            # lag columns: null unless some assigned partition of the group has a lag
            lag_or_null(F.col("total_lag")).cast("long").alias("total_lag"),
            lag_or_null(F.when(F.col("total_lag").isNotNull(), F.col("max_member_lag")))
            .cast("long").alias("max_member_lag"),
            lag_or_null(F.col("total_lag") / F.greatest(F.coalesce("members", zero), F.lit(1)))
            .cast("double").alias("mean_member_lag"),
            ignored_col.cast("long").alias("ignored_owned_claims"),
        )
