"""Replaying membership events through rebalances: ``simulate()`` and ``what_if()``.

The events (``join``, ``leave``, ``crash``, ``subscribe``, ``unsubscribe``,
``partitions_added``, ``lag_change``, ``config_change``), their columns and their
semantics under Kafka's classic protocol are in :mod:`spark_assign.simulation.events`.

The replay runs per **step**: the k-th distinct event time of every group is
step k; each step is one distributed computation over all groups with an
event at that step (never a loop over groups); the driver loops over steps
(bounded by the events per group) and cuts the lineage of the state each step
(:mod:`spark_assign.simulation.replay`). A replay that forces ``range`` or
``roundrobin`` (classic protocol) on every group, each of whose steps has an event that
calls for a rebalance, runs all its steps at once instead, as one computation over
(group, step) pairs, with the same results (:mod:`spark_assign.simulation.batched`).
Every rebalance round is recorded as a generation in ``history``; the
simulated time of each generation goes to the ``simulation`` table next to the
history (``group_id, generation, round, step, at, event_kinds, unassigned``;
:mod:`spark_assign.simulation.analytics`, with the packaged SQL over both).
The whole replay is recorded once it is done: one commit per table per
``simulate()`` call, atomic and idempotent like any record (a replay
interrupted midway records nothing). :func:`what_if` replays the same events
under several settings at once (:mod:`spark_assign.simulation.what_if`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from .execution import entry_point
from .simulation.analytics import (
    as_of_generation,
    generation_version,
    record_simulation,
    register_analytics_views,
    run_analytics,
)
from .simulation.replay import SimulationResult, protocol_of, replay
from .simulation.timing import Timing
from .simulation.what_if import compare, what_if

if TYPE_CHECKING:
    from .history import AssignmentHistory

#: what a user of the simulation calls: the replay, its what-if and comparison, the clock's
#: settings, and the analytics over a recorded replay (the rest is in :mod:`spark_assign.simulation`)
__all__ = [
    "simulate", "what_if", "compare", "SimulationResult", "Timing",
    "register_analytics_views", "run_analytics", "generation_version", "as_of_generation",
]


@entry_point
def simulate(
    events: DataFrame,
    partitions: DataFrame,
    *,
    # the assignor
    strategy: str | None = None,
    options: Mapping[str, Any] | None = None,
    lags: DataFrame | None = None,
    # the protocol
    group_protocol: str | None = None,
    protocol_rule: str = "static",
    max_rounds: int = 5,
    scheduled_rebalance_max_delay_ms: int = 0,
    # the clock
    timing: Timing | Mapping[str, Any] | None = None,
    # the record and the checks
    history: AssignmentHistory | None = None,
    validate: bool = True,
) -> SimulationResult:
    """Replay ``events`` (see the module doc) for every group through rebalances.

    ``partitions``: the initial metadata (``topic, partition``), the same for
    every group. ``strategy``: force one assignor (default: Kafka's selection
    from the members' ``assignors``); ``options``: the strategies' options (``{"rack_aware":
    False}``: each strategy takes those it declares, and one no strategy declares is an
    :class:`~spark_assign.errors.InvalidOptionError`). ``lags``: initial lags (``topic,
    partition, lag``, optionally ``group_id``). ``history``: an
    :class:`~spark_assign.history.AssignmentHistory`; every rebalance round is
    recorded as a generation and the simulated times go to the ``simulation``
    table beside it (:func:`~spark_assign.simulation.analytics.simulation_store`). All events are validated before
    anything is recorded.

    ``timing``: both protocols' timers (:class:`~spark_assign.simulation.timing.Timing`,
    or its mapping ``{"classic": {...}, "consumer": {...}}``; Kafka's defaults). A classic
    rebalance begins at the event that calls for it and ends when every member has
    rejoined (:mod:`spark_assign.simulation.windows`); the events in between join it.

    ``group_protocol="consumer"`` (implied by ``strategy="uniform"``) replays KIP-848's
    reconciliation instead of JoinGroup rounds: every membership or metadata change
    bumps the group epoch and the broker's assignor (``uniform``, or ``range``)
    computes a new target from the current assignment; the members revoke what they
    must give up (nothing is revoked from members that keep their partitions, no
    stop-the-world, no EAGER) and a revoked partition goes to its new owner on the
    next heartbeat, ``timing.consumer.heartbeat_interval_ms`` later. The epoch is
    recorded as a generation, and the hand-over, when partitions change owner, as the
    next one at the heartbeat's time, so the partitions awaiting it count as unassigned
    for one heartbeat (the what-if's ``unassigned_partition_seconds``).

    >>> events = spark.createDataFrame([("g", 0, "join", "a", ["t"], ["range", "cooperative-sticky"]),
    ...                                 ("g", 60_000, "join", "b", ["t"], ["range", "cooperative-sticky"])],
    ...     "group_id string, at long, kind string, member_id string, topics array<string>, assignors array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> r = simulate(events, parts)  # Kafka selects range, the first both list: EAGER
    >>> r.generations.orderBy("generation").select(
    ...     "generation", "strategy", "protocol", "members", "assigned", "revoked").show()
    +----------+--------+--------+-------+--------+-------+
    |generation|strategy|protocol|members|assigned|revoked|
    +----------+--------+--------+-------+--------+-------+
    |         1|   range|   EAGER|      1|       4|      0|
    |         2|   range|   EAGER|      2|       4|      4|
    +----------+--------+--------+-------+--------+-------+
    <BLANKLINE>
    """
    group_protocol = protocol_of(strategy, group_protocol)
    if group_protocol == "consumer" and strategy is None:  # the broker's default: the members' lists play no part
        strategy = "uniform"
    result, rows = replay(
        events, partitions, strategy=strategy, protocol_rule=protocol_rule, timing=Timing.of(timing),
        group_protocol=group_protocol,
        scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms, lags=lags, keep_rows=history is not None,
        max_rounds=max_rounds, validate=validate, options=options or {})
    if history is not None and rows is not None:
        record_simulation(history, rows, result.generations, result.revocations, lags_known=result.lags is not None)
    return result
