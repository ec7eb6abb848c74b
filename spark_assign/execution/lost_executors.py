"""Lost executors: what names a Spark failure over local checkpoint blocks that died with
their executor (:func:`~spark_assign.execution.store.materialize` under the ``local`` policy),
the executor and the setting that survives it, for the
:class:`~spark_assign.errors.ExecutorLostError` a call's scope raises
(:func:`~spark_assign.execution.scope.call_scope`).

>>> lost_block(RuntimeError("Checkpoint block rdd_12_0 not found!"))
'rdd_12_0'
"""

from __future__ import annotations

import re
import time

from pyspark.sql import SparkSession

from .policy import MATERIALIZATION_CONF

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


#: how long a failure over lost checkpoint blocks waits for the driver to drop the lost executor
LOST_EXECUTOR_WAIT_S = 3.0


def executors_after_loss(spark: SparkSession | None, before: set[str]) -> set[str] | None:
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
