"""The embedded default Spark session: local Spark, no Delta jars needed."""

from __future__ import annotations

import os
import socket
import sys

from pyspark.sql import SparkSession

#: compiled classes Spark's code generation keeps (Spark's default: 100)
CODEGEN_CACHE_ENTRIES = 1000
#: the memory page of an aggregation's hash map or a sort (Spark's default on a 4 GiB
#: local driver: 64 MiB, allocated whole by the first row of every operator of every task)
MEMORY_PAGE_SIZE = "2m"
#: the chunk a broadcast (every job's task binary among them) is written in (Spark's default:
#: 4 MiB, allocated whole for a few kilobytes)
BROADCAST_BLOCK_SIZE = "512k"
#: Spark's setting that carries the JVM's exchanges with Python workers over Unix domain sockets
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
#: Spark's interpreted execution: operators and expressions run without generated code, so no
#: plan compiles Java classes. For plans over few rows, whose compilation would cost more than
#: their run: every small call (:data:`~spark_assign.execution.policy.SMALL_CALL_SETTINGS`), and the test
#: suite's sessions. ``factoryMode`` is one of Spark's internal settings
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
#: the session setting that opts a session in to running spark-assign's small calls under tuned
#: settings (:mod:`spark_assign.execution`); the sessions built here set it, a caller's own
#: session keeps its settings unless it sets it
SMALL_CALL_SETTINGS_CONF = "spark.assign.smallCallSettings"
#: Spark's threshold above which the paths of one read are listed with a Spark job of their own
#: (32 by default); the sessions built here list a history's local files on the driver, where
#: listing them one by one takes a fraction of a job
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
#: set in the environment of a Python that ``spark-submit`` (or ``pyspark``) started: its JVM runs,
#: configured by the command line
SUBMITTED = "PYSPARK_GATEWAY_PORT"
#: Spark's substitution of constant SQL parameters before parsing (see :data:`DELTA_SQL`)
PARAMETER_SUBSTITUTION = "spark.sql.legacy.parameterSubstitution.constantsOnly"
#: Delta Lake's SQL extension and catalog: with Delta's jars on the class path (``spark.jars``,
#: ``--packages io.delta:delta-spark_2.13:<version>``), the settings that make a session write and
#: read Delta itself, as Databricks does; the history then uses the ``spark-delta`` backend.
#: Delta's SQL parser drops the parameter markers of ``spark.sql(text, args=...)`` (Delta 4.x on
#: Spark 4.1+, delta-io/delta#7640), which the queries under ``sql/`` take; Spark's substitution of
#: constant parameters before parsing (its ``legacy`` setting) gives them back their values
DELTA_SQL = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
             "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
             PARAMETER_SUBSTITUTION: "true"}


def local_session(
    app_name: str = "spark-assign",
    *,
    master: str = "local[2]",
    shuffle_partitions: int = 8,
    driver_memory: str | None = None,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """A local Spark session with the UI off and few shuffle partitions.

    PySpark's DataFrame call-site capture (``spark.python.sql.dataFrameDebugging.enabled``,
    on by default since Spark 4) is turned off: it walks the Python stack and makes
    several JVM calls for every column function, which slowed the sticky general path
    measurably. Errors still
    name the failing expression; pass ``extra={"spark.python.sql.dataFrameDebugging.enabled":
    "true"}`` to get the Python call site in them too.

    Spark's cache of compiled generated code (``spark.sql.codegen.cache.maxEntries``,
    a static setting) holds :data:`CODEGEN_CACHE_ENTRIES` classes instead of Spark's 100:
    one ``assign()`` of the sticky family compiles about 155 classes (queries, joins,
    windows), so with 100 every call evicted and recompiled them all (most of a small
    call's time); with the larger cache a repeated call compiles none. Set the same in a
    cluster's configuration.

    Spark's buffers are sized for many small jobs: ``spark.buffer.pageSize``
    (:data:`MEMORY_PAGE_SIZE`) and ``spark.broadcast.blockSize`` (:data:`BROADCAST_BLOCK_SIZE`).
    Each aggregation or sort of a task takes a whole page with its first row, and each
    broadcast (every job's task binary too) a whole block; at Spark's sizes those arrays
    were most of a replay's allocation and its garbage collection.

    Where the platform has them, the JVM talks to its Python workers over Unix domain sockets
    (:data:`UNIX_SOCKETS`). Over local TCP each Python task waited for the kernel's delayed
    acknowledgement of its last small write: every read of a frame made by
    ``spark.createDataFrame`` from Python rows runs such tasks.

    Returns the active session unchanged when one already exists (Databricks), and under
    ``spark-submit`` the session of its settings (``--master``, ``--jars``, ``--conf``: none of
    these are applied over them), so pipelines can call it unconditionally.

    >>> spark = local_session(shuffle_partitions=4)  # doctest: +SKIP
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if os.environ.get(SUBMITTED):  # this Python was started by spark-submit's JVM, with its settings
        return SparkSession.builder.getOrCreate()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in {**session_settings(shuffle_partitions, driver_memory), **(extra or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_settings(shuffle_partitions: int = 8, driver_memory: str | None = None) -> dict[str, str]:
    """The settings :func:`local_session` and :func:`remote_session` give a new session."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": "2",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": driver_memory or os.environ.get("SPARK_ASSIGN_DRIVER_MEMORY", "4g"),
        "spark.sql.ansi.enabled": "false",
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        "spark.buffer.pageSize": MEMORY_PAGE_SIZE,
        "spark.broadcast.blockSize": BROADCAST_BLOCK_SIZE,
        SMALL_CALL_SETTINGS_CONF: "true",
        LISTING_THRESHOLD: "1000000",
        **({UNIX_SOCKETS: "true"} if hasattr(socket, "AF_UNIX") else {}),
    }


def remote_session(url: str = "local[2]", *, shuffle_partitions: int = 8,
                   extra: dict[str, str] | None = None) -> SparkSession:
    """A Spark Connect session (needs ``pyspark[connect]``). ``url``: ``sc://host:port``
    for a running Connect server (Databricks serverless, a cluster's), or a local master
    such as ``local[2]`` to start the Connect server that ships with PySpark, with the
    settings of :func:`local_session`.

    >>> spark = remote_session("local[2]", shuffle_partitions=4)  # doctest: +SKIP
    """
    import warnings

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_settings(shuffle_partitions) if not url.startswith("sc://") else {
        "spark.sql.shuffle.partitions": str(shuffle_partitions), "spark.sql.session.timeZone": "UTC"}
    builder = SparkSession.builder.remote(url)
    for k, v in {**settings, **(extra or {})}.items():
        builder = builder.config(k, v)
    with warnings.catch_warnings():
        # the client sets every option again once connected: static ones (the UI, the
        # driver's memory) were applied when the local server started, and only warn
        warnings.filterwarnings("ignore", message="Failed to set")
        return builder.getOrCreate()
