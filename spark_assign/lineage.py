"""Plan lineage: where a multi-step transformation materializes what it reuses.

Spark plans are trees, so a DataFrame used twice is planned (and analyzed,
optimized) twice; a chain of steps that each reuse the previous result grows
exponentially. The strategies and the rebalance loop materialize such shared
intermediates with :func:`materialize`, under the session's materialization policy
(the ``spark.assign.materialization`` setting, :func:`materialization`):

- ``local``: ``localCheckpoint``, stored in the executors' block managers. Fastest, but
  the blocks live only on the executor that computed them: when an executor is lost
  (autoscaling down, a spot node, an OOM) the call fails with
  :class:`~spark_assign.errors.ExecutorLostError` and must be re-run.
- ``reliable``: ``checkpoint``, written to the session's checkpoint directory
  (``spark.checkpoint.dir``), which survives a lost executor. Every materialization is
  eager (a lazy reliable checkpoint would compute its rows twice) and pays a write and
  a read of the files.
- ``auto`` (the default): ``reliable`` when the session has a checkpoint directory,
  else ``local``.

Both work over Spark Connect (the server's checkpoint directory).

A checkpoint keeps its origin's size estimate, and Spark estimates an inner or
outer join as the *product* of its sides: state carried from step to step
(rebalance rounds, simulation steps) that is joined with itself squares that
estimate at every step, until the planner spends minutes multiplying numbers of
millions of digits. :func:`materialize_state` resets the estimate (a limit of
``2**31 - 1`` rows bounds it) at the cost of one single-partition pass: use it
for loop state, which is small, and :func:`materialize` elsewhere.

**Small calls.** A call whose inputs bound its state to at most
``spark.assign.smallCallRows`` rows (:func:`small_call_rows`; 50,000 by default, 0 turns
it off) keeps what it materializes after deciding so on the driver instead, as local
relations (:func:`decide_small_call`): one Arrow collect each, whose result Spark plans
with its exact size, so joins with it are broadcast and no shuffle feeds them. A
checkpoint's plan is an opaque scan of unknown size, so every join over one shuffles
both sides, and on small inputs those shuffle stages are most of a call's time. Each
local relation is one partition (``coalesce(1)``, no shuffle): Spark's planner knows a
single partition already holds every key, so aggregations and windows over local
relations add no shuffle stage either, nor do joins of two of them. A join's result, or a
union's, is not planned as one partition: a join that reads it shuffles both its sides,
unless the result is put into one partition first (:func:`~spark_assign.frames.one_partition`;
BENCHMARKS.md has the stage counts). An entry
point (:func:`small_call_scope`) decides once per call, from a bound on its sizes (a
threshold's estimate, not a guarantee); a call inside another keeps the outer call's
choice. What a call stores before it decides, and the outputs it accumulates step by
step, follow the policy above; only its local relations are out of a lost executor's
reach. Once decided, a small call runs under :data:`SMALL_CALL_SETTINGS` (Spark's
interpreted execution, no automatic broadcast joins) until the call that decided ends,
when the session's own settings come back (``spark.assign.smallCallSettings=false``
keeps them throughout).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from .errors import InvalidOptionError
from .session import INTERPRETED

#: the session setting that chooses how intermediates are materialized
MATERIALIZATION_CONF = "spark.assign.materialization"
MATERIALIZATION_CHOICES = ("auto", "local", "reliable")
#: Spark's largest limit: bounds the size estimate, never the data
_MAX_ROWS = 2**31 - 1
_F = TypeVar("_F", bound=Callable[..., Any])
#: the session setting that bounds a small call's intermediates, in rows (0: never small)
SMALL_CALL_CONF = "spark.assign.smallCallRows"
#: its default: a small call's state is at most a few megabytes on the driver
SMALL_CALL_ROWS = 50_000
#: the call in progress: outside any scope, in one not decided yet, decided small or large
_OUTSIDE, _OPEN, _SMALL, _LARGE = "outside", "open", "small", "large"
_CALL: ContextVar[str] = ContextVar("spark_assign_small_call", default=_OUTSIDE)
#: the session setting that keeps the session's own settings in small calls ("false")
SMALL_CALL_SETTINGS_CONF = "spark.assign.smallCallSettings"
#: Spark's optimizer rule that moves a semi or anti join below the operators under it,
#: a single-partition coalesce among them: the join then reads the local relation's own
#: partitions, and Spark shuffles both of its sides
PUSH_DOWN_SEMI_JOINS = "org.apache.spark.sql.catalyst.optimizer.PushDownLeftSemiAntiJoin"
#: the optimizer rules a small call excludes, added to the session's own list
_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
#: what a small call runs under: Spark's interpreted operators and expressions, no generated
#: code (its rows are few; compiling its plans' code was most of its time); no automatic
#: broadcast joins (its local relations are one partition each: a join of two shuffles nothing,
#: while each broadcast is a Spark job of its own; the joins the code hints still broadcast);
#: semi and anti joins kept above a local relation's single-partition coalesce
#: (:data:`PUSH_DOWN_SEMI_JOINS`); one shuffle partition, so that a frame it did not store
#: (several partitions) is shuffled into one, and its local relations are not shuffled to match;
#: no adaptive execution: each action is planned once, and its shuffles are stages of
#: its job rather than jobs of their own, for rows too few to re-plan on;
#: and no size limit on a one-partition side of a join: Spark shuffles a join's one-partition
#: sides once its size estimate passes the limit (128 MiB), and a join's estimate is the
#: product of its sides', so joins of joins of a few hundred rows passed it
#: (:func:`~spark_assign.frames.one_partition`)
SMALL_CALL_SETTINGS = {
    **INTERPRETED,
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    _EXCLUDED_RULES: PUSH_DOWN_SEMI_JOINS,
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.maxSinglePartitionBytes": str(2**63 - 1),
}
#: the session whose settings the small call in progress applied (to give back when the
#: scope that decided ends)
_RESTORE: ContextVar[SparkSession | None] = ContextVar("spark_assign_small_call_restore", default=None)
#: how many :func:`small_call_scope` calls are running, one inside the other, and at which of
#: those depths the small call in progress applied its settings (-1: none did)
_DEPTH: ContextVar[int] = ContextVar("spark_assign_small_call_depth", default=0)
_SETTINGS_DEPTH: ContextVar[int] = ContextVar("spark_assign_small_call_settings_depth", default=-1)
#: per session (by id) in a small call, across threads: how many small calls run, and the
#: session's own values of the settings they changed (None: unset)
_APPLIED: dict[int, tuple[int, dict[str, str | None]]] = {}
_APPLIED_LOCK = threading.Lock()


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
    """The materialization policy in effect: ``"local"`` or ``"reliable"`` (see the
    module docstring). Raises InvalidOptionError for an unknown setting, or for
    ``reliable`` without a checkpoint directory.

    >>> spark.conf.set("spark.assign.materialization", "reliable")  # doctest: +SKIP
    >>> materialization(spark)                                       # doctest: +SKIP
    'reliable'
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


