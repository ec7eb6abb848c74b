"""``assign()``: the one entry point every strategy plugs into."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from .errors import InvalidOptionError, UnknownStrategyError
from .inputs import (
    ASSIGNMENT_COLUMNS,
    normalize_members,
    normalize_partitions,
    validate_inputs,
)
from .lineage import (
    in_small_call,
    materialize,
    small_call_result,
    small_call_scope,
    small_call_undecided,
)
from .lost_executors import explains_lost_executors
from .options import check_options
from .small_inputs import decide_small_inputs

#: Kafka's assignor names -> the module and function that implement them.
#: Each function takes normalized, validated ``members`` and ``partitions``
#: (plus ``lags=``, ``topic_sizes=``: the partitions' :func:`~spark_assign.inputs.topic_sizes`
#: when validation computed them, else None, and strategy options) and returns
#: ``group_id, member_id, topic, partition``.
STRATEGIES: dict[str, tuple[str, str]] = {
    "range": ("spark_assign.strategies.range", "assign_range"),
    "roundrobin": ("spark_assign.strategies.roundrobin", "assign_roundrobin"),
    "sticky": ("spark_assign.strategies.sticky", "assign_sticky"),
    "cooperative-sticky": ("spark_assign.strategies.cooperative_sticky", "assign_cooperative_sticky"),
    "lag-aware": ("spark_assign.strategies.lag_aware", "assign_lag_aware"),
    "uniform": ("spark_assign.strategies.uniform", "assign_uniform"),
}

#: the strategies that read the partitions' topic sizes (``topic_sizes=``): validation
#: builds them for these only
SIZED_STRATEGIES = frozenset({"sticky", "cooperative-sticky", "uniform"})

#: the strategies whose result plans join what a small call stored: a small call of one stores
#: its result before returning it (:func:`~spark_assign.lineage.small_call_result`). Range and
#: roundrobin's plans read once as they are (a job fewer: 0.37-0.49 s against 0.42-0.54 s a call)
STORED_SMALL_RESULTS = frozenset({"sticky", "cooperative-sticky", "lag-aware", "uniform"})

#: the rebalance protocols a group can run: ``classic`` (JoinGroup/SyncGroup, the
#: group leader's client assignor) or ``consumer`` (KIP-848: the broker's assignor)
GROUP_PROTOCOLS = ("classic", "consumer")

#: the strategies of each protocol: KIP-848's server-side assignors are ``uniform``
#: (the broker's default) and ``range`` (Kafka's server RangeAssignor)
PROTOCOL_STRATEGIES: dict[str, tuple[str, ...]] = {
    "classic": ("range", "roundrobin", "sticky", "cooperative-sticky", "lag-aware"),
    "consumer": ("uniform", "range"),
}

#: Kafka's class names for the same assignors, accepted wherever a name is.
ALIASES: dict[str, str] = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.LagAwareAssignor": "lag-aware",
}

#: the broker's (KIP-848) class names: they imply ``group_protocol="consumer"``
SERVER_ALIASES: dict[str, str] = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def strategy_name(name: str) -> str:
    """The canonical name of a strategy (Kafka's short name), or UnknownStrategyError.

    >>> strategy_name("org.apache.kafka.clients.consumer.RangeAssignor")
    'range'
    """
    canonical = ALIASES.get(name, SERVER_ALIASES.get(name, name))
    if canonical not in STRATEGIES:
        raise UnknownStrategyError(
            f"unknown strategy {name!r}: expected one of {sorted(STRATEGIES)} "
            f"(or Kafka's class names {sorted(ALIASES) + sorted(SERVER_ALIASES)})"
        )
    return canonical


def group_protocol_of(strategy: str, group_protocol: str | None = None) -> str:
    """The rebalance protocol a call runs: ``group_protocol`` when given, else
    ``consumer`` for a server-side assignor (``uniform``, or a broker class name),
    else ``classic``. Raises InvalidOptionError when the strategy does not exist
    under that protocol.

    >>> group_protocol_of("uniform"), group_protocol_of("range")
    ('consumer', 'classic')
    >>> group_protocol_of("org.apache.kafka.coordinator.group.assignor.RangeAssignor")
    'consumer'
    """
    canonical = strategy_name(strategy)
    implied = "consumer" if strategy in SERVER_ALIASES or canonical not in PROTOCOL_STRATEGIES["classic"] else None
    if group_protocol is None:
        return implied or "classic"
    if group_protocol not in GROUP_PROTOCOLS:
        raise InvalidOptionError(
            f"option group_protocol of strategy {canonical!r}: expected one of {list(GROUP_PROTOCOLS)}, "
            f"found {group_protocol!r}")
    if canonical not in PROTOCOL_STRATEGIES[group_protocol] or (implied and group_protocol != implied):
        raise InvalidOptionError(
            f"strategy {strategy!r} does not run under group_protocol={group_protocol!r}: that protocol's "
            f"strategies are {list(PROTOCOL_STRATEGIES[group_protocol])}")
    return group_protocol


def strategy_function(name: str) -> Callable[..., DataFrame]:
    """The function implementing strategy ``name``."""
    module, func = STRATEGIES[strategy_name(name)]
    return getattr(importlib.import_module(module), func)


@explains_lost_executors
@small_call_scope
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
    >>> assign(members, parts, "range").orderBy("partition").show()  # doctest: +SKIP
    +--------+---------+-----+---------+
    |group_id|member_id|topic|partition|
    +--------+---------+-----+---------+
    |      g1|       c0|   t0|        0|
    |      g1|       c0|   t0|        1|
    |      g1|       c1|   t0|        2|
    +--------+---------+-----+---------+

    ``validate=False`` skips the input checks (one Spark action: the members' checks and
    the partitions' per-topic summary) for inputs already known to be valid. ``checkpoint``
    (default) materializes the normalized inputs (under the session's materialization
    policy, :mod:`spark_assign.lineage`; a lazy ``localCheckpoint`` by default, stored by
    the first action that reads them):
    strategies use their inputs many times, and inputs built from earlier assignments (follow-up rounds,
    simulations) would otherwise carry ever deeper plans that Spark re-analyzes
    at every step. A validated call whose inputs are small (``spark.assign.smallCallRows``,
    :mod:`spark_assign.lineage`) keeps its inputs and what it materializes on the driver and
    runs interpreted: a limited read of each input, before anything else, decides it
    (:func:`~spark_assign.small_inputs.decide_small_inputs`); its result, but range's and
    roundrobin's, comes back stored (:func:`~spark_assign.lineage.small_call_result`). Strategy options (``rack_aware=``, ...) are the ones the strategy
    declares (:mod:`spark_assign.options`); an unknown or ill-typed one raises
    :class:`~spark_assign.errors.InvalidOptionError`.

    ``group_protocol``: ``"classic"`` (the client assignors, the default) or
    ``"consumer"`` (KIP-848: the broker's ``uniform`` and ``range``; implied by
    ``"uniform"`` and by the broker's class names). The server ``range`` ignores
    owned partitions and racks: it takes no options.
    """
    protocol = group_protocol_of(strategy, group_protocol)
    canonical = strategy_name(strategy)
    if protocol == "consumer":
        if options:
            raise InvalidOptionError(
                f"unknown option(s) {sorted(options)} of strategy {canonical!r} under "
                "group_protocol='consumer': the broker's assignors take none (no rack awareness)")
        if canonical == "range":  # the server range: the plain range, owned lists ignored
            options = {"rack_aware": False}
    options = check_options(canonical, options)
    fn = strategy_function(strategy)
    m, p = normalize_members(members), normalize_partitions(partitions)
    if validate and small_call_undecided(m.sparkSession):
        # read first, a limited read each: a small call keeps its inputs on the driver from
        # here on (a call inside another keeps the outer call's decision)
        m, p = decide_small_inputs(m, p)
    if checkpoint and not in_small_call():
        # lazy: the lineage is cut now (no job); the first action that reads an input stores it
        m, p = materialize(m, eager=False), materialize(p, eager=False)
    # the validated partitions' per-topic sizes: strategies that need them reuse them
    sizes = validate_inputs(m, p, sizes=canonical in SIZED_STRATEGIES) if validate else None
    result = fn(m, p, lags=lags, validate=validate, topic_sizes=sizes, **options).select(*ASSIGNMENT_COLUMNS)
    return small_call_result(result) if canonical in STORED_SMALL_RESULTS else result
