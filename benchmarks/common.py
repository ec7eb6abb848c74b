"""Shared benchmark harness: input generators, timers, the kafka-python peer, result files.

Inputs are generated distributed with ``spark.range`` (never driver lists), so the
largest sizes build as fast as Spark can. The peer (kafka-python's assignors) gets
the very same input: :func:`to_python` collects it once (benchmark code only, not
library code) and :func:`run_peer` times the peer in a subprocess with a time cap.

Every ``bench_*.py`` writes ``benchmarks/results/<area>.json`` (:func:`write_results`), and
BENCHMARKS.md is generated from them (``python benchmarks/collect.py``).
"""

from __future__ import annotations

import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(ROOT))

MEMBER_COLS = "group_id string, member_id string, topics array<string>, owned array<struct<topic:string,partition:int>>, generation int"


def session(shuffle_partitions: int = 8, driver_memory: str = "8g", *, delta: bool = False) -> SparkSession:
    """The benchmark Spark session: local[2], UI off; ``delta``: with Delta's jars (the project's
    jar cache, fetched when empty), SQL extension and catalog, as docs/production.md runs it."""
    from spark_assign.session import DELTA_SQL, local_session

    extra = {}
    if delta:
        sys.path.insert(0, str(ROOT / "jars"))
        from fetch import bundle

        extra = {"spark.jars": ",".join(str(p) for p in bundle("delta")), **DELTA_SQL,
                 "spark.databricks.delta.snapshotPartitions": "1"}
    return local_session("spark-assign-bench", shuffle_partitions=shuffle_partitions, driver_memory=driver_memory,
                         extra=extra)


# ---------------------------------------------------------------------------- generators


def _names(prefix: str, col, width: int = 6):
    return F.concat(F.lit(prefix), F.lpad(col.cast("string"), width, "0"))


def topics_df(spark, topics: int, partitions_per_topic: int) -> DataFrame:
    """``topic, partition`` for ``topics`` topics named t0000.. with equal partition counts."""
    return spark.range(topics * partitions_per_topic).select(
        _names("t", F.floor(F.col("id") / partitions_per_topic), 4).alias("topic"),
        (F.col("id") % partitions_per_topic).cast("int").alias("partition"),
    )


def uniform_members(
    spark,
    *,
    groups: int,
    members: int,
    topics: int,
    partitions_per_topic: int,
    owned: bool = False,
    joiners: int = 0,
) -> tuple[DataFrame, DataFrame]:
    """``groups`` groups of ``members`` members all subscribed to the same topics.

    With ``owned``, the first ``members - joiners`` members own a balanced previous
    assignment (global partition index mod the old member count: a round-robin
    layout, as a previous generation would leave it) at generation 1, and the last
    ``joiners`` members join with nothing. Topics are shared by all groups.
    """
    topic_names = [f"t{i:04d}" for i in range(topics)]
    parts = topics_df(spark, topics, partitions_per_topic)
    m = spark.range(groups * members).select(
        _names("g", F.floor(F.col("id") / members)).alias("group_id"),
        (F.col("id") % members).alias("idx"),
    ).select(
        "group_id",
        _names("m", F.col("idx")).alias("member_id"),
        F.array(*[F.lit(t) for t in topic_names]).alias("topics"),
        "idx",
    )
    if not owned:
        return (
            m.select("group_id", "member_id", "topics",
                     F.lit(None).cast("array<struct<topic:string,partition:int>>").alias("owned"),
                     F.lit(None).cast("int").alias("generation")),
            parts,
        )
    old = members - joiners
    total = topics * partitions_per_topic
    # each (group, partition) -> owner index = global index mod old member count
    claims = (
        spark.range(groups * total)
        .select(
            _names("g", F.floor(F.col("id") / total)).alias("group_id"),
            (F.col("id") % total).alias("k"),
        )
        .select(
            "group_id",
            _names("m", F.col("k") % old).alias("member_id"),
            F.struct(
                _names("t", F.floor(F.col("k") / partitions_per_topic), 4).alias("topic"),
                (F.col("k") % partitions_per_topic).cast("int").alias("partition"),
            ).alias("tp"),
        )
        .groupBy("group_id", "member_id")
        .agg(F.collect_list("tp").alias("owned"))
    )
    out = m.join(claims, ["group_id", "member_id"], "left").select(
        "group_id", "member_id", "topics", "owned",
        F.when(F.col("owned").isNotNull(), F.lit(1)).cast("int").alias("generation"),
    )
    return out, parts