def materialize(df: DataFrame, *, eager: bool = True, accumulates: bool = False) -> DataFrame:
    """``df`` computed once and cut from its lineage, by the session's
    :func:`materialization` policy.

    ``eager=False`` cuts the lineage now (the plan is analyzed and planned once, and
    under adaptive execution its shuffle stages run now) but leaves the last stage
    to the first action that reads the result, which stores it for later reads:
    one Spark job fewer. Use it where an action follows that reads all of ``df``,
    and only for deterministic results (two concurrent reads of a partition not yet
    stored may each compute it).

    ``eager`` applies to local materialization only. Inside a small call
    (:func:`decide_small_call`) ``df`` becomes a :func:`local_relation` instead, always
    eagerly (one collect); ``accumulates=True`` (a frame the call adds one of per step,
    such as a replay's per-step outputs) keeps the session's policy even there, so
    that the driver never holds a call's whole output.

    >>> members = materialize(members.where("group_id = 'g1'"))  # doctest: +SKIP
    """
    if in_small_call() and not accumulates:
        return local_relation(df)
    if materialization(df.sparkSession) == "reliable":
        return df.checkpoint(eager=True)
    return df.localCheckpoint(eager=eager)


def materialize_state(df: DataFrame, *, eager: bool = True, accumulates: bool = False) -> DataFrame:
    """:func:`materialize` for state carried across loop steps: also resets Spark's
    size estimate, so that joins of state with state do not compound it.
    ``eager`` and ``accumulates`` as in :func:`materialize`.

    >>> owned = materialize_state(owned.unionByName(new_owned))  # doctest: +SKIP
    """
    if in_small_call() and not accumulates:  # a local relation's estimate is its size already
        return local_relation(df)
    return materialize(df.limit(_MAX_ROWS), eager=eager, accumulates=accumulates)


