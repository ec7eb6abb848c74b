"""One round of :func:`spark_assign.rebalance.rebalance`: its assignment, revocations and
summary over every group still rebalancing, and the members of the next round.

>>> r = run_round(prep, state, 1, None, {}, lags=None, run_options={}, departed=None)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .assign import assign
from .frames import GROUP as _G
from .frames import TP as _TP
from .frames import owned_lists, union_all
from .inputs import OWNED_TYPE, normalize_members
from .lineage import materialize, materialize_state
from .protocol import COOPERATIVE, EAGER
from .reconcile import SERVER_RUN, reconciliation_round


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
      member id they had there (``first_owner``'s ``_first_id``, where it differs).
    """

    members: DataFrame
    partitions: DataFrame
    all_partitions: DataFrame
    runs: list[str]
    first_owner: DataFrame
    needed: DataFrame
    extra_df: DataFrame | None
    owned_is_latest: bool = False


@dataclass
class Round:
    """One round: its assignment, revocations and summary (``any_pending``: some group
    still has partitions to hand out); ``final``: the rows of the groups it ends;
    ``members``: the round's members, to record."""

    assignment: DataFrame
    revocations: DataFrame
    summary: DataFrame
    any_pending: bool
    final: DataFrame | None = None
    members: DataFrame | None = None


def _owned_rows(members: DataFrame, partitions: DataFrame, *columns: str) -> DataFrame:
    """One row per distinct owned partition of each member that is in ``partitions``:
    ``group_id, member_id, *columns, topic, partition`` (``columns``: member columns carried along)."""
    return (
        members.select(_G, "member_id", *columns, F.explode(F.array_distinct("owned")).alias("tp"))
        .select(_G, "member_id", *columns, "tp.topic", "tp.partition")
        .join(partitions.select(*_TP), _TP, "left_semi")
    )


def run_round(prep: Prepared, state: DataFrame, rnd: int, prev_a: DataFrame | None, targets: dict[str, DataFrame],
               *, lags: DataFrame | None, run_options: dict[str, dict[str, Any]],
               departed: DataFrame | None) -> Round:
    """Round ``rnd`` over the groups of ``state`` (with ``_gen``, the round's generation):
    the assignment (one distributed call per assignor to run), the revocations
    (``departed``: added to them, in the first round) and the summary (one action, which
    also tells whether some group is still pending)."""
    p = prep.partitions
    owned = _owned_rows(state, prep.all_partitions, "_proto", "_gproto", "_rule", "protocol", "_gen")
    parts = []
    for name in prep.runs:
        sm = state.where(F.col("_run") == name).select(*normalize_members(state).columns)
        if name.startswith(SERVER_RUN):  # KIP-848: the group epoch's target, then its hand-over
            parts.append(reconciliation_round(name, sm, p, rnd, targets))
            continue
        glags = lags.join(sm.select(_G).distinct(), _G, "left_semi") if lags is not None else None
        parts.append(assign(sm, p, name, lags=glags, validate=False, **run_options.get(name, {})))
    round_gens = state.select(_G, "_gen").distinct()  # one row per group
    a = materialize(union_all(parts).join(round_gens, _G).select(
        _G, F.col("_gen").alias("generation"), F.lit(rnd).alias("round"), "member_id", *_TP))
    # revocations: EAGER gives up everything; COOPERATIVE what it no longer gets;
    # a member that held under COOPERATIVE and now faces an EAGER assignor (dynamic rule) loses
    is_lost = (F.col("_rule") == "dynamic") & (F.col("protocol") == COOPERATIVE) & (F.col("_gproto") == EAGER)
    kept_flag = a.select(_G, "member_id", *_TP, F.lit(True).alias("_kept"))  # one row per partition
    rev = (
        owned.join(kept_flag, [_G, "member_id", *_TP], "left")
        .withColumn("kind", F.when(is_lost, F.lit("lost")).when(
            (F.col("_proto") == EAGER) | F.col("_kept").isNull(), F.lit("revoked")))
        .where(F.col("kind").isNotNull())
        .select(_G, F.col("_gen").alias("generation"), F.lit(rnd).alias("round"), "member_id", *_TP, "kind")
    )
    if departed is not None:
        rev = rev.unionByName(
            departed.join(round_gens, _G).select(
                _G, F.col("_gen").alias("generation"), F.lit(rnd).alias("round"), "member_id", *_TP,
                F.coalesce("kind", F.lit("revoked")).alias("kind"))
        )
    rev = materialize(rev)
    s = round_summary(prep, state, a, rev, rnd, prev_a)
    # one action computes and stores the summary and tells whether some group is pending
    any_pending = bool(s.agg(F.max(F.col("pending") > 0)).first()[0])  # type: ignore[index]  # a global aggregate: one row
    return Round(assignment=a, revocations=rev, summary=s, any_pending=any_pending)


