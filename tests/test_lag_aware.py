"""The lag-aware strategy (KAFKA-5337): table cases, a plain-Python greedy oracle, options."""

from __future__ import annotations

import random

import casetable
import pytest
from pyspark.sql import functions as F

from spark_assign import assign
from spark_assign.errors import InvalidLagsError
from spark_assign.lags import lag_balance
from spark_assign.properties import balance_violations, cooperative_violations, validity_violations

MEMBERS = ("group_id string, member_id string, topics array<string>, "
           "owned array<struct<topic:string,partition:int>>, generation int")
PARTS = "topic string, partition int"
LAGS = "group_id string, topic string, partition int, lag long"


# ----------------------------------------------------------------------------- the oracle (tests only)


def _quota_for_rank(p, n, rank):
    return p // n + (1 if rank < p % n else 0)


def oracle(groups, sizes, lags, *, balance="topic", max_skew=0, hkeys=None, owned=None):
    """The proposal's greedy, one partition at a time, in plain Python.

    ``groups``: {group: {member: [topics]}}; ``sizes``: {topic: partitions};
    ``lags``: {(group, topic, partition): lag}; ``hkeys``: {(group, member, topic):
    tie-break key} (None: member id only); ``owned``: {group: {member: [(t, p)]}} to
    keep (sticky). Returns {(group, topic, partition): member}.
    """
    out = {}
    for g, mem in groups.items():
        ids = sorted(mem)
        topics = sorted({t for m in ids for t in mem[m] if t in sizes})
        lag = lambda t, p: lags.get((g, t, p), 0)  # noqa: E731
        kept = {}  # topic -> {member: [p]}
        for t in topics:
            subs = [m for m in ids if t in mem[m]]
            own = {m: sorted((p for (tt, p) in (owned or {}).get(g, {}).get(m, []) if tt == t),
                             key=lambda p: (-lag(t, p), p)) for m in subs}
            order = sorted(subs, key=lambda m: (-len(own[m]), m))
            kept[t] = {m: own[m][: _quota_for_rank(sizes[t], len(subs), r)] for r, m in enumerate(order)}
        group_tot = {m: sum(lag(t, p) for t in topics for p in kept[t].get(m, [])) for m in ids}
        for t in topics:
            subs = [m for m in ids if t in mem[m]]
            tot = {m: group_tot[m] if balance == "group" else sum(lag(t, p) for p in kept[t][m]) for m in subs}
            cnt = {m: len(kept[t][m]) for m in subs}
            for m in subs:
                for p in kept[t][m]:
                    out[(g, t, p)] = m
            taken = {p for m in subs for p in kept[t][m]}
            for p in sorted((p for p in range(sizes[t]) if p not in taken), key=lambda p: (-lag(t, p), p)):
                lo = min(cnt.values())
                key = lambda m: (tot[m], (hkeys or {}).get((g, m, t), 0), m)  # noqa: E731
                m = min((m for m in subs if cnt[m] < lo + 1 + max_skew), key=key)
                out[(g, t, p)] = m
                tot[m] += lag(t, p)
                cnt[m] += 1
            if balance == "group":
                group_tot.update(tot)
    return out


def random_input(seed, groups=6):
    rnd = random.Random(seed)
    sizes = {f"t{i}": rnd.randint(1, 9) for i in range(5)}
    mem, lags = {}, {}
    for gi in range(groups):
        g = f"g{seed}_{gi}"
        n = rnd.randint(1, 5)
        mem[g] = {f"m{j}": sorted(rnd.sample(sorted(sizes) + ["missing"], rnd.randint(1, 3))) for j in range(n)}
        for t, size in sizes.items():
            for p in range(size):
                r = rnd.random()
                if r < 0.15:
                    continue  # no lag row: lag 0
                # skewed lags with ties
                lags[(g, t, p)] = 0 if r < 0.3 else rnd.choice([1, 5, 5, 20, 100, 1000, 50000])
    return mem, sizes, lags


def frames(spark, mem, sizes, lags, owned=None):
    rows = [(g, m, ts, [{"topic": t, "partition": p} for t, p in (owned or {}).get(g, {}).get(m, [])] or None,
             1 if (owned or {}).get(g, {}).get(m) else None)
            for g, ms in mem.items() for m, ts in ms.items()]
    members = spark.createDataFrame(rows, MEMBERS)
    parts = spark.createDataFrame([(t, p) for t, n in sizes.items() for p in range(n)], PARTS)
    lag_df = spark.createDataFrame([(g, t, p, lag) for (g, t, p), lag in lags.items()], LAGS)
    return members, parts, lag_df


def as_map(rows):
    return {(r.group_id, r.topic, r.partition): r.member_id for r in rows}


# ----------------------------------------------------------------------------- table cases