def local_relation(df: DataFrame) -> DataFrame:
    """``df``'s rows collected (Arrow) into a local relation of the same schema, in one
    partition: a plan Spark sizes exactly, and whose aggregations and windows need no
    shuffle (one partition holds every key). For small frames only (:func:`decide_small_call`).
    The collected rows stay readable with :func:`stored_rows` while the result lives.

    >>> owned = local_relation(owned)  # doctest: +SKIP
    """
    return relation_of(df, df.toArrow())


def relation_of(df: DataFrame, rows: Any) -> DataFrame:
    """A local relation (:func:`local_relation`) of ``rows``, a ``pyarrow.Table`` of
    ``df``'s rows already collected (:func:`rows_within`): no action of its own."""
    out = df.sparkSession.createDataFrame(rows, schema=df.schema).coalesce(1)
    _STORED_ROWS[out] = rows
    return out


def stored_union(a: DataFrame, b: DataFrame) -> DataFrame:
    """``a.unionByName(b)`` materialized (:func:`materialize`). When a small call stored both
    (:func:`stored_rows`), their rows are put together on the driver instead: a local
    relation of the union, with no Spark action.

    >>> placed = stored_union(placed, proposed)  # doctest: +SKIP
    """
    union = a.unionByName(b)
    ra, rb = stored_rows(a), stored_rows(b)
    if ra is not None and rb is not None and sorted(ra.column_names) == sorted(rb.column_names):
        rb = rb.select(ra.column_names)
        if rb.schema.types == ra.schema.types:
            import pyarrow as pa

            return relation_of(union, pa.concat_tables([ra, rb.cast(ra.schema)]))
    return materialize(union)


def rows_within(df: DataFrame, max_rows: int) -> Any:
    """``df``'s rows as a ``pyarrow.Table`` when it has at most ``max_rows`` of them, else
    None: one action, which collects at most ``max_rows + 1`` rows (a call that is not
    small pays that limited read once, before it decides).

    The rows are read through one partition, by one task that stops once it has enough:
    a limit over several partitions takes each one's first rows and then shuffles them
    into one (a second stage), as for a frame made from Python rows (two partitions).

    >>> rows_within(spark.range(3), 5).num_rows, rows_within(spark.range(3), 2)
    (3, None)
    """
    if max_rows < 0:
        return None
    rows = df.coalesce(1).limit(max_rows + 1).toArrow()
    return rows if rows.num_rows <= max_rows else None


#: the rows of each live local relation (:func:`local_relation`), by the frame it returned
_STORED_ROWS: weakref.WeakKeyDictionary[DataFrame, Any] = weakref.WeakKeyDictionary()


def stored_rows(df: DataFrame) -> Any:
    """``df``'s rows as a ``pyarrow.Table`` when ``df`` is a local relation a small call stored
    (:func:`materialize`), read on the driver with no Spark action; None for any other frame.
    For the flags a step reads off a small frame it has just stored (one action, not two).

    >>> rows = stored_rows(summary)  # doctest: +SKIP
    >>> pending = one_row(summary.agg(F.max("pending")))[0] if rows is None else max(rows["pending"].to_pylist())  # doctest: +SKIP
    """
    return _STORED_ROWS.get(df)


def stored_select(df: DataFrame, *cols: str) -> DataFrame:
    """``df.select(*cols)`` (column names only), whose rows stay readable with
    :func:`stored_rows` when ``df``'s are: for a projection of a frame a small call
    stored, read on the driver for a flag (:func:`has_rows`) without a Spark action.

    >>> state = stored_select(materialize(rows), "group_id", "member_id")  # doctest: +SKIP
    """
    out = df.select(*cols)
    rows = stored_rows(df)
    if rows is not None:
        _STORED_ROWS[out] = rows.select(list(cols))
    return out


