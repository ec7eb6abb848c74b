"""An online migration: a classic group that turns into a KIP-848 consumer group as its
members come back on ``group.protocol=consumer``, one by one.

Kafka 4's group coordinator (``GroupMetadataManager``) converts a classic group at the first
heartbeat of a member on the consumer protocol (``convertToConsumerGroup``, allowed by
``group.consumer.migration.policy``, ``bidirectional`` by default): the classic members stay,
with what they were last assigned, as members of the new consumer group; the pending JoinGroup
and SyncGroup requests are answered ``REBALANCE_IN_PROGRESS`` (a join phase open then never
completes); the group epoch is bumped and the broker's assignor computes a target over every
member. From then on the group runs on the consumer protocol's timers.

A member's **type** is the protocol its client speaks (``MemberDescription.type()`` in Kafka's
admin client): the event's ``group_protocol`` on its ``join`` or ``config_change`` (a restart),
else the group's protocol at the start. A classic member of a consumer group learns of a new
epoch at its heartbeat and rejoins through JoinGroup/SyncGroup
(``classicGroupJoinToConsumerGroup``); its client revokes as its own assignor list has it
(``ConsumerCoordinator``: EAGER unless every assignor it lists is cooperative), so under
``[range, cooperative-sticky]`` it gives up everything at each rejoin and gets back at the
SyncGroup what the reconciliation gives it (:func:`~spark_assign.reconcile.mark_consumer_groups`).

Not modelled: the downgrade back to classic when the last consumer-protocol member leaves
(``validateOnlineDowngradeWithFencedMember``); a converted group stays a consumer group.

>>> e = spark.createDataFrame([("g", 0, "join", None, "classic"), ("g", 5, "join", "consumer", "classic")],
...     "group_id string, at long, kind string, group_protocol string, _gp string")
>>> [r._converted for r in with_conversions(e).collect()]
[5, 5]
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..frames import GROUP as _G

#: the settings a converted group takes from then on, by column: the consumer protocol's
#: timers (``_up_*``: :meth:`~.timing.Timing.settings_of`), none of the classic join phase's
_UPGRADED = {"_gp": "'consumer'", "_hb": "_up_hb", "_timeout": "_up_timeout", "_ai": "_up_ai",
             "_rt": "0", "_init": "0", "_js": "0", "_mma": "0"}


def with_conversions(e: DataFrame) -> DataFrame:
    """``e`` (the events with their settings columns) with ``_start_gp``, the group's protocol at
    the start, and ``_converted``: when a classic group turns into a consumer group, at the first
    ``join`` or ``config_change`` of a member on the consumer protocol (null: never)."""
    upgrade = (F.col("kind").isin("join", "config_change") & (F.col("group_protocol") == "consumer")
               & (F.col("_gp") == "classic"))
    first = F.min(F.when(upgrade, F.col("at"))).over(Window.partitionBy(_G))
    return e.withColumn("_start_gp", F.col("_gp")).withColumn("_converted", first.cast("long"))


def protocol_at(df: DataFrame, at: str = "at") -> DataFrame:
    """``df`` (rows with the settings columns and ``_converted``) with the group's protocol and
    timers at time ``at``: from the conversion on, a consumer group's."""
    after = f"_converted IS NOT NULL AND {at} >= _converted"
    return df.withColumns({c: F.expr(f"CASE WHEN {after} THEN {v} ELSE {c} END") for c, v in _UPGRADED.items()
                           if c in df.columns})


def member_types(history: str, start: str = "_start_gp") -> str:
    """A member's type after each of its events (SQL text over ``history``, its sorted events as
    structs with ``kind`` and ``group_protocol``): its latest join's ``group_protocol``, or a
    later restart's, else ``start``'s protocol."""
    return (f"coalesce(aggregate({history}, CAST(NULL AS STRING), (acc, x) -> CASE "
            f"WHEN x.kind = 'join' THEN x.group_protocol "
            f"WHEN x.kind = 'config_change' AND x.group_protocol IS NOT NULL THEN x.group_protocol "
            f"ELSE acc END), {start})")
