"""Run by tests/test_killed_writes.py in its own process: one ``record()`` of generation 2 into
the history at LOCATION, on BACKEND, that stops at the kill point POINT, writes MARKER and waits
there for the test's SIGKILL. The kill points are set here, by wrapping the history's stores:
nothing in the library waits for a test.

- ``parquet-job``: inside the Spark job that writes the ``assignments`` table's Parquet files
  (a Python UDF, identity on ``group_id``, that pauses on its first row);
- ``before-generations``: after ``assignments``, ``revocations`` and ``members`` are committed,
  before the ``generations`` commit (the commit marker).

usage: python tests/killed_record.py LOCATION BACKEND POINT MARKER
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql import types as T
from short_run import delta_conf

from spark_assign.history import AssignmentHistory
from spark_assign.session import local_session

#: generation 2 of the test's two groups (generation 1 is recorded by the test)
GEN2 = [("g1", "a", "t", 0), ("g1", "b", "t", 1), ("g2", "x", "t", 0)]
ASSIGNMENT = "group_id string, member_id string, topic string, partition int"
POINTS = ("parquet-job", "before-generations")


def pause(marker: str) -> None:
    """Say where the run is, then wait for the kill."""
    Path(marker).write_text("paused")
    time.sleep(600)


def at_kill_point(history: AssignmentHistory, point: str, marker: str) -> None:
    """Wrap ``history``'s stores so that the record stops at ``point``."""
    if point == "parquet-job":
        store = history.stores["assignments"]
        stage = store.stage

        def paused_rows(value):  # in the executor's Python worker, during the write job
            pause(marker)
            return value

        identity = F.udf(paused_rows, T.StringType())
        store.stage = lambda df: stage(df.withColumn("group_id", identity("group_id")))  # type: ignore[method-assign]
    elif point == "before-generations":
        store = history.stores["generations"]
        stage = store.stage

        def staged_then_paused(df):
            staged = stage(df)
            commit = staged.commit

            def paused_commit(**kwargs):
                pause(marker)
                return commit(**kwargs)

            staged.commit = paused_commit  # type: ignore[method-assign]
            return staged

        store.stage = staged_then_paused  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown kill point {point!r}: expected one of {POINTS}")


def main(location: str, backend: str, point: str, marker: str) -> None:
    extra = delta_conf() if backend == "spark-delta" else {}
    spark = local_session("killed-record", shuffle_partitions=2, extra=extra)
    history = AssignmentHistory(location, spark, backend=backend)
    at_kill_point(history, point, marker)
    history.record(spark.createDataFrame(GEN2, ASSIGNMENT), strategy="range", generation=2)
    raise SystemExit("the record completed: the kill point was never reached")


if __name__ == "__main__":
    main(*sys.argv[1:5])
