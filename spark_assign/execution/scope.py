"""A call's scope: the one place a public entry point's execution policy is created, its
session settings given back, and a lost executor explained.

>>> @entry_point
... def assign_all(members): ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from ..errors import ExecutorLostError
from .lost_executors import executor_ids, executors_after_loss, lost_block, lost_executor_message
from .policy import _POLICY, OPEN, ExecutionPolicy

_F = TypeVar("_F", bound=Callable[..., Any])


@contextmanager
def call_scope(spark: SparkSession | None) -> Iterator[ExecutionPolicy]:
    """The execution policy of the call it encloses: a new one for an outermost call (with the
    session's live executors, to name a lost one), the outer call's inside another. A scope
    entered before its call decided (small or large) ends the decision taken inside it, and
    gives back the session settings that decision applied; a failure over local checkpoint blocks lost with their
    executor is raised as :class:`~spark_assign.errors.ExecutorLostError`.

    >>> with call_scope(spark) as policy:
    ...     policy.state
    'open'
    """
    policy = _POLICY.get()
    token = None
    if policy is None:
        policy = ExecutionPolicy(executor_ids(spark))
        token = _POLICY.set(policy)
    undecided = policy.state == OPEN
    policy.depth += 1
    try:
        yield policy
    except ExecutorLostError:
        raise
    except Exception as exc:
        block = lost_block(exc)
        if block is None:
            raise
        before = policy.executors_before
        after = executors_after_loss(spark, before) if before is not None else None
        raise ExecutorLostError(lost_executor_message(block, before, after)) from exc
    finally:
        policy.depth -= 1
        try:
            if undecided:  # a decision taken in this scope ends with it, and its settings too
                policy.state = OPEN
                policy.restore_settings()
        finally:
            if token is not None:
                _POLICY.reset(token)


def _session_of(args: tuple, kwargs: dict) -> SparkSession | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, DataFrame):
            return value.sparkSession
        spark = getattr(value, "spark", None)  # AssignmentHistory
        if spark is not None and hasattr(spark, "conf"):
            return spark
    return SparkSession.getActiveSession()


def entry_point(fn: _F) -> _F:
    """Decorator for the functions a call enters by: each runs in a :func:`call_scope` of the
    session of its first DataFrame (or history) argument."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with call_scope(_session_of(args, kwargs)):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
