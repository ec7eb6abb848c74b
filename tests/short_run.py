"""Settings for the tests' short Spark runs in a new JVM (a subprocess: the wheel's pipelines,
a killed recording, a lost executor). What those tests check is packaging, commit order or a
lost executor's blocks, not how fast plans run, and a new JVM spends most of a short run
compiling: with C1 only (no C2 compiler) and every plan interpreted (no generated classes), the
wheel's two pipeline runs took 42.7 s instead of 59.4 s on 2 cores (BENCHMARKS.md, "The
test suite's runs in new JVMs"). The run's own session is interpreted too (conftest.py); Spark's
generated code is exercised by tests/test_codegen.py.
"""

from __future__ import annotations

from spark_assign.session import INTERPRETED

#: the JVM option: the client compiler only
C1_ONLY = "-XX:TieredStopAtLevel=1"


def submit_args() -> str:
    """``PYSPARK_SUBMIT_ARGS`` that give a PySpark process's new driver JVM these settings
    (a session it builds still applies its own settings over them)."""
    confs = " ".join(f"--conf {k}={v}" for k, v in INTERPRETED.items())
    return f"--driver-java-options {C1_ONLY} {confs} pyspark-shell"


def delta_conf() -> dict[str, str]:
    """A short run's Delta settings: Delta's jars from the project's cache (fetched when empty),
    its SQL extension and catalog, and a table's state read in one partition (conftest.py)."""
    import sys
    from pathlib import Path

    from spark_assign.session import DELTA_SQL

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jars"))
    from fetch import bundle

    return {"spark.jars": ",".join(str(p) for p in bundle("delta")), **DELTA_SQL,
            "spark.databricks.delta.snapshotPartitions": "1"}
