"""What each strategy is: one record per strategy, which every other module reads.

A :class:`Strategy` says what Kafka calls it (its short name and its Java class names), which
rebalance protocols it supports (``EAGER``, or ``COOPERATIVE`` and ``EAGER``, as Kafka's
``supportedProtocols``), which group protocols run it (``classic``: a client assignor the
group leader runs; ``consumer``: one of KIP-848's broker assignors), the options it declares,
what inputs it reads beyond the members and partitions, and the function that implements it
(imported on first use, so that this module imports no strategy).

================== ================== =============== =============================================
strategy           group protocols    protocols       options (values, default first)
================== ================== =============== =============================================
range              classic, consumer  EAGER           ``rack_aware``: ``"auto"``, True, False
roundrobin         classic            EAGER           (none)
sticky             classic            EAGER           ``rack_aware``; ``member_order``: ``"member_id"``, ``"java_hash"``
cooperative-sticky classic            COOPERATIVE     ``rack_aware``, ``member_order``
lag-aware          classic            EAGER           ``balance``, ``max_skew``, ``tie_break``, ``sticky``,
                                                      ``threshold``, ``cooperative``, ``auto_offset_reset``,
                                                      ``method`` (:data:`~spark_assign.options.LAG_AWARE_OPTIONS`)
uniform            consumer           (the broker's)  (none: the broker's assignors take none)
================== ================== =============== =============================================

>>> strategy("org.apache.kafka.clients.consumer.CooperativeStickyAssignor").protocols
('COOPERATIVE', 'EAGER')
>>> strategies_of("consumer")
('range', 'uniform')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidOptionError, UnknownStrategyError
from ..options import LAG_AWARE_OPTIONS, MEMBER_ORDER, RACK_AWARE, Option, parse_declared

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"
#: the rebalance protocols, in increasing order, as Kafka's enum
PROTOCOLS = (EAGER, COOPERATIVE)
#: the group protocols: ``classic`` (JoinGroup/SyncGroup, the group leader's client
#: assignor) or ``consumer`` (KIP-848: the broker's assignor)
GROUP_PROTOCOLS = ("classic", "consumer")


@dataclass(frozen=True)
class Strategy:
    """One strategy. ``implementation``: ``module:function``, a function of normalized,
    validated ``members`` and ``partitions`` (plus ``lags=``, ``validate=``, ``topic_sizes=``
    and its options) returning ``group_id, member_id, topic, partition``."""

    name: str
    implementation: str
    group_protocols: tuple[str, ...]
    protocols: tuple[str, ...] = (EAGER,)
    client_class: str | None = None
    server_class: str | None = None
    options: tuple[Option, ...] = ()
    #: the options it runs with under KIP-848 (the broker's assignors take none from the caller)
    consumer_options: Mapping[str, Any] = field(default_factory=dict)
    #: it reads the partitions' per-topic sizes (``topic_sizes=``): validation builds them
    reads_topic_sizes: bool = False
    #: its result plans join what a small call stored, so such a call stores its result
    #: before returning it (:func:`~spark_assign.execution.small_call_result`)
    stores_small_result: bool = False

    @property
    def function(self) -> Callable[..., Any]:
        """The function that implements it."""
        module, name = self.implementation.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def cooperative(self) -> bool:
        """Whether it supports the COOPERATIVE protocol."""
        return COOPERATIVE in self.protocols

    def declared(self) -> dict[str, Option]:
        """Its options, by name."""
        return {o.name: o for o in self.options}


_CLIENT = "org.apache.kafka.clients.consumer."
_SERVER = "org.apache.kafka.coordinator.group.assignor."

#: every strategy, by its short name
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("range", "spark_assign.strategies.range:assign_range", ("classic", "consumer"),
             client_class=_CLIENT + "RangeAssignor", server_class=_SERVER + "RangeAssignor",
             options=(RACK_AWARE,), consumer_options={"rack_aware": False}),
    Strategy("roundrobin", "spark_assign.strategies.roundrobin:assign_roundrobin", ("classic",),
             client_class=_CLIENT + "RoundRobinAssignor"),
    Strategy("sticky", "spark_assign.strategies.sticky:assign_sticky", ("classic",),
             client_class=_CLIENT + "StickyAssignor", options=(RACK_AWARE, MEMBER_ORDER),
             reads_topic_sizes=True, stores_small_result=True),
    Strategy("cooperative-sticky", "spark_assign.strategies.cooperative_sticky:assign_cooperative_sticky",
             ("classic",), protocols=(COOPERATIVE, EAGER), client_class=_CLIENT + "CooperativeStickyAssignor",
             options=(RACK_AWARE, MEMBER_ORDER), reads_topic_sizes=True, stores_small_result=True),
    Strategy("lag-aware", "spark_assign.strategies.lag_aware:assign_lag_aware", ("classic",),
             client_class=_CLIENT + "LagAwareAssignor", options=LAG_AWARE_OPTIONS, stores_small_result=True),
    Strategy("uniform", "spark_assign.strategies.uniform:assign_uniform", ("consumer",),
             server_class=_SERVER + "UniformAssignor", reads_topic_sizes=True, stores_small_result=True),
)}

#: Kafka's client class names, accepted wherever a name is
ALIASES: dict[str, str] = {s.client_class: s.name for s in STRATEGIES.values() if s.client_class}
#: the broker's (KIP-848) class names: they imply ``group_protocol="consumer"``
SERVER_ALIASES: dict[str, str] = {s.server_class: s.name for s in STRATEGIES.values() if s.server_class}
#: the assignors that support COOPERATIVE (they support EAGER too)
COOPERATIVE_ASSIGNORS: tuple[str, ...] = tuple(s.name for s in STRATEGIES.values() if s.cooperative)


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


def strategy(name: str) -> Strategy:
    """The record of strategy ``name`` (a short name or a Kafka class name)."""
    return STRATEGIES[strategy_name(name)]


def strategies_of(group_protocol: str) -> tuple[str, ...]:
    """The strategies a group protocol runs, in this module's order."""
    return tuple(s.name for s in STRATEGIES.values() if group_protocol in s.group_protocols)


