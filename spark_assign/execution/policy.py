"""The execution policy of one call: small or large, how it materializes, and the session
settings a small call may run under. One :class:`ExecutionPolicy` per call, created by the
entry point's scope (:func:`~spark_assign.execution.scope.call_scope`) and shared by the calls
inside it; :func:`current_policy` reads it.

>>> current_policy() is None  # outside any entry point
True
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ..errors import InvalidOptionError
from ..session import INTERPRETED, SMALL_CALL_SETTINGS_CONF

#: the session setting that chooses how intermediates are materialized
MATERIALIZATION_CONF = "spark.assign.materialization"
MATERIALIZATION_CHOICES = ("auto", "local", "reliable")
#: the session setting that bounds a small call's intermediates, in rows (0: never small)
SMALL_CALL_CONF = "spark.assign.smallCallRows"
#: its default: a small call's state is at most a few megabytes on the driver
SMALL_CALL_ROWS = 50_000
#: set in the session's settings while a call's :data:`SMALL_CALL_SETTINGS` are in effect: the
#: call that holds them (a small call on the same session from another thread leaves them be)
SETTINGS_HELD_BY_CONF = "spark.assign.smallCallSettings.heldBy"
#: Spark's optimizer rule that moves a semi or anti join below the operators under it,
#: a single-partition coalesce among them: the join then reads the local relation's own
#: partitions, and Spark shuffles both of its sides
PUSH_DOWN_SEMI_JOINS = "org.apache.spark.sql.catalyst.optimizer.PushDownLeftSemiAntiJoin"
#: the optimizer rules a small call excludes, added to the session's own list
_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
#: what a small call runs under, where the session opts in (``spark.assign.smallCallSettings=true``,
#: which the sessions spark-assign builds set): Spark's interpreted operators and expressions (its
#: rows are few; compiling its plans' code was most of its time); no automatic broadcast joins (its
#: local relations are one partition each: a join of two shuffles nothing, while each broadcast is
#: a Spark job of its own); semi and anti joins kept above a local relation's single-partition
#: coalesce (:data:`PUSH_DOWN_SEMI_JOINS`); one shuffle partition; no adaptive execution (each
#: action planned once, for rows too few to re-plan on); and no size limit on a one-partition side
#: of a join (a join's estimate is the product of its sides', so joins of joins of a few hundred
#: rows passed Spark's 128 MiB)
SMALL_CALL_SETTINGS = {
    **INTERPRETED,
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    _EXCLUDED_RULES: PUSH_DOWN_SEMI_JOINS,
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.maxSinglePartitionBytes": str(2**63 - 1),
}
#: a call's state: not decided yet, decided small (state on the driver), decided large
OPEN, SMALL, LARGE = "open", "small", "large"
#: the check-and-set of :data:`SETTINGS_HELD_BY_CONF` (small calls on one session from threads)
_SETTINGS_LOCK = threading.Lock()


def checkpoint_dir(spark: SparkSession) -> str | None:
    """The session's checkpoint directory: ``spark.checkpoint.dir``, or (classic
    sessions) the one set with ``SparkContext.setCheckpointDir``; None without one."""
    directory = spark.conf.get("spark.checkpoint.dir", None)
    if directory:
        return directory
    try:  # classic sessions only; Spark Connect has no SparkContext
        return spark.sparkContext.getCheckpointDir()
    except Exception:
        return None


def materialization(spark: SparkSession) -> str:
    """The materialization policy in effect: ``"local"`` or ``"reliable"`` (see
    :mod:`spark_assign.execution`). Raises InvalidOptionError for an unknown setting, or for
    ``reliable`` without a checkpoint directory.

    >>> materialization(spark) in ("local", "reliable")
    True
    """
    value = (spark.conf.get(MATERIALIZATION_CONF, None) or "auto").strip().lower()
    if value not in MATERIALIZATION_CHOICES:
        raise InvalidOptionError(
            f"setting {MATERIALIZATION_CONF}={value!r}: expected one of {list(MATERIALIZATION_CHOICES)}")
    directory = checkpoint_dir(spark)
    if value == "auto":
        return "reliable" if directory else "local"
    if value == "reliable" and not directory:
        raise InvalidOptionError(
            f"setting {MATERIALIZATION_CONF}='reliable' needs a checkpoint directory: set spark.checkpoint.dir "
            "(or SparkContext.setCheckpointDir) to a folder every executor can reach")
    return value


def small_call_rows(spark: SparkSession) -> int:
    """The ``spark.assign.smallCallRows`` setting: at most how many rows a call's
    intermediates may have for it to keep them as local relations (0: never).
    Raises InvalidOptionError for a value that is not a whole number >= 0."""
    raw = spark.conf.get(SMALL_CALL_CONF, None)
    if raw is None or str(raw).strip() == "":
        return SMALL_CALL_ROWS
    try:
        rows = int(str(raw).strip())
    except ValueError:
        rows = -1
    if rows < 0:
        raise InvalidOptionError(f"setting {SMALL_CALL_CONF}={raw!r}: expected a whole number of rows >= 0 "
                                 "(0: never keep a call's intermediates on the driver)")
    return rows


def tunes_small_calls(spark: SparkSession) -> bool:
    """Whether the session opts in to running small calls under :data:`SMALL_CALL_SETTINGS`
    (``spark.assign.smallCallSettings=true``; the sessions spark-assign builds set it)."""
    return str(spark.conf.get(SMALL_CALL_SETTINGS_CONF, None) or "").strip().lower() == "true"


class ExecutionPolicy:
    """How one call runs, decided once: ``state`` is :data:`OPEN` until the call decides
    whether it is small (:func:`decide_small_call`), then :data:`SMALL` or :data:`LARGE`.
    A small call keeps what it materializes on the driver as local relations, whose rows
    the policy holds for the call (:meth:`rows_of`); ``depth`` counts the entry points running
    one inside the other, ``settings_depth`` is the one whose decision applied
    :data:`SMALL_CALL_SETTINGS` (-1: none), and ``saved`` the session's own values of them.
    ``decisions`` lists every decision taken under it, in order (an entry point entered
    undecided ends its own decision when it returns: the state is then open again)."""

    def __init__(self, executors_before: set[str] | None = None) -> None:
        self.state = OPEN
        self.depth = 0
        self.settings_depth = -1
        self.saved: dict[str, str | None] | None = None
        self.settings_session: SparkSession | None = None
        self.executors_before = executors_before
        self.decisions: list[str] = []
        self._token = uuid.uuid4().hex
        #: the rows of the local relations this call stored, by the frame that holds them (a
        #: frame that is dropped takes its rows with it)
        self._rows: weakref.WeakKeyDictionary[DataFrame, Any] = weakref.WeakKeyDictionary()

    @property
    def small(self) -> bool:
        return self.state == SMALL

    def keep_rows(self, df: DataFrame, rows: Any) -> None:
        """Hold ``rows`` (a ``pyarrow.Table``) as ``df``'s, a local relation this call stored."""
        self._rows[df] = rows

    def rows_of(self, df: DataFrame) -> Any:
        """``df``'s rows when this call stored them (:meth:`keep_rows`), else None."""
        return self._rows.get(df)

    def apply_settings(self, spark: SparkSession) -> None:
        """Run the rest of the call under :data:`SMALL_CALL_SETTINGS`, where the session opts in
        (:func:`tunes_small_calls`) and no other call holds them (:data:`SETTINGS_HELD_BY_CONF`),
        until :meth:`restore_settings`. A setting the platform refuses keeps its value."""
        if not tunes_small_calls(spark):
            return
        with _SETTINGS_LOCK:
            try:
                if spark.conf.get(SETTINGS_HELD_BY_CONF, None):
                    return
                spark.conf.set(SETTINGS_HELD_BY_CONF, self._token)
            except Exception:  # a platform that refuses settings it does not know
                return
            saved: dict[str, str | None] = {}
            for key, value in SMALL_CALL_SETTINGS.items():
                try:
                    before = spark.conf.get(key, None)
                    if key == _EXCLUDED_RULES and before:  # the session's exclusions stay excluded
                        value = ",".join(dict.fromkeys([*before.split(","), value]))
                    spark.conf.set(key, value)
                except Exception:
                    continue
                saved[key] = before
        self.saved, self.settings_session, self.settings_depth = saved, spark, self.depth

    def restore_settings(self) -> None:
        """The session's own values of the settings :meth:`apply_settings` changed, back."""
        spark, saved = self.settings_session, self.saved
        self.saved, self.settings_session, self.settings_depth = None, None, -1
        if spark is None or saved is None:
            return
        with _SETTINGS_LOCK:
            for key, before in saved.items():
                try:
                    spark.conf.unset(key) if before is None else spark.conf.set(key, before)
                except Exception:  # a session already stopped
                    pass
            try:
                if spark.conf.get(SETTINGS_HELD_BY_CONF, None) == self._token:
                    spark.conf.unset(SETTINGS_HELD_BY_CONF)
            except Exception:
                pass


