"""KIP-848 reconciliation inside :func:`spark_assign.rebalance.rebalance`.

Under the consumer rebalance protocol (``group_protocol="consumer"``) there are no
JoinGroup rounds: the broker's assignor (``uniform`` or the server ``range``)
computes the group's target assignment from the members' current assignments, and
the members reconcile towards it. In :func:`~spark_assign.rebalance.rebalance` a
consumer group's round 1 is the new group epoch: every target partition that no
other member holds goes to its target owner, and each member revokes what the
target takes from it (nothing else: no stop-the-world). Round 2, the next heartbeat,
hands the revoked partitions to their new owners: the same target, not a new
assignment.

>>> from spark_assign import rebalance
>>> members = spark.createDataFrame([("g", "a", ["t"], [("t", p) for p in range(4)], 3), ("g", "b", ["t"], None, None)],
...     "group_id string, member_id string, topics array<string>, "
...     "owned array<struct<topic:string,partition:int>>, generation int")
>>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
>>> r = rebalance(members, parts, group_protocol="consumer")  # the broker's uniform assignor
>>> r.summary.select("round", "generation", "protocol", "assigned", "pending", "revoked").show()
+-----+----------+--------+--------+-------+-------+
|round|generation|protocol|assigned|pending|revoked|
+-----+----------+--------+--------+-------+-------+
|    1|         4|CONSUMER|       2|      2|      2|
|    2|         5|CONSUMER|       4|      0|      0|
+-----+----------+--------+--------+-------+-------+
<BLANKLINE>
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .assign import assign
from .execution import in_small_call, materialize_state
from .frames import sql_string
from .owned import partition_claims, without_transfers
from .protocol import CONSUMER, canonical_assignors, member_protocol
from .strategies.registry import SERVER_ALIASES, strategies_of, strategy_name

_G = "group_id"

#: the run-name prefix of the broker's assignors in a rebalance's list of runs
SERVER_RUN = "consumer:"


def with_group_protocols(m: DataFrame, *, group_protocol: str, strategy: str | None) -> DataFrame:
    """``m`` with ``_gp`` (each group's protocol: ``group_protocol``, or a
    ``group_protocol`` column of ``m``, per group) and, in consumer groups, ``assignors`` set
    to the broker's assignor: ``strategy`` when it is one of the broker's, else the
    group's ``remote_assignor`` column (KIP-848's ``group.remote.assignor``), else
    ``uniform`` (the broker's default). The members' own lists play no part. A group's
    value is the highest of its members' (a window over the group's rows: one shuffle,
    where aggregates joined back took two and their broadcasts).

    >>> m = with_group_protocols(m, group_protocol="classic", strategy=None)  # doctest: +SKIP
    """
    # SQL text: one JVM call an expression, where column functions take several each
    over_group = f"OVER (PARTITION BY {_G})"
    gp = sql_string(group_protocol)
    if "group_protocol" in m.columns:
        gp = f"coalesce(max(group_protocol) {over_group}, {gp})"
    forced = strategy_name(strategy) if strategy is not None else None
    brokers = strategies_of("consumer")
    server = sql_string(forced if forced in brokers else "uniform")
    if "remote_assignor" in m.columns and forced not in brokers:
        names = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in [*SERVER_ALIASES.items(), *(
            (n, n) for n in brokers)])
        server = f"coalesce(map({names})[max(remote_assignor) {over_group}], {server})"
    m = m.selectExpr("*", f"{gp} AS _gp")
    if "member_type" in m.columns:  # a classic member revokes as its own list has it (:func:`mark_consumer_groups`)
        m = m.withColumn("_own_proto", F.expr(
            f"CASE WHEN member_type = 'classic' THEN {member_protocol(canonical_assignors())} END"))
    return m.withColumn("assignors", F.expr(f"CASE WHEN _gp = 'consumer' THEN array({server}) ELSE assignors END"))


def mark_consumer_groups(m: DataFrame) -> DataFrame:
    """Consumer groups run the broker's assignor (``_run`` prefixed with
    :data:`SERVER_RUN`) and follow the ``CONSUMER`` protocol (``_proto``, ``_gproto``).

    A member whose ``member_type`` is ``classic`` (a classic consumer in a consumer group: an
    online migration, :mod:`spark_assign.simulation.migration`) reconciles through
    JoinGroup/SyncGroup, and its client revokes as its own assignor list has it
    (``ConsumerCoordinator``'s protocol: EAGER unless every assignor it lists is cooperative):
    an EAGER one gives up everything each time it rejoins (``_proto``: EAGER), and gets back at
    the SyncGroup what the reconciliation gives it."""
    consumer = "_gp = 'consumer'"
    member = f"coalesce(_own_proto, {sql_string(CONSUMER)})" if "_own_proto" in m.columns else sql_string(CONSUMER)
    return m.withColumns({  # one projection, each expression over the columns before it
        "_run": F.expr(f"CASE WHEN {consumer} THEN concat({sql_string(SERVER_RUN)}, assignor) ELSE _run END"),
        "_proto": F.expr(f"CASE WHEN {consumer} THEN {member} ELSE _proto END"),
        "_gproto": F.expr(f"CASE WHEN {consumer} THEN {sql_string(CONSUMER)} ELSE _gproto END"),
    })


def reconciliation_round(run: str, members: DataFrame, partitions: DataFrame, rnd: int,
                         targets: dict[str, DataFrame], target: DataFrame | None = None,
                         away: DataFrame | None = None) -> DataFrame:
    """The assignment of consumer groups (``members``, normalized, all running the
    broker's assignor ``run``) in round ``rnd``: round 1 computes and keeps the target
    (in ``targets``; ``target``: computed by the caller, with other groups' assignment)
    and hands out what nobody else holds; later rounds hand out the rest of the target.
    ``away`` (``group_id, member_id``): members that send no heartbeat (:func:`with_away_members`).
    Returns ``group_id, member_id, topic, partition``."""
    if rnd == 1:
        if target is None:
            # a small call's members and partitions are short plans over local relations already
            target = assign(members, partitions, run[len(SERVER_RUN):], group_protocol="consumer", validate=False,
                            checkpoint=not in_small_call())
        targets[run] = materialize_state(target, eager=False)
        # a partition goes now unless another member still holds it (it revokes it this round)
        claims = partition_claims(members, partitions, subscribed_only=False)
        handed = without_transfers(targets[run], claims)
    else:
        # the next heartbeat: the previous owners have revoked, the target is reached
        handed = targets[run].join(members.select(_G).distinct(), _G, "left_semi")
        if away is None:
            return handed
        claims = partition_claims(members, partitions, subscribed_only=False)
    if away is None:
        return handed
    return with_away_members(handed, targets[run], claims, away)


def with_away_members(handed: DataFrame, target: DataFrame, claims: DataFrame, away: DataFrame) -> DataFrame:
    """A round's assignment ``handed`` when the ``away`` members (``group_id, member_id``) send no
    heartbeat: a crashed member, or a static one that left, until its session expires. An away
    member revokes nothing, so what the target takes from it stays with it (its new owner waits
    for the expiry), and what the target gives it, it holds idle as soon as nobody else does
    (``GroupMetadataManager``: a member reconciles only on its own heartbeats). ``claims``: who
    holds each partition before the round (:func:`~spark_assign.owned.partition_claims`)."""
    tp = [_G, "topic", "partition"]
    keys = [_G, "member_id"]
    away = away.select(*keys).distinct()
    held = claims.join(away, keys, "left_semi").select(*keys, "topic", "partition")
    others = handed.join(away, keys, "left_anti").join(held.select(*tp), tp, "left_anti")
    given = without_transfers(target.join(away, keys, "left_semi"), claims).select(*handed.columns)
    return others.unionByName(held.select(*handed.columns)).unionByName(given).dropDuplicates(tp)
