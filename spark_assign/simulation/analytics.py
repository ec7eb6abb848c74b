"""A simulation's records and the SQL over them: the ``simulation`` table beside the
history (the simulated time and counts of every recorded generation), the packaged
analytics queries (``sql/analytics/*.sql``) and time travel to a generation.

>>> run_analytics(history, "rounds_per_rebalance")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.resources
import re
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import HistoryError, InvalidOptionError
from ..frames import GROUP as _G
from ..frames import TP as _TP
from ..frames import empty, one_row
from ..locations import is_path
from ..storage import open_table

SIMULATION_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("step", T.IntegerType()),
    T.StructField("at", T.TimestampType()),
    T.StructField("event_kinds", T.StringType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("members", T.LongType()),
    T.StructField("assigned", T.LongType()),
    T.StructField("unassigned", T.LongType()),
    T.StructField("moved", T.LongType()),
    T.StructField("revoked", T.LongType()),
    T.StructField("lost", T.LongType()),
])


def record_simulation(history, rows: DataFrame, gens: DataFrame, revs: DataFrame, *, lags_known: bool) -> None:
    """Every generation of the simulation in ``history`` (one commit per table), then
    its simulated times in the ``simulation`` table (one commit), both idempotent."""
    meta = gens.select(
        _G, "generation", "strategy", F.lower("protocol").alias("protocol"), "round",
        F.lit(datetime.now(timezone.utc)).cast("timestamp").alias("recorded_at"), "members", "unassigned")
    recorded = history.record_generations(
        rows, meta, revocations=revs.select(_G, "generation", "member_id", *_TP, "kind"), lags_known=lags_known)
    rid = one_row(recorded.agg(F.min("record_id")))[0]
    simulation_store(history).append(gens, app_id=f"spark-assign:simulation:{rid}")


def simulation_store(history):
    """The ``simulation`` Delta table beside ``history``: simulated time and
    counts of every recorded generation (:data:`SIMULATION_SCHEMA`)."""
    sep = "/" if is_path(history.location) else "."
    return open_table(history.spark, f"{history.location}{sep}simulation", SIMULATION_SCHEMA, backend=history.backend)


def simulation_table(history) -> DataFrame:
    """The ``simulation`` rows recorded beside ``history`` (empty when none)."""
    store = simulation_store(history)
    if not store.exists():
        return empty(history.spark, SIMULATION_SCHEMA)
    return store.read()


def analytics_sql(name: str) -> str:
    """The text of the packaged query ``spark_assign/sql/analytics/<name>.sql`` (also
    ``sql/analytics/`` in a checkout), read with :mod:`importlib.resources`, so it works
    from an installed wheel."""
    folder = importlib.resources.files("spark_assign") / "sql" / "analytics"
    path = folder / f"{name}.sql"
    if not path.is_file():
        known = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".sql"))
        raise InvalidOptionError(f"unknown analytics query {name!r}: expected one of {known}")
    return path.read_text()


def register_analytics_views(history, prefix: str = "") -> None:
    """Register ``generations``, ``assignments``, ``revocations`` (via
    ``history.register_views``), ``simulation`` and ``generation_times``."""
    history.register_views(prefix)
    simulation_table(history).createOrReplaceTempView(f"{prefix}simulation")
    sql = analytics_sql("generation_times")
    if prefix:
        for v in ("generations", "simulation"):
            sql = sql.replace(f"FROM {v}", f"FROM {prefix}{v}")
    history.spark.sql(sql).createOrReplaceTempView(f"{prefix}generation_times")


def run_analytics(history, name: str, *, register: bool = True, **params) -> DataFrame:
    """Run ``sql/analytics/<name>.sql`` over ``history`` with named parameters.

    >>> run_analytics(history, "partition_ownership_timeline", group_id="g", topic="t", partition=0)  # doctest: +SKIP
    """
    if register:
        register_analytics_views(history)
    return history.spark.sql(bind_parameters(analytics_sql(name), params))


#: a quoted string or name, or a comment (kept as they are), or a parameter marker (group 1)
_MARKER = re.compile(r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*"|`[^`]*`|--[^\n]*|/\*.*?\*/"""
                     r"|(?<![:\w]):([A-Za-z_]\w*)", re.S)


def bind_parameters(text: str, params: dict[str, object]) -> str:
    """``text`` with each named parameter marker ``:name`` replaced by ``params[name]`` as a SQL
    literal (strings quoted, None as NULL; ``::`` casts are left alone).

    ``spark.sql(text, args=params)`` binds them too, but not in every session: Delta's SQL
    parser drops the markers on Spark 4.1+ (delta-io/delta#7640); a classic session gets them
    back with ``spark.sql.legacy.parameterSubstitution.constantsOnly=true``, a Spark Connect
    session does not. Bound here, the queries run in both.

    >>> bind_parameters("SELECT * FROM t WHERE g = :group_id AND n = :n", {"group_id": "it's", "n": 3})
    "SELECT * FROM t WHERE g = 'it''s' AND n = 3"
    """
    def literal(m: re.Match) -> str:
        name = m.group(1)
        if name is None:  # a string, a quoted name or a comment
            return m.group(0)
        if name not in params:
            raise InvalidOptionError(f"SQL parameter :{name} not given: expected one of {sorted(params)}")
        value = params[name]
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, (int, float)):
            return repr(value)
        if isinstance(value, str):
            return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
        raise InvalidOptionError(f"SQL parameter :{name}: expected a string, number, bool or None, found "
                                 f"{type(value).__name__}")

    return _MARKER.sub(literal, text)


def generation_version(history, group_id: str, generation: int) -> int:
    """The Delta version of the ``generations`` table that committed generation
    ``generation`` of ``group_id`` (found by the record id in the commit's metadata)."""
    row = history.history(group_id).where(F.col("generation") == generation).select("record_id").first()
    if row is None:
        raise HistoryError(f"generation {generation} of group {group_id!r} is not recorded")
    log = history.delta_history("generations")
    meta_col = "userMetadata" if "userMetadata" in log.columns else "user_metadata"
    hit = one_row(log.where(F.col(meta_col).contains(row.record_id)).agg(F.min("version")))[0]
    if hit is None:
        raise HistoryError(f"no commit of the generations table carries record {row.record_id}")
    return int(hit)


def as_of_generation(history, group_id: str, generation: int) -> DataFrame:
    """Every group's assignment as of the commit of ``generation`` of ``group_id``
    (Delta time travel on the ``generations`` table, then
    ``sql/analytics/as_of_generation.sql``). Registers ``generations_asof``.

    >>> as_of_generation(history, "orders", 3).show()  # doctest: +SKIP
    """
    version = generation_version(history, group_id, generation)
    history.as_of("generations", version).createOrReplaceTempView("generations_asof")
    history.assignments().createOrReplaceTempView("assignments")
    return history.spark.sql(analytics_sql("as_of_generation"))