def group_protocol_of(name: str, group_protocol: str | None = None) -> str:
    """The group protocol a call runs: ``group_protocol`` when given, else ``consumer``
    for a strategy only the broker runs (``uniform``, or a broker class name), else
    ``classic``. Raises InvalidOptionError when the strategy does not run under it.

    >>> group_protocol_of("uniform"), group_protocol_of("range")
    ('consumer', 'classic')
    >>> group_protocol_of("org.apache.kafka.coordinator.group.assignor.RangeAssignor")
    'consumer'
    """
    record = strategy(name)
    implied = "consumer" if name in SERVER_ALIASES or "classic" not in record.group_protocols else None
    if group_protocol is None:
        return implied or "classic"
    if group_protocol not in GROUP_PROTOCOLS:
        raise InvalidOptionError(
            f"option group_protocol of strategy {record.name!r}: expected one of {list(GROUP_PROTOCOLS)}, "
            f"found {group_protocol!r}")
    if group_protocol not in record.group_protocols or (implied and group_protocol != implied):
        raise InvalidOptionError(
            f"strategy {name!r} does not run under group_protocol={group_protocol!r}: that protocol's "
            f"strategies are {list(strategies_of(group_protocol))}")
    return group_protocol


def check_options(name: str, options: Mapping[str, Any], *, context: str = "") -> dict[str, Any]:
    """``options`` parsed for strategy ``name`` (a canonical name); InvalidOptionError for an
    unknown option (naming the valid ones) or an ill-typed value (naming what it accepts).

    >>> check_options("range", {"rack_aware": "false"})
    {'rack_aware': False}
    >>> check_options("sticky", {"rack_awre": True})
    Traceback (most recent call last):
    ...
    spark_assign.errors.InvalidOptionError: unknown option 'rack_awre' of strategy 'sticky': expected one of ['member_order', 'rack_aware']
    """
    return parse_declared(f"strategy {name!r}{context}", STRATEGIES[name].declared(), options)


def options_for(names: Iterable[str], options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For a call that may run any of the strategies ``names`` (canonical; rebalance and
    simulate select one per group): per strategy, the options it declares, parsed. An
    option no strategy of the call declares raises InvalidOptionError.

    >>> options_for(["range", "roundrobin"], {"rack_aware": False})
    {'range': {'rack_aware': False}, 'roundrobin': {}}
    """
    names = list(dict.fromkeys(names))
    known = {option for s in names for option in STRATEGIES[s].declared()}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidOptionError(
            f"unknown option {unknown[0]!r}: none of the strategies {names} declares it; "
            f"their options are {sorted(known)}")
    return {s: check_options(s, {k: v for k, v in options.items() if k in STRATEGIES[s].declared()}) for s in names}


def strategy_options(name: str | None, options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For :func:`~spark_assign.rebalance.rebalance` and the simulations: per client
    strategy, the ``options`` it declares, parsed. A call with a forced strategy ``name``
    takes that strategy's options, one that selects an assignor per group those of any
    client strategy; anything else raises InvalidOptionError.

    >>> strategy_options(None, {"rack_aware": False})["range"]
    {'rack_aware': False}
    """
    if name is not None:
        check_options(strategy_name(name), options)
    return options_for(strategies_of("classic"), options)