#: the policy of the call in progress (None outside every entry point)
_POLICY: ContextVar[ExecutionPolicy | None] = ContextVar("spark_assign_execution_policy", default=None)


def current_policy() -> ExecutionPolicy | None:
    """The policy of the call in progress; None outside every entry point."""
    return _POLICY.get()


def in_small_call() -> bool:
    """Whether the call in progress was decided small (:func:`decide_small_call`).

    >>> in_small_call()
    False
    """
    policy = _POLICY.get()
    return policy is not None and policy.small


def small_call_undecided(spark: SparkSession) -> bool:
    """Whether the call in progress has yet to :func:`decide_small_call` (so that an
    action it takes anyway can also read the sizes the decision needs). With
    ``spark.assign.smallCallRows`` at 0 the call is decided not small here, at no cost."""
    policy = _POLICY.get()
    if policy is None:
        return False
    if policy.state == OPEN and not small_call_rows(spark):
        policy.state = LARGE
        policy.decisions.append(LARGE)
    return policy.state == OPEN


def decide_small_call(spark: SparkSession, bound_rows: Callable[[], int], *, max_rows: int | None = None) -> bool:
    """Whether the call in progress keeps its state on the driver: decided once, by the
    first entry point that asks, from ``bound_rows()``, the rows its state can reach (an
    estimate for a threshold, computed only when this call decides and
    ``spark.assign.smallCallRows`` is not 0), against that setting or ``max_rows``,
    whichever is lower. Never small outside an entry point.

    >>> decide_small_call(spark, lambda: 10)  # outside an entry point
    False
    """
    policy = _POLICY.get()
    if policy is None:
        return False
    if policy.state == OPEN:
        materialization(spark)  # its setting is checked by every call, small ones too (they may never checkpoint)
        limit = small_call_rows(spark) if max_rows is None else min(max_rows, small_call_rows(spark))
        policy.state = SMALL if limit and bound_rows() <= limit else LARGE
        policy.decisions.append(policy.state)
        if policy.small:
            policy.apply_settings(spark)
    return policy.small
