"""One round of :func:`spark_assign.rebalance.rebalance`: its assignment, revocations and
summary over every group still rebalancing, and the members of the next round.

>>> r = run_round(prep, state, 1, prep.runs, None, {}, lags=None, run_options={}, departed=None)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .assign import assign
from .execution import in_small_call, join_small, materialize, materialize_state, stored_rows, union_all
from .frames import GROUP as _G
from .frames import TP as _TP
from .frames import one_row, owned_lists, sql_name, sql_string
from .inputs import MEMBER_COLUMNS, normalize_members, owned_or_empty
from .owned import partition_claims
from .protocol import CONSUMER
from .reconcile import SERVER_RUN, reconciliation_round, with_away_members
from .strategies.range import no_member_racks
from .strategies.registry import COOPERATIVE, COOPERATIVE_ASSIGNORS, EAGER
from .strategies.sticky import sticky_assignment


@dataclass
class Prepared:
    """A rebalance's inputs, prepared once for all its rounds.

    * ``members``: normalized, with ``protocol`` and the group's ``_rule``, ``assignor``,
      ``votes``, protocols (``_proto`` the member's, ``_gproto`` the group's), the
      assignor to run (``_run``) and the generation before the rebalance (``_base``);
    * ``partitions``: the ones this rebalance hands out; ``all_partitions``: with the
      ones held out (``unavailable``);
    * ``runs``: the assignors to run (at most the number of strategies);
    * ``first_owner``: each partition's owner before the rebalance (``_first``);
    * ``needed``: per group, the subscribed partitions it hands out (``_needed``) and the
      ones held out (``unavailable``);
    * ``extra_df``: the input's extra columns, by member;
    * ``owned_is_latest``: the owned lists are the groups' latest recorded generation, so
      round 1's moves since that generation are its moves since the owners before, by the
      member id they had there (``first_owner``'s ``_first_id``, where it differs);
    * ``owned_known``: the owned lists hold partitions of the metadata only, each once (the
      caller gave the owners: :func:`~spark_assign.rebalance.rebalance`'s ``owners``);
    * ``keeping``: some member follows a protocol other than EAGER, so it keeps the owned
      partitions it gets again (else every owned partition is revoked, or lost);
    * ``eager_in_consumer``: a consumer group has an EAGER member (a classic one,
      :func:`~spark_assign.reconcile.mark_consumer_groups`).
    """

    members: DataFrame
    partitions: DataFrame
    all_partitions: DataFrame
    runs: list[str]
    first_owner: DataFrame
    needed: DataFrame
    extra_df: DataFrame | None
    owned_is_latest: bool = False
    owned_known: bool = False
    keeping: bool = True
    eager_in_consumer: bool = False


@dataclass
class Round:
    """One round: its assignment, revocations and summary (``pending_runs``: the
    assignors to run of the groups that still have partitions to hand out and go on, the next
    round's runs); ``final``: the rows of the groups it ends; ``members``: the round's
    members, to record."""

    assignment: DataFrame
    revocations: DataFrame
    summary: DataFrame
    pending_runs: list[str]
    final: DataFrame | None = None
    members: DataFrame | None = None


def _owned_rows(members: DataFrame, partitions: DataFrame | None, *columns: str) -> DataFrame:
    """One row per distinct owned partition of each member that is in ``partitions``:
    ``group_id, member_id, *columns, topic, partition`` (``columns``: member columns carried
    along). ``partitions`` None: the owned lists hold partitions of the metadata only, each
    once (no lookup, and no de-duplication: Spark compares a list's structs pairwise)."""
    cols = [_G, "member_id", *columns]
    listed = "owned" if partitions is None else "array_distinct(owned)"
    rows = members.selectExpr(*cols, f"explode({listed}) AS tp").selectExpr(*cols, "tp.topic", "tp.partition")
    return rows if partitions is None else rows.join(partitions.selectExpr(*_TP), _TP, "left_semi")


#: the runs one sticky assignment serves together: the client sticky assignors (the
#: cooperative groups withhold the partitions changing owner). The broker's uniform runs
#: alone: its answer is Kafka's own builder, not the sticky assignment
STICKY_FAMILY = ("sticky", "cooperative-sticky")


def sticky_runs(runs: list[str], rnd: int, run_options: dict[str, dict[str, Any]]) -> list[str]:
    """The runs of ``runs`` that one sticky assignment serves in round ``rnd``: both of
    :data:`STICKY_FAMILY` with the same options, else none. Each distinct assignor call costs a
    fixed set of Spark jobs whatever its groups, so the family runs as one.

    >>> sticky_runs(["consumer:uniform", "sticky", "cooperative-sticky", "range"], 1, {})
    ['sticky', 'cooperative-sticky']
    """
    family = [r for r in runs if r in STICKY_FAMILY]
    options = [run_options.get(r, {}) for r in family]
    if any(o != options[0] for o in options[1:]):
        return []
    return family if len(family) > 1 else []


def _sticky_together(state: DataFrame, p: DataFrame, together: list[str], run_options: dict[str, dict[str, Any]],
                     columns: list[str]) -> DataFrame:
    """The assignment of the groups of the runs ``together`` (:func:`sticky_runs`) by one
    sticky assignment: the cooperative groups withhold the partitions changing owner."""
    sm = state.where(f"_run IN ({', '.join(map(sql_string, together))})").selectExpr(*columns)
    # the cooperative groups (sticky_assignment takes their distinct ids, broadcast)
    coop = state.where("_run = 'cooperative-sticky'").selectExpr(_G) if "cooperative-sticky" in together else False
    opts = next((run_options.get(r, {}) for r in together), {})
    # the inputs materialized as assign() does (the assignment reads them many times); in a
    # small call they are short plans over local relations already (:func:`run_round`)
    sm, sp = normalize_members(sm), p
    if not in_small_call():
        sm, sp = materialize(sm, eager=False), materialize(sp, eager=False)
    return sticky_assignment(sm, sp, cooperative=coop, **opts)


def as_joined(state: DataFrame) -> DataFrame:
    """The members as their JoinGroup requests reach the leader's assignor: an EAGER member has
    revoked everything before it joins (``ConsumerCoordinator.onJoinPrepare``), so the
    cooperative-sticky assignor sees its ``ownedPartitions`` empty. The eager ``sticky``
    assignor keeps its memory: it reads the previous assignment from the member's userData.

    >>> as_joined(state).where("member_id = 'b'").select("owned")  # doctest: +SKIP
    """
    cooperative = ", ".join(map(sql_string, COOPERATIVE_ASSIGNORS))  # the assignors that read ownedPartitions
    eager = f"_run IN ({cooperative}) AND _proto = {sql_string(EAGER)}"
    return state.withColumn("owned", F.expr(f"CASE WHEN {eager} THEN filter(owned, x -> false) ELSE owned END"))


def run_round(prep: Prepared, state: DataFrame, rnd: int, runs: list[str], prev_a: DataFrame | None,
              targets: dict[str, DataFrame], *, lags: DataFrame | None, run_options: dict[str, dict[str, Any]],
              departed: DataFrame | None, away: DataFrame | None = None,
              frozen: DataFrame | None = None) -> Round:
    """Round ``rnd`` over the groups of ``state`` (with ``_gen``, the round's generation):
    the assignment (one distributed call per assignor in ``runs``, the sticky family's in
    one: :func:`sticky_runs`), the revocations (``departed``: added to them, in the first
    round) and the summary (one action, which also lists the runs still pending; in a small
    call the summary's store, whose rows give them). ``away``: consumer groups' members that
    send no heartbeat (:func:`~spark_assign.reconcile.with_away_members`); ``frozen``: the
    cooperative groups that revoke nothing (:func:`revoking_nothing`)."""
    p = prep.partitions
    # in a small call the members (``state``) and the partitions are local relations
    # (:func:`~spark_assign.rebalance._prepare`): the assignors read short plans over them,
    # with no store of their own (one action each, the plan's work is a filter)
    small = in_small_call()
    # after round 1 the owned lists are the last round's assignment: partitions of the metadata
    known = rnd > 1 or prep.owned_known
    owned = _owned_rows(state, None if known else prep.all_partitions, "_proto", "_gproto", "_rule", "protocol", "_gen")
    columns = list(MEMBER_COLUMNS)  # normalize_members' columns
    parts = []
    joined = as_joined(state) if set(COOPERATIVE_ASSIGNORS) & set(runs) else state  # only they read it
    together = sticky_runs(runs, rnd, run_options)
    if together:
        parts.append(_sticky_together(joined, p, together, run_options, columns))
    for name in runs:
        if name in together:
            continue
        sm = joined.where(f"_run = {sql_string(name)}").selectExpr(*columns)
        if name.startswith(SERVER_RUN):  # KIP-848: the group epoch's target, then its hand-over
            parts.append(reconciliation_round(name, sm, p, rnd, targets, away=away))
            continue
        glags = lags.join(sm.selectExpr(_G).distinct(), _G, "left_semi") if lags is not None else None
        options = run_options.get(name, {})
        if name == "range" and no_member_racks(state):  # the plain ranges: no rack passes in the plan
            options = {**options, "rack_aware": False}
        parts.append(assign(sm, p, name, lags=glags, validate=False, checkpoint=not small, **options))
    if not parts:  # no group to assign (a round always has some: a guard for empty input)
        parts.append(state.selectExpr(_G, "member_id", "CAST(NULL AS STRING) AS topic",
                                      "CAST(NULL AS INT) AS partition").limit(0))
    handed = union_all(parts)
    if frozen is not None:  # deferred resolution is the incremental cooperative protocol's
        frozen = frozen.join(state.where(f"_gproto = {sql_string(COOPERATIVE)}").select(_G), _G, "left_semi")
        handed = revoking_nothing(handed, joined.selectExpr(*columns), p, frozen)
    # the round's generation through each row's member (a broadcast of the members: a distinct
    # per group was a shuffle more)
    member_gens = state.selectExpr(_G, "member_id", "_gen")
    in_round = [_G, "_gen AS generation", f"{rnd} AS round", "member_id", *_TP]
    a = materialize(join_small(handed, member_gens, [_G, "member_id"]).selectExpr(*in_round))
    # revocations: EAGER gives up everything; COOPERATIVE what it no longer gets;
    # a member that held under COOPERATIVE and now faces an EAGER assignor (dynamic rule) loses
    is_lost = f"_rule = 'dynamic' AND protocol = {sql_string(COOPERATIVE)} AND _gproto = {sql_string(EAGER)}"
    # a classic EAGER member of a consumer group rejoins, giving up everything, on the group
    # epoch's round, then only to pick up what it waits for (classicGroupHeartbeatToConsumerGroup)
    rejoins = "true"
    if rnd > 1 and prep.eager_in_consumer:
        rejoins = f"(_gproto != {sql_string(CONSUMER)} OR _gains IS NOT NULL)"
        mine = owned.selectExpr(_G, "member_id", *_TP)
        gains = a.selectExpr(_G, "member_id", *_TP).join(mine, [_G, "member_id", *_TP], "left_anti") \
            .selectExpr(_G, "member_id").distinct().selectExpr("*", "true AS _gains")
        owned = owned.join(gains, [_G, "member_id"], "left")
    eager = f"_proto = {sql_string(EAGER)} AND {rejoins}"
    kind = f"CASE WHEN {is_lost} THEN 'lost' WHEN ({eager}) OR _kept IS NULL THEN 'revoked' END"
    if prep.keeping:  # what each member gets again: one row per partition
        kept_flag = a.selectExpr(_G, "member_id", *_TP, "true AS _kept")
        owned = owned.join(kept_flag, [_G, "member_id", *_TP], "left")
    else:  # every member follows EAGER: it gives up everything, nothing to look up
        owned = owned.selectExpr("*", "CAST(NULL AS BOOLEAN) AS _kept")
    rev = owned.selectExpr(*in_round, f"{kind} AS kind").where("kind IS NOT NULL")
    if departed is not None:  # a departed member's partitions: revoked unless its departure says lost
        departed = departed.selectExpr(_G, "member_id", *_TP, "coalesce(kind, 'revoked') AS kind")
        round_gens = state.selectExpr(_G, "_gen").distinct()  # one row per group
        rev = rev.unionByName(join_small(departed, round_gens, _G).selectExpr(*in_round, "kind"))
    counts = [_G, "CASE WHEN kind = 'revoked' THEN 1 ELSE 0 END AS revoked",
              "CASE WHEN kind = 'lost' THEN 1 ELSE 0 END AS lost"]
    if prep.keeping or not known:
        rev = materialize(rev)  # read by the summary and by the caller: computed once
        rev_counts = rev.selectExpr(*counts)
    else:
        # every owned partition is revoked or lost, and the lists hold partitions of the metadata
        # only: the summary counts them per member (no row per partition), and the revocations
        # stay a lazy plan over the stored members for the caller to store (a replay: once)
        size = "coalesce(array_size(owned), 0)"  # each listed once (``known``)
        rev_counts = state.selectExpr(_G, f"CASE WHEN {is_lost} THEN 0 ELSE {size} END AS revoked",
                                      f"CASE WHEN {is_lost} THEN {size} ELSE 0 END AS lost")
        if departed is not None:  # (a group not in the round has no summary row)
            rev_counts = rev_counts.unionByName(departed.selectExpr(*counts))
    s = round_summary(prep, state, a, rev_counts, rnd, prev_a)
    # one action computes and stores the summary and lists the runs of the groups still pending
    # (in a small call the store was that action: its rows are on the driver already)
    rows = stored_rows(s)
    if rows is None:
        pending = one_row(s.agg(F.expr("collect_set(CASE WHEN pending > 0 AND NOT _last_round THEN _run END)")))[0]
    else:
        pending = {run for run, n, last in zip(rows["_run"].to_pylist(), rows["pending"].to_pylist(),
                                               rows["_last_round"].to_pylist())
                   if n is not None and n > 0 and run is not None and not last}
    return Round(assignment=a, revocations=rev, summary=s, pending_runs=sorted(pending))


def revoking_nothing(handed: DataFrame, members: DataFrame, partitions: DataFrame, frozen: DataFrame) -> DataFrame:
    """A round's assignment ``handed`` where the ``frozen`` groups (``group_id``) revoke nothing:
    each of their members keeps what it holds, and only the partitions nobody holds go out, to
    the owners ``handed`` gives them. Kafka Connect's incremental cooperative assignor makes no
    load-balancing revocation while a deferred resolution's delay runs
    (``IncrementalCooperativeAssignor.performTaskAssignment``: "Do not revoke resources for
    re-assignment while a delayed rebalance is active"); it assigns the new work only.
    ``members``: normalized, with the owned lists the assignor saw (an EAGER member's empty).

    >>> from spark_assign.inputs import normalize_members, normalize_partitions
    >>> members = normalize_members(spark.createDataFrame(
    ...     [("g", "a", ["t"], [("t", 0), ("t", 1)]), ("g", "b", ["t"], None)],
    ...     "group_id string, member_id string, topics array<string>, "
    ...     "owned array<struct<topic:string,partition:int>>"))
    >>> partitions = normalize_partitions(
    ...     spark.createDataFrame([("t", p) for p in range(3)], "topic string, partition int"))
    >>> handed = spark.createDataFrame([("g", "a", "t", 0), ("g", "b", "t", 1), ("g", "b", "t", 2)],
    ...                                "group_id string, member_id string, topic string, partition int")
    >>> frozen = spark.createDataFrame([("g",)], "group_id string")
    >>> sorted((r.member_id, r.partition) for r in revoking_nothing(handed, members, partitions, frozen).collect())
    [('a', 0), ('a', 1), ('b', 2)]
    """
    frozen = frozen.select(_G).distinct()
    mine = handed.join(frozen, _G, "left_semi")
    keeping = members.join(frozen, _G, "left_semi")
    claims = partition_claims(keeping, partitions, subscribed_only=False)
    kept = with_away_members(mine, mine, claims, keeping.select(_G, "member_id"))
    return handed.join(frozen, _G, "left_anti").unionByName(kept)


def round_summary(prep: Prepared, state: DataFrame, a: DataFrame, rev_counts: DataFrame, rnd: int,
                   prev_a: DataFrame | None) -> DataFrame:
    """Per group of the round: :data:`SUMMARY_COLUMNS`, ``_moved_gen``, the partitions
    held by another member in the previous generation, where known, and ``_run``, the
    assignor the group ran (stored by the first action that reads it). ``rev_counts``: rows
    of ``group_id, revoked, lost`` counts the summary adds up."""
    # pending: subscribed partitions (not held out) left unassigned this round. The
    # assignment holds each partition at most once and only for a subscriber (the
    # assignors' contract, checked with ``check``), so it is the subscribed count
    # (prep.needed) less the assigned count.
    # moved: from the owner before this round (before the rebalance in round 1, else the
    # last round's assignment, the members' owned lists of a follow-up round);
    # ``_moved_gen``: since the previous generation (the last round's, or in round 1 the
    # latest recorded when the owned lists are that generation), for the history.
    # One aggregation by partition gives each assigned partition its owners, one by group
    # sums everything: 2 shuffles, where per-group aggregates joined back took a dozen
    tp = [_G, *_TP]
    none = "CAST(NULL AS STRING)"
    fo = prep.first_owner
    sides = [a.selectExpr(*tp, "member_id AS _a", f"{none} AS _prev", f"{none} AS _first", f"{none} AS _first_id"),
             fo.selectExpr(*tp, f"{none} AS _a", f"{none} AS _prev", "_first",
                           f"{'_first_id' if '_first_id' in fo.columns else none} AS _first_id")]
    if prev_a is not None:
        sides.append(prev_a.selectExpr(*tp, f"{none} AS _a", "member_id AS _prev", f"{none} AS _first",
                                       f"{none} AS _first_id"))
    owners = union_all(sides).groupBy(*tp).agg(
        *[F.expr(f"max({c}) AS {c}") for c in ("_a", "_prev", "_first", "_first_id")]).where("_a IS NOT NULL")
    if prev_a is None:
        moved = "_first != _a"
        moved_gen = "coalesce(_first_id, _first) != _a" if prep.owned_is_latest else None
    else:
        moved = "coalesce(_prev, _first) != _a"
        moved_gen = "_prev != _a"
    flag = "CASE WHEN {} THEN 1 ELSE 0 END".format
    # the groups whose rebalance ends with this round, whatever is pending (rebalance_rounds' single_round)
    last_round = f"{'_last_round' if '_last_round' in state.columns else 'CAST(NULL AS BOOLEAN)'} AS _last_round"
    rows = union_all([
        owners.selectExpr(_G, "1 AS assigned", f"{flag(moved)} AS moved",
                          f"{flag(moved_gen) if moved_gen is not None else 'CAST(NULL AS INT)'} AS _moved_gen"),
        rev_counts,
        state.selectExpr(_G, "1 AS _member", "assignor", "votes", "_gproto AS protocol", "_gen", "_run", last_round),
        prep.needed.selectExpr(_G, "_needed", "unavailable"),
    ], allow_missing=True)
    constant = ("assignor", "votes", "protocol", "_gen", "_run", "_last_round", "_needed", "unavailable")  # per group
    counts = ("assigned", "moved", "_moved_gen", "revoked", "lost")
    s = rows.groupBy(_G).agg(*map(F.expr, (
        "sum(_member) AS members", *[f"max({c}) AS {c}" for c in constant], *[f"sum({c}) AS {c}" for c in counts],
    ))).where("members > 0")  # the groups of this round
    s = s.selectExpr("*", "coalesce(_needed, 0) - coalesce(assigned, 0) AS pending")
    return materialize_state(s.selectExpr(
        _G, f"{rnd} AS round", "_gen AS generation", "assignor", "CAST(votes AS BIGINT) AS votes", "protocol",
        "CAST(members AS BIGINT) AS members",
        *[f"CAST(coalesce({c}, 0) AS BIGINT) AS {c}"
          for c in ("assigned", "pending", "unavailable", "revoked", "lost", "moved")],
        "CAST(_moved_gen AS BIGINT) AS _moved_gen", "_run", "coalesce(_last_round, false) AS _last_round",
    ), eager=False)


def next_round_state(state: DataFrame, a: DataFrame, pending_groups: DataFrame) -> DataFrame:
    """The pending groups' members rejoin with ``owned`` = this round's assignment, at
    this round's generation."""
    new_owned = owned_lists(a, "_o")
    joined = state.join(pending_groups, _G, "left_semi").join(new_owned, [_G, "member_id"], "left")
    now = {"owned": f"{owned_or_empty('_o')} AS owned",
           "generation": "_gen AS generation", "protocol": "_gproto AS protocol"}
    cols = [c for c in joined.columns if c not in ("_o", "_gen")]
    return materialize_state(joined.selectExpr(*[now.get(c, sql_name(c)) for c in cols],
                                               *[v for c, v in now.items() if c not in cols]))