def has_rows(df: DataFrame, *, not_null: str | None = None, true: str | None = None,
             greater: tuple[str, str] | None = None) -> bool:
    """Whether ``df`` has a row (one whose column ``not_null`` is not null, whose boolean
    column ``true`` is true, or whose column ``greater[0]`` is greater than its column
    ``greater[1]``, if given): read off a small call's stored rows (:func:`stored_rows`)
    with no Spark action, else one ``isEmpty`` action.

    >>> has_rows(spark.range(0)), has_rows(spark.sql("SELECT NULL AS key"), not_null="key")  # doctest: +SKIP
    (False, False)
    >>> has_rows(spark.sql("SELECT false AS moved"), true="moved")  # doctest: +SKIP
    False
    >>> has_rows(spark.sql("SELECT 3 AS load, 2 AS target"), greater=("load", "target"))  # doctest: +SKIP
    True
    """
    rows = stored_rows(df)
    if rows is not None:
        if true:
            return True in rows.column(true).to_pylist()
        if greater:
            import pyarrow.compute as pc

            return bool(pc.any(pc.greater(rows.column(greater[0]), rows.column(greater[1]))).as_py())
        return rows.num_rows > (rows.column(not_null).null_count if not_null else 0)
    if true:
        df = df.where(df[true])
    elif greater:
        df = df.where(df[greater[0]] > df[greater[1]])
    elif not_null:
        df = df.where(df[not_null].isNotNull())
    return not df.isEmpty()


def in_small_call() -> bool:
    """Whether the call in progress was decided small (:func:`decide_small_call`): its
    materializations are single-partition local relations (:func:`materialize`,
    :func:`partitioned_by`).

    >>> in_small_call()  # doctest: +SKIP
    False
    """
    return _CALL.get() == _SMALL


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


