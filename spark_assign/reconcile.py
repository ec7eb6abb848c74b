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

>>> r = rebalance(members, partitions, group_protocol="consumer")  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .assign import PROTOCOL_STRATEGIES, SERVER_ALIASES, assign, strategy_name
from .lineage import in_small_call, materialize_state
from .owned import partition_claims, without_transfers
from .protocol import CONSUMER

_G = "group_id"

#: the run-name prefix of the broker's assignors in a rebalance's list of runs
SERVER_RUN = "consumer:"


def with_group_protocols(m: DataFrame, extra_df: DataFrame | None, extra: list[str], *, group_protocol: str,
                         strategy: str | None) -> DataFrame:
    """``m`` with ``_gp`` (each group's protocol: ``group_protocol``, or an extra
    ``group_protocol`` column per group) and, in consumer groups, ``assignors`` set to
    the broker's assignor: ``strategy`` when it is one of the broker's, else the
    group's ``remote_assignor`` column (KIP-848's ``group.remote.assignor``), else
    ``uniform`` (the broker's default). The members' own lists play no part."""
    if "group_protocol" in extra:
        assert extra_df is not None  # the columns listed in ``extra`` come from it
        gp = extra_df.groupBy(_G).agg(F.coalesce(F.max("group_protocol"), F.lit(group_protocol)).alias("_gp"))
        m = m.join(gp, _G)
    else:
        m = m.withColumn("_gp", F.lit(group_protocol))
    forced = strategy_name(strategy) if strategy is not None else None
    server: Column = F.lit(forced if forced in PROTOCOL_STRATEGIES["consumer"] else "uniform")
    if "remote_assignor" in extra and forced not in PROTOCOL_STRATEGIES["consumer"]:
        names = F.create_map(*[F.lit(x) for k, v in [*SERVER_ALIASES.items(), *(
            (n, n) for n in PROTOCOL_STRATEGIES["consumer"])] for x in (k, v)])
        assert extra_df is not None
        remote = extra_df.groupBy(_G).agg(F.max("remote_assignor").alias("_remote"))
        m = m.join(remote, _G, "left")
        server = F.coalesce(names[F.col("_remote")], server)
    return m.withColumn("assignors", F.when(F.col("_gp") == "consumer", F.array(server)).otherwise(
        F.col("assignors")))


def mark_consumer_groups(m: DataFrame) -> DataFrame:
    """Consumer groups run the broker's assignor (``_run`` prefixed with
    :data:`SERVER_RUN`) and follow the ``CONSUMER`` protocol (``_proto``, ``_gproto``)."""
    consumer = F.col("_gp") == "consumer"
    return (
        m.withColumn("_run", F.when(consumer, F.concat(F.lit(SERVER_RUN), F.col("assignor"))).otherwise(F.col("_run")))
        .withColumn("_proto", F.when(consumer, F.lit(CONSUMER)).otherwise(F.col("_proto")))
        .withColumn("_gproto", F.when(consumer, F.lit(CONSUMER)).otherwise(F.col("_gproto")))
    )


def reconciliation_round(run: str, members: DataFrame, partitions: DataFrame, rnd: int,
                         targets: dict[str, DataFrame], target: DataFrame | None = None) -> DataFrame:
    """The assignment of consumer groups (``members``, normalized, all running the
    broker's assignor ``run``) in round ``rnd``: round 1 computes and keeps the target
    (in ``targets``; ``target``: computed by the caller, with other groups' assignment)
    and hands out what nobody else holds; later rounds hand out the rest of the target.
    Returns ``group_id, member_id, topic, partition``."""
    if rnd == 1:
        if target is None:
            # a small call's members and partitions are short plans over local relations already
            target = assign(members, partitions, run[len(SERVER_RUN):], group_protocol="consumer", validate=False,
                            checkpoint=not in_small_call())
        targets[run] = materialize_state(target, eager=False)
        # a partition goes now unless another member still holds it (it revokes it this round)
        return without_transfers(targets[run], partition_claims(members, partitions, subscribed_only=False))
    # the next heartbeat: the previous owners have revoked, the target is reached
    return targets[run].join(members.select(_G).distinct(), _G, "left_semi")
