"""The rebalance pipeline end to end on 10,000 groups x 10 members x 100 partitions (issue #18).

    python benchmarks/bench_pipeline.py [--groups 10000] [--strategies cooperative-sticky ...]

Per strategy, two successive pipeline runs into one fresh history, as a platform team runs it
on membership exports (members and subscriptions only, no owned lists):

1. every group fresh (10 members: 1,000,000 assigned partitions);
2. one member joins every group: ownership from the history, revocations, and rounds until
   nothing is pending (cooperative-sticky: two generations).

Each run is the job of ``pipelines/rebalance.py`` (:mod:`spark_assign.cli.rebalance`) in this process: reading the inputs
(Parquet), ``rebalance()``, recording every round in the history and printing the summary. The
Spark session starts once, before the first run (its start is reported apart); the job count
is the status tracker's, per run.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from contextlib import redirect_stdout

from common import RESULTS, SparkJobs, _names, session, topics_df, write_results
from pyspark.sql import functions as F

STRATEGIES = ("range", "sticky", "cooperative-sticky")
HEADER = ["input", "strategy", "pipeline run", "Spark jobs", "rounds", "generations recorded",
          "partitions assigned (last round)", "partitions moved", "partitions revoked", "measured (UTC)"]


def write_inputs(spark, folder: str, groups: int, members: int, topics: int, per_topic: int) -> dict[str, str]:
    """Parquet inputs: the partitions, and the membership exports of both runs."""
    names = [f"t{i:04d}" for i in range(topics)]
    paths = {"partitions": f"{folder}/partitions.parquet"}
    topics_df(spark, topics, per_topic).write.mode("overwrite").parquet(paths["partitions"])
    for run, count in (("fresh", members), ("join", members + 1)):
        paths[run] = f"{folder}/members-{run}.parquet"
        spark.range(groups * count).select(
            _names("g", F.floor(F.col("id") / count)).alias("group_id"),
            _names("m", F.col("id") % count).alias("member_id"),
            F.array(*[F.lit(t) for t in names]).alias("topics"),
        ).write.mode("overwrite").parquet(paths[run])
    return paths


def _with_earlier_rows(rows: list[list], strategies: list[str]) -> list[list]:
    """With ``--strategies`` naming some of them, the last full table's rows of the
    others are kept (each row says when it was measured)."""
    earlier = RESULTS / "pipeline.json"
    if set(strategies) == set(STRATEGIES) or not earlier.exists():
        return rows
    table = json.loads(earlier.read_text())
    run_at = str(table.get("run_at", "earlier")).removesuffix(" UTC")
    kept = [r + [run_at] * (len(HEADER) - len(r))  # rows from before the column
            for r in table["rows"] if r[1] not in strategies]
    return sorted(kept + rows, key=lambda r: (STRATEGIES.index(r[1]), "join" in r[0]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions-per-topic", type=int, default=10)
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    args = ap.parse_args()

    t0 = time.perf_counter()
    spark = session()
    start = time.perf_counter() - t0
    from spark_assign.cli import rebalance as pipeline  # the job behind pipelines/rebalance.py

    folder = tempfile.mkdtemp(prefix="bench-pipeline-")
    paths = write_inputs(spark, folder, args.groups, args.members, args.topics, args.partitions_per_topic)
    rows = []
    for strategy in args.strategies:
        history = f"{folder}/history-{strategy}"
        for run in ("fresh", "join"):
            argv = ["--members", paths[run], "--partitions", paths["partitions"], "--history", history,
                    "--strategy", strategy]
            cfg = pipeline.load_config(pipeline.parse_args(argv))
            with SparkJobs(spark) as jobs, redirect_stdout(io.StringIO()):
                t = time.perf_counter()
                summary = pipeline.run(cfg, spark)  # what main() does: run, then print the summary
                pipeline.print_summary(summary, cfg)
                seconds = time.perf_counter() - t
            totals = summary.agg(F.count("*").alias("groups"), F.max("rounds").alias("rounds"),
                                 F.sum("rounds").alias("generations"), F.sum("partitions_moved").alias("moved"),
                                 F.sum("revoked").alias("revoked"), F.sum("partitions").alias("rows")).first()
            rows.append([
                f"{args.groups:,} groups x {args.members + (run == 'join')} members x "
                f"{args.topics * args.partitions_per_topic} partitions, {run}",
                strategy, f"{seconds:.1f} s", jobs.count, totals.rounds, f"{totals.generations:,}",
                f"{totals.rows:,}", f"{totals.moved:,}", f"{totals.revoked:,}",
                time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            ])
    rows = _with_earlier_rows(rows, args.strategies)
    write_results(
        "pipeline", "The rebalance pipeline end to end (issue #18)", HEADER, rows,
        notes=f"""
Each run is `pipelines/rebalance.py`'s `main()` in one warm local[2] session (Spark started once,
in {start:.1f} s, before the first run; a row's strategy may have been re-run alone, with
`--strategies`, after the others: its last column says when): Parquet inputs read, ownership from the history
(`--owned-from auto`: the inputs carry no owned lists), `rebalance()` with `--strategy`, every
round recorded (one commit per history table), the summary printed. `fresh`: a new history;
`join`: the next run with one more member in every group. Moved and revoked come from the
pipeline's summary, summed over the groups (moved: partitions that end the rebalance with another
member than before it, across its rounds; revoked: under EAGER every owned partition, under
COOPERATIVE only the ones taken away). range moves nothing here: with 10 partitions per topic, the
11th member in member-id order gets no partition of any topic (Kafka's RangeAssignor does the same).
The Spark jobs exclude the summary's own (it is computed once for this table).
""")


if __name__ == "__main__":
    main()
