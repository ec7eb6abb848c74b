"""The sticky assignor's general path: members of a group subscribe to different topics.

Kafka's client (``AbstractStickyAssignor.GeneralAssignmentBuilder``) keeps the
valid owned partitions, hands the rest to the least loaded subscribers and then
moves single partitions until no partition could move to a subscriber of its
topic holding two or more fewer (Kafka's balance rule,
``properties.balance_violations(rule="kafka")``). That loop is super-linear.

Here the same result is computed for every group at once, at member x topic
granularity (one row per subscription, integer member and topic indexes per
group, so a group's result never depends on the groups assigned with it), as
DataFrame transformations; the driver only loops over rounds, each one
distributed step over all groups:

1. **initial fill** (:func:`.sticky_counts.initial_counts`): ``assigned_count``, how many
   partitions of topic ``t`` member ``m`` gets. Start from the ``owned_count`` and
   spread each topic's unowned partitions over its subscribers by weights fitted
   (iterative proportional fitting) so that members top up to the group's water
   level; round each member's fractional parts jointly over its topics, and give
   each topic's leftover partitions to the members whose rounding wants one, ties
   by hash (an order shared by all topics would pile the errors onto the same
   members). Each member also gets a ``target_load``: its fitted total,
   rounded over the group.
2. **pairing rounds** (:func:`.sticky_pairing.pair_moves`): the units members hold above their
   target and lack below it are laid out in a hash order and paired by position,
   each pair moving one partition the giver did not own of a topic both share;
   a move is kept only if its giver ends at least as loaded as its receiver. One
   round settles nearly every unit of a fresh group (the benchmark: 2-3 rounds).
   Pairing rounds read and update one row per member (:mod:`.sticky_pairing`),
   partitioned by group, so a round is one shuffle of the member rows; the
   subscription rows take all their moves at once, when pairing stops
   (:func:`.sticky_pairing.synced_state`).
3. **water-fill rounds** (:func:`.sticky_counts.balancing_round`), once a pairing
   round finds nothing, while Kafka's rule still fails (owners above the level,
   targets the fit got wrong); no pairing round follows them (pairing rounds after a
   water-fill round, and the member rows rebuilt for them, cost a large share of a call
   and could keep fewer owned partitions):
   every member picks the single topic of its worst violation, as giver or
   receiver, and per topic the members that picked it redistribute its
   partitions among themselves by a water-fill over their other loads
   (owned partitions kept first).
   Termination: every move of either round kind goes, played one by one, from a
   member at least two partitions heavier, so each round strictly lowers the sum
   of squared member loads (for water-fill rounds: with ``K(t)`` = largest load of
   a holder of ``t`` minus smallest load of a subscriber, the topic with the
   largest ``K`` is picked by a most loaded holder and a least loaded subscriber,
   and members change load through one topic only). ``MAX_ROUNDS`` is a safety
   cap that raises :class:`~spark_assign.errors.AssignmentPropertyError` naming
   the unbalanced subscriptions, never a silent stop.
4. **stickiness rounds** (:func:`.sticky_chains.chain_moves`, once balanced, only where a member
   holds fewer of a topic than it owned): per group and round one chain of moves
   that keeps more owned partitions and Kafka's balance rule: a single move, a
   swap, or ``a -> x -> b`` where each hop hands on one partition (the chains
   Kafka's GeneralAssignmentBuilder reaches among equally loaded members). On the
   tests' 256 random groups this keeps at least as many owned partitions as Kafka
   in every group. A round searches only the groups the round before changed
   (:func:`.sticky_chains.sticky_rounds`).
5. **placement** (:mod:`spark_assign.strategies.sticky_placement`): each member keeps
   its owned partitions of a topic up to its ``assigned_count`` (lowest partitions
   first), and the partitions left over are
   handed out by a rank join on ``(group_id, topic, position)`` against the
   members' remaining counts. With ``rack_aware`` (KIP-881, best effort, in
   Kafka's priority balance > rack locality > stickiness) rack-local owned
   partitions are kept first, then rack-local free partitions handed out, then
   other owned partitions kept, then the rest handed out. The counts themselves
   are rack-blind, so rack locality only decides which partitions of a topic a
   member gets, never how many.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import AssignmentPropertyError, raise_if_rows
from ..execution import has_rows, materialize, partitioned_by, stored_select
from ..inputs import topic_sizes as count_topic_sizes
from .sticky_chains import sticky_rounds
from .sticky_counts import STATE, balancing_round, initial_counts, with_loads
from .sticky_pairing import MEMBER_ROWS, after_moves, member_rows, pair_moves, synced_state
from .sticky_placement import place

#: cap on balancing rounds: reaching it raises AssignmentPropertyError naming the groups
MAX_ROUNDS = 200
#: balancing rounds the last :func:`target_counts` call ran (for benchmarks)
LAST_ROUNDS = 0


def target_counts(
    members: DataFrame, partitions: DataFrame, owned: DataFrame | None, *, max_rounds: int = MAX_ROUNDS,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Per subscription, how many partitions of the topic the member gets:
    ``group_id, member_id, topic, member_index, owned_count, count`` (balanced by
    Kafka's rule; ``member_index``: the member's position in Kafka's member order).
    ``topic_sizes``: the partitions' :func:`spark_assign.inputs.topic_sizes` (counted
    here when None).

    >>> target_counts(members, partitions, resolve_owned(members, partitions)).show()  # doctest: +SKIP
    """
    global LAST_ROUNDS
    sizes = count_topic_sizes(partitions) if topic_sizes is None else topic_sizes
    state = materialize(initial_counts(members, sizes, owned))
    mem = materialize(member_rows(state))
    subscribers = mem.select("group_id", "member_id", "member_index", "target_load", "subscribed_topics")
    synced = True  # the state rows hold the counts the member rows say
    pairing = True  # until a pairing round moves nothing: the water-fill rounds finish alone
    LAST_ROUNDS = 0
    for LAST_ROUNDS in range(max_rounds + 1):
        # a pairing round while some member is above its target and pairing finds
        # moves (on the member rows alone), else check Kafka's rule and water-fill
        if pairing and LAST_ROUNDS < max_rounds and has_rows(mem, greater=("member_load", "target_load")):
            by_group = partitioned_by(mem, "group_id")  # the round shuffles nothing more
            paired = materialize(after_moves(by_group, pair_moves(by_group, LAST_ROUNDS)))
            if has_rows(paired, true="moved"):
                mem, synced = stored_select(paired, *MEMBER_ROWS), False
                continue
            pairing = False
        if not synced:  # the subscription rows take every pairing round's moves at once
            state, synced = stored_select(materialize(synced_state(state, mem)), *STATE), True
        # Kafka's rule fails exactly where a topic's most loaded holder is two or more above
        # its least loaded subscriber: where some subscription has a violation key (a holder
        # two or more above the topic's least loaded subscriber, or a subscriber two or more
        # below its most loaded holder), read off the stored rows
        s = materialize(with_loads(state))
        if not has_rows(s, not_null="violation_key"):
            break
        pending = s.where(F.col("violation_key").isNotNull())
        if LAST_ROUNDS == max_rounds:
            raise_if_rows(
                pending.select("group_id", "member_id", "topic", "assigned_count", "member_load",
                               "min_subscriber_load", "max_holder_load"),
                AssignmentPropertyError,
                f"the general sticky path did not reach Kafka's balance rule in {max_rounds} "
                "balancing rounds (max_rounds); subscriptions still out of balance",
            )
        state = materialize(balancing_round(s))
        if pairing:  # the member rows are pairing's
            mem = materialize(member_rows(state, subscribers))
    state = sticky_rounds(state, s) if owned is not None else state
    return state.select(
        "group_id", "member_id", "topic", "member_index", "owned_count", F.col("assigned_count").alias("count"))


def assign_general(
    members: DataFrame, partitions: DataFrame, owned: DataFrame | None, *, rack_aware: bool = False,
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """Sticky assignment for groups whose members subscribe to different topics.

    ``members``: normalized members (spark_assign.inputs); ``partitions``:
    normalized partitions; ``owned``: the honoured owned partitions
    (:func:`spark_assign.owned.resolve_owned`), or None when nobody owns anything
    (fresh groups: the steps that only concern owned partitions are left out);
    ``topic_sizes`` as in :func:`target_counts`. Returns the full target
    assignment ``group_id, member_id, topic, partition``: valid, balanced by
    Kafka's rule, keeping owned partitions wherever balance allows.

    >>> m = normalize_members(members_df)  # doctest: +SKIP
    >>> assign_general(m, parts, resolve_owned(m, parts), rack_aware=False).show()  # doctest: +SKIP
    """
    counts = target_counts(members, partitions, owned, topic_sizes=topic_sizes)  # a projection of materialized state
    out = place(counts, members, partitions, owned, rack_aware)
    return out.select("group_id", "member_id", "topic", F.col("partition").cast("int"))