@pytest.mark.connect
def test_table_cases(spark):
    """The proposal's example, the prototype's tests and the option cases, in one job."""
    cases = casetable.load_cases("lag_aware")
    actual = casetable.run_cases(spark, cases).cache()
    casetable.assert_assignment_equal(actual, casetable.expected(spark, cases))
    members, partitions = casetable.inputs(spark, cases)
    assert validity_violations(actual, members, partitions).count() == 0
    skew = [c.group_id for c in cases if c.options.get("max_skew")]
    assert balance_violations(actual.where(~F.col("group_id").isin(skew)), members.where(
        ~F.col("group_id").isin(skew)), partitions, rule="topic").count() == 0
    actual.unpersist()


# ----------------------------------------------------------------------------- the oracle, all variants at once

VARIANTS = {
    "wave": dict(method="wave"),
    "step": dict(method="step"),
    "group": dict(balance="group"),
    "group_step": dict(balance="group", method="step"),
    "hash": dict(tie_break="hash"),
    "group_hash": dict(balance="group", tie_break="hash"),
    "skew1": dict(max_skew=1),
    "skew2_group_hash": dict(max_skew=2, balance="group", tie_break="hash"),
}


def test_equals_plain_python_greedy(spark):
    """Every option combination equals the one-partition-at-a-time greedy (the wave
    scan included), on random groups with partial subscriptions, ties and missing lags."""
    mem, sizes, lags = random_input(11, groups=8)
    members, parts, lag_df = frames(spark, mem, sizes, lags)
    results = None
    for name, opts in VARIANTS.items():
        a = assign(members, parts, "lag-aware", lags=lag_df, validate=False, **opts).withColumn("variant", F.lit(name))
        results = a if results is None else results.unionByName(a)
    hashed = members.select("group_id", "member_id", F.explode("topics").alias("topic")).select(
        "group_id", "member_id", "topic", F.xxhash64("group_id", "member_id", "topic").alias("h"))
    rows = results.collect()
    hkeys = {(r.group_id, r.member_id, r.topic): r.h for r in hashed.collect()}  # the key, not the result
    for name, opts in VARIANTS.items():
        got = as_map(r for r in rows if r.variant == name)
        want = oracle(mem, sizes, lags, balance=opts.get("balance", "topic"), max_skew=opts.get("max_skew", 0),
                      hkeys=hkeys if opts.get("tie_break") == "hash" else None)
        assert got == want, name


def test_properties_and_skew_bound(spark):
    mem, sizes, lags = random_input(5, groups=6)
    members, parts, lag_df = frames(spark, mem, sizes, lags)
    a0 = assign(members, parts, "lag-aware", lags=lag_df, validate=False, balance="group")
    a2 = assign(members, parts, "lag-aware", lags=lag_df, validate=False, max_skew=2)
    assert validity_violations(a0.unionByName(a2.withColumn("group_id", F.concat("group_id", F.lit("#2")))),
                               members.unionByName(members.withColumn("group_id", F.concat("group_id", F.lit("#2")))),
                               parts).count() == 0
    assert balance_violations(a0, members, parts, rule="topic").count() == 0
    # the skew bound: per topic, counts within [floor(P/n) - k, ceil(P/n) + k] and differ by at most 1 + k
    counts = {}
    for r in a2.groupBy("group_id", "topic", "member_id").count().collect():
        counts[(r.group_id, r.topic, r.member_id)] = r["count"]
    for g, ms in mem.items():
        for t in {t for ts in ms.values() for t in ts if t in sizes}:
            subs = [m for m in ms if t in ms[m]]
            cs = [counts.get((g, t, m), 0) for m in subs]
            p, n = sizes[t], len(subs)
            assert max(cs) - min(cs) <= 3
            assert all(p // n - 2 <= c <= -(-p // n) + 2 for c in cs)


def test_max_skew_lowers_lag_imbalance(spark):
    """A skewed topic: the heavy members take fewer light partitions with max_skew > 0."""
    mem = {"skewed": {f"c{i}": ["t"] for i in range(4)}}
    sizes = {"t": 24}
    lags = {("skewed", "t", p): (100000 if p < 2 else 1000) for p in range(24)}
    members, parts, lag_df = frames(spark, mem, sizes, lags)
    ratios = {}
    for k in (0, 1, 3):
        a = assign(members, parts, "lag-aware", lags=lag_df, max_skew=k)
        (b,) = lag_balance(a, lag_df, members).collect()
        ratios[k] = b.max_mean_ratio
        counts = [r["count"] for r in a.groupBy("member_id").count().collect()]
        assert len(counts) == 4 and max(counts) <= 6 + k and min(counts) >= 6 - k
    assert ratios[1] < ratios[0] and ratios[3] < ratios[1]


def test_hash_tie_break_spreads_the_heavy_partition(spark):
    """member_id always gives the heavier partition to the first member id; hash does not."""
    mem = {f"h{i}": {"a": ["t"], "b": ["t"]} for i in range(24)}
    lags = {(g, "t", 0): 10 for g in mem}
    members, parts, lag_df = frames(spark, mem, {"t": 2}, lags)
    firsts = {}
    for tb in ("member_id", "hash"):
        a = assign(members, parts, "lag-aware", lags=lag_df, tie_break=tb).where("partition = 0")
        firsts[tb] = {r.member_id: r["count"] for r in a.groupBy("member_id").count().collect()}
    assert firsts["member_id"] == {"a": 24}
    assert firsts["hash"].get("a", 0) > 0 and firsts["hash"].get("b", 0) > 0


def test_no_lags_means_count_balance(spark):
    mem = {"nolag": {"a": ["t"], "b": ["t"], "c": ["t"]}}
    members, parts, _ = frames(spark, mem, {"t": 7}, {})
    got = as_map(assign(members, parts, "lag-aware").collect())
    assert got == oracle(mem, {"t": 7}, {})
    assert sorted(list(got.values()).count(m) for m in "abc") == [2, 2, 3]


# ----------------------------------------------------------------------------- sticky and cooperative


def _sticky_input(spark):
    # g_keep: the owned layout is as good as the fresh one -> kept
    # g_move: the owned layout piles both heavy partitions on one member -> moved
    # g_join: a member joins; the others keep what their quota allows
    mem = {
        "g_keep": {"a": ["t"], "b": ["t"]},
        "g_move": {"a": ["t"], "b": ["t"]},
        "g_join": {"a": ["t"], "b": ["t"], "c": ["t"]},
    }
    owned = {
        "g_keep": {"a": [("t", 0), ("t", 3)], "b": [("t", 1), ("t", 2)]},
        "g_move": {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)]},
        "g_join": {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4), ("t", 5)]},
    }
    lags = {}
    for g in mem:
        for p, lag in enumerate([100, 90, 5, 1, 50, 40]):
            lags[(g, "t", p)] = lag
    sizes = {"t": 6}
    return mem, owned, lags, sizes


