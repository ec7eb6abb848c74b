"""Every step of a replay at once, for the assignors that keep no state between rebalances.

``range`` and ``roundrobin`` under the classic protocol assign from the step's members
and metadata alone: the previous assignment plays no part (EAGER: every member gives
up everything first, and one round completes the rebalance). When every group runs one
of them (forced: ``_strategy``) and has, at every step, an event that calls for a
rebalance (a crash, a static leave or a quiet static return only beside one), with no
delayed resolution, topic growth or lag change, nothing a step computes decides whether
or what the next one rebalances, and the whole replay is a
distributed computation over *(group, step)* pairs, each pair a group of its own
(:func:`pair_id`):

1. the assignment at every step, from the rosters (:func:`~.events.rosters`): one
   :func:`~spark_assign.assign` call per assignor;
2. each step's owned partitions (the previous step's assignment, carried as the step
   loop carries it: members gone depart, a static member's replacement inherits) and
   its group's last generation (a window over the steps), then the step loop's own phases
   (:mod:`.phases`) once over every pair: one :func:`~spark_assign.rebalance.rebalance`
   gives every step's generation, moves, revocations and rows.

Both ways give the same tables (``tests/test_simulate_batched.py``); this way pays a
fixed few dozen Spark jobs for the whole replay instead of about seventy per step.

>>> batchable(per_step)  # doctest: +SKIP
True
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from ..assign import assign
from ..execution import materialize_state, union_all
from ..frames import GROUP as _G
from ..strategies.registry import EAGER, strategy_options
from .phases import (
    ReplayOutputs,
    ReplayState,
    Step,
    _carry_ownership,
    _members_for,
    _rebalance_flags,
    _rebalance_step,
    _step_stats,
    scoped_partitions,
    unscope,
)

#: the assignors whose assignment depends on the step's members and metadata alone
STATELESS = ("range", "roundrobin")
#: separates the group from the step in a pair's id; the step is zero-padded to this width
PAIR_SEP, STEP_WIDTH = "\u001e", 9
#: a step whose groups all rebalance by their own events, with nothing else to look up
_ALL_TRIGGER = Row(grow=False, lag=False, refresh=False, triggers=True, all_trigger=True, delay=False, holding=False,
                   merge=False, away=False, restart=False, consumer=False)


def stateless_column() -> Column:
    """Per step row: whether its group runs a stateless assignor under the classic protocol
    (aggregated with ``bool_and`` into the replay's per-step flags)."""
    return F.coalesce(F.col("_strategy").isin(*STATELESS) & (F.col("_gp") == "classic"), F.lit(False))


def batchable(per_step: dict[int, Row]) -> bool:
    """Whether a replay with these per-step flags can run all its steps at once: every
    group of every step rebalances by its events and runs a stateless assignor, and no
    step grows a topic, changes lags, delays a resolution or restarts a member."""
    return bool(per_step) and all(
        r.all_trigger and r.stateless and not (r.grow or r.lag or r.delay or r.restart) for r in per_step.values())


def pair_id(step: Column | str = "step") -> Column:
    """The id of the pair (``group_id``, ``step``): a group of its own in the batched rebalances."""
    s = F.col(step) if isinstance(step, str) else step
    return F.concat(F.col(_G), F.lit(PAIR_SEP), F.lpad(s.cast("string"), STEP_WIDTH, "0"))


def _pairs(df: DataFrame, step: Column | str = "step") -> DataFrame:
    """``df`` (keyed by ``group_id`` and ``step``) keyed by pairs."""
    return df.withColumn(_G, pair_id(step))


def _unpair(df: DataFrame) -> DataFrame:
    """``df`` keyed by pairs, keyed by their groups again."""
    return df.withColumn(_G, F.expr(f"left({_G}, length({_G}) - {STEP_WIDTH + 1})"))


def replay_batched(state: ReplayState, steps: DataFrame, roster_rows: DataFrame, dep_kinds: DataFrame, *,
                   strategies: list[str], protocol_rule: str, max_rounds: int, keep_rows: bool,
                   options: dict[str, Any]) -> tuple[DataFrame, ReplayOutputs]:
    """All steps of a :func:`batchable` replay from its initial ``state``: each group's
    final owned rows (``group_id, member_id, group_instance_id, topic, partition``) and
    the outputs the step loop appends, one frame each, keyed by groups. ``strategies``:
    the assignors the groups run (each group's roster lists its own alone)."""
    pair_steps = _pairs(steps)
    roster = _pairs(roster_rows)
    meta = materialize_state(
        _pairs(state.meta.join(steps.select(_G, "step"), _G)).select(_G, "topic", "partitions", "seen"))
    lags = (_pairs(state.lags.join(steps.select(_G, "step"), _G)).select(_G, "topic", "partition", "lag")
            if state.lags is not None else None)
    step = Step(0, _ALL_TRIGGER, pair_steps, pair_steps.limit(0), roster)
    flags = _rebalance_flags(step, pair_steps.limit(0))  # every pair rebalances

    # 1. every step's assignment, from its members alone (one call per assignor)
    parts = scoped_partitions(meta)
    members = _members_for(roster, state.owned.limit(0), state.groups.limit(0), flags)
    per_strategy = strategy_options(None, options)
    first = union_all([
        assign(members.where(F.col("assignors")[0] == name), parts, name, validate=False, **per_strategy.get(name, {}))
        for name in strategies])
    # what the members own going into step k + 1: step k's assignment, with their instance ids
    owned = _unpair(first.join(roster.select(_G, "step", "member_id", "group_instance_id"), [_G, "member_id"]))
    owned = owned.select(pair_id(F.col("step") + 1).alias(_G), "member_id", "group_instance_id",
                         F.expr(unscope()).alias("topic"), "partition")

    # 2. the step loop's phases, once over every pair: members depart or are inherited,
    # generations continue, the rebalance records its rounds
    carried = ReplayState(meta=meta, lags=lags, owned=materialize_state(owned), held=state.held.limit(0),
                          groups=state.groups.limit(0))
    departures = _pairs(dep_kinds).withColumn("step", F.lit(step.k))
    owned_now, departed, _ = _carry_ownership(carried, step, departures, False)
    carried.groups = _previous_generations(roster_rows, steps)
    out = ReplayOutputs()
    one = strategies[0] if len(strategies) == 1 else None  # then nothing to select: its options alone
    new_owned = materialize_state(_rebalance_step(
        carried, step, flags, flags.select(_G), owned_now, departed, out, protocol_rule=protocol_rule,
        max_rounds=max_rounds, keep_rows=keep_rows, options=per_strategy.get(one, {}) if one else options,
        strategy=one), accumulates=True)
    last = _pairs(steps.groupBy(_G).agg(F.max("step").alias("step"))).select(_G)
    return _unpair(new_owned.join(F.broadcast(last), _G, "left_semi")), ReplayOutputs(
        generations=[_unpair(g) for g in out.generations],
        steps=[_unpair(_step_stats(flags, roster, meta, new_owned))],
        revocations=[_unpair(r) for r in out.revocations], rows=[_unpair(r) for r in out.rows],
        lazy=dict(out.lazy))  # a small replay's lazy generations, stored by the replay with its others


def _previous_generations(roster_rows: DataFrame, steps: DataFrame) -> DataFrame:
    """Per pair: the generation and protocol of its group's last rebalance before the step,
    as the step loop carries them (``group_id`` the pair, ``generation``, ``protocol``; no
    row before the group's first rebalance). Every step with members is one rebalance of
    one round (EAGER), one generation: the generation before step k is the number of the
    group's steps before k that had members."""
    with_members = roster_rows.select(_G, "step").distinct().withColumn("_rebalanced", F.lit(1))
    before = F.sum("_rebalanced").over(
        Window.partitionBy(_G).orderBy("step").rowsBetween(Window.unboundedPreceding, -1))
    gens = steps.select(_G, "step").join(with_members, [_G, "step"], "left").withColumn("generation", before)
    return _pairs(gens).where(F.col("generation") > 0).select(
        _G, F.col("generation").cast("int").alias("generation"), F.lit(EAGER).alias("protocol"))
