"""The tests' tiers and the live tests' Apache Kafka broker.

* ``-m fast``: the case tables and unit tests, in the suite's one Spark session: no broker,
  no JVM of their own, no Connect copies. The inner loop (``pytest -m fast``).
* ``-m release``: the long live replays, run before a release; left out unless ``-m`` names them.
* ``broker``: the session's Apache Kafka broker (tests/kafka_broker.py), started on first
  use from the cached jars (fetched when the cache is empty) and stopped at the end. A test
  that used it and failed prints the tail of the broker's log.
"""

from __future__ import annotations

import pytest

#: the test files of the fast tier: every test in them that is not a Connect copy
FAST_FILES = {
    "test_bad_inputs.py", "test_cooperative_sticky.py", "test_core.py", "test_kafka_protocol.py", "test_kip848.py",
    "test_lags.py", "test_protocol.py", "test_range.py", "test_roundrobin.py", "test_sticky.py",
    "test_sticky_general.py", "test_storage.py", "test_generated_properties.py", "test_lag_aware.py",
    "test_simulate_clock.py", "test_layers.py", "test_benchmarks_page.py",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: the case tables and unit tests (no broker, no extra JVM)")
    config.addinivalue_line("markers", "release: long live replays, run before a release (-m release)")


def pytest_collection_modifyitems(config, items):
    # the release tier runs only where -m names it (``-m release``): deselected, never skipped
    if "release" not in (config.option.markexpr or ""):
        released = [item for item in items if item.get_closest_marker("release")]
        if released:
            config.hook.pytest_deselected(items=released)
            items[:] = [item for item in items if not item.get_closest_marker("release")]
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_connect = callspec is not None and callspec.params.get("spark") == "connect"
        if item.path.name in FAST_FILES and not on_connect and "broker" not in item.fixturenames:
            item.add_marker(pytest.mark.fast)


_BROKER: list = []


@pytest.fixture(scope="session")
def broker():
    """The session's Apache Kafka broker (``SPARK_ASSIGN_TEST_BOOTSTRAP``: one already running)."""
    from kafka_broker import session_broker

    _BROKER.append(session_broker())
    yield _BROKER[0]
    _BROKER.pop().stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and _BROKER and "broker" in getattr(item, "fixturenames", ()) and _BROKER[0].log:
        report.sections.append(("Kafka broker log (tail)", _BROKER[0].tail(80)))
    return report
