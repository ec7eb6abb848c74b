"""How a call runs: one execution policy per call, decided in one place.

Every public entry point runs in a call scope (:func:`~.scope.entry_point`), which creates the
call's :class:`~.policy.ExecutionPolicy` (a call inside another shares the outer one's). The
policy makes two decisions, and the algorithm modules only state what they compute: they call
the functions of :mod:`.store` (``materialize``, ``one_partition``, ``join_small``, ...), which
read the policy.

**Small or large.** A call whose inputs bound its state to at most
``spark.assign.smallCallRows`` rows (50,000 by default; 0 turns it off) is *small*: limited
reads of its inputs decide it (:mod:`.small_inputs`), and what it materializes becomes local
relations on the driver, one partition each, whose rows the policy holds for the call (flags
are then read on the driver, with no Spark action). Spark plans a local relation with its exact
size, so joins with it shuffle nothing. Any other call is *large*.

**How a large call materializes** (``spark.assign.materialization``):

- ``local``: ``localCheckpoint``, in the executors' block managers. Fastest, but a lost
  executor fails the call with :class:`~spark_assign.errors.ExecutorLostError`: re-run it.
- ``reliable``: ``checkpoint`` to the session's checkpoint directory (``spark.checkpoint.dir``),
  which survives a lost executor, at the cost of a write and a read.
- ``auto`` (the default): ``reliable`` when the session has a checkpoint directory, else ``local``.

**The caller's session is never changed behind their back.** A small call runs fastest under
a few session settings (:data:`~.policy.SMALL_CALL_SETTINGS`: interpreted execution, one shuffle
partition, no adaptive execution, no automatic broadcast). They are opt-in: a session with
``spark.assign.smallCallSettings=true`` (the sessions spark-assign builds for its CLI and
pipelines, :func:`~spark_assign.session.local_session`, set it) runs each small call under them,
applied when the call decides and restored when it ends (:func:`~.scope.call_scope`); one small
call at a time holds them on a session (``spark.assign.smallCallSettings.heldBy``), and a query
from another thread meanwhile runs under them (its speed changes, never its result). Without the
setting a small call keeps the session's settings throughout.

>>> from spark_assign.execution import in_small_call
>>> in_small_call()
False
"""

from .policy import (
    MATERIALIZATION_CONF,
    SMALL_CALL_CONF,
    SMALL_CALL_ROWS,
    SMALL_CALL_SETTINGS,
    ExecutionPolicy,
    current_policy,
    decide_small_call,
    in_small_call,
    materialization,
    small_call_rows,
    small_call_undecided,
)
from .scope import call_scope, entry_point
from .store import (
    broadcast_within,
    count_rows,
    has_rows,
    join_small,
    local_relation,
    materialize,
    materialize_state,
    merge_side,
    one_partition,
    partitioned_by,
    per_group,
    relation_of,
    rows_within,
    shuffle_partitions,
    small_call_result,
    stored_rows,
    stored_select,
    stored_union,
    union_all,
)

__all__ = [
    "MATERIALIZATION_CONF", "SMALL_CALL_CONF", "SMALL_CALL_ROWS", "SMALL_CALL_SETTINGS", "ExecutionPolicy",
    "broadcast_within", "call_scope", "count_rows", "current_policy", "decide_small_call", "entry_point",
    "has_rows", "in_small_call", "join_small", "local_relation", "materialization", "materialize",
    "materialize_state", "merge_side", "one_partition", "partitioned_by", "per_group", "relation_of",
    "rows_within", "shuffle_partitions", "small_call_result", "small_call_rows", "small_call_undecided",
    "stored_rows", "stored_select", "stored_union", "union_all",
]
