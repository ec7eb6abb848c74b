"""Reading the generation history: the inspection half of :class:`~spark_assign.history.AssignmentHistory`.

Every method returns a DataFrame of committed rows only: the ``assignments``,
``revocations`` and ``members`` rows whose ``(group_id, generation, record_id)``
is in ``generations`` (the commit marker, see :mod:`spark_assign.history`).
An example builds one: :class:`~spark_assign.history.AssignmentHistory`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..errors import HistoryError
from ..storage import DeltaStore
from .tables import KEY, PAIR, TP


class HistoryReader:
    """The read methods of :class:`~spark_assign.history.AssignmentHistory` over its
    ``stores`` (one :class:`~spark_assign.storage.DeltaStore` per table).

    >>> history.moves("g1", 4, 5).show()  # doctest: +SKIP
    """

    spark: SparkSession
    location: str
    backend: str
    stores: dict[str, DeltaStore]

    def _raw(self, table: str) -> DataFrame:
        return self.stores[table].read()

    def _committed(self, table: str, generations: DataFrame | None = None) -> DataFrame:
        gens = generations if generations is not None else self._raw("generations")
        raw = self._raw(table)
        return raw.join(gens.select(*KEY), KEY, "left_semi").select(*raw.columns)

    def rows_of(self, table: str, generations: DataFrame) -> DataFrame:
        """The committed ``table`` rows of ``generations`` (``group_id, generation``: a few
        rows per group, broadcast), found through their record ids: the table is scanned
        once and never shuffled, however long the history.

        >>> history.rows_of("assignments", latest_pairs).show()  # doctest: +SKIP
        """
        keys = self._raw("generations").select(*KEY).join(generations.select(*PAIR), PAIR, "left_semi")
        raw = self._raw(table)
        return raw.join(F.broadcast(keys), KEY, "left_semi").select(*raw.columns)

    def _store(self, table: str) -> DeltaStore:
        if table not in self.stores:
            raise HistoryError(f"unknown history table {table!r}: expected one of {sorted(self.stores)}")
        return self.stores[table]

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
        """The recorded members of every generation
        (:data:`~spark_assign.history.tables.MEMBERS_SCHEMA`), of one group if given;
        generations recorded without their members have no rows."""
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
