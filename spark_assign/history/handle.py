"""The history's handle: :class:`AssignmentHistory` (the package doc, :mod:`spark_assign.history`, says
what it keeps and how)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from ..locations import is_path, pinned
from ..storage import EMBEDDED, choose_backend, open_table
from .tables import TABLES
from .writer import HistoryWriter


class AssignmentHistory(HistoryWriter):
    """The generation history of consumer groups, kept in Delta tables: the read
    methods of :class:`~.reader.HistoryReader` and the writes of
    :class:`~.writer.HistoryWriter` over one Delta table per name of
    :data:`TABLES`.

    >>> history = AssignmentHistory("out/history")                     # doctest: +SKIP
    >>> history.record(assign(members, parts, "range"), members=members,
    ...                partitions=parts, strategy="range").show()     # doctest: +SKIP
    >>> history.latest().where("group_id = 'g1'").show()              # doctest: +SKIP
    """

    def __init__(self, location: str, spark: SparkSession | None = None, *, backend: str | None = None):
        if spark is None:
            spark = SparkSession.getActiveSession()
            if spark is None:
                from ..session import local_session

                spark = local_session()
        self.spark = spark
        self.backend = choose_backend(spark, backend)
        location = location.rstrip("/") if is_path(location) else location
        # its lock and checks are taken from this process, like its tables' commits (DeltaStore)
        self.location = pinned(location) if self.backend == EMBEDDED else location
        sep = "/" if is_path(location) else "."
        self.stores = {
            name: open_table(spark, f"{self.location}{sep}{name}", schema, backend=self.backend)
            for name, schema in TABLES.items()
        }

    def optimize(self) -> None:
        """Compact each table's small files (Delta OPTIMIZE)."""
        for store in self.stores.values():
            store.compact()