def round_summary(prep: Prepared, state: DataFrame, a: DataFrame, rev: DataFrame, rnd: int,
                   prev_a: DataFrame | None) -> DataFrame:
    """Per group of the round: :data:`SUMMARY_COLUMNS` and ``_moved_gen``, the partitions
    held by another member in the previous generation, where known (stored by the first
    action that reads it)."""
    # pending: subscribed partitions (not held out) left unassigned this round. The
    # assignment holds each partition at most once and only for a subscriber (the
    # assignors' contract, checked with ``check``), so it is the subscribed count
    # (prep.needed) less the assigned count
    # the owner before this round: before the rebalance in round 1, else the last
    # round's assignment (the members' owned lists of a follow-up round)
    # ``_moved_gen``: since the previous generation (the last round's, or in round 1 the
    # latest recorded when the owned lists are that generation), for the history
    if prev_a is None:
        since_latest = (F.count(F.when(F.coalesce("_first_id", "_first") != F.col("member_id"), 1))
                        if prep.owned_is_latest else F.lit(None))
        moved = a.join(prep.first_owner, [_G, *_TP], "left").groupBy(_G).agg(
            F.count(F.when(F.col("_first") != F.col("member_id"), 1)).alias("moved"), since_latest.alias("_moved_gen"))
    else:
        moved = (
            a.join(prev_a.select(_G, *_TP, F.col("member_id").alias("_prev")), [_G, *_TP], "left")
            .join(prep.first_owner, [_G, *_TP], "left")
            .groupBy(_G).agg(F.count(F.when(F.coalesce("_prev", "_first") != F.col("member_id"), 1)).alias("moved"),
                             F.count(F.when(F.col("_prev") != F.col("member_id"), 1)).alias("_moved_gen")))
    counts = a.groupBy(_G).agg(F.count("*").alias("assigned"))
    revc = rev.groupBy(_G).agg(
        F.count(F.when(F.col("kind") == "revoked", 1)).alias("revoked"),
        F.count(F.when(F.col("kind") == "lost", 1)).alias("lost"),
    )
    groups = state.groupBy(_G, "assignor", "votes", F.col("_gproto").alias("protocol"), "_gen").agg(
        F.count("*").alias("members"))
    s = groups.join(counts, _G, "left").join(prep.needed, _G, "left").join(revc, _G, "left").join(moved, _G, "left")
    s = s.withColumn("pending", F.coalesce("_needed", F.lit(0)) - F.coalesce("assigned", F.lit(0)))
    return materialize_state(s.select(
        _G, F.lit(rnd).alias("round"), F.col("_gen").alias("generation"), "assignor",
        F.col("votes").cast("long").alias("votes"), "protocol", F.col("members").cast("long").alias("members"),
        *[F.coalesce(c, F.lit(0)).cast("long").alias(c) for c in
          ("assigned", "pending", "unavailable", "revoked", "lost", "moved")],
        F.col("_moved_gen").cast("long").alias("_moved_gen"),
    ), eager=False)


def next_round_state(state: DataFrame, a: DataFrame, pending_groups: DataFrame) -> DataFrame:
    """The pending groups' members rejoin with ``owned`` = this round's assignment, at
    this round's generation."""
    new_owned = owned_lists(a, "_o")
    return materialize_state(
        state.join(pending_groups, _G, "left_semi")
        .join(new_owned, [_G, "member_id"], "left")
        .withColumn("owned", F.coalesce("_o", F.array().cast(OWNED_TYPE)).cast(OWNED_TYPE))
        .withColumn("generation", F.col("_gen"))
        .withColumn("protocol", F.col("_gproto"))
        .drop("_o", "_gen")
    )
