"""``rebalance()``: one full consumer-group rebalance for any number of groups.

(Past 400 lines: :func:`rebalance`'s docstring is the reference for the whole protocol, and
its round loop with the recording is one piece.)

A rebalance is:

1. **selection** of the group's assignor (:func:`spark_assign.protocol.select_assignor`);
2. the **protocol** each member follows (static Kafka rule or KIP-726's dynamic
   rule, :mod:`spark_assign.protocol`);
3. **revocation**: an EAGER member gives up everything it owns before the
   assignment (recorded as ``revoked``). The eager ``sticky`` assignor still has the
   previous assignment as its memory (Kafka's userData), while ``cooperative-sticky``
   sees an EAGER member's ``ownedPartitions`` empty and keeps only the COOPERATIVE
   members' partitions (:func:`spark_assign.rebalance_round.as_joined`). Under the
   dynamic rule, a member that held partitions under COOPERATIVE and sees an EAGER
   assignor selected loses them (``lost``, never handed over as ``revoked``). Under
   COOPERATIVE a member revokes only what the new assignment takes away;
4. the **assignment** by the selected assignor, one distributed
   :func:`spark_assign.assign` call per distinct selected assignor (at most
   the number of strategies) covering all groups that selected it;
5. **follow-up rounds** while any group has partitions pending (a cooperative
   round leaves partitions that change owner out): the members rejoin with
   ``owned`` = the round's assignment and the next generation. Each round is
   one distributed step over every group still pending; cooperative rounds
   converge after one follow-up, ``max_rounds`` bounds the loop.

Every round is a generation, numbered by the history's rule
(:mod:`spark_assign.history`): round *r* is the group's highest generation so far,
the latest recorded in ``history`` (when given) or its members' highest
``generation``, whichever is higher (0 for a new group), plus *r*. The rounds are recorded in ``history`` when one
is given (every round in one commit per table). ``moved`` counts the partitions a
round hands to a member other than their owner before the rebalance (a partition
revoked in round 1 and handed over in round 2 moves in round 2; a departed
member's partitions move when another member gets them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import AssignmentPropertyError, InvalidMembersError, InvalidOptionError, raise_if_rows
from .execution import (
    entry_point,
    in_small_call,
    join_small,
    materialize,
    materialize_state,
    one_partition,
    partitioned_by,
    per_group,
    small_call_undecided,
    stored_rows,
    union_all,
)
from .execution.small_inputs import decide_small_inputs
from .frames import GROUP as _G
from .frames import TP as _TP
from .frames import owned_lists, sql_name, sql_string
from .inputs import (
    MEMBER_COLUMNS,
    InputCheck,
    ignored_claims,
    normalize_members,
    normalize_partitions,
    owned_or_empty,
    subscriptions,
    validate_inputs,
)
from .owned import resolve_owned
from .ownership import CarriedOwnership
from .properties import cooperative_violations, validity_violations
from .protocol import (
    CONSUMER,
    PROTOCOL_RULES,
    assignor_protocol,
    check_common_assignor,
    disagreements,
    protocol_columns,
    select_assignor,
)
from .rebalance_round import Prepared, Round, next_round_state, run_round
from .reconcile import mark_consumer_groups, with_group_protocols
from .strategies.registry import COOPERATIVE, EAGER, GROUP_PROTOCOLS, strategy_name, strategy_options

if TYPE_CHECKING:
    from .history import AssignmentHistory

ASSIGNMENT_ROUND_COLUMNS = ("group_id", "generation", "round", "member_id", "topic", "partition")
REVOCATION_COLUMNS = ("group_id", "generation", "round", "member_id", "topic", "partition", "kind")
SUMMARY_COLUMNS = (
    "group_id", "round", "generation", "assignor", "votes", "protocol", "members",
    "assigned", "pending", "unavailable", "revoked", "lost", "moved",
)


@dataclass
class RebalanceResult:
    """What :func:`rebalance` returns; every attribute is a DataFrame.

    * ``summary``: per group per round: ``group_id, round, generation, assignor,
      votes, protocol, members, assigned, pending, unavailable, revoked, lost, moved``;
    * ``assignments``: the assignment of every round:
      ``group_id, generation, round, member_id, topic, partition``;
    * ``revocations``: ``group_id, generation, round, member_id, topic, partition,
      kind`` (``revoked`` or ``lost``);
    * ``final``: each group's assignment after its last round
      (``group_id, member_id, topic, partition``);
    * ``members``: the input members after the rebalance: ``owned`` = the final
      assignment, ``generation`` = the group's last generation, ``protocol`` =
      the protocol the member followed (extra input columns kept).
    """

    summary: DataFrame
    assignments: DataFrame
    revocations: DataFrame
    final: DataFrame
    members: DataFrame
    rounds: int



#: the extra member columns that set a value per group (the highest of its members')
GROUP_SETTINGS = ("protocol_rule", "group_protocol", "remote_assignor")


def _with_extra(members: DataFrame) -> tuple[DataFrame, list[str], DataFrame | None, bool]:
    """Normalized members plus the input's extra columns (``protocol`` and others), and
    whether the input was stored. With extra columns the input is read several times
    (joined back per member): it is cut from its lineage first, so that a costly lazy input
    (a simulation step's members) is planned and computed once. The member's ``protocol``
    and the per-group settings (:data:`GROUP_SETTINGS`) stay in the normalized members'
    projection (the same rows: no join), as strings."""
    extra = [c for c in members.columns if c not in MEMBER_COLUMNS]
    on_driver = stored_rows(members) is not None  # a small call's input is a local relation already
    if extra and not on_driver:
        members = materialize(members, eager=False)
    stored = bool(extra) or on_driver
    m = normalize_members(members, keep={c: T.StringType() for c in ("protocol", "member_type", *GROUP_SETTINGS)
                                         if c in extra})
    if "protocol" not in extra:
        m = m.withColumn("protocol", F.lit(None).cast("string"))
    extra = [c for c in extra if c != "protocol"]
    extra_df = members.select(_G, "member_id", *extra) if extra else None
    return m, extra, extra_df, stored


def rebalance(
    members: DataFrame | CarriedOwnership,
    partitions: DataFrame,
    *,
    # the assignor
    strategy: str | None = None,
    options: Mapping[str, Any] | None = None,
    lags: DataFrame | None = None,
    # the protocol
    group_protocol: str = "classic",
    protocol_rule: str = "static",
    max_rounds: int = 5,
    # the record
    history: AssignmentHistory | None = None,
    first_generation: int | None = None,
    recorded_at: datetime | None = None,
    # the checks
    check: bool = False,
    validate: bool = True,
) -> RebalanceResult:
    """Rebalance every group in ``members``: selection, protocol, revocations,
    assignment and follow-up rounds until nothing is pending.

    - What the members own: ``members``' ``owned`` lists (the input contract), or
      :func:`~spark_assign.ownership.owned_from_history`'s result, which also carries the
      departed members' partitions and the static members that rejoined under a new id.
    - The assignor: ``strategy`` forces one for every group (as if every member listed only
      it; default: the one Kafka selects from the members' ``assignors``), with ``options``
      (each strategy takes those it declares), reading ``lags``.
    - The protocol: ``group_protocol`` (``classic``, JoinGroup rounds; ``consumer``, KIP-848's
      reconciliation), ``protocol_rule`` (``static``, Kafka's; ``dynamic``, KIP-726's
      proposal), at most ``max_rounds`` rounds.
    - The record: every round goes to ``history`` as a generation, numbered from
      ``first_generation`` if given, stamped ``recorded_at`` (default: now).
    - The checks: ``validate`` the inputs first; ``check`` every round against the property
      checks before anything is recorded.

    The details of each are below (:func:`rebalance_rounds`).

    >>> members = spark.createDataFrame([("g", "a", ["t"], [("t", p) for p in range(4)], 3), ("g", "b", ["t"], None, None)],
    ...     "group_id string, member_id string, topics array<string>, "
    ...     "owned array<struct<topic:string,partition:int>>, generation int")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> r = rebalance(members, parts, strategy="cooperative-sticky")  # b joins a, which owns all four
    >>> r.summary.select("round", "generation", "protocol", "assigned", "pending", "revoked", "moved").show()
    +-----+----------+-----------+--------+-------+-------+-----+
    |round|generation|   protocol|assigned|pending|revoked|moved|
    +-----+----------+-----------+--------+-------+-------+-----+
    |    1|         4|COOPERATIVE|       2|      2|      2|    0|
    |    2|         5|COOPERATIVE|       4|      0|      0|    2|
    +-----+----------+-----------+--------+-------+-------+-----+
    <BLANKLINE>
    >>> sorted((x.member_id, x.partition) for x in r.final.collect())
    [('a', 0), ('a', 1), ('b', 2), ('b', 3)]
    """
    departed = rejoined = None
    if isinstance(members, CarriedOwnership):
        members, departed, rejoined = members
    return rebalance_rounds(
        members, partitions, strategy=strategy, options=options or {}, lags=lags, protocol_rule=protocol_rule,
        group_protocol=group_protocol, max_rounds=max_rounds, departed=departed, rejoined=rejoined,
        history=history, first_generation=first_generation, recorded_at=recorded_at, check=check,
        validate=validate)


@entry_point
def rebalance_rounds(
    members: DataFrame,
    partitions: DataFrame,
    *,
    strategy: str | None = None,
    options: Mapping[str, Any],
    lags: DataFrame | None = None,
    protocol_rule: str = "static",
    group_protocol: str = "classic",
    max_rounds: int = 5,
    departed: DataFrame | None = None,
    rejoined: DataFrame | None = None,
    history: AssignmentHistory | None = None,
    first_generation: int | None = None,
    recorded_at: datetime | None = None,
    check: bool = False,
    validate: bool = True,
    unavailable: DataFrame | None = None,
    owners: DataFrame | None = None,
    away: DataFrame | None = None,
    frozen: DataFrame | None = None,
    single_round: DataFrame | None = None,
) -> RebalanceResult:
    """:func:`rebalance`, with what a simulation's step adds: ``unavailable``, ``owners``,
    ``away``, ``frozen`` and ``single_round`` (below).

    ``members`` follows the input contract (``assignors`` drives the selection;
    an optional ``protocol`` column is the protocol each member followed in its
    last generation, used by the dynamic rule to tell lost from revoked).
    ``strategy`` forces one assignor for every group (as if every member listed
    only it). ``unavailable`` (``topic, partition``) are held out of this
    rebalance (delayed resolution of departed members) and stay unassigned;
    topics must then be group-scoped (as :func:`spark_assign.simulate.simulate`
    makes them). ``departed`` (``group_id, member_id, topic, partition, kind``):
    partitions of members that left the group, added to the first round's
    revocations. A ``protocol_rule`` column in ``members`` sets the rule per
    group (what-if variants). ``history`` (an :class:`~spark_assign.history.AssignmentHistory`)
    records each round as a generation, all rounds of all groups in one commit per
    table once the last round is done (:func:`record_rounds`), with the members of
    each round. ``first_generation``: the generation of the first round for every
    group, instead of the rule above (re-running a recorded rebalance records nothing
    twice). ``check``: before anything is recorded, check every round (each partition
    at most once, only to a member subscribed to its topic; under COOPERATIVE, never to
    a member other than its current holder) and each group's final assignment
    (complete unless still pending at ``max_rounds``); raises
    :class:`~spark_assign.errors.AssignmentPropertyError` naming the rows (one action).
    ``rejoined`` (``group_id, member_id, previous_member_id``), when given, says the
    members' owned lists are their group's latest recorded generation in ``history``,
    each member's under its own member id or, for the static members it lists, under
    ``previous_member_id`` (as :func:`~spark_assign.ownership.owned_from_history` gives
    them): the first round's moves since that generation are then known without
    reading it back when recording. ``owners`` (``group_id, member_id, topic, partition``),
    when given, is each partition's owner before the rebalance as the caller knows it
    (:func:`~spark_assign.simulate.simulate`'s carried ownership, ``departed`` included):
    the owned lists then hold partitions of ``partitions`` only, each once, and their claims
    are not resolved or looked up in the metadata again.

    ``group_protocol="consumer"`` (or a ``group_protocol`` column in ``members``, per
    group) runs KIP-848's reconciliation instead of JoinGroup rounds
    (:mod:`spark_assign.reconcile`): the broker's assignor (``strategy`` when it is
    ``uniform`` or ``range``, else a ``remote_assignor`` column, else ``uniform``, the
    broker's default; the members' ``assignors`` play no part) computes the group's
    target from the members' current assignments (``owned``); round 1 (the new group
    epoch) hands out every target partition nobody else holds and the members revoke
    what the target takes away (nothing is revoked from members that keep their
    partitions); round 2 (the next heartbeat, when partitions changed owner) hands the
    revoked partitions to their new owners. The group's protocol is ``CONSUMER``. A
    ``member_type`` column (``classic`` or ``consumer``, the protocol the member's client
    speaks) marks the classic members of a consumer group (an online migration): each revokes
    as its own ``assignors`` have it, an EAGER one everything in round 1, and again in round 2
    when it picks something up there (:func:`~spark_assign.reconcile.mark_consumer_groups`).
    ``away`` (``group_id, member_id``): consumer groups' members that send no heartbeat (a
    crash, or a static member that left, before its session expires): they revoke nothing
    and take nothing from others, so what the target moves off them waits for their expiry.
    ``frozen`` (``group_id``): COOPERATIVE groups that revoke nothing, while a deferred
    resolution's delay runs (Kafka Connect's incremental cooperative protocol): their members
    keep what they hold, and only what nobody holds is handed out
    (:func:`~spark_assign.rebalance_round.revoking_nothing`). ``single_round`` (``group_id``):
    groups whose rebalance stops after its first round, what it revoked left unassigned (a
    replay's classic group whose follow-up round joins the rebalance of the events after it).
    """
    if protocol_rule not in PROTOCOL_RULES:
        raise InvalidOptionError(f"unknown protocol_rule {protocol_rule!r}: expected one of {PROTOCOL_RULES}")
    if max_rounds < 1:
        raise InvalidOptionError(f"max_rounds must be >= 1, got {max_rounds}")
    if group_protocol not in GROUP_PROTOCOLS:
        raise InvalidOptionError(f"option group_protocol of rebalance(): expected one of {list(GROUP_PROTOCOLS)}, "
                                 f"found {group_protocol!r}")
    run_options = strategy_options(strategy, options)
    if history is not None:
        history.check_writable()  # before any work: a history that cannot take the rounds fails now
    if small_call_undecided(members.sparkSession):
        # read first, a limited read each: a small call keeps its inputs on the driver from here
        # on (members with their extra columns; the types checked first). The members are cut
        # from their lineage before that read (no action of its own), so that a costly lazy
        # input (the ownership carried from the history) is computed once whatever the decision
        normalize_members(members)
        members, partitions = decide_small_inputs(materialize(members, eager=False), normalize_partitions(partitions))
    if departed is not None:  # read by the owners before the rebalance and by round 1: computed once
        departed = materialize(departed.select(_G, "member_id", *_TP, "kind"), eager=False)
    prep = _prepare(members, partitions, protocol_rule=protocol_rule, strategy=strategy, unavailable=unavailable,
                    departed=departed, first_generation=first_generation, history=history, validate=validate,
                    group_protocol=group_protocol, rejoined=rejoined, owners=owners)
    rounds: list[Round] = []
    problems: list[DataFrame] = []  # with ``check``
    state = prep.members  # members of groups still rebalancing, with their current owned/generation
    if single_round is not None:  # their first round is their last (the summary's ``_last_round``)
        state = state.join(per_group(single_round.select(_G).distinct().selectExpr(_G, "true AS _last_round")),
                           _G, "left")
    targets: dict[str, DataFrame] = {}  # consumer groups: the target of the group epoch, per assignor
    while True:
        rnd = len(rounds) + 1
        state = state.withColumn("_gen", F.expr(f"CAST(_base + {rnd} AS INT)"))
        runs = rounds[-1].pending_runs if rounds else prep.runs  # later rounds: the pending groups' assignors
        r = run_round(prep, state, rnd, runs, rounds[-1].assignment if rounds else None, targets, lags=lags,
                       run_options=run_options, departed=departed if rnd == 1 else None, away=away,
                       frozen=frozen)
        rounds.append(r)
        if check:
            sm = normalize_members(state)
            problems.append(validity_violations(r.assignment, sm, prep.partitions).where(F.col("problem") != "unassigned"))
            coop = state.where(F.col("_gproto").isin(COOPERATIVE, CONSUMER)).select(_G).distinct()
            problems.append(cooperative_violations(r.assignment.join(coop, _G, "left_semi"),
                                                   sm.join(coop, _G, "left_semi"), prep.partitions))
        if history is not None:
            r.members = state.selectExpr(
                _G, "_gen AS generation", "member_id", "group_instance_id", "rack", "topics", "assignors",
                "lower(_gproto) AS protocol")
        pending_groups = r.summary.where("pending > 0 AND NOT _last_round").selectExpr(_G)
        done = state.join(pending_groups, _G, "left_anti").selectExpr(_G).distinct()
        r.final = r.assignment.join(done, _G, "left_semi")
        if rnd >= max_rounds or not r.pending_runs:
            r.final = r.assignment  # groups still pending at the bound keep their last round
            break
        state = next_round_state(state, r.assignment, pending_groups)

    per_round = union_all([r.summary for r in rounds])  # with ``_moved_gen``, for the history
    summary = per_round.drop("_moved_gen", "_run", "_last_round")
    final = union_all([r.final for r in rounds if r.final is not None]).selectExpr(_G, "member_id", *_TP)
    if check:  # each group's final assignment complete, unless still pending at the bound
        still = summary.where(F.col("round") == len(rounds)).where("pending > 0").select(_G)
        problems.append(validity_violations(final, normalize_members(prep.members), prep.partitions)
                        .join(still, _G, "left_anti"))
        raise_if_rows(union_all(problems), AssignmentPropertyError, "rebalance breaks property checks")
    assignments = union_all([r.assignment for r in rounds])
    revocations = union_all([r.revocations for r in rounds])
    if history is not None:
        record_rounds(history, assignments, revocations, per_round,
                      ignored=ignored_claims(normalize_members(prep.members), prep.all_partitions), lags=lags,
                      recorded_at=recorded_at, members=union_all([r.members for r in rounds if r.members is not None]))
    return RebalanceResult(summary=summary, assignments=assignments, revocations=revocations, final=final,
                           members=_members_after(prep, final, summary), rounds=len(rounds))


def _rebalance_checks(m: DataFrame) -> list[InputCheck]:
    """A rebalance's own checks of its normalized members, beyond the input contract: at least
    one member, and in each group an assignor every member lists
    (:class:`~spark_assign.errors.NoCommonAssignorError`)."""
    def no_members() -> None:
        raise InvalidMembersError("no members: expected at least one member row to rebalance, found none")

    return [InputCheck(m.agg(F.count("*").alias("_n")).where("_n = 0"), no_members),
            InputCheck(disagreements(m), lambda: check_common_assignor(m))]


def _prepare(members: DataFrame, partitions: DataFrame, *, protocol_rule: str, strategy: str | None,
             unavailable: DataFrame | None, departed: DataFrame | None, first_generation: int | None,
             history: Any, validate: bool, group_protocol: str, rejoined: DataFrame | None,
             owners: DataFrame | None) -> Prepared:
    """Selection, protocols, the owner of each partition before the rebalance and the
    generation numbering: everything the rounds share (one action: the assignors to run)."""
    m, extra, extra_df, stored = _with_extra(members)
    p_stored = stored_rows(partitions) is not None  # a small call's, on the driver already
    p = normalize_partitions(partitions)
    if strategy is not None:
        m = m.withColumn("assignors", F.expr(f"array({sql_string(strategy_name(strategy))})"))
    # each group's protocol; consumer groups (KIP-848) list the broker's assignor
    m = with_group_protocols(m, group_protocol=group_protocol, strategy=strategy)
    # the protocol rule: the argument, or per group from an extra ``protocol_rule`` column (a
    # window over the group's rows, in the group protocol's window's shuffle: before the store)
    rule = sql_string(protocol_rule)
    if "protocol_rule" in extra:
        rule = f"coalesce(max(protocol_rule) OVER (PARTITION BY {_G}), {rule})"
    m = m.selectExpr("*", f"{rule} AS _rule").drop(*GROUP_SETTINGS)
    # a small leaf: the selection and protocol plans below reuse it many times. Stored by
    # the first action that reads it (the validation's), so that a costly lazy input (the
    # ownership carried from the history) is computed once. In a small call whose input
    # :func:`_with_extra` stored already, it is a short plan over that local relation: a
    # second one would cost an action and save nothing
    if not (stored and in_small_call()):
        m = materialize_state(m, eager=False)
    if validate:
        validate_inputs(m, p, checks=_rebalance_checks(m))  # one action for all the checks
    if strategy is not None:
        # every member of a group lists the same one assignor (the forced one, or in a consumer
        # group the broker's): it is selected with every member's vote, and under either rule
        # the members and the group follow the protocol it supports (one window, no vote)
        m = m.selectExpr("*", "assignors[0] AS assignor", "count(*) OVER (PARTITION BY group_id) AS votes").selectExpr(
            "*", f"{assignor_protocol('assignor')} AS _proto", f"{assignor_protocol('assignor')} AS _gproto")
    else:
        # each member's protocol under its group's rule, and the group's (one join, one window)
        member_proto, group_proto = protocol_columns("_rule")
        m = one_partition(m.join(select_assignor(m, validate=False), _G)).selectExpr(
            "*", f"{member_proto} AS _proto", f"{group_proto} AS _gproto")
    # each member joins as its own protocol has it: an EAGER member has given up everything
    # and sends no owned partitions (rebalance_round.as_joined), so the cooperative-sticky
    # assignor keeps only the COOPERATIVE members' partitions and withholds only theirs
    m = m.selectExpr("*", "assignor AS _run")
    m = mark_consumer_groups(m)  # they run the broker's assignor and reconcile towards its target
    # stored by the action that lists the assignors to run (no action of its own; in a small
    # call the store is the action, and the runs are read off its rows)
    m = materialize_state(m, eager=False)
    # the same action tells whether any member may keep what it holds (a protocol other than
    # EAGER): if none does, a round's revocations are every owned partition, with no lookup
    keeps = f"coalesce(_proto != {sql_string(EAGER)}, true)"
    # and whether a consumer group has an EAGER member (a classic one, mark_consumer_groups)
    eager_in_consumer = f"_gproto = {sql_string(CONSUMER)} AND _proto = {sql_string(EAGER)}"
    if (rows := stored_rows(m)) is not None:  # a small call's members are on the driver already
        runs = sorted(set(rows["_run"].to_pylist()))
        pairs = set(zip(rows["_proto"].to_pylist(), rows["_gproto"].to_pylist()))
        keeping = bool({proto for proto, _ in pairs} - {EAGER})
        mixed = (EAGER, CONSUMER) in pairs
    else:
        found = m.selectExpr("_run", f"{keeps} AS _keeps", f"coalesce({eager_in_consumer}, false) AS _mixed") \
            .distinct().collect()
        runs, keeping = sorted({r._run for r in found}), any(r._keeps for r in found)
        mixed = any(r._mixed for r in found)
    # every round's assignors read the partitions many times: in a small call they are stored
    # once here, and the rounds read them (and the members) without storing them again
    # (:func:`~spark_assign.rebalance_round.run_round`)
    small = in_small_call() and bool(runs)  # no runs (no members): nothing reads them
    full_p = p = materialize(p) if small and not p_stored else p
    if unavailable is not None:  # the partitions this rebalance hands out
        p = full_p.join(unavailable.select(*_TP), _TP, "left_anti")
        p = materialize(p) if small else p
    # the owner before this rebalance (also of a topic it no longer subscribes to): a
    # partition revoked in one round and handed over in the next has moved from it
    first = [_G, *_TP, "member_id AS _first"]
    if owners is not None:  # the caller's (departed included): nothing to resolve
        first_owner = owners.selectExpr(*first)
    else:
        first_owner = resolve_owned(normalize_members(m), full_p, subscribed_only=False).selectExpr(*first)
        if departed is not None:  # a departed member's partitions move when someone else gets them
            first_owner = first_owner.unionByName(
                departed.selectExpr(*first).join(first_owner.selectExpr(_G, *_TP), [_G, *_TP], "left_anti"))
    if rejoined is not None:  # the owners are the latest generation's: the member id each held them under there
        first_owner = join_small(first_owner, rejoined.selectExpr(
            _G, "member_id AS _first", "previous_member_id AS _first_id"), [_G, "_first"], "left")
    # per topic: the partitions this rebalance hands out, and the ones held out of it
    sizes = full_p.groupBy("topic").agg(F.expr("count(*) AS _all"))
    if unavailable is not None:
        sizes = sizes.join(p.groupBy("topic").agg(F.expr("count(*) AS available")), "topic", "left").selectExpr(
            "topic", "coalesce(available, 0) AS available", "_all - coalesce(available, 0) AS held_out")
    else:
        sizes = sizes.selectExpr("topic", "_all AS available", "CAST(0 AS BIGINT) AS held_out")
    # per group: the subscribed partitions it hands out and holds out (the same in every
    # round: a pending count is this less the round's assigned count, no join over the partitions)
    # (partitioned by group once: the distinct and the sums by group shuffle nothing more)
    subscribed = partitioned_by(subscriptions(normalize_members(m)).selectExpr(_G, "topic"), _G).distinct()
    needed = join_small(subscribed, sizes, "topic").groupBy(_G).agg(
        F.expr("sum(available) AS _needed"), F.expr("sum(held_out) AS unavailable"))
    if first_generation is not None:
        base = m.selectExpr(_G).distinct().selectExpr(_G, f"{int(first_generation) - 1} AS _base")
    else:
        highest = m.selectExpr(_G, "generation")
        if history is not None:
            highest = highest.unionByName(history.history().join(m.selectExpr(_G).distinct(), _G, "left_semi")
                                          .selectExpr(_G, "generation"))
        base = one_partition(highest).groupBy(_G).agg(F.expr("coalesce(max(generation), 0) AS _base"))
    # the members with their base generation (read by every round-1 plan), the owners and
    # the needed counts (read by every round's summary): each computed once, stored by its first reader
    return Prepared(members=materialize_state(m.join(base, _G), eager=False), partitions=p,
                    all_partitions=full_p, runs=runs, first_owner=materialize(first_owner, eager=False),
                    needed=materialize(needed, eager=False), extra_df=extra_df, owned_is_latest=rejoined is not None,
                    owned_known=owners is not None, keeping=keeping,
                    eager_in_consumer=mixed)


def _members_after(prep: Prepared, final: DataFrame, summary: DataFrame) -> DataFrame:
    """The input members after the rebalance (:attr:`RebalanceResult.members`)."""
    m = prep.members
    last = summary.groupBy(_G).agg(F.expr("max(generation) AS _lastgen"))
    fo = owned_lists(final, "_o")
    now = {"owned": f"{owned_or_empty('_o')} AS owned",
           "generation": "CAST(_lastgen AS INT) AS generation", "protocol": "_gproto AS protocol"}
    after = m.join(fo, [_G, "member_id"], "left").join(last, _G).selectExpr(
        *[now.get(c, sql_name(c)) for c in (*MEMBER_COLUMNS, "protocol")])
    if prep.extra_df is not None:
        after = after.join(prep.extra_df, [_G, "member_id"], "left")
    return after


def record_rounds(history, assignments: DataFrame, revocations: DataFrame, summary: DataFrame, *,
                  ignored: DataFrame | None = None, lags: DataFrame | None = None, recorded_at=None,
                  members: DataFrame | None = None) -> DataFrame:
    """Record every round of every group of a rebalance (:class:`RebalanceResult`'s
    ``assignments``, ``revocations`` and ``summary``) in ``history``: one
    :meth:`~spark_assign.history.AssignmentHistory.record_generations` call, one commit
    per table. ``ignored``: first-round owned claims outside the metadata per group.
    ``members``: each round's members (``group_id, generation, member_id,
    group_instance_id, rack, topics, assignors, protocol``)."""
    from datetime import datetime, timezone

    when = recorded_at or datetime.now(timezone.utc)
    gens = summary.select(
        _G, "generation", F.col("assignor").alias("strategy"), F.lower("protocol").alias("protocol"), "round",
        F.lit(when).cast("timestamp").alias("recorded_at"), "members",
        (F.col("pending") + F.col("unavailable")).alias("unassigned"),
        (F.col("_moved_gen") if "_moved_gen" in summary.columns else F.lit(None).cast("long")).alias("partitions_moved"))
    if ignored is not None:
        gens = gens.join(ignored.withColumnRenamed("ignored_owned_claims", "_ignored"), _G, "left").withColumn(
            "ignored_owned_claims", F.when(F.col("round") == 1, F.coalesce("_ignored", F.lit(0))).otherwise(0))
    else:
        gens = gens.withColumn("ignored_owned_claims", F.lit(0))
    a = assignments.select(_G, "generation", "member_id", *_TP)
    if lags is not None:
        a = a.join(lags.select(_G, *_TP, F.col("lag").cast("long")).dropDuplicates([_G, *_TP]), [_G, *_TP], "left")
    return history.record_generations(
        a, gens.drop("_ignored"), revocations=revocations.select(_G, "generation", "member_id", *_TP, "kind"),
        members=members, lags_known=lags is not None)
