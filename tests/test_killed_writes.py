"""A record killed (SIGKILL, the process and its JVM) mid-write loses nothing, on both backends.

tests/killed_record.py records generation 2 in a process of its own and stops at a named kill
point, set by wrapping the history's stores (nothing in the library waits for a test):

- ``parquet-job``: during the Spark job that writes the ``assignments`` table's files;
- ``before-generations``: between the tables of one record, after ``assignments`` and
  ``revocations`` are committed, before ``generations`` (the commit marker).

Either way the readers see generation 1 only, and the same call again records generation 2
once: no duplicate row, and the tables committed before the kill are not committed again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from short_run import submit_args

from spark_assign.history import AssignmentHistory
from spark_assign.storage import EMBEDDED, SPARK_DELTA

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "group_id string, member_id string, topic string, partition int"
GEN1 = [("g1", "a", "t", 0), ("g1", "a", "t", 1), ("g2", "x", "t", 0)]
GEN2 = [("g1", "a", "t", 0), ("g1", "b", "t", 1), ("g2", "x", "t", 0)]  # killed_record.GEN2
COLS = ("group_id", "member_id", "topic", "partition")


def versions(h: AssignmentHistory) -> dict[str, int | None]:
    return {name: (store.history().agg(F.max("version")).first()[0] if store.exists() else None)
            for name, store in h.stores.items()}


def killed_at(location: str, backend: str, point: str, marker: Path) -> None:
    """Run tests/killed_record.py until it reaches ``point``, then SIGKILL it and its JVM."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_ASSIGN_DRIVER_MEMORY="1g", PYSPARK_SUBMIT_ARGS=submit_args())
    log = marker.with_suffix(".log")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "killed_record.py"), location, backend, point,
                                 str(marker)], env=env, start_new_session=True, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), f"the record never reached {point} (exit code {proc.poll()}):\n" + \
            log.read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("backend", [EMBEDDED, SPARK_DELTA])
@pytest.mark.parametrize("point", ["parquet-job", "before-generations"])
def test_a_record_killed_mid_write_loses_nothing(spark, tmp_path, backend, point):
    loc = str(tmp_path / "h")
    h = AssignmentHistory(loc, spark, backend=backend)
    gen1 = spark.createDataFrame(GEN1, ASSIGNMENT)
    h.record(gen1, strategy="range", generation=1)
    before = versions(h)
    assert before == {"assignments": 0, "revocations": 0, "members": None, "generations": 0}

    killed_at(loc, backend, point, tmp_path / "paused")

    raw = h.stores["assignments"].read()
    if point == "before-generations":  # generation 2's rows are committed, its marker is not
        assert versions(h) == {**before, "assignments": 1, "revocations": 1}
        assert sorted({r.generation for r in raw.collect()}) == [1, 2]
    else:  # killed while its files were written: no commit of generation 2
        assert versions(h) == before
        assert sorted({r.generation for r in raw.collect()}) == [1]
    # no reader sees generation 2
    assert sorted((r.group_id, r.generation) for r in h.history().collect()) == [("g1", 1), ("g2", 1)]
    assert_df_equality(h.assignments().select(*COLS), gen1, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(h.latest().select(*COLS), gen1, ignore_row_order=True, ignore_nullable=True)

    # the same call again records generation 2 once: one commit per table, none repeated
    gen2 = spark.createDataFrame(GEN2, ASSIGNMENT)
    h.record(gen2, strategy="range", generation=2)
    assert versions(h) == {**before, "assignments": 1, "revocations": 1, "generations": 1}
    assert h.stores["assignments"].read().count() == 6  # 3 + 3: no duplicate
    assert_df_equality(h.latest().select(*COLS), gen2, ignore_row_order=True, ignore_nullable=True)
    assert [tuple(r) for r in h.moves("g1", 1, 2).collect()] == [("g1", "t", 1, "a", "b")]
    # compaction keeps the rows, and what the readers see of them
    h.optimize()
    assert h.stores["assignments"].history().first().operation == "OPTIMIZE"
    assert h.assignments().count() == 6 and h.stores["assignments"].read().count() == 6
