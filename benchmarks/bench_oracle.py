"""One ``assign()`` over the oracle's generated groups (tests/test_kafka_oracle.py: 300 groups of
mixed subscriptions, racks, static members and conflicting claims), per strategy, with its
Spark jobs; beside it Kafka 4.4.0's own assignor over the same groups in one JVM (the
oracle's process, its start included), in the same run.

    python benchmarks/bench_oracle.py
"""

from __future__ import annotations

import statistics
import sys
import time

from common import ROOT, SparkJobs, session, write_results

sys.path.insert(0, str(ROOT / "tests"))

STRATEGIES = [("range", "range", {}), ("roundrobin", "roundrobin", {}), ("sticky", "sticky", {}),
              ("cooperative-sticky", "cooperative-sticky", {}), ("uniform", "uniform", {}),
              ("range", "server-range", {"group_protocol": "consumer"})]


def main(runs: int = 3) -> None:
    from casetable import Case, inputs
    from kafka_oracle import KAFKA_VERSION, run
    from test_kafka_oracle import GROUPS, SEED, _oracle_case, generate

    from spark_assign import assign

    spark = session(shuffle_partitions=4)
    rows = []
    for strategy, oracle, options in STRATEGIES:
        cases = generate(SEED + (oracle in ("uniform", "server-range")), GROUPS,
                         server=oracle in ("uniform", "server-range"))
        members, partitions = inputs(spark, [Case(c["name"], None, {}, c["members"], c["partitions"], None)
                                             for c in cases])
        assign(members, partitions, strategy, **options).collect()  # warm-up
        ours, theirs, jobs = [], [], 0
        for _ in range(runs):
            with SparkJobs(spark) as counted:
                began = time.perf_counter()
                assign(members, partitions, strategy, **options).collect()
                ours.append(time.perf_counter() - began)
            jobs = counted.count
            began = time.perf_counter()
            run([_oracle_case(c, oracle) for c in cases], refused={})
            theirs.append(time.perf_counter() - began)
        rows.append((strategy + (" (consumer)" if options else ""), oracle, statistics.median(ours), jobs,
                     statistics.median(theirs)))
    write_results(
        "oracle", f"The oracle's {GROUPS} generated groups in one assign() per strategy",
        ["strategy", "spark-assign s", "Spark jobs", "Kafka's assignor", "Kafka s (a new JVM)"],
        [[s, f"{a:.2f}", j, o, f"{b:.2f}"] for s, o, a, j, b in rows],
        notes=f"Kafka {KAFKA_VERSION}'s assignors in one JVM per run, its start included. Seed {SEED}; "
              f"{runs} runs after a warm-up, medians.")


if __name__ == "__main__":
    main()
