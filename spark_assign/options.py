"""The options a strategy declares: what each accepts and how it is parsed, in one place.

Every strategy takes a fixed set of keyword options, declared in its record
(:mod:`spark_assign.strategies.registry`, which has the table). :func:`parse_declared`
takes the caller's options and returns them parsed, or raises
:class:`~spark_assign.errors.InvalidOptionError` naming the option, the strategy and
the valid choices: a misspelled option (``rack_awre=True``) is an error, never
silently dropped.

>>> parse_declared("strategy 'range'", {"rack_aware": RACK_AWARE}, {"rack_aware": "false"})
{'rack_aware': False}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

#: lag-aware's options
LAG_AWARE_OPTIONS: tuple[Option, ...] = (
    _named("balance", _choice("topic", "group")),
    Option("max_skew", "an int >= 0", _count),
    _named("tie_break", _choice("member_id", "hash")),
    Option("sticky", "a bool", _bool),
    Option("threshold", "a fraction in [0, 1]", _fraction),
    Option("cooperative", "a bool", _bool),
    Option("auto_offset_reset", "one of ['latest', 'earliest', 'none'] (any case)", _offset_reset),
    _named("method", _choice("auto", "wave", "step")),
)


def parse_declared(owner: str, declared: Mapping[str, Option], options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` parsed by the ``declared`` ones (name -> option) of ``owner`` (as an error
    names it: "strategy 'sticky'"); InvalidOptionError for an unknown option (naming the
    valid ones) or an ill-typed value (naming what it accepts)."""
    parsed = {}
    for name, value in options.items():
        if name not in declared:
            raise InvalidOptionError(
                f"unknown option {name!r} of {owner}: expected "
                + (f"one of {sorted(declared)}" if declared else "none (the strategy takes no options)"))
        option = declared[name]
        try:
            parsed[name] = option.parse(value)
        except (ValueError, TypeError):
            raise InvalidOptionError(f"option {name!r} of {owner}: expected {option.expected}, found {value!r}") from None
    return parsed
