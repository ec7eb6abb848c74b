"""The options each strategy declares, checked in one place.

Every strategy takes a fixed set of keyword options. :func:`check_options` takes the
caller's options and returns them parsed, or raises
:class:`~spark_assign.errors.InvalidOptionError` naming the option, the strategy and
the valid choices: a misspelled option (``rack_awre=True``) is an error, never
silently dropped.

================== ======================================= ==========================
strategy           option                                  values (default first)
================== ======================================= ==========================
range              ``rack_aware``                          ``"auto"``, True, False
roundrobin         (none)
sticky             ``rack_aware``, ``member_order``        ``"member_id"``, ``"java_hash"``
cooperative-sticky ``rack_aware``, ``member_order``
lag-aware          ``balance``                             ``"topic"``, ``"group"``
\\                  ``max_skew``                            int >= 0 (0)
\\                  ``tie_break``                           ``"member_id"``, ``"hash"``
\\                  ``sticky``, ``cooperative``              bool (False)
\\                  ``threshold``                           fraction in [0, 1] (0.1)
\\                  ``auto_offset_reset``                   ``"latest"``, ``"earliest"``, ``"none"``
\\                  ``method``                              ``"auto"``, ``"wave"``, ``"step"``
uniform            (none: the broker's assignors take none)
================== ======================================= ==========================

>>> check_options("range", {"rack_aware": "false"})
{'rack_aware': False}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidOptionError


@dataclass(frozen=True)
class Option:
    """One declared option: its name, what it accepts (``expected``, for the error
    message) and ``parse``, which returns the parsed value or raises ValueError."""

    name: str
    expected: str
    parse: Callable[[Any], Any]


def parse_rack_aware(value: Any) -> Any:
    """The ``rack_aware`` option, parsed the same way everywhere: ``"auto"`` (Kafka's
    rule, also for None), ``True`` or ``False``; the strings ``"true"``/``"false"``
    (any case, as a config file gives them) are the booleans.

    >>> parse_rack_aware("TRUE"), parse_rack_aware(None), parse_rack_aware(False)
    (True, 'auto', False)
    """
    if value is None or isinstance(value, bool):
        return "auto" if value is None else value
    if isinstance(value, str) and value.strip().lower() in ("auto", "true", "false"):
        return {"auto": "auto", "true": True, "false": False}[value.strip().lower()]
    raise ValueError(value)


def _choice(*choices: str) -> Option:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(value)
        return value
    return Option("", f"one of {list(choices)}", parse)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(value)
    return float(value)


def _offset_reset(value: Any) -> str:
    if not isinstance(value, str) or value.strip().lower() not in ("latest", "earliest", "none"):
        raise ValueError(value)
    return value.strip().lower()


def _named(name: str, option: Option) -> Option:
    return Option(name, option.expected, option.parse)


RACK_AWARE = Option("rack_aware", "one of ['auto', True, False]", parse_rack_aware)
MEMBER_ORDER = _named("member_order", _choice("member_id", "java_hash"))

#: strategy -> its declared options
STRATEGY_OPTIONS: dict[str, tuple[Option, ...]] = {
    "range": (RACK_AWARE,),
    "roundrobin": (),
    "sticky": (RACK_AWARE, MEMBER_ORDER),
    "cooperative-sticky": (RACK_AWARE, MEMBER_ORDER),
    "lag-aware": (
        _named("balance", _choice("topic", "group")),
        Option("max_skew", "an int >= 0", _count),
        _named("tie_break", _choice("member_id", "hash")),
        Option("sticky", "a bool", _bool),
        Option("threshold", "a fraction in [0, 1]", _fraction),
        Option("cooperative", "a bool", _bool),
        Option("auto_offset_reset", "one of ['latest', 'earliest', 'none'] (any case)", _offset_reset),
        _named("method", _choice("auto", "wave", "step")),
    ),
    "uniform": (),
}


def declared(strategy: str) -> dict[str, Option]:
    """The options ``strategy`` (a canonical name) declares, by name."""
    return {o.name: o for o in STRATEGY_OPTIONS[strategy]}


def check_options(strategy: str, options: Mapping[str, Any], *, context: str = "") -> dict[str, Any]:
    """``options`` parsed for ``strategy`` (a canonical name); InvalidOptionError for an
    unknown option (naming the valid ones) or an ill-typed value (naming what it accepts).

    >>> check_options("sticky", {"rack_awre": True})
    Traceback (most recent call last):
    ...
    spark_assign.errors.InvalidOptionError: unknown option 'rack_awre' of strategy 'sticky': expected one of ['member_order', 'rack_aware']
    """
    valid = declared(strategy)
    parsed = {}
    for name, value in options.items():
        if name not in valid:
            raise InvalidOptionError(
                f"unknown option {name!r} of strategy {strategy!r}{context}: expected "
                + (f"one of {sorted(valid)}" if valid else "none (the strategy takes no options)"))
        option = valid[name]
        try:
            parsed[name] = option.parse(value)
        except (ValueError, TypeError):
            raise InvalidOptionError(
                f"option {name!r} of strategy {strategy!r}{context}: expected {option.expected}, found {value!r}"
            ) from None
    return parsed


def options_for(strategies: Iterable[str], options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For a call that may run any of ``strategies`` (canonical names; rebalance and
    simulate select one per group): per strategy, the options it declares, parsed.
    An option no strategy of the call declares raises InvalidOptionError.

    >>> options_for(["range", "roundrobin"], {"rack_aware": False})
    {'range': {'rack_aware': False}, 'roundrobin': {}}
    """
    strategies = list(dict.fromkeys(strategies))
    known = {name for s in strategies for name in declared(s)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidOptionError(
            f"unknown option {unknown[0]!r}: none of the strategies {strategies} declares it; "
            f"their options are {sorted(known)}")
    return {s: check_options(s, {k: v for k, v in options.items() if k in declared(s)}) for s in strategies}


def strategy_options(strategy: str | None, options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For :func:`~spark_assign.rebalance.rebalance` and the simulations: per client
    strategy, the ``options`` it declares, parsed. A call with a forced ``strategy``
    takes that strategy's options, one that selects an assignor per group those of any
    client strategy; anything else raises InvalidOptionError.

    >>> strategy_options(None, {"rack_aware": False})["range"]
    {'rack_aware': False}
    """
    from .assign import PROTOCOL_STRATEGIES, strategy_name

    client = PROTOCOL_STRATEGIES["classic"]
    if strategy is not None:
        check_options(strategy_name(strategy), options)
    return options_for(client, options)
