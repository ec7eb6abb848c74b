"""Benchmark: ``sticky``, ``cooperative-sticky`` and KIP-848's ``uniform`` on uniform subscriptions.

Cases (the issue's sizes; ``--tiny`` shrinks every case for an end-to-end check):

* ``fresh_2100``: 1 group, 2,100 members x 2,100 partitions, nobody owns anything;
* ``joiner_2100``: the same with a previous assignment and one joining member;
* ``joiner_21000``: 2,100 members x 21,000 partitions, owned plus one joiner;
* ``joiner_1m``: 2,000 members x 1,000,000 partitions (100 topics x 10,000), owned
  plus one joiner (target: under 15 s end to end, at most 3x the baseline sort);
* ``groups_10000``: 10,000 groups of 10 members x 100 partitions in one call, owned
  plus one joiner each (target: under 60 s).

Per case: spark-assign's ``assign(members, partitions, strategy)`` end to end
(input validation included, timed to a noop write; best of ``--repeat`` runs after
``--warmups`` untimed runs on the same input, the first of them reported as the
first run); kafka-python's
StickyPartitionAssignor / CooperativeStickyAssignor on the same input (subprocess,
time cap); and the baseline Spark job that reads the owned rows, sorts them by
member and partition and writes them to parquet (timed as spark-assign: best of
``--repeat`` after ``--warmups``). Inputs are generated with
``spark.range`` (benchmarks/common.py) and checkpointed before timing.

    python benchmarks/bench_sticky.py                    # full sizes (the lead runs this)
    python benchmarks/bench_sticky.py --tiny --verify    # end-to-end check at tiny sizes
    python benchmarks/bench_sticky.py --cases joiner_1m --no-peer
    python benchmarks/bench_sticky.py --strategies uniform --cases joiner_2100 joiner_1m groups_10000 --area uniform

``uniform`` (the broker's assignor, no rack option) has no kafka-python peer.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import common  # noqa: F401  (puts the project root on sys.path)
from common import (
    Timing,
    fmt_s,
    ratio,
    run_peer,
    session,
    time_baseline_sort,
    time_spark,
    to_python,
    uniform_members,
    write_results,
)

#: name -> (groups, members, topics, partitions per topic, owned, joiners)
CASES = {
    "fresh_2100": (1, 2100, 1, 2100, False, 0),
    "joiner_2100": (1, 2100, 1, 2100, True, 1),
    "joiner_21000": (1, 2100, 10, 2100, True, 1),
    "joiner_1m": (1, 2000, 100, 10000, True, 1),
    "groups_10000": (10000, 10, 10, 10, True, 1),
}
TINY = {
    "fresh_2100": (1, 21, 1, 21, False, 0),
    "joiner_2100": (1, 21, 1, 21, True, 1),
    "joiner_21000": (1, 21, 10, 21, True, 1),
    "joiner_1m": (1, 20, 10, 100, True, 1),
    "groups_10000": (100, 10, 10, 10, True, 1),
}


def describe(spec) -> str:
    groups, members, topics, ppt, owned, joiners = spec
    what = f"{members} members x {topics * ppt:,} partitions ({topics} topics)"
    if groups > 1:
        what = f"{groups:,} groups of {what}"
    return what + (f", owned + {joiners} joiner" if owned else ", fresh")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--strategies", nargs="*", default=["sticky", "cooperative-sticky"],
                    choices=["sticky", "cooperative-sticky", "uniform"])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (end-to-end check)")
    ap.add_argument("--verify", action="store_true", help="check the property rules on each result")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer-timeout", type=float, default=300.0)
    ap.add_argument("--peer-max-partitions", type=int, default=200_000,
                    help="skip the peer above this many partitions per call (its input is collected)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs (best reported)")
    ap.add_argument("--warmups", type=int, default=3,
                    help="untimed runs first on the same input (JIT warm-up), for spark-assign and the baseline")
    ap.add_argument("--rack-aware", default="auto", choices=["auto", "true", "false"],
                    help="the strategy option (the inputs have no racks; 'false' skips the rack steps)")
    ap.add_argument("--area", default="sticky")
    args = ap.parse_args()

    from spark_assign import assign, properties
    from spark_assign.inputs import normalize_members, normalize_partitions

    rack_aware = {"auto": "auto", "true": True, "false": False}[args.rack_aware]
    spark = session()
    specs = TINY if args.tiny else CASES
    rows = []
    # one untimed run of each strategy on a tiny input first (JVM warm-up: class
    # loading and code generation of the whole path), as the other benchmarks do
    wm, wp = uniform_members(spark, groups=2, members=5, topics=2, partitions_per_topic=5, owned=True, joiners=1)
    def options(strategy):  # the broker's assignor takes no rack option
        return {} if strategy == "uniform" else {"rack_aware": rack_aware}

    for strategy in args.strategies:
        assign(wm, wp, strategy, **options(strategy)).write.format("noop").mode("overwrite").save()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            spec = specs[name]
            groups, n_members, topics, ppt, owned, joiners = spec
            m, p = uniform_members(spark, groups=groups, members=n_members, topics=topics,
                                   partitions_per_topic=ppt, owned=owned, joiners=joiners)
            members = normalize_members(m).localCheckpoint()
            partitions = normalize_partitions(p).localCheckpoint()
            baseline = (time_baseline_sort(spark, members, f"{tmp}/{name}", repeat=args.repeat, warmups=args.warmups)
                        if owned else None)
            data = None
            if not args.no_peer and groups * topics * ppt <= args.peer_max_partitions:
                data = to_python(members, partitions)
            for strategy in args.strategies:
                def build(strategy=strategy):
                    return assign(members, partitions, strategy, **options(strategy))

                t0 = time.perf_counter()
                first = time_spark(build, repeat=1).seconds  # the first run on this input
                for _ in range(args.warmups - 1):
                    build().write.format("noop").mode("overwrite").save()
                ours = time_spark(build, repeat=args.repeat)
                print(f"{name} {strategy}: {ours.seconds:.2f} s (first run {first:.2f} s), {ours.rows} rows "
                      f"(wall {time.perf_counter() - t0:.1f} s)", flush=True)
                if args.verify:
                    a = build().localCheckpoint()
                    bad = properties.validity_violations(a, members, partitions)
                    if strategy in ("sticky", "uniform"):
                        bad = bad.unionByName(properties.balance_violations(a, members, partitions, "count"))
                    else:
                        bad = bad.where("problem != 'unassigned'").unionByName(
                            properties.cooperative_violations(a, members, partitions))
                    n_bad = bad.count()
                    print(f"  verification: {n_bad} property violations", flush=True)
                    assert n_bad == 0, bad.limit(20).collect()
                peer: Timing | None = None
                peer_cell = "not run"
                if data is not None and strategy != "uniform":
                    peer = run_peer(strategy, data, timeout_s=args.peer_timeout)
                    peer_cell = fmt_s(peer) if peer else f"> {args.peer_timeout:.0f} s (cut off)"
                    print(f"  kafka-python {strategy}: {peer_cell}", flush=True)
                rows.append([
                    describe(spec), strategy, fmt_s(ours), fmt_s(first),
                    peer_cell,
                    "n/a" if data is None or strategy == "uniform" else ratio(peer, ours, None if peer else args.peer_timeout),
                    fmt_s(baseline) if baseline is not None else "n/a",
                    f"{ours.seconds / baseline:.2f}x" if baseline else "n/a",
                ])
    server_only = args.strategies == ["uniform"]
    write_results(
        args.area + ("_tiny" if args.tiny else ""),
        "KIP-848 uniform (the broker's assignor), same subscriptions" if server_only
        else "Sticky and cooperative-sticky, uniform subscriptions",
        ["input", "strategy", "spark-assign (end to end)", "spark-assign, first run", "kafka-python",
         "speed-up vs kafka-python",
         "baseline sort job", "spark-assign / baseline"],
        rows,
        notes=(
            "spark-assign: `assign(members, partitions, strategy)` with input validation, timed to a "
            f"noop write, best of {args.repeat} runs after {max(args.warmups, 1)} untimed runs on the same input "
            "(one untimed run of each strategy on a tiny input before all cases); the first run on each input "
            "has its own column (successive runs in one JVM get faster: JIT). Nothing is cached between runs. "
            + (("`uniform` takes no rack option and has no kafka-python peer (kafka-python has no "
                "server-side assignor). ") if "uniform" in args.strategies else "")
            + f"rack_aware={args.rack_aware} (sticky, cooperative-sticky). kafka-python: `StickyPartitionAssignor` / "
            "`CooperativeStickyAssignor` `.assign` in a subprocess, only the assign calls timed "
            "(skipped above --peer-max-partitions, since its input is collected to the driver). "
            "Baseline: read the owned rows from parquet, sort by group, member, topic, partition, "
            f"write parquet; best of {args.repeat} runs after {args.warmups} untimed ones, like spark-assign."
        ),
    )


if __name__ == "__main__":
    main()
