"""The simulator's clock: the timers of both group protocols, as one settings object.

Every variant of a replay counts its unassigned partition-seconds on this clock. The
settings are the ones a user sets, with Kafka's defaults:

================================ ========================================= =======
setting                          Kafka's name                              default
================================ ========================================= =======
``classic.heartbeat_interval``   ``heartbeat.interval.ms`` (consumer)      3 s
``classic.session_timeout``      ``session.timeout.ms`` (consumer)         45 s
``classic.rebalance_timeout``    ``max.poll.interval.ms`` (consumer)       300 s
``classic.initial_delay``        ``group.initial.rebalance.delay.ms``      3 s
``classic.metadata_max_age``     ``metadata.max.age.ms`` (consumer)        300 s
``classic.join_sync``            none: one JoinGroup + SyncGroup exchange  100 ms
``consumer.heartbeat_interval``  ``group.consumer.heartbeat.interval.ms``  5 s
``consumer.session_timeout``     ``group.consumer.session.timeout.ms``     45 s
``consumer.assignment_interval`` ``group.consumer.assignment.interval.ms`` 1 s
================================ ========================================= =======

How a classic rebalance spends them (``GroupMetadataManager.prepareRebalance``,
``maybeCompleteJoinElseSchedule``, ``tryCompleteInitialRebalanceElseSchedule`` and
``completeClassicGroupJoin`` in Kafka's group coordinator):

* an event calls for a rebalance; the members learn of it on their next heartbeat
  (``REBALANCE_IN_PROGRESS``) and rejoin. They heartbeat on the interval since the last
  sync, all at the same ticks, so the join phase ends half a heartbeat interval after the
  event on average. A member that crashed, or a static member that left, never rejoins:
  the join waits until its session expires (its last heartbeat, half an interval before it
  went on average, plus the session timeout; or the rebalance timeout), and the coordinator
  then removes it and completes the join at once (``removeMemberAndUpdateClassicGroup``);
  an expiry in a stable group begins a rebalance that the others learn of at their next tick;
* a group that was empty waits ``initial_delay`` instead, again each time a member joined
  during the last wait, up to the rebalance timeout;
* events during the join phase join that rebalance: one generation for all of them; right after
  a rebalance the members' next tick is known, one interval after the phase ended (they reset
  their heartbeat timers when their JoinGroup is answered), and an event before it learned of
  there joins the cooperative follow-up round, if one runs;
* the assignment reaches the members ``join_sync`` after the join phase ends. A
  cooperative follow-up round starts when the revoking members rejoin, and ends when
  the others have learned of it: one heartbeat interval plus ``join_sync`` later;
* EAGER members revoke everything when they learn of the rebalance: on average half a
  heartbeat interval after it began, at the phase's end at the latest; those partitions
  are unassigned until the assignment.

A KIP-848 group (``consumer``) bumps its epoch at the event, and the coordinator computes a
new target then, or, within ``assignment_interval`` of its last one, once that interval has
passed: the epochs bumped meanwhile share that target (``maybeUpdateTargetAssignment``,
``canComputeNextTargetAssignment``). The members reconcile at their next heartbeat, half an
interval after the target on average: each revokes what the target takes from it, and picks up
what it gets of the partitions nobody holds; a revoked partition reaches its new owner one
interval after the target.

>>> Timing().classic.heartbeat_interval_ms
3000
>>> Timing.of({"classic": {"session_timeout_ms": 10000}}).classic.session_timeout_ms
10000
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..errors import InvalidOptionError


@dataclass(frozen=True)
class ClassicTiming:
    """The timers of a classic group (JoinGroup/SyncGroup), in milliseconds."""

    heartbeat_interval_ms: int = 3_000
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    initial_rebalance_delay_ms: int = 3_000
    metadata_max_age_ms: int = 300_000
    join_sync_ms: int = 100


@dataclass(frozen=True)
class ConsumerTiming:
    """The timers of a KIP-848 group (``group.protocol=consumer``), in milliseconds."""

    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    assignment_interval_ms: int = 1_000


@dataclass(frozen=True)
class Timing:
    """Both protocols' timers (:mod:`spark_assign.simulation.timing`).

    >>> Timing.of({"consumer": {"heartbeat_interval_ms": 2000}}).consumer
    ConsumerTiming(heartbeat_interval_ms=2000, session_timeout_ms=45000, assignment_interval_ms=1000)
    """

    classic: ClassicTiming = field(default_factory=ClassicTiming)
    consumer: ConsumerTiming = field(default_factory=ConsumerTiming)

    @classmethod
    def of(cls, settings: Timing | Mapping[str, Any] | None, base: Timing | None = None) -> Timing:
        """``settings`` (a Timing, or ``{"classic": {...}, "consumer": {...}}`` as in a YAML
        config) over ``base`` (Kafka's defaults); InvalidOptionError naming an unknown key."""
        base = base or cls()
        if settings is None:
            return base
        if isinstance(settings, Timing):
            return settings
        if not isinstance(settings, Mapping):
            raise InvalidOptionError(f"timing: expected a mapping of 'classic' and 'consumer', found {settings!r}")
        unknown = sorted(set(settings) - {"classic", "consumer"})
        if unknown:
            raise InvalidOptionError(f"timing: expected keys among ['classic', 'consumer'], found {unknown}")
        parts = {}
        for name in ("classic", "consumer"):
            current = getattr(base, name)
            given = settings.get(name) or {}
            names = [f.name for f in fields(current)]
            bad = sorted(set(given) - set(names))
            if bad:
                raise InvalidOptionError(f"timing.{name}: expected keys among {names}, found {bad}")
            values = {}
            for key, value in given.items():
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidOptionError(
                        f"timing.{name}.{key}: expected a non-negative whole number of milliseconds, found {value!r}")
                values[key] = value
            parts[name] = replace(current, **values)
        return cls(**parts)

    def settings_of(self, group_protocol: str) -> dict[str, int]:
        """The per-group settings columns a replay carries for a group of ``group_protocol``
        (``_timeout``, ``_hb``: that protocol's session timeout and heartbeat interval; the
        classic join phase's ``_rt``, ``_init``, ``_js``, ``_mma``, 0 for a consumer group; a
        consumer group's assignment interval ``_ai``, 0 for a classic one; and ``_up_timeout``,
        ``_up_hb``, ``_up_ai``: the consumer protocol's, which a classic group runs on once it
        converts, :mod:`.migration`).

        >>> Timing().settings_of("consumer")["_hb"]
        5000
        """
        c = self.consumer
        # a classic group that converts to a consumer group (an online migration) runs on these from then on
        upgraded = {"_up_timeout": c.session_timeout_ms, "_up_hb": c.heartbeat_interval_ms,
                    "_up_ai": c.assignment_interval_ms}
        if group_protocol == "consumer":
            return {"_timeout": c.session_timeout_ms, "_hb": c.heartbeat_interval_ms,
                    "_rt": 0, "_init": 0, "_js": 0, "_mma": 0, "_ai": c.assignment_interval_ms, **upgraded}
        k = self.classic
        return {"_timeout": k.session_timeout_ms, "_hb": k.heartbeat_interval_ms, "_rt": k.rebalance_timeout_ms,
                "_init": k.initial_rebalance_delay_ms, "_js": k.join_sync_ms, "_mma": k.metadata_max_age_ms, "_ai": 0,
                **upgraded}

    def as_dict(self) -> dict[str, dict[str, int]]:
        """``{"classic": {...}, "consumer": {...}}``: what a report states it assumed."""
        return asdict(self)

    def describe(self) -> str:
        """One line per protocol, in seconds.

        >>> print(Timing().describe())  # doctest: +NORMALIZE_WHITESPACE
        classic: heartbeat_interval 3 s, session_timeout 45 s, rebalance_timeout 300 s,
          initial_rebalance_delay 3 s, metadata_max_age 300 s, join_sync 0.1 s
        consumer: heartbeat_interval 5 s, session_timeout 45 s, assignment_interval 1 s
        """
        def line(name: str, part: Any) -> str:
            items = [f"{f.name.removesuffix('_ms')} {getattr(part, f.name) / 1000:g} s" for f in fields(part)]
            return f"{name}: " + ", ".join(items)
        return "\n".join((line("classic", self.classic), line("consumer", self.consumer)))


#: the settings columns of :meth:`Timing.settings_of`
TIMING_COLUMNS = ("_timeout", "_hb", "_rt", "_init", "_js", "_mma", "_ai", "_up_timeout", "_up_hb", "_up_ai")

#: the old instant classic clock: rebalances take no time (for tables of assignment cases)
INSTANT_CLASSIC = ClassicTiming(heartbeat_interval_ms=0, initial_rebalance_delay_ms=0, join_sync_ms=0,
                                metadata_max_age_ms=0)
