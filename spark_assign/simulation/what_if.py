"""What-if: the same events under several strategies and protocols, in one replay,
and the comparison table of a replay's variants (an example: :func:`what_if`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..errors import InvalidOptionError
from ..execution import entry_point
from ..frames import GROUP as _G
from .analytics import record_simulation
from .events import normalize_events
from .replay import SimulationResult, protocol_of, replay
from .timing import TIMING_COLUMNS, Timing

if TYPE_CHECKING:
    from ..history import AssignmentHistory

VARIANT_KEYS = ("name", "strategy", "protocol_rule", "timing", "scheduled_rebalance_max_delay_ms", "group_protocol",
                "restart_protocol")

WHAT_IF_COLUMNS = (
    "variant", "group_id", "rebalances", "rounds", "partitions_moved", "revoked", "lost",
    "unassigned_partition_seconds", "max_min_partitions", "max_member_lag", "mean_member_lag",
)


@entry_point
def what_if(
    events: DataFrame,
    partitions: DataFrame,
    variants: Iterable[dict],
    *,
    # the variants' defaults: the assignor's
    options: Mapping[str, Any] | None = None,
    lags: DataFrame | None = None,
    # the protocol's
    group_protocol: str | None = None,
    protocol_rule: str = "static",
    max_rounds: int = 5,
    scheduled_rebalance_max_delay_ms: int = 0,
    # the clock's
    timing: Timing | Mapping[str, Any] | None = None,
    # the record and the checks
    history: AssignmentHistory | None = None,
    record_variant: str | None = None,
    validate: bool = True,
) -> DataFrame:
    """The same events under several strategies / protocols, in one replay.

    ``variants``: dicts with ``name`` and any of ``strategy``, ``protocol_rule``,
    ``timing`` (a mapping over this call's ``timing``: :class:`~.timing.Timing`),
    ``scheduled_rebalance_max_delay_ms``, ``group_protocol`` (a migration plan:
    ``{"name": "kip848", "group_protocol": "consumer"}`` next to the classic variants),
    ``restart_protocol`` (the ``group.protocol`` each ``config_change`` restarts its member
    with, where the event names none: ``{"name": "migration", "restart_protocol": "consumer"}``
    is a rolling upgrade to KIP-848, the group converting at the first restart,
    :mod:`.migration`); ``group_protocol`` here is the variants' default. Every variant counts its
    unassigned partition-seconds on the same clock. Each variant
    runs as groups ``<group_id>@<name>`` in the same distributed steps. Returns
    one row per variant and group: ``variant, group_id, rebalances, rounds,
    partitions_moved, revoked, lost, unassigned_partition_seconds`` (partitions
    unassigned or idle on a crashed/away member, times seconds),
    ``max_min_partitions`` (worst max-min partitions per member after a
    rebalance), ``max_member_lag``, ``mean_member_lag`` (at the end).

    ``history``: every variant's generations are recorded, as groups
    ``<group_id>@<name>``; with ``record_variant``, only that variant's, under the
    events' own group ids, exactly as :func:`simulate` with the variant's settings
    records them (a replay and its what-if variants in one replay).

    >>> events = spark.createDataFrame([("g", 0, "join", "a", ["t"]), ("g", 60_000, "join", "b", ["t"])],
    ...     "group_id string, at long, kind string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> cmp = what_if(events, parts, [{"name": "eager", "strategy": "range"},
    ...                               {"name": "coop", "strategy": "cooperative-sticky"}])
    >>> cmp.orderBy("variant").select("variant", "rebalances", "rounds", "revoked",
    ...                               "unassigned_partition_seconds").show()
    +-------+----------+------+-------+----------------------------+
    |variant|rebalances|rounds|revoked|unassigned_partition_seconds|
    +-------+----------+------+-------+----------------------------+
    |   coop|         2|     3|      2|                        18.6|
    |  eager|         2|     2|      4|                        12.8|
    +-------+----------+------+-------+----------------------------+
    <BLANKLINE>

    Both start from the initial rebalance delay (3 s, every partition unassigned); then the
    EAGER group stops for one join/sync exchange, while the cooperative one's follow-up round
    waits a heartbeat for the two partitions a hands to b.
    """
    base = Timing.of(timing)
    rows = []
    for v in variants:
        unknown = sorted(set(v) - set(VARIANT_KEYS))
        if unknown or "name" not in v:
            raise InvalidOptionError(
                f"variant {v!r}: expected a 'name' and keys among {VARIANT_KEYS}, found {unknown}")
        st = v.get("strategy")
        gp = protocol_of(st, v.get("group_protocol", group_protocol))
        st = "uniform" if gp == "consumer" and st is None else st  # the broker's default
        clock = Timing.of(v.get("timing"), base).settings_of(gp)
        restart = v.get("restart_protocol")
        if restart not in (None, "classic", "consumer"):
            raise InvalidOptionError(f"variant {v['name']!r}: restart_protocol: expected 'classic' or 'consumer', "
                                     f"found {restart!r}")
        if restart == "consumer" and gp == "classic" and st is not None:
            raise InvalidOptionError(
                f"variant {v['name']!r}: restart_protocol 'consumer' converts the group, whose broker then assigns; "
                f"expected no strategy (the members' selection, then the broker's uniform), found {st!r}")
        rows.append((str(v["name"]), st, v.get("protocol_rule", protocol_rule),
                     int(v.get("scheduled_rebalance_max_delay_ms", scheduled_rebalance_max_delay_ms)), gp, clock,
                     restart))
    if record_variant is not None and record_variant not in {r[0] for r in rows}:
        raise InvalidOptionError(f"record_variant {record_variant!r}: expected one of the variants' names "
                         f"{[r[0] for r in rows]}")
    vcol = F.explode(F.array(*[
        F.struct(F.lit(n).alias("variant"), F.lit(st).cast("string").alias("_strategy"), F.lit(ru).alias("_rule"),
                 F.lit(de).cast("long").alias("_delay"), F.lit(gp).alias("_gp"),
                 F.lit(restart).cast("string").alias("_restart"),
                 *[F.lit(value).cast("long").alias(c) for c, value in clock.items()])
        for n, st, ru, de, gp, clock, restart in rows])).alias("_v")
    e = normalize_events(events)
    restarted = F.when(F.col("kind") == "config_change", F.coalesce("group_protocol", "_v._restart")).otherwise(
        F.col("group_protocol")).alias("group_protocol")
    cols = [restarted if c == "group_protocol" else c for c in e.columns if c != _G]
    ev = e.select("*", vcol).select(  # every event once per variant (a handful)
        F.concat(F.col(_G), F.lit("@"), F.col("_v.variant")).alias(_G), *cols,
        "_v._strategy", "_v._rule", "_v._delay", "_v._gp", *[f"_v.{c}" for c in TIMING_COLUMNS])
    vlags = None
    if lags is not None:
        if _G in lags.columns:
            vlags = lags.select("*", vcol).select(
                F.concat(F.col(_G), F.lit("@"), F.col("_v.variant")).alias(_G), "topic", "partition", "lag")
        else:
            vlags = lags
    r, recorded_rows = replay(
        ev, partitions, strategy=None, protocol_rule=protocol_rule, timing=base,
        scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms, lags=vlags,
        keep_rows=history is not None, max_rounds=max_rounds, validate=validate, options=options or {})
    if history is not None and recorded_rows is not None:
        tables: tuple[DataFrame, ...] = (recorded_rows, r.generations, r.revocations)
        if record_variant is not None:
            suffix = f"@{record_variant}"
            tables = tuple(
                df.where(F.col(_G).endswith(suffix))
                .withColumn(_G, F.expr(f"substring({_G}, 1, length({_G}) - {len(suffix)})"))
                for df in tables)
        record_simulation(history, *tables, lags_known=r.lags is not None)
    return compare(r, lags=vlags)


def compare(result: SimulationResult, lags: DataFrame | None = None) -> DataFrame:
    """The what-if comparison table of a simulation whose groups are named
    ``<group>@<variant>`` (see :func:`what_if`). Member lags come from ``lags``
    (``[group_id,] topic, partition, lag``), by default the simulation's final lags."""
    g = result.generations
    per = g.groupBy(_G).agg(
        F.count(F.when(F.col("round") == 1, 1)).alias("rebalances"),
        F.count("*").alias("rounds"),
        F.sum("moved").alias("partitions_moved"),
        F.sum("revoked").alias("revoked"),
        F.sum("lost").alias("lost"),
    )
    w = Window.partitionBy(_G).orderBy("step")
    st = result.steps.withColumn("_next", F.lead("at").over(w)).withColumn(
        "_gap", (F.col("unassigned") + F.col("idle")) * (F.coalesce("_next", F.col("at")) - F.col("at")))
    # partitions left unassigned between the rounds of one step (a consumer group's
    # hand-over one heartbeat after its epoch, a classic follow-up round's join phase),
    # beyond those the step's stats count (held out by a deferred resolution)
    wr = Window.partitionBy(_G, "step").orderBy("round")
    g = g.withColumn("_last", F.last("unassigned").over(wr.rowsBetween(0, Window.unboundedFollowing)))
    rg = g.withColumn("_gap", (F.col("unassigned") - F.col("_last")) * (
        F.unix_millis(F.lead("at").over(wr)) - F.unix_millis("at"))).select(_G, "_gap")
    # a consumer group's target, up to its first round (the members' next heartbeat): only what
    # they held before is consumed. The first round's assignment less that, the partitions it
    # picked up less those revoked, is what that round changed
    first = g.where("round = 1 AND protocol = 'CONSUMER'").join(
        st.where("held_before IS NOT NULL").selectExpr(_G, "step", "at AS _target", "held_before"), [_G, "step"])
    pg = first.select(_G, ((F.col("unassigned") + F.col("assigned") - F.col("held_before") - F.col("_last"))
                           * (F.unix_millis("at") - F.col("_target"))).alias("_gap"))
    gap = st.select(_G, "_gap").unionByName(rg).unionByName(pg).groupBy(_G).agg(
        (F.coalesce(F.sum("_gap"), F.lit(0)) / 1000.0).cast("double").alias("unassigned_partition_seconds"))
    a = result.assignment
    loads = a.groupBy(_G, "member_id").agg(F.count("*").alias("n"))
    bal = loads.groupBy(_G).agg((F.max("n") - F.min("n")).alias("max_min_partitions"))
    out = per.join(gap, _G, "full_outer").join(bal, _G, "left")
    lags = lags if lags is not None else result.lags
    if lags is not None:
        keys = [_G, "topic", "partition"] if _G in lags.columns else ["topic", "partition"]
        ml = a.join(lags.select(*keys, "lag"), keys, "left").groupBy(_G, "member_id").agg(
            F.sum(F.coalesce("lag", F.lit(0))).alias("ml"))
        out = out.join(ml.groupBy(_G).agg(F.max("ml").alias("max_member_lag"),
                                          F.avg("ml").alias("mean_member_lag")), _G, "left")
    if "max_member_lag" not in out.columns:
        out = out.withColumn("max_member_lag", F.lit(None).cast("long")).withColumn(
            "mean_member_lag", F.lit(None).cast("double"))
    return out.select(
        F.substring_index(_G, "@", -1).alias("variant"),
        F.expr("substring(group_id, 1, length(group_id) - length(substring_index(group_id, '@', -1)) - 1)").alias(_G),
        *[F.coalesce(c, F.lit(0)).cast("long").alias(c) for c in
          ("rebalances", "rounds", "partitions_moved", "revoked", "lost")],
        F.coalesce("unassigned_partition_seconds", F.lit(0.0)).alias("unassigned_partition_seconds"),
        F.coalesce("max_min_partitions", F.lit(0)).cast("long").alias("max_min_partitions"),
        F.col("max_member_lag").cast("long").alias("max_member_lag"),
        F.col("mean_member_lag").cast("double").alias("mean_member_lag"),
    )