def sticky_oracle(mem, sizes, lags, owned, threshold):
    """The sticky choice per group, from the oracle: keep unless fresh lowers the max lag by > threshold."""
    fresh, kept = oracle(mem, sizes, lags), oracle(mem, sizes, lags, owned=owned)
    out = {}
    for g in mem:
        def max_lag(assignment):
            tot = {}
            for (gg, t, p), m in assignment.items():
                if gg == g:
                    tot[m] = tot.get(m, 0) + lags.get((g, t, p), 0)
            return max(tot.values())
        want = fresh if max_lag(kept) - max_lag(fresh) > threshold * max_lag(kept) else kept
        out.update({k: v for k, v in want.items() if k[0] == g})
    return out


def test_sticky_keeps_unless_moving_pays(spark):
    mem, owned, lags, sizes = _sticky_input(spark)
    members, parts, lag_df = frames(spark, mem, sizes, lags, owned)
    a = assign(members, parts, "lag-aware", lags=lag_df, sticky=True, threshold=0.1).cache()
    got = as_map(a.collect())
    assert got == sticky_oracle(mem, sizes, lags, owned, 0.1)
    # the choices are not trivial: g_keep keeps every owned partition, g_move moves some
    held = {(g, t, p): m for g, ms in owned.items() for m, tps in ms.items() for t, p in tps}
    assert all(got[k] == m for k, m in held.items() if k[0] == "g_keep")
    assert any(got[k] != m for k, m in held.items() if k[0] == "g_move")
    assert validity_violations(a, members, parts).unionByName(
        balance_violations(a, members, parts, rule="topic")).count() == 0
    a.unpersist()


def test_cooperative_round_moves_nothing_still_held(spark):
    mem, owned, lags, sizes = _sticky_input(spark)
    members, parts, lag_df = frames(spark, mem, sizes, lags, owned)
    coop = assign(members, parts, "lag-aware", lags=lag_df, sticky=True, threshold=0.0, cooperative=True).cache()
    assert cooperative_violations(coop, members, parts).count() == 0
    full = sticky_oracle(mem, sizes, lags, owned, 0.0)
    held = {(g, t, p): m for g, ms in owned.items() for m, tps in ms.items() for t, p in tps}
    # the cooperative round is the full one minus the partitions changing owner
    c = as_map(coop.collect())
    assert c == {k: m for k, m in full.items() if held.get(k, m) == m}
    assert len(c) < len(full)
    coop.unpersist()


# ----------------------------------------------------------------------------- errors


def test_bad_lags_and_options(spark):
    members, parts, _ = frames(spark, {"e": {"a": ["t"]}}, {"t": 1}, {})
    bad = spark.createDataFrame([("e", "t", 0, -3)], LAGS)
    with pytest.raises(InvalidLagsError, match="lag=-3"):
        assign(members, parts, "lag-aware", lags=bad)
    for opts in (dict(balance="members"), dict(tie_break="random"), dict(max_skew=-1), dict(threshold=2.0)):
        with pytest.raises(ValueError):
            assign(members, parts, "lag-aware", validate=False, **opts)
