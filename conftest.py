"""Shared by tests/ and the doctests of spark_assign/: the Spark sessions of a test run.

One JVM serves the whole run. Its classic session (local[2], UI off, few shuffle partitions,
interpreted execution: no generated code but in tests/test_codegen.py) has Delta Lake's Spark
jars (``jars/fetch.py``'s ``delta`` bundle, fetched when the cache is empty), SQL extension and
catalog, as Databricks and ``spark-submit`` sessions have them, and a warehouse folder of its
own for catalog tables. Every test that records a history names its storage backend (a session
with Delta configured would otherwise pick ``spark-delta`` for all of them). The session also runs
the Spark Connect server that ships with PySpark, as a plugin (the plugin
``remote_session("local[2]")`` starts), and every test marked ``connect`` runs twice:
``[classic]``, then ``[connect]`` over a Spark Connect session of that server. The Connect
copies run after every other test, since opening a Connect session switches PySpark's column
functions to Spark Connect for the whole process. A JVM of their own paid the JIT's warm-up
a second time (BENCHMARKS.md, "The Connect tests in the suite's one JVM").

``SPARK_ASSIGN_TEST_CONNECT=0`` leaves the Connect copies out (a quicker local run).
"""

import os
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: the sessions a test marked ``connect`` runs on, in order
SESSIONS = ("classic", "connect") if os.environ.get("SPARK_ASSIGN_TEST_CONNECT", "1") != "0" else ("classic",)
#: the Spark Connect server's plugin (in the jars of pyspark[connect])
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
#: the run's sessions, opened on first use and stopped when the run ends (the Connect
#: session first): the ``spark`` fixture hands them out, so that switching between the
#: two never stops one
_OPEN: dict[str, object] = {}
#: whether the classic session runs the Connect server (some Connect copy was collected)
_SERVE_CONNECT = False


def pytest_generate_tests(metafunc):
    """The tests marked ``connect`` take ``spark`` once per session kind (ids ``classic``,
    ``connect``). The classic kind's parameter is None, the value an unparametrized test's
    request has, so that pytest keeps one classic ``spark`` (and the module fixtures built
    on it) for both."""
    if len(SESSIONS) > 1 and metafunc.definition.get_closest_marker("connect") and "spark" in metafunc.fixturenames:
        metafunc.parametrize("spark", [None, "connect"], ids=list(SESSIONS), indirect=True, scope="module")


def pytest_collection_finish(session):
    """The Connect copies last, in their collection order (a stable sort, after every
    reordering of the items, pytest's ``--ff`` and ``--nf`` included); the classic session
    runs the Connect server only when some were collected."""
    global _SERVE_CONNECT
    session.items.sort(key=_on_connect)
    _SERVE_CONNECT = bool(session.items) and _on_connect(session.items[-1])


def _on_connect(item) -> bool:
    """Whether ``item`` is a Connect copy."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("spark") == "connect"


def _session(kind: str):
    """The run's ``kind`` session (``classic`` or ``connect``), opened on first use."""
    if kind == "classic" and "connect" in _OPEN:
        raise RuntimeError("a classic test after a Connect copy: PySpark's functions are Spark Connect's "
                           "for the rest of the process (the Connect copies must run last)")
    if kind not in _OPEN:
        if kind == "classic":
            from spark_assign.session import INTERPRETED, local_session

            # the Connect server's token: PySpark's client sends it, and the server (in the
            # JVM this process starts, so with this environment) checks it
            os.environ.setdefault("SPARK_CONNECT_AUTHENTICATE_TOKEN", str(uuid.uuid4()))
            # the server on Spark Connect's port, 15002 (where PySpark's local Connect mode
            # looks for it)
            server = {"spark.plugins": CONNECT_PLUGIN} if _SERVE_CONNECT else {}
            # interpreted execution (no generated classes to compile), as small calls run: the
            # tests' rows are few (tests/test_codegen.py runs Spark's generated code)
            _OPEN[kind] = local_session(app_name="spark-assign-tests", shuffle_partitions=4,
                                        extra={**INTERPRETED, **server, **delta_settings()})
        else:
            _session("classic")  # its server
            from spark_assign.session import remote_session

            # PySpark's own local Connect mode (``remote_session("local[2]")``): its server
            # runs in this process's JVM, which is the classic session's here
            os.environ["SPARK_LOCAL_REMOTE"] = "1"
            _OPEN[kind] = remote_session("local[2]", shuffle_partitions=4)
    return _OPEN[kind]


def delta_jars() -> list[str]:
    """Delta Lake's Spark jars, from the project's jar cache (fetched with Maven when empty)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "jars"))
    from fetch import bundle

    return [str(p) for p in bundle("delta")]


def delta_settings() -> dict[str, str]:
    """The test session's Delta settings: the jars, Delta's SQL extension and catalog, and a
    warehouse folder of the run's own for the catalog tests' managed tables. A table's state is
    read in one partition (Delta's default, 50, makes every commit of a small table run 50 tasks),
    as ``docs/production.md`` advises for histories of small tables."""
    from spark_assign.session import DELTA_SQL

    warehouse = tempfile.mkdtemp(prefix="spark-assign-warehouse-")
    return {"spark.jars": ",".join(delta_jars()), **DELTA_SQL, "spark.sql.warehouse.dir": warehouse,
            "spark.databricks.delta.snapshotPartitions": "1"}


def pytest_sessionfinish(session, exitstatus):
    """Stop the run's sessions, the Connect one first (in PySpark's local Connect mode its
    stop also stops the classic session; a second stop does nothing)."""
    for kind in ("connect", "classic"):
        if kind in _OPEN:
            _OPEN.pop(kind).stop()


@pytest.fixture(autouse=True)
def _spark_in_doctests(request, doctest_namespace):
    """The docstring examples of spark_assign/ (run as doctests) get the session as ``spark``."""
    if isinstance(request.node, DoctestItem):
        doctest_namespace["spark"] = request.getfixturevalue("spark")


@pytest.fixture(scope="session")
def spark(request):
    """The classic Spark session of the test run (local[2], UI off, few shuffle partitions),
    or for a test marked ``connect`` its ``[connect]`` copy's Spark Connect session."""
    return _session(getattr(request, "param", None) or "classic")


@pytest.fixture
def small_call_rows(request, spark):
    """``spark.assign.smallCallRows`` set to the test's parameter for the duration of the
    test (None: the default, small calls on), unset after it. Use with
    ``@pytest.mark.parametrize("small_call_rows", [...], indirect=True)``."""
    from spark_assign.execution import SMALL_CALL_CONF

    value = getattr(request, "param", None)
    if value is not None:
        spark.conf.set(SMALL_CALL_CONF, value)
    yield value
    spark.conf.unset(SMALL_CALL_CONF)