def random_subscription_members(
    spark, *, members: int, topics: int, partitions_per_topic: int, low: float, high: float, seed: int = 7
) -> tuple[DataFrame, DataFrame]:
    """One group ``g000000`` whose members each subscribe to a random ``low``..``high``
    fraction of the topics (deterministic in ``seed``), nobody owning anything."""
    topic_ids = spark.range(topics).withColumnRenamed("id", "t")
    mem = spark.range(members).withColumnRenamed("id", "m").withColumn(
        "frac", F.lit(low) + (F.lit(high - low) * F.rand(seed))
    )
    # member x topic (member x topic granularity is what subscriptions are)
    subs = (
        mem.join(topic_ids)
        .where(F.rand(seed + 1) < F.col("frac"))
        .groupBy("m")
        .agg(F.sort_array(F.collect_list(_names("t", F.col("t"), 4))).alias("topics"))
    )
    out = subs.select(
        F.lit("g000000").alias("group_id"),
        _names("m", F.col("m")).alias("member_id"),
        "topics",
        F.lit(None).cast("array<struct<topic:string,partition:int>>").alias("owned"),
        F.lit(None).cast("int").alias("generation"),
    )
    return out, topics_df(spark, topics, partitions_per_topic)


# ---------------------------------------------------------------------------- timing


class SparkJobs:
    """The number of Spark jobs run inside a ``with`` block (``.count`` after it),
    from the status tracker: job ids are sequential, so the newest id before and after
    tell the count even past the tracker's retained-jobs window.

    >>> with SparkJobs(spark) as jobs: assign(m, p, "range").count()  # doctest: +SKIP
    >>> jobs.count                                                      # doctest: +SKIP
    """

    def __init__(self, spark: SparkSession):
        self.tracker = spark.sparkContext.statusTracker()
        self.count = 0

    def _newest(self) -> int:
        return max(self.tracker.getJobIdsForGroup(None), default=-1)

    def __enter__(self) -> SparkJobs:
        self._before = self._newest()
        return self

    def __exit__(self, *exc) -> None:
        self.count = self._newest() - self._before


@dataclass
class Timing:
    seconds: float
    rows: int


def time_spark(build, repeat: int = 1, warmup=None) -> Timing:
    """Time ``build()`` (which returns a DataFrame) computed to the end; best of
    ``repeat``. ``warmup``: a callable returning a small DataFrame of the same
    plan shape, run once untimed first (JIT and code generation warm-up)."""
    if warmup is not None:
        warmup().write.format("noop").mode("overwrite").save()
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        df = build()
        df.write.format("noop").mode("overwrite").save()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    rows = build().count()
    return Timing(best, rows)


def time_baseline_sort(spark, members: DataFrame, out_dir: str, repeat: int = 1, warmups: int = 0) -> float:
    """The baseline Spark job: read the owned rows, sort them by member and partition,
    write them. Best of ``repeat`` runs after ``warmups`` untimed ones."""
    src = Path(out_dir) / "owned_src"
    members.select("group_id", "member_id", F.explode("owned").alias("tp")).select(
        "group_id", "member_id", "tp.topic", "tp.partition"
    ).write.mode("overwrite").parquet(str(src))
    times = []
    for _ in range(warmups + repeat):
        t0 = time.perf_counter()
        spark.read.parquet(str(src)).orderBy("group_id", "member_id", "topic", "partition").write.mode(
            "overwrite"
        ).parquet(str(Path(out_dir) / "owned_sorted"))
        times.append(time.perf_counter() - t0)
    return min(times[warmups:])


# ---------------------------------------------------------------------------- the peer


def to_python(members: DataFrame, partitions: DataFrame) -> dict:
    """The input as plain Python for the peer (benchmark-only collect)."""
    groups: dict[str, list] = {}
    for r in members.select("group_id", "member_id", "topics", "owned", "generation").toLocalIterator():
        owned = [(o["topic"], o["partition"]) for o in (r["owned"] or [])]
        groups.setdefault(r["group_id"], []).append((r["member_id"], list(r["topics"]), owned, r["generation"]))
    sizes = {r["topic"]: r["n"] for r in partitions.groupBy("topic").agg(F.count("*").alias("n")).collect()}
    return {"groups": groups, "sizes": sizes}


