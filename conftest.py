"""Shared by tests/ and the doctests of spark_assign/: the one Spark session of a test run."""

import os
import sys

import pytest
from _pytest.doctest import DoctestItem

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: set to a Spark Connect URL (``local[2]``: the server that ships with PySpark) to run the
#: tests marked ``connect`` over Spark Connect instead of the whole suite on a classic session
REMOTE = os.environ.get("SPARK_ASSIGN_TEST_REMOTE")


def pytest_collection_modifyitems(config, items):
    """Over Spark Connect, only the ``connect`` slice runs (the rest assumes a classic
    session, or repeats what the slice already covers)."""
    if not REMOTE:
        return
    keep = [item for item in items if item.get_closest_marker("connect")]
    dropped = [item for item in items if not item.get_closest_marker("connect")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(autouse=True)
def _spark_in_doctests(request, doctest_namespace):
    """The docstring examples of spark_assign/ (run as doctests) get the session as ``spark``."""
    if isinstance(request.node, DoctestItem):
        doctest_namespace["spark"] = request.getfixturevalue("spark")


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run: local[2], UI off, few shuffle partitions;
    a Spark Connect session when SPARK_ASSIGN_TEST_REMOTE is set."""
    if REMOTE:
        from spark_assign.session import remote_session

        session = remote_session(REMOTE, shuffle_partitions=4)
    else:
        from spark_assign.session import local_session

        session = local_session(app_name="spark-assign-tests", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture
def small_call_rows(request, spark):
    """``spark.assign.smallCallRows`` set to the test's parameter for the duration of the
    test (None: the default, small calls on), unset after it. Use with
    ``@pytest.mark.parametrize("small_call_rows", [...], indirect=True)``."""
    from spark_assign.lineage import SMALL_CALL_CONF

    value = getattr(request, "param", None)
    if value is not None:
        spark.conf.set(SMALL_CALL_CONF, value)
    yield value
    spark.conf.unset(SMALL_CALL_CONF)
