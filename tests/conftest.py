import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run: local[2], UI off, few shuffle partitions."""
    from spark_assign.session import local_session

    session = local_session(app_name="spark-assign-tests", shuffle_partitions=4)
    yield session
    session.stop()
