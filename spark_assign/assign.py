"""``assign()``: the one entry point every strategy plugs into (the strategies are the records
of :mod:`spark_assign.strategies.registry`)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from .errors import InvalidOptionError
from .execution import (
    entry_point,
    in_small_call,
    materialize,
    small_call_result,
    small_call_undecided,
)
from .execution.small_inputs import decide_small_inputs
from .inputs import (
    ASSIGNMENT_COLUMNS,
    normalize_members,
    normalize_partitions,
    validate_inputs,
)
from .strategies.registry import check_options, group_protocol_of
from .strategies.registry import strategy as get_strategy


@entry_point
def assign(
    members: DataFrame,
    partitions: DataFrame,
    strategy: str,
    *,
    lags: DataFrame | None = None,
    validate: bool = True,
    checkpoint: bool = True,
    group_protocol: str | None = None,
    **options: Any,
) -> DataFrame:
    """Assign the partitions of every group in ``members`` with ``strategy``.

    One call handles any number of groups in one Spark job; the result does not
    depend on Spark's partitioning or row order. Returns one row per assigned
    partition: ``group_id, member_id, topic, partition``; members with nothing
    assigned are absent.

    >>> members = spark.createDataFrame(
    ...     [("g1", "c0", ["t0"]), ("g1", "c1", ["t0"])],
    ...     "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t0", p) for p in range(3)], "topic string, partition int")
    >>> assign(members, parts, "range").orderBy("partition").show()
    +--------+---------+-----+---------+
    |group_id|member_id|topic|partition|
    +--------+---------+-----+---------+
    |      g1|       c0|   t0|        0|
    |      g1|       c0|   t0|        1|
    |      g1|       c1|   t0|        2|
    +--------+---------+-----+---------+
    <BLANKLINE>

    ``validate=False`` skips the input checks (one Spark action: the members' checks and
    the partitions' per-topic summary) for inputs already known to be valid. ``checkpoint``
    (default) materializes the normalized inputs (under the session's materialization
    policy, :mod:`spark_assign.execution`; a lazy ``localCheckpoint`` by default, stored by
    the first action that reads them):
    strategies use their inputs many times, and inputs built from earlier assignments (follow-up rounds,
    simulations) would otherwise carry ever deeper plans that Spark re-analyzes
    at every step. A validated call whose inputs are small (``spark.assign.smallCallRows``,
    :mod:`spark_assign.execution`) keeps its inputs and what it materializes on the driver and
    runs interpreted: a limited read of each input, before anything else, decides it
    (:func:`~spark_assign.execution.small_inputs.decide_small_inputs`); its result, but range's and
    roundrobin's, comes back stored (:func:`~spark_assign.execution.small_call_result`). Strategy options (``rack_aware=``, ...) are the ones the strategy
    declares (:mod:`spark_assign.strategies.registry`); an unknown or ill-typed one raises
    :class:`~spark_assign.errors.InvalidOptionError`.

    ``group_protocol``: ``"classic"`` (the client assignors, the default) or
    ``"consumer"`` (KIP-848: the broker's ``uniform`` and ``range``; implied by
    ``"uniform"`` and by the broker's class names). The server ``range`` ignores
    owned partitions and racks: it takes no options.
    """
    protocol = group_protocol_of(strategy, group_protocol)
    record = get_strategy(strategy)
    if protocol == "consumer":
        if options:
            raise InvalidOptionError(
                f"unknown option(s) {sorted(options)} of strategy {record.name!r} under "
                "group_protocol='consumer': the broker's assignors take none (no rack awareness)")
        options = dict(record.consumer_options)  # the server range: the plain range, owned lists ignored
    options = check_options(record.name, options)
    m, p = normalize_members(members), normalize_partitions(partitions)
    if validate and small_call_undecided(m.sparkSession):
        # read first, a limited read each: a small call keeps its inputs on the driver from
        # here on (a call inside another keeps the outer call's decision)
        m, p = decide_small_inputs(m, p)
    if checkpoint and not in_small_call():
        # lazy: the lineage is cut now (no job); the first action that reads an input stores it
        m, p = materialize(m, eager=False), materialize(p, eager=False)
    # the validated partitions' per-topic sizes: strategies that need them reuse them
    sizes = validate_inputs(m, p, sizes=record.reads_topic_sizes) if validate else None
    result = record.function(m, p, lags=lags, validate=validate, topic_sizes=sizes, **options).select(
        *ASSIGNMENT_COLUMNS)
    return small_call_result(result) if record.stores_small_result else result
