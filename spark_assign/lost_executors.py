"""Lost executors: a Spark failure over local checkpoint blocks that died with their
executor (:func:`~spark_assign.lineage.materialize` under the ``local`` policy) raised as
:class:`~spark_assign.errors.ExecutorLostError`, naming the executor and the setting that
survives it. The public entry points carry :func:`explains_lost_executors`.

>>> @explains_lost_executors
... def assign_all(members): ...
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from .errors import ExecutorLostError
from .lineage import MATERIALIZATION_CONF

_F = TypeVar("_F", bound=Callable[..., Any])

_LOST_BLOCK = re.compile(r"Checkpoint block (\S+) not found", re.IGNORECASE)


def executor_ids(spark: SparkSession | None) -> set[str] | None:
    """The ids of the session's live executors, for naming a lost one in an error;
    None where Spark does not say (Spark Connect). Diagnostics only: the one place
    the library reaches into the JVM, and only for a classic session."""
    try:
        return set(filter(None, spark.sparkContext._jsc.sc().getExecutorIds().mkString(",").split(",")))  # type: ignore[union-attr]
    except Exception:
        return None


def lost_block(exc: BaseException) -> str | None:
    """The local checkpoint block whose loss with its executor failed ``exc``; None for
    any other failure."""
    found = _LOST_BLOCK.search(str(exc))
    return found.group(1) if found else None


def lost_executor_message(block: str, before: set[str] | None = None, after: set[str] | None = None) -> str:
    """The ExecutorLostError message for a Spark failure over the lost local checkpoint
    ``block`` (:func:`lost_block`); ``before``/``after``: the live executor ids when the
    call started and when it failed."""
    lost = sorted((before or set()) - (after or set())) if before is not None and after is not None else []
    who = (f"executor {', '.join(lost)}" if len(lost) == 1 else f"executors {', '.join(lost)}") if lost \
        else "an executor"
    return (f"{who} holding this call's local checkpoints (block {block}) was lost, and local "
            f"checkpoints cannot be recomputed: nothing of this call was recorded. Re-run it; to survive lost "
            f"executors, set {MATERIALIZATION_CONF}=reliable (or leave it 'auto') with spark.checkpoint.dir set "
            "to a folder every executor can reach")


def _session_of(args: tuple, kwargs: dict) -> SparkSession | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, DataFrame):
            return value.sparkSession
        spark = getattr(value, "spark", None)  # AssignmentHistory
        if spark is not None and hasattr(spark, "conf"):
            return spark
    return SparkSession.getActiveSession()


def explains_lost_executors(fn: _F) -> _F:
    """Decorator for public entry points: a Spark failure caused by lost local
    checkpoint blocks is raised as ExecutorLostError, naming the lost executor and
    the setting to change."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spark = _session_of(args, kwargs)
        outer = _EXECUTORS_BEFORE.get()
        # the executors when the outermost entry point started: an inner one (a rebalance's
        # assign() or recording) may start after the executor was lost and dropped
        before = outer if outer is not None else executor_ids(spark)
        token = _EXECUTORS_BEFORE.set(before) if outer is None and before is not None else None
        try:
            return fn(*args, **kwargs)
        except ExecutorLostError:
            raise
        except Exception as exc:
            block = lost_block(exc)
            if block is None:
                raise
            after = _executors_after_loss(spark, before) if before is not None else None
            raise ExecutorLostError(lost_executor_message(block, before, after)) from exc
        finally:
            if token is not None:
                _EXECUTORS_BEFORE.reset(token)

    return wrapper  # type: ignore[return-value]


#: the live executor ids when the outermost public entry point in progress started
_EXECUTORS_BEFORE: ContextVar[set[str] | None] = ContextVar("spark_assign_executors_before", default=None)


#: how long a failure over lost checkpoint blocks waits for the driver to drop the lost executor
LOST_EXECUTOR_WAIT_S = 3.0


def _executors_after_loss(spark: SparkSession | None, before: set[str]) -> set[str] | None:
    """The live executor ids after a failure over lost checkpoint blocks. A job can fail
    on the lost blocks before the driver has removed the executor that held them, so
    while every executor of ``before`` still looks alive this asks again for up to
    :data:`LOST_EXECUTOR_WAIT_S` (error path only): the error can then name it."""
    deadline = time.monotonic() + LOST_EXECUTOR_WAIT_S
    after = executor_ids(spark)
    while after is not None and not (before - after) and time.monotonic() < deadline:
        time.sleep(0.1)
        after = executor_ids(spark)
    return after