PEER_SCRIPT = r"""
import pickle, sys, time
from collections import defaultdict
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor, StickyAssignorUserData
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.old.group import GroupMember

class Cluster:
    def __init__(self, sizes): self.sizes = sizes
    def topics(self): return set(self.sizes)
    def partitions_for_topic(self, t): return set(range(self.sizes[t])) if t in self.sizes else None

def member(assignor, mid, topics, owned, gen):
    by_topic = defaultdict(list)
    for t, p in owned: by_topic[t].append(p)
    if assignor == "cooperative-sticky":
        SubTP = ConsumerProtocolSubscription.TopicPartition
        md = ConsumerProtocolSubscription(version=1, topics=sorted(topics), user_data=b"",
            owned_partitions=[SubTP(topic=t, partitions=sorted(ps)) for t, ps in by_topic.items()])
    elif assignor == "sticky" and owned:
        md = ConsumerProtocolSubscription(version=0, topics=topics,
            user_data=StickyAssignorUserData(list(by_topic.items()), gen if gen is not None else -1))
    else:
        md = ConsumerProtocolSubscription(version=0, topics=topics, user_data=b"")
    return GroupMember(mid, None, md)

data = pickle.load(open(sys.argv[1], "rb"))
assignor = sys.argv[2]
cls = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
       "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}[assignor]
cluster = Cluster(data["sizes"])
inputs = [[member(assignor, *m) for m in ms] for ms in data["groups"].values()]
t0 = time.perf_counter()
assigned = 0
for ms in inputs:
    a = cls().assign(cluster, ms) if assignor in ("sticky", "cooperative-sticky") else cls.assign(cluster, ms)
    assigned += sum(len(ps) for v in a.values() for _, ps in v.assigned_partitions)
dt = time.perf_counter() - t0
print(f"{dt} {assigned}")
"""


def run_peer(assignor: str, data: dict, timeout_s: float = 300.0) -> Timing | None:
    """Time kafka-python's ``assignor`` on ``data`` (from :func:`to_python`) in a
    subprocess; ``None`` when it did not finish within ``timeout_s``. Only the
    assign calls are timed, not building the peer's input objects."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.pkl"
        path.write_bytes(pickle.dumps(data))
        script = Path(tmp) / "peer.py"
        script.write_text(PEER_SCRIPT)
        try:
            out = subprocess.run(
                [sys.executable, str(script), str(path), assignor],
                capture_output=True, text=True, timeout=timeout_s, check=True,
            )
        except subprocess.TimeoutExpired:
            return None
        secs, rows = out.stdout.split()
        return Timing(float(secs), int(rows))


# ---------------------------------------------------------------------------- results


def machine() -> str:
    import pyspark

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GiB, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__} local[2], Java {_java_version()}"
    )


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
        return out.split('"')[1]
    except Exception:
        return "?"


def fmt_s(t: Timing | float | None) -> str:
    if t is None:
        return "did not finish"
    s = t.seconds if isinstance(t, Timing) else t
    return f"{s:.2f} s"


def ratio(peer: Timing | None, ours: Timing, cap: float | None = None) -> str:
    if peer is None:
        return f"> {cap / ours.seconds:.1f}x" if cap else "n/a"
    return f"{peer.seconds / ours.seconds:.2f}x"


def commit() -> str:
    """The checkout's commit (short), ``-dirty`` when its tracked files differ from it (the
    results and the page they make apart: an earlier benchmark of the same run wrote them)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results", ":!BENCHMARKS.md")
    return head + ("-dirty" if changed else "")


def write_results(area: str, title: str, header: list[str], rows: list[list], notes: str = "") -> Path:
    """Write ``benchmarks/results/<area>.json`` (the table with the machine, the time, the commit
    and the command that measured it) and regenerate BENCHMARKS.md from every result
    (``collect.py``). ``notes``: a short paragraph under the table: how it was measured."""
    from collect import write_page

    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {
        "title": title, "machine": machine(), "run_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(), "command": " ".join(["python", *sys.argv]), "header": header,
        "rows": [[str(x) if not isinstance(x, (int, float)) else x for x in r] for r in rows],
        "notes": " ".join(notes.split()),
    }
    path = RESULTS / f"{area}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    write_page()
    print(json.dumps(result, indent=1))
    return path