def small_call_scope(fn: _F) -> _F:
    """Decorator for entry points that may decide they are small (:func:`decide_small_call`):
    the decision holds for the decorated call and the calls inside it, and ends with it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        undecided = _CALL.get() in (_OUTSIDE, _OPEN)
        token = _CALL.set(_OPEN if _CALL.get() == _OUTSIDE else _CALL.get())
        depth = _DEPTH.set(_DEPTH.get() + 1)
        # a decision taken in this call ends with it, and so do the settings it applied
        restore = (_RESTORE.set(None), _SETTINGS_DEPTH.set(-1)) if undecided else None
        try:
            return fn(*args, **kwargs)
        finally:
            try:
                if restore is not None:
                    _restore_settings()
                    _RESTORE.reset(restore[0])
                    _SETTINGS_DEPTH.reset(restore[1])
            finally:
                _DEPTH.reset(depth)
                _CALL.reset(token)

    return wrapper  # type: ignore[return-value]


def small_call_result(df: DataFrame) -> DataFrame:
    """``df``, a result an entry point returns, stored (:func:`local_relation`) when the
    entry point running is the small call that applied :data:`SMALL_CALL_SETTINGS`: its
    caller reads it after the session's settings are back, and its plan was built for the
    small call's. Read under the session's settings, Spark broadcasts its joins of
    one-partition relations (a job each), shuffles where an optimizer rule the call
    excluded moves a join, and generates code for it: for the sample's mixed group,
    ``assign(..., "sticky")`` took 6 Spark jobs for its caller's one read, against 2 stored (the store and the read)
    (BENCHMARKS.md). Unchanged otherwise: a call inside another one returns its plan to a
    caller that reads it under the small call's settings.

    >>> return small_call_result(result)  # doctest: +SKIP
    """
    if _RESTORE.get() is not None and _SETTINGS_DEPTH.get() == _DEPTH.get():
        return local_relation(df)
    return df


def small_call_undecided(spark: SparkSession) -> bool:
    """Whether the call in progress has yet to :func:`decide_small_call` (so that an
    action it takes anyway can also read the sizes the decision needs). With
    ``spark.assign.smallCallRows`` at 0 the call is decided not small here, at no cost."""
    if _CALL.get() == _OPEN and not small_call_rows(spark):
        _CALL.set(_LARGE)
    return _CALL.get() == _OPEN


def decide_small_call(spark: SparkSession, bound_rows: Callable[[], int], *, max_rows: int | None = None) -> bool:
    """Whether the call in progress keeps its state on the driver: decided once, by the
    outermost :func:`small_call_scope` call that asks, from ``bound_rows()``, the rows its
    state can reach (an estimate for a threshold, computed only when this call decides
    and ``spark.assign.smallCallRows`` is not 0), against that setting or ``max_rows``,
    whichever is lower. Never small outside a scope.

    >>> if decide_small_call(spark, lambda: events.count() + groups * partitions):  # doctest: +SKIP
    ...     log.info("small call: intermediates kept as local relations")
    """
    if _CALL.get() == _OPEN:
        materialization(spark)  # its setting is checked by every call, small ones too (they may never checkpoint)
        limit = small_call_rows(spark) if max_rows is None else min(max_rows, small_call_rows(spark))
        _CALL.set(_SMALL if limit and bound_rows() <= limit else _LARGE)
        if _CALL.get() == _SMALL:
            _apply_small_call_settings(spark)
    return _CALL.get() == _SMALL


def _apply_small_call_settings(spark: SparkSession) -> None:
    """Run the rest of a small call under :data:`SMALL_CALL_SETTINGS` (unless
    ``spark.assign.smallCallSettings`` is ``false``), until the scope that decided it ends.

    Spark compiles generated Java code for every new plan: about 1,200 classes for one
    rebalance of the README's sample groups, a large share of a call over a few hundred
    rows, where interpreting them costs less. These are session settings: a query the session runs while a small
    call is in progress (from another thread) runs under them too, which changes its
    speed, never its result. Small calls on one session from several threads share them:
    the first to start saves the session's values, the last to end gives them back. A
    platform that refuses a setting (some serverless ones) keeps its own.
    ``spark.sql.codegen.factoryMode`` is one of Spark's internal settings: a Spark version
    that drops it runs a small call with expression code generation again, nothing else.
    """
    if str(spark.conf.get(SMALL_CALL_SETTINGS_CONF, None) or "").strip().lower() == "false":
        return
    with _APPLIED_LOCK:
        calls, previous = _APPLIED.get(id(spark), (0, {}))
        if not calls:
            for key, value in SMALL_CALL_SETTINGS.items():
                try:
                    before = spark.conf.get(key, None)
                    if key == _EXCLUDED_RULES and before:  # the session's exclusions stay excluded
                        value = ",".join(dict.fromkeys([*before.split(","), value]))
                    spark.conf.set(key, value)
                except Exception:  # a platform that does not let a session change it
                    continue
                previous[key] = before
        _APPLIED[id(spark)] = (calls + 1, previous)
    _RESTORE.set(spark)
    _SETTINGS_DEPTH.set(_DEPTH.get())


def _restore_settings() -> None:
    """The session's own values of the settings :func:`_apply_small_call_settings`
    changed, back once its last small call ends."""
    spark = _RESTORE.get()
    if spark is None:
        return
    with _APPLIED_LOCK:
        calls, previous = _APPLIED.pop(id(spark), (1, {}))
        if calls > 1:
            _APPLIED[id(spark)] = (calls - 1, previous)
            return
        for key, before in previous.items():
            try:
                spark.conf.unset(key) if before is None else spark.conf.set(key, before)
            except Exception:  # a session already stopped
                pass


#: rows per task a large hash aggregation aims at (hash tables that stay in cache)
ROWS_PER_TASK = 65_536


def shuffle_partitions(df: DataFrame, rows: int) -> int:
    """How many partitions a shuffle of ``rows`` rows gets: the session's
    ``spark.sql.shuffle.partitions``, or more so that a task aggregates at most
    :data:`ROWS_PER_TASK` rows (Spark's adaptive coalescing would otherwise merge
    them into a few large tasks, whose hash tables outgrow the CPU caches).

    >>> parts.repartition(shuffle_partitions(parts, 2_000_000), "topic")  # doctest: +SKIP
    """
    try:
        base = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)
    except (TypeError, ValueError):  # "auto" on some platforms
        base = 200
    return max(base, -(-int(rows) // ROWS_PER_TASK))


def partitioned_by(df: DataFrame, *cols: str, rows: Callable[[], int] | None = None) -> DataFrame:
    """``df`` repartitioned by ``cols`` (so that the windows and aggregations keyed by them
    that follow shuffle nothing more), into :func:`shuffle_partitions` of ``rows()`` rows
    when ``rows`` is given (an action, taken only here). Inside a small call ``df`` in one
    partition (``coalesce(1)``: no shuffle), which holds every key: a union of local
    relations is one partition each.

    >>> by_group = partitioned_by(mem, "group_id")  # doctest: +SKIP
    """
    if in_small_call():
        return df.coalesce(1)
    if rows is None:
        return df.repartition(*cols)
    return df.repartition(shuffle_partitions(df, rows()), *cols)
