"""The fill of the sticky assignors' uniform path (:mod:`spark_assign.strategies.sticky_uniform`,
steps 3 and 4): the unassigned partitions dealt to the members below their quotas, round-robin
as arithmetic on slots (:func:`deal`), rack-local first in rack-aware groups (:func:`rack_fill`,
KIP-881).

>>> filled = deal(members_with_quotas, unassigned, use_racks=False)  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..execution import has_rows, join_small, materialize, one_partition, stored_union, union_all
from ..ordering import java_order_sql

_G = "group_id"

#: rounds of rack-local matching over all replica racks, after a first round on each
#: partition's first (leader) replica rack; each one distributed step over all groups
RACK_ROUNDS = 1


def deal(mem: DataFrame, unassigned: DataFrame, use_racks: bool) -> DataFrame:
    """The unassigned partitions, in Kafka's order, dealt to the members' slots:
    ``group_id, member_id, m_rank, topic, partition, holder, co_holder``."""
    extra = "CASE WHEN e_phase IS NOT NULL AND e_rank < X THEN 1 ELSE 0 END"
    # slot s < deficit is the member's turn in round s of the deal; slot s == deficit
    # is its extra partition (up to C_c), dealt after every round
    n_slots = f"(deficit + {extra})"
    slots = mem.where(f"{n_slots} > 0").selectExpr(
        _G, "member_id", "m_rank", "mrack", "deficit", "e_rank",
        f"explode(sequence(CAST(0 AS BIGINT), CAST({n_slots} - 1 AS BIGINT))) AS s",
    ).selectExpr(
        _G, "member_id", "m_rank", "mrack",
        "row_number() OVER (PARTITION BY group_id ORDER BY s >= deficit, "
        "CASE WHEN s >= deficit THEN e_rank ELSE s END, m_rank) - 1 AS pos",
    )
    # rack-aware groups: read off the member rows a small call stored, else one action
    if not use_racks or not has_rows(mem, not_null="mrack"):
        unassigned = unassigned.selectExpr("*", "row_number() OVER (PARTITION BY group_id ORDER BY "
                                           f"{java_order_sql('topic')}, partition) - 1 AS pos")
        return one_partition(slots.join(unassigned, [_G, "pos"]))
    placed = rack_fill(mem, slots, unassigned, f"{java_order_sql('topic')}, partition")
    placed = one_partition(placed.join(unassigned.selectExpr(_G, "topic", "partition", "holder", "co_holder"),
                                       [_G, "topic", "partition"]))
    return join_small(placed, mem.selectExpr(_G, "member_id", "m_rank"), [_G, "member_id"])


def rack_fill(mem: DataFrame, slots: DataFrame, unassigned: DataFrame, base_order: str) -> DataFrame:
    """Place the unassigned partitions on the slots, rack-local first (rack-aware groups).
    ``base_order``: Kafka's order of a group's partitions (SQL text). Written as SQL text:
    each column named in Python costs the driver three JVM round trips."""
    tp = [_G, "topic", "partition"]
    rack_members = mem.where("mrack IS NOT NULL").groupBy(_G, "mrack").count()
    # one_partition: joins of joins shuffle nothing in a small call (execution.one_partition)
    ncons = one_partition(unassigned.selectExpr(*tp, "explode(racks) AS mrack").join(rack_members, [_G, "mrack"])
                          .groupBy(*tp).agg(F.expr("sum(count) AS ncons")))
    # Kafka's order: fewest rack-local members first, then topic, partition
    unassigned = one_partition(unassigned.join(ncons, tp, "left").selectExpr(
        *tp, "racks", "coalesce(ncons, 0) AS ncons").selectExpr(
        "*", f"row_number() OVER (PARTITION BY group_id ORDER BY ncons, {base_order}) - 1 AS upos"))
    free_slots = slots.where("mrack IS NOT NULL")
    fs_cols = [_G, "mrack", "member_id", "pos"]
    rank = "row_number() OVER (PARTITION BY group_id, mrack ORDER BY {}) AS k".format
    # round 0: each partition on the rack of its first replica (the leader's): no conflicts
    cand = unassigned.where("ncons > 0").selectExpr(*tp, "upos", "try_element_at(racks, 1) AS mrack").selectExpr(
        "*", rank("upos"))
    fs = free_slots.selectExpr(*fs_cols, rank("pos"))
    placed = materialize(cand.join(fs, [_G, "mrack", "k"]).selectExpr(_G, "member_id", "pos", "topic", "partition"))
    free_slots = one_partition(free_slots.join(placed.selectExpr(_G, "pos"), [_G, "pos"], "left_anti"))
    free_parts = one_partition(unassigned.where("ncons > 0").join(placed.selectExpr(*tp), tp, "left_anti"))
    for _ in range(RACK_ROUNDS):
        # the k-th rack-local candidate of each rack meets the k-th free slot on that rack;
        # a partition proposed on several racks takes its best proposal
        cand = free_parts.selectExpr(*tp, "upos", "explode(racks) AS mrack").selectExpr("*", rank("upos"))
        fs = free_slots.selectExpr(*fs_cols, rank("pos"))
        prop = cand.join(fs, [_G, "mrack", "k"]).selectExpr(
            _G, "member_id", "pos", "topic", "partition",
            "row_number() OVER (PARTITION BY group_id, topic, partition ORDER BY k, pos) AS _best")
        prop = materialize(prop.where("_best = 1").selectExpr(_G, "member_id", "pos", "topic", "partition"))
        placed = stored_union(placed, prop)
        free_slots = one_partition(free_slots.join(prop.selectExpr(_G, "pos"), [_G, "pos"], "left_anti"))
        free_parts = one_partition(free_parts.join(prop.selectExpr(*tp), tp, "left_anti"))
    rest_slots = one_partition(slots.join(placed.selectExpr(_G, "pos"), [_G, "pos"], "left_anti").selectExpr(
        _G, "member_id", "row_number() OVER (PARTITION BY group_id ORDER BY pos) AS k"))
    rest_parts = one_partition(unassigned.join(placed.selectExpr(*tp), tp, "left_anti").selectExpr(
        *tp, "row_number() OVER (PARTITION BY group_id ORDER BY upos) AS k"))
    rest = rest_slots.join(rest_parts, [_G, "k"])
    return union_all([placed.selectExpr(_G, "member_id", "topic", "partition"),
                      rest.selectExpr(_G, "member_id", "topic", "partition")])
