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

    >>> import tempfile
    >>> from spark_assign import assign
    >>> members = spark.createDataFrame([("g1", "a", ["t"]), ("g1", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int")
    >>> history = AssignmentHistory(tempfile.mkdtemp(), spark, backend="embedded")
    >>> history.record(assign(members, parts, "range"), members=members, partitions=parts,
    ...                strategy="range").select("group_id", "generation", "members", "partitions").show()
    +--------+----------+-------+----------+
    |group_id|generation|members|partitions|
    +--------+----------+-------+----------+
    |      g1|         1|      2|         3|
    +--------+----------+-------+----------+
    <BLANKLINE>
    >>> history.latest().where("group_id = 'g1'").select("generation", "member_id", "partition").orderBy("partition").show()
    +----------+---------+---------+
    |generation|member_id|partition|
    +----------+---------+---------+
    |         1|        a|        0|
    |         1|        a|        1|
    |         1|        b|        2|
    +----------+---------+---------+
    <BLANKLINE>
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
