"""Owned partitions across generations: which claims a rebalance honours.

Kafka's current rule (KAFKA-14639), applied per partition:

* claims on topics the member no longer subscribes to, or on partitions the
  metadata does not have, are dropped;
* the claim from the highest generation wins (a null generation is lower than
  any generation);
* two or more members claiming the partition in that same highest generation
  void the claim: nobody owns it.

A cooperative round has a rule of its own (:func:`without_transfers`): the
*holders* of a partition are every member that lists it at the partition's
highest claimed generation, whether or not it still subscribes to the topic.
The partition may go only to one of its holders (a contested partition to one
of its claimants: that creates no new overlap), or to anyone when nobody holds
it; everything else waits one round, until its holders have revoked it.

Kafka's constrained (uniform) path drops every claim of a member below the
group's highest generation; spark-assign applies the per-partition rule on
both paths, so a lagging member keeps the partitions nobody newer claims.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .execution import join_small
from .inputs import owned_claims, subscriptions
from .ordering import java_order_sql

#: the generation a null generation sorts as
NO_GENERATION = -1


def current_claims(members: DataFrame, partitions: DataFrame, *, subscribed_only: bool = True) -> DataFrame:
    """The claims at each partition's highest generation.

    Columns: ``group_id, member_id, topic, partition, generation, contested``
    (``contested``: more than one member claims the partition at that
    generation), every claimant's row kept. Inputs are normalized members and
    partitions; ``subscribed_only`` as in :func:`partition_claims` (False: the
    cooperative holders). The assignors use :func:`partition_claims` (one row per partition,
    a hash aggregation); this window form is the property checks' own reading of
    the rule (:func:`spark_assign.properties.cooperative_violations`), written
    apart on purpose so that a check does not reuse the code it checks.
    """
    claims = owned_claims(members)
    if subscribed_only:
        claims = claims.join(subscriptions(members), ["group_id", "member_id", "topic"], "left_semi")
    claims = (
        claims.join(partitions.select("topic", "partition"), ["topic", "partition"], "left_semi")
        .dropDuplicates(["group_id", "member_id", "topic", "partition"])
        .withColumn("generation", F.coalesce("generation", F.lit(NO_GENERATION)))
    )
    w = Window.partitionBy("group_id", "topic", "partition")
    return (
        claims.withColumn("_top", F.max("generation").over(w))
        .where(F.col("generation") == F.col("_top"))
        .withColumn("contested", F.count("*").over(w) > 1)
        .select("group_id", "member_id", "topic", "partition", "generation", "contested")
    )


#: claim order keys pack (generation, member rank) into one long: ``generation +
#: 2**31`` in the high 32 bits, the member's rank in its group in the low 31
_SPAN = 1 << 31


def member_ranks(members: DataFrame, name: str = "m_rank") -> DataFrame:
    """``members`` plus each member's 0-based rank in its group, in member-id order
    (Java's string order): the member key of the claim aggregation."""
    return members.selectExpr("*", f"{MEMBER_RANK} AS {name}")


#: :func:`member_ranks`' rank, as SQL text
MEMBER_RANK = f"row_number() OVER (PARTITION BY group_id ORDER BY {java_order_sql('member_id')}) - 1"


def claim_aggregates(generation: str, rank: str, pos: str | None = None) -> list[str]:
    """Aggregation columns over the claims of one partition (rows with a null
    ``rank`` are not claims), as SQL texts: ``_n_claims``, ``_hi`` and ``_lo`` (the highest
    ``(generation, rank)`` and the highest ``(generation, -rank)`` as order keys),
    and with ``pos``, ``_pos``: the ``pos`` of the ``_hi`` claim. Longs only, so
    Spark aggregates them in a hash table (no sort). Read them with
    :func:`claim_outcome`.

    >>> agg.groupBy("group_id", "topic", "partition").agg(*map(F.expr, claim_aggregates("generation", "m_rank")))  # doctest: +SKIP
    """
    gen = f"(CAST(coalesce({generation}, {NO_GENERATION}) AS BIGINT) + {_SPAN})"
    hi = f"CASE WHEN {rank} IS NOT NULL THEN {gen} * {_SPAN} + {rank} END"
    lo = f"CASE WHEN {rank} IS NOT NULL THEN {gen} * {_SPAN} + ({_SPAN - 1} - {rank}) END"
    cols = [f"count({rank}) AS _n_claims", f"max({hi}) AS _hi", f"max({lo}) AS _lo"]
    if pos is not None:
        cols.append(f"max_by({pos}, {hi}) AS _pos")
    return cols


def claim_outcome() -> dict[str, str]:
    """The KAFKA-14639 outcome of :func:`claim_aggregates`, as SQL texts: ``holder`` (the rank
    of the claimant at the highest generation, the smallest when several claim
    it), ``co_holder`` (the largest: ``holder`` unless contested), ``generation``
    and ``contested`` (several members claim it at that generation). All null when
    nobody claims the partition."""
    holder = f"CAST({_SPAN - 1} - (_lo & {_SPAN - 1}) AS INT)"
    co_holder = f"CAST(_hi & {_SPAN - 1} AS INT)"
    return {
        "holder": holder,
        "co_holder": co_holder,
        "generation": f"CAST(shiftright(_hi, 31) - {_SPAN} AS INT)",
        "contested": f"({co_holder} != {holder})",
    }


def partition_claims(members: DataFrame, partitions: DataFrame, *, subscribed_only: bool = True) -> DataFrame:
    """Per claimed partition, who holds it now: ``group_id, topic, partition,
    member_id, co_holder, generation, contested``. ``member_id`` is the claimant at the
    partition's highest generation (the smallest member id when several claim it
    there: then ``contested`` is true and nobody owns it; ``co_holder`` is the
    largest, else ``member_id``). ``subscribed_only``: only claims on topics the
    member subscribes to, as stickiness honours them (False: every listed
    partition, the cooperative holders and the owner before a rebalance in which a
    member dropped a topic).

    One hash aggregation of long keys per partition (:func:`claim_aggregates`).
    With three or more claimants at the highest generation, the ones between the
    smallest and the largest member id are not named (a cooperative round then
    hands the partition only to one of the two named: safe, one round later at worst).
    """
    ranked = member_ranks(members)
    claims = owned_claims(ranked, "m_rank")
    if subscribed_only:
        claims = claims.join(subscriptions(members), ["group_id", "member_id", "topic"], "left_semi")
    claims = claims.join(partitions.selectExpr("topic", "partition"), ["topic", "partition"], "left_semi")
    out = claim_outcome()
    agg = claims.groupBy("group_id", "topic", "partition").agg(*map(F.expr, claim_aggregates("generation", "m_rank")))
    names = ranked.selectExpr("group_id", "member_id", "m_rank")
    outcome = agg.selectExpr(
        "group_id", "topic", "partition", f"{out['holder']} AS m_rank", f"{out['co_holder']} AS _co",
        f"{out['generation']} AS generation", f"{out['contested']} AS contested")
    return join_small(join_small(outcome, names, ["group_id", "m_rank"]),
                      names.selectExpr("group_id", "m_rank AS _co", "member_id AS co_holder"), ["group_id", "_co"]
                      ).selectExpr(
        "group_id", "topic", "partition", "member_id", "co_holder", "generation", "contested")


def free_to_take(holder: str, co_holder: str, member: str) -> str:
    """Whether a partition may go to ``member`` this cooperative round: nobody holds
    it, or ``member`` is one of its holders (``holder``, ``co_holder``: the smallest
    and largest claimant at its highest generation). Otherwise it is transferring
    ownership and waits one round. SQL text over the three columns.

    >>> free_to_take("holder", "co_holder", "m_rank")
    '(holder IS NULL OR holder = m_rank OR co_holder = m_rank)'
    """
    return f"({holder} IS NULL OR {holder} = {member} OR {co_holder} = {member})"


def without_transfers(assignment: DataFrame, holders: DataFrame) -> DataFrame:
    """``assignment`` minus the partitions it hands to a member that does not hold
    them while another member does (they change owner: Kafka's
    ``partitionsTransferringOwnership``); ``holders``: the members'
    :func:`partition_claims` with ``subscribed_only=False`` (a member still holds
    the partitions of a topic it dropped until it has revoked them).

    >>> without_transfers(assign(m, p, "sticky"), partition_claims(m, p, subscribed_only=False))  # doctest: +SKIP
    """
    tp = ["group_id", "topic", "partition"]
    holders = holders.select(*tp, F.col("member_id").alias("_holder"), F.col("co_holder").alias("_co_holder"))
    return (
        assignment.join(holders, tp, "left")
        .where(free_to_take("_holder", "_co_holder", "member_id"))
        .select(*assignment.columns)
    )


def resolve_owned(members: DataFrame, partitions: DataFrame, *, subscribed_only: bool = True) -> DataFrame:
    """The honoured owned partitions: one owner per partition at most
    (``subscribed_only`` as in :func:`partition_claims`).

    Columns: ``group_id, member_id, topic, partition, generation``.

    >>> from spark_assign.inputs import normalize_members, normalize_partitions
    >>> members = normalize_members(spark.createDataFrame(
    ...     [("g", "a", ["t"], [("t", 0), ("t", 1)], 3), ("g", "b", ["t"], [("t", 1)], 2)],
    ...     "group_id string, member_id string, topics array<string>, "
    ...     "owned array<struct<topic:string,partition:int>>, generation int"))
    >>> partitions = normalize_partitions(spark.createDataFrame([("t", 0), ("t", 1)], "topic string, partition int"))
    >>> sorted((r.member_id, r.partition, r.generation) for r in resolve_owned(members, partitions).collect())
    [('a', 0, 3), ('a', 1, 3)]
    """
    return partition_claims(members, partitions, subscribed_only=subscribed_only).where("NOT contested").selectExpr(
        "group_id", "member_id", "topic", "partition", "generation")
