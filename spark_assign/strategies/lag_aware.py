"""``lag-aware``: the lag-aware assignor of KAFKA-5337, as DataFrame transformations.

The rule (the proposal's, exactly): per group and topic, the partitions in
descending lag (ties: lower partition number first) each go to the subscribed
member with the fewest partitions of the topic, then the lowest total lag of the
topic, then the lowest member id (Java string order). Partition counts per topic
differ by at most one. Lags come from ``lags=`` (see :mod:`spark_assign.lags`);
partitions without a lag row, or every partition when ``lags`` is None, count as
lag 0 (then the result is balanced by count only).

Options beyond the proposal (asked for by its users):

``balance="topic"`` (default) | ``"group"``
    ``group``: the running total lag of a member is carried across all the
    group's topics (processed in Java order of their names), so the member's
    total lag over the whole group is balanced; counts per topic still differ by
    at most one.
``max_skew=k`` (default 0)
    The count rule relaxed by ``k``: a partition goes to the member with the
    lowest total lag among the subscribers holding fewer than (the fewest any
    subscriber of the topic holds) + 1 + ``k`` partitions of the topic. ``k=0``
    is the proposal's rule. Guarantees: per topic, counts differ by at most
    ``1 + k``, and every member holds between ``floor(P/n) - k`` and
    ``ceil(P/n) + k`` partitions of a topic with ``P`` partitions and ``n``
    subscribers. Heavy partitions then take fewer light ones along.
``tie_break="member_id"`` (default, the proposal's rule) | ``"hash"``
    Between members with equal counts and equal total lag, ``hash`` prefers the
    lower ``xxhash64(group_id, member_id, topic)`` (stable across runs and
    versions of the data) instead of the lowest member id, so that the
    lexicographically first member is not always the one that gets the heavier
    partition. Remaining ties (equal hashes) fall back to member id.
``sticky=True``, ``threshold=0.1``
    Each member keeps its owned partitions (the honoured claims of
    :func:`spark_assign.owned.resolve_owned`) up to its count quota for the topic
    (members owning more keep their highest-lag partitions; the ``P % n``
    members that may keep ``ceil(P/n)`` are those owning the most, then by member
    id); the other partitions are placed by the rule above on top of what was
    kept. This sticky assignment is used unless the fresh (non-sticky)
    assignment lowers the group's maximum member lag by more than ``threshold``
    (a fraction of the sticky assignment's maximum), decided per group.
``cooperative=True``
    Incremental cooperative rebalancing: a partition that another member still
    holds (:func:`spark_assign.owned.without_transfers`) is not
    handed to its new owner this round; it is left out (the holder revokes it
    and a follow-up rebalance assigns it).

How it runs: per unit (a group's topic, or the whole group with
``balance="group"``) the partitions' lags are sorted once into an array, and a
Spark SQL ``aggregate`` scans it on the executors. Without stickiness or skew the
scan goes in *waves*: with ``n`` subscribers, wave ``w`` holds the partitions
ranked ``[w*n, (w+1)*n)``; within a wave the members sorted by (total lag so
far, tie-break key, member id) take the wave's partitions by rank, which equals
the one-partition-at-a-time greedy since everyone enters the wave with the same
count. Only the ``n`` member totals are sorted per wave. With ``max_skew > 0`` or
``sticky`` the scan takes one partition per step (cost ``O(P * n)`` per topic).
The scan runs in chunks of ``sqrt(steps)`` steps so that the per-step copy of
the scan state stays small. The driver runs no loop: the number of Spark jobs
does not depend on the input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..errors import InvalidOptionError
from ..execution import one_partition
from ..frames import let
from ..inputs import subscriptions
from ..lags import partition_lags
from ..ordering import java_order
from ..owned import partition_claims, resolve_owned, without_transfers
from ..quota import quota_for_rank

BALANCE_MODES = ("topic", "group")
TIE_BREAKS = ("member_id", "hash")
METHODS = ("auto", "wave", "step")

_CUR = "array<struct<total:bigint,key:bigint,u:int,cnt:int>>"


def _cur(total, key, u, cnt) -> Column:
    return F.struct(
        total.cast("bigint").alias("total"), key.cast("bigint").alias("key"),
        u.cast("int").alias("u"), cnt.cast("int").alias("cnt"),
    )


def _gather(st: Column, t: Column) -> Column:
    """The subscribers of topic ``t`` with their carried totals and kept counts."""
    return F.transform(
        t["subs"], lambda u, i: _cur(F.get(st["dense"], u), F.get(t["hkey"], i), u, F.get(t["kcnt"], i))
    )


def _scatter(dense: Column, cur: Column) -> Column:
    """``dense`` (total per unit member) with the totals of ``cur`` written back."""
    merged = F.array_sort(F.concat(
        F.transform(dense, lambda d, u: F.struct(u.cast("int").alias("u"), F.lit(0).alias("f"), d.alias("total"))),
        F.transform(cur, lambda x: F.struct(x["u"].alias("u"), F.lit(1).alias("f"), x["total"].alias("total"))),
    ))
    return let(merged, lambda mg: F.transform(
        F.filter(mg, lambda x, i: (x["f"] == 1) | (i + 1 == F.size(mg)) | (F.get(mg, i + 1)["u"] != x["u"])),
        lambda x: x["total"],
    ))


def _state(dense, cur, outs) -> Column:
    return F.struct(dense.alias("dense"), cur.alias("cur"), outs.alias("outs"))


def _wave_step(topics: Column) -> Callable[[Column, Column], Column]:
    def step(st: Column, e: Column) -> Column:
        t = F.get(topics, e["ti"])
        n, w = F.size(t["subs"]), e["w"]
        cur0 = F.when(w == 0, _gather(st, t)).otherwise(st["cur"])

        def with_sorted(s: Column) -> Column:
            m = F.least(n, t["np"] - w * n)
            cur1 = F.transform(s, lambda x, i: _cur(
                x["total"] + F.when(i < m, F.get(t["lags"], w * n + i)).otherwise(F.lit(0)),
                x["key"], x["u"], x["cnt"] + F.when(i < m, 1).otherwise(0)))
            out = F.transform(F.slice(s, 1, m), lambda x: x["u"])
            return let(cur1, lambda c1: _state(
                F.when(w == t["S"] - 1, _scatter(st["dense"], c1)).otherwise(st["dense"]),
                c1, F.concat(st["outs"], F.array(out))))

        return let(F.array_sort(cur0), with_sorted)

    return step


def _single_step(topics: Column, skew: int) -> Callable[[Column, Column], Column]:
    def step(st: Column, e: Column) -> Column:
        t = F.get(topics, e["ti"])
        r = e["w"]
        cur0 = F.when(r == 0, _gather(st, t)).otherwise(st["cur"])

        def with_cur(c: Column) -> Column:
            lo = F.array_min(F.transform(c, lambda x: x["cnt"]))
            best = F.array_min(F.transform(
                F.filter(c, lambda x: x["cnt"] < lo + 1 + skew),
                lambda x: F.struct(x["total"].alias("total"), x["key"].alias("key"), x["u"].alias("u"))))

            def with_best(b: Column) -> Column:
                lag = F.get(t["lags"], r)
                cur1 = F.transform(c, lambda x: F.when(
                    x["u"] == b["u"], _cur(x["total"] + lag, x["key"], x["u"], x["cnt"] + 1)
                ).otherwise(_cur(x["total"], x["key"], x["u"], x["cnt"])))
                return let(cur1, lambda c1: _state(
                    F.when(r == t["S"] - 1, _scatter(st["dense"], c1)).otherwise(st["dense"]),
                    c1, F.concat(st["outs"], F.array(F.array(b["u"])))))

            return let(best, with_best)

        return let(cur0, with_cur)

    return step


def _scan(topics: Column, steps: Column, total_steps: Column, dense0: Column, step_fn) -> Column:
    """Run ``step_fn`` over ``steps`` in chunks of ``ceil(sqrt(total_steps))``;
    return the concatenated step outputs (unit member index per partition rank)."""
    b = F.ceil(F.sqrt(total_steps.cast("double"))).cast("int")
    chunks = F.sequence(F.lit(0), F.ceil(total_steps / b).cast("int") - 1)
    zero = _state(dense0, F.array().cast(_CUR), F.array().cast("array<array<int>>"))

    def chunk(st: Column, c: Column) -> Column:
        inner = F.aggregate(
            F.slice(steps, c * b + 1, b),
            _state(st["dense"], st["cur"], F.array().cast("array<array<int>>")),
            step_fn,
        )
        return let(inner, lambda v: _state(v["dense"], v["cur"], F.concat(st["outs"], F.array(F.flatten(v["outs"])))))

    return F.aggregate(chunks, zero, chunk, lambda st: F.flatten(st["outs"]))


def _core(members: DataFrame, partitions: DataFrame, lag: DataFrame | None, *, balance: str, max_skew: int,
          tie_break: str, kept_from: DataFrame | None, method: str) -> DataFrame:
    """The lag-aware assignment; ``kept_from``: resolved owned claims to keep (sticky)."""
    unit = F.col("topic") if balance == "topic" else F.lit("")
    topics_meta = partitions.select("topic").distinct()
    # one_partition: in a small call, joins that read joins shuffle nothing (execution.one_partition)
    subs = one_partition(subscriptions(members).join(topics_meta, "topic", "left_semi")).withColumn("unit", unit)
    um = subs.select("group_id", "unit", "member_id").distinct().withColumn(
        "u", (F.row_number().over(Window.partitionBy("group_id", "unit").orderBy(
            java_order("member_id"), "member_id")) - 1).cast("int"))
    key = F.xxhash64("group_id", "member_id", "topic") if tie_break == "hash" else F.lit(0).cast("bigint")
    subs_u = one_partition(subs.join(um, ["group_id", "unit", "member_id"])).withColumn("hkey", key)
    gt = one_partition(subs.select("group_id", "unit", "topic").distinct().join(partitions.select("topic", "partition"),
                                                                               "topic"))
    if lag is not None:
        gt = one_partition(gt.join(lag.select("group_id", "topic", "partition", "lag"), ["group_id", "topic", "partition"],
                                   "left"))
    else:
        gt = gt.withColumn("lag", F.lit(None).cast("bigint"))
    gt = gt.withColumn("lag", F.coalesce("lag", F.lit(0)).cast("bigint"))

    if kept_from is not None:
        wt = Window.partitionBy("group_id", "topic")
        owned = one_partition(kept_from.select("group_id", "member_id", "topic", "partition").join(
            gt, ["group_id", "topic", "partition"]))
        ocount = owned.groupBy("group_id", "topic", "member_id").agg(F.count("*").alias("owned_count"))
        quotas = (
            one_partition(subs_u.join(ocount, ["group_id", "topic", "member_id"], "left"))
            .withColumn("owned_count", F.coalesce("owned_count", F.lit(0)))
            .withColumn("n", F.count("*").over(wt))
            .transform(lambda q: one_partition(q.join(gt.groupBy("group_id", "topic").agg(F.count("*").alias("P")),
                                                      ["group_id", "topic"])))
            .withColumn("rank", F.row_number().over(wt.orderBy(F.desc("owned_count"), "u")) - 1)
            .withColumn("limit", quota_for_rank(F.col("P"), F.col("n"), F.col("rank")))
            .select("group_id", "topic", "member_id", "limit")
        )
        kept = (
            one_partition(owned.join(quotas, ["group_id", "topic", "member_id"]))
            .withColumn("k", F.row_number().over(Window.partitionBy("group_id", "topic", "member_id")
                                                  .orderBy(F.desc("lag"), "partition")))
            .where(F.col("k") <= F.col("limit"))
            .join(um, ["group_id", "unit", "member_id"])
            .select("group_id", "unit", "topic", "member_id", "u", "partition", "lag")
            .transform(one_partition)
        )
        remaining = one_partition(gt.join(kept, ["group_id", "topic", "partition"], "left_anti"))
    else:
        kept = None
        remaining = gt

    # per (group, topic): subscribers (sorted by u) with tie-break keys and kept counts/lag
    sub_rows = subs_u
    if kept is not None:
        kagg = kept.groupBy("group_id", "topic", "u").agg(
            F.count("*").cast("int").alias("kcnt"), F.sum("lag").cast("bigint").alias("klag"))
        sub_rows = one_partition(sub_rows.join(kagg, ["group_id", "topic", "u"], "left"))
    else:
        sub_rows = sub_rows.withColumn("kcnt", F.lit(None).cast("int")).withColumn("klag", F.lit(None).cast("bigint"))
    sub_rows = sub_rows.withColumn("kcnt", F.coalesce("kcnt", F.lit(0))).withColumn(
        "klag", F.coalesce("klag", F.lit(0)).cast("bigint"))
    sa = sub_rows.groupBy("group_id", "unit", "topic").agg(
        F.array_sort(F.collect_list(F.struct("u", "hkey", "kcnt", "klag"))).alias("sa"))
    rp = remaining.groupBy("group_id", "unit", "topic").agg(
        F.array_sort(F.collect_list(F.struct((-F.col("lag")).alias("nl"), "partition"))).alias("rp"))
    use_step = method == "step" or (method == "auto" and (max_skew > 0 or kept is not None))
    wu = Window.partitionBy("group_id", "unit").orderBy(java_order("topic"), "topic")
    trows = (
        one_partition(sa.join(rp, ["group_id", "unit", "topic"]))
        .withColumn("n", F.size("sa"))
        .withColumn("np", F.size("rp"))
        .withColumn("S", F.col("np") if use_step else F.ceil(F.col("np") / F.col("n")).cast("int"))
        .withColumn("tp", (F.row_number().over(wu) - 1).cast("int"))
        .withColumn("off", F.coalesce(F.sum("np").over(wu.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0)))
    )
    tstruct = F.struct(
        "tp",
        F.transform("sa", lambda x: x["u"]).alias("subs"),
        F.transform("sa", lambda x: x["hkey"]).alias("hkey"),
        F.transform("sa", lambda x: x["kcnt"]).alias("kcnt"),
        F.transform("rp", lambda x: -x["nl"]).alias("lags"),
        F.col("np").cast("int").alias("np"),
        F.col("S").cast("int").alias("S"),
    )
    units = trows.groupBy("group_id", "unit").agg(
        F.array_sort(F.collect_list(tstruct)).alias("topics"), F.sum("S").cast("int").alias("total_steps"))
    # carried totals start at each member's kept lag over the unit's topics
    start = sub_rows.groupBy("group_id", "unit", "u").agg(F.sum("klag").cast("bigint").alias("t0"))
    dense0 = start.groupBy("group_id", "unit").agg(
        F.transform(F.array_sort(F.collect_list(F.struct("u", "t0"))), lambda x: x["t0"]).alias("dense0"))
    units = one_partition(units.join(dense0, ["group_id", "unit"]))
    steps = F.flatten(F.transform("topics", lambda x, i: F.transform(
        F.sequence(F.lit(0), x["S"] - 1), lambda w: F.struct(i.cast("int").alias("ti"), w.cast("int").alias("w")))))
    step_fn = _single_step(F.col("topics"), max_skew) if use_step else _wave_step(F.col("topics"))
    scanned = units.select(
        "group_id", "unit",
        F.posexplode(_scan(F.col("topics"), steps, F.col("total_steps"), F.col("dense0"), step_fn)).alias("gpos", "u"),
    )
    placed = (
        trows.select("group_id", "unit", "topic", "off", F.posexplode("rp").alias("pos", "x"))
        .select("group_id", "unit", "topic", (F.col("off") + F.col("pos")).alias("gpos"),
                F.col("x.partition").alias("partition"))
        .join(scanned, ["group_id", "unit", "gpos"])
        .transform(one_partition)
        .join(um, ["group_id", "unit", "u"])
        .select("group_id", "member_id", "topic", "partition")
    )
    if kept is not None:
        placed = placed.unionByName(kept.select("group_id", "member_id", "topic", "partition"))
    return placed


def assign_lag_aware(
    members: DataFrame,
    partitions: DataFrame,
    *,
    lags: DataFrame | None = None,
    validate: bool = True,
    balance: str = "topic",
    max_skew: int = 0,
    tie_break: str = "member_id",
    sticky: bool = False,
    threshold: float = 0.1,
    cooperative: bool = False,
    auto_offset_reset: str = "latest",
    method: str = "auto",
    topic_sizes: DataFrame | None = None,
) -> DataFrame:
    """The lag-aware assignor (KAFKA-5337) for every group in ``members``.

    ``lags``: ``group_id, topic, partition, lag`` or offsets (see
    :func:`spark_assign.lags.partition_lags`, which ``auto_offset_reset`` is
    passed to); None means every lag is 0. Options: see the module doc.
    ``method`` (``auto``/``wave``/``step``) forces the scan kind (for tests).

    >>> from spark_assign import assign
    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> lags = spark.createDataFrame([("g", "t", 0, 100), ("g", "t", 1, 90), ("g", "t", 2, 10), ("g", "t", 3, 5)],
    ...                              "group_id string, topic string, partition int, lag long")
    >>> [(r.member_id, r.partition) for r in assign(members, parts, "lag-aware", lags=lags).orderBy("partition").collect()]
    [('a', 0), ('b', 1), ('b', 2), ('a', 3)]
    """
    if balance not in BALANCE_MODES:
        raise InvalidOptionError(f"lag-aware: unknown balance {balance!r}, expected one of {BALANCE_MODES}")
    if tie_break not in TIE_BREAKS:
        raise InvalidOptionError(f"lag-aware: unknown tie_break {tie_break!r}, expected one of {TIE_BREAKS}")
    if method not in METHODS:
        raise InvalidOptionError(f"lag-aware: unknown method {method!r}, expected one of {METHODS}")
    if not isinstance(max_skew, int) or max_skew < 0:
        raise InvalidOptionError(f"lag-aware: max_skew must be an int >= 0, found {max_skew!r}")
    if not (0 <= float(threshold) <= 1):
        raise InvalidOptionError(f"lag-aware: threshold must be a fraction in [0, 1], found {threshold!r}")
    if method == "wave" and (max_skew > 0 or sticky):
        raise InvalidOptionError("lag-aware: method='wave' needs max_skew=0 and sticky=False")
    lag = partition_lags(lags, auto_offset_reset, validate=validate) if lags is not None else None
    kw: dict[str, Any] = dict(balance=balance, max_skew=max_skew, tie_break=tie_break)
    result = _core(members, partitions, lag, kept_from=None, method=method, **kw)
    if sticky:
        kept_result = _core(members, partitions, lag, kept_from=resolve_owned(members, partitions),
                            method=method, **kw)
        # one pass over both candidates (windows, no self-join): keep the sticky one
        # unless the fresh one lowers the group's maximum member lag by more than threshold
        both = result.withColumn("_fresh", F.lit(True)).unionByName(kept_result.withColumn("_fresh", F.lit(False)))
        if lag is not None:
            both = both.join(lag, ["group_id", "topic", "partition"], "left")
        else:
            both = both.withColumn("lag", F.lit(None).cast("bigint"))
        wm = Window.partitionBy("group_id", "_fresh", "member_id")
        wv = Window.partitionBy("group_id", "_fresh")
        wg = Window.partitionBy("group_id")
        both = (
            both.withColumn("_member", F.sum(F.coalesce("lag", F.lit(0))).over(wm))
            .withColumn("_max", F.max("_member").over(wv))
            .withColumn("_fresh_max", F.max(F.when(F.col("_fresh"), F.col("_max"))).over(wg))
            .withColumn("_sticky_max", F.max(F.when(~F.col("_fresh"), F.col("_max"))).over(wg))
            .withColumn("_move", F.col("_sticky_max") - F.col("_fresh_max")
                        > F.lit(float(threshold)) * F.col("_sticky_max"))
        )
        result = both.where(F.col("_fresh") == F.col("_move")).select("group_id", "member_id", "topic", "partition")
    if cooperative:
        # a partition is left out when members other than its new owner still hold it
        result = without_transfers(result.select("group_id", "member_id", "topic", "partition"),
                                   partition_claims(members, partitions, subscribed_only=False))
    return result.select("group_id", "member_id", "topic", "partition")
