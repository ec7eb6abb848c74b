"""Fetch the Java jars the project runs beside PySpark, with Maven, into one git-ignored cache.

Each bundle is a set of Maven artifacts resolved with their runtime dependencies into
``<cache>/<bundle>/`` (the cache is ``jars/cache`` in a checkout, or ``$SPARK_ASSIGN_JARS``):

* ``kafka``: Apache Kafka's broker (``kafka.Kafka``, KRaft, broker and controller in one
  process), its tools (``kafka-consumer-groups``), Kafka's own assignors (``kafka-clients``,
  ``kafka-group-coordinator``) and a log4j binding so the broker writes its log;
* ``delta``: Delta Lake's Spark jars for the PySpark this project pins (``spark.jars``).

A bundle counts as fetched once its ``.complete`` marker is written, after Maven has
copied every jar: an interrupted fetch is fetched again. The tests' session fixtures
call :func:`bundle`, so a fresh machine needs no step of its own::

    python jars/fetch.py            # every bundle
    python jars/fetch.py kafka      # one

>>> sorted(BUNDLES)
['delta', 'kafka']
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: the Apache Kafka release the tests run (the broker, its clients and its assignors)
KAFKA_VERSION = "4.4.0"
#: Delta Lake's Spark jars: 4.4.x is built for Spark 4.2 (PySpark 4.2.0). Maven Central serves
#: 4.4.0; delta-spark 4.4.1's Python package has no 4.4.1 jar there
DELTA_VERSION = "4.4.0"
LOG4J_VERSION = "2.24.3"

#: bundle name -> the ``group:artifact:version`` coordinates it resolves
BUNDLES: dict[str, tuple[str, ...]] = {
    "kafka": (
        f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
        f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        f"org.apache.kafka:kafka-clients:{KAFKA_VERSION}",
        f"org.apache.kafka:kafka-group-coordinator:{KAFKA_VERSION}",
        "org.slf4j:slf4j-api:2.0.17",
        f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
        f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
    ),
    "delta": (
        f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
        f"io.delta:delta-storage:{DELTA_VERSION}",
    ),
}
#: bundles that join Spark's JVM: they leave out every artifact PySpark already ships (in any
#: version), so Spark's own Parquet, compression and Scala jars stay the only ones
_JOINS_SPARK = ("delta",)

MARKER = ".complete"


def cache_dir() -> Path:
    """Where the bundles live: ``$SPARK_ASSIGN_JARS``, else ``jars/cache`` beside this file."""
    return Path(os.environ.get("SPARK_ASSIGN_JARS") or Path(__file__).resolve().parent / "cache")


def _pom(name: str) -> str:
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in (c.split(":") for c in BUNDLES[name]))
    return ("<project xmlns='http://maven.apache.org/POM/4.0.0'><modelVersion>4.0.0</modelVersion>"
            f"<groupId>spark-assign</groupId><artifactId>jars-{name}</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>")


def bundle(name: str, *, quiet: bool = True) -> list[Path]:
    """The jars of bundle ``name``, fetched first when the cache does not hold it whole.

    Raises RuntimeError naming the bundle, the command and Maven's last lines when Maven
    cannot resolve it (no ``mvn``, no registry)."""
    if name not in BUNDLES:
        raise ValueError(f"unknown jar bundle {name!r}: expected one of {sorted(BUNDLES)}")
    folder = cache_dir() / name
    if not (folder / MARKER).exists():
        _fetch(name, folder, quiet)
    return sorted(folder.glob("*.jar"))


def classpath(name: str) -> str:
    """Bundle ``name``'s jars joined as a Java class path."""
    return os.pathsep.join(str(p) for p in bundle(name))


def _fetch(name: str, folder: Path, quiet: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"jar bundle {name!r} is not in {folder} and there is no `mvn` on the PATH to fetch it")
    staging = folder.with_name(f".{name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "pom.xml").write_text(_pom(name))
    command = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(staging / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"fetching jar bundle {name!r} failed: {' '.join(command)}\n{tail}")
    if name in _JOINS_SPARK:
        shipped = _artifacts(_pyspark_jars())
        for jar in staging.glob("*.jar"):
            if _artifact(jar.name) in shipped:
                jar.unlink()
    (staging / MARKER).write_text("\n".join(BUNDLES[name]) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def _artifact(file_name: str) -> str:
    """``parquet-column-1.16.0.jar`` -> ``parquet-column``."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", file_name)


def _artifacts(folder: Path) -> set[str]:
    return {_artifact(p.name) for p in folder.glob("*.jar")}


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("the delta jar bundle joins PySpark's jars, and pyspark is not installed")
    return Path(spec.origin).parent / "jars"


if __name__ == "__main__":
    for wanted in sys.argv[1:] or sorted(BUNDLES):
        jars = bundle(wanted, quiet=False)
        print(f"{wanted}: {len(jars)} jars in {cache_dir() / wanted}")
