"""The exceptions spark-assign raises.

Every error is a :class:`SparkAssignError`. Input errors name what was expected
and what was found, with the offending groups, members or rows, so a pipeline
log points straight at the bad record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: how many offending rows an error message lists before it says "and N more"
MAX_LISTED = 10


class SparkAssignError(Exception):
    """Base class of every error raised by spark-assign."""


class InvalidInputError(SparkAssignError, ValueError):
    """An input DataFrame does not meet the contract.

    ``rows`` holds the offending rows (as dicts), at most :data:`MAX_LISTED`.
    """

    def __init__(self, message: str, rows: Sequence[dict] = ()):
        super().__init__(message)
        self.rows = list(rows)


class MissingColumnError(InvalidInputError):
    """A required column is missing or has the wrong type."""


class ColumnTypeError(MissingColumnError):
    """A column has a type that cannot stand for the contract's (``topics`` as a string,
    ``partition`` as a string that is not a number); the message names the column, the
    expected type and the found type."""


class InvalidMembersError(InvalidInputError):
    """The members DataFrame has null ids, repeated member ids or bad owned partitions."""


class InvalidPartitionsError(InvalidInputError):
    """The partitions (cluster metadata) DataFrame has null, negative or repeated partitions."""


class InvalidLagsError(InvalidInputError):
    """The lags DataFrame has negative offsets or lags, or inconsistent offsets."""


class InvalidEventsError(InvalidInputError):
    """A simulation events table is out of order or refers to unknown members."""


class InvalidConfigError(InvalidInputError):
    """A pipeline's config (YAML file or flags) has an unknown key or an invalid value."""


class UnknownStrategyError(SparkAssignError, ValueError):
    """The strategy (assignor) name is not one spark-assign knows."""


class InvalidOptionError(SparkAssignError, ValueError):
    """An option is unknown, ill-typed or not valid with the other options; the
    message names the option, the strategy and the valid choices."""


class NoCommonAssignorError(SparkAssignError, ValueError):
    """The members of a group support no assignor in common."""


class ExecutorLostError(SparkAssignError, RuntimeError):
    """An executor holding this call's local checkpoints was lost (autoscaling down, a
    spot node, an OOM): the blocks cannot be recomputed. The message names the executor
    when Spark does, and the setting that avoids it (reliable materialization)."""


class AssignmentPropertyError(SparkAssignError, AssertionError):
    """An assignment breaks a property it must hold (validity, balance, cooperative safety)."""

    def __init__(self, message: str, rows: Sequence[dict] = ()):
        super().__init__(message)
        self.rows = list(rows)


class HistoryError(SparkAssignError):
    """Reading or writing the generation history failed, or the history is inconsistent."""

    #: whether the same call, run again, may succeed (another writer was committing)
    retryable = False


class ConcurrentWriteError(HistoryError):
    """Another writer committed into the history while this call was recording: nothing of
    this call is visible. Retry it: it then records, finds its generations recorded (the
    same assignment: a no-op), or says that they were recorded with another assignment.

    >>> ConcurrentWriteError("g1 generation 5 was recorded meanwhile").retryable
    True
    """

    retryable = True


def describe_rows(rows: Iterable[dict], total: int | None = None) -> str:
    """Format offending rows for an error message: one ``key=value`` line per row."""
    rows = list(rows)
    lines = ["  " + ", ".join(f"{k}={v!r}" for k, v in row.items()) for row in rows[:MAX_LISTED]]
    more = (total if total is not None else len(rows)) - min(len(rows), MAX_LISTED)
    if more > 0:
        lines.append(f"  ... and {more} more")
    return "\n".join(lines)


def raise_if_rows(problems, error: type, what: str) -> None:
    """Raise ``error`` naming the rows of the ``problems`` DataFrame, if it has any.

    Runs one Spark job when nothing offends (a count: every partition at once, where
    ``take`` scans them in growing rounds, a job each), one more to list the rows.
    """
    total = problems.count()
    if not total:
        return
    rows = problems.take(MAX_LISTED)
    dicts = [r.asDict() for r in rows]
    raise error(f"{what}: {total} problem row(s):\n{describe_rows(dicts, total)}", dicts)
