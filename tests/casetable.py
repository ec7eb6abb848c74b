"""Table-driven assignment cases: YAML files under tests/cases/ -> Spark DataFrames.

A case file::

    strategy: range                 # default strategy of the file (optional)
    options: {rack_aware: false}    # default options of the file (optional)
    cases:
      - name: two_members_one_topic
        source: RangeAssignorTest.testOneConsumerOneTopic   # where the case comes from
        members:
          - {member_id: c0, topics: [t1]}
          - {member_id: c1, topics: [t1], group_instance_id: i1, rack: r1,
             owned: [t1-0, t1-2], generation: 3, assignors: [range]}
        partitions:                 # topic -> count, or topic -> {count, racks} / {count, rack_cycle} / {numbers: [..]}
          t1: 3
          t2: {count: 2, racks: [[r0, r1], [r1]]}
          t3: {count: 4, rack_cycle: {racks: [r0, r1, r2], replicas: 2}}
        lags: {t1-0: 100000}        # optional, topic-partition -> lag
        expected:                   # member -> assigned partitions; absent members get nothing
          c0: [t1-0, t1-1]
          c1: [t1-2]

Every case becomes its own group (group_id = case name) and its topics are
prefixed with ``<case name>/`` so that many cases share one metadata DataFrame
and run in one Spark job; :func:`strip_topics` removes the prefix again. Keys the
loader does not know stay in ``Case.raw`` for the test to use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CASES_DIR = Path(__file__).parent / "cases"

MEMBER_SCHEMA = (
    "group_id string, member_id string, group_instance_id string, rack string, "
    "topics array<string>, owned array<struct<topic:string,partition:int>>, generation int, "
    "assignors array<string>"
)
PARTITION_SCHEMA = "topic string, partition int, racks array<string>"
ASSIGNMENT_SCHEMA = "group_id string, member_id string, topic string, partition int"
LAG_SCHEMA = "group_id string, topic string, partition int, lag long"
SEP = "/"


@dataclass
class Case:
    name: str
    strategy: str | None
    options: dict
    members: list[dict]
    partitions: dict
    expected: dict | None
    lags: dict | None = None
    source: str | None = None
    raw: dict = field(default_factory=dict)

    @property
    def group_id(self) -> str:
        return self.name


def parse_tp(text: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)`` (the partition is after the last dash)."""
    topic, _, part = str(text).rpartition("-")
    return topic, int(part)


def load_cases(*paths: str | Path) -> list[Case]:
    """Load the cases of YAML files or folders (relative paths are under tests/cases/)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.is_absolute():
            p = CASES_DIR / p
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    cases: list[Case] = []
    for f in files:
        doc = yaml.safe_load(f.read_text())
        for c in doc["cases"]:
            cases.append(
                Case(
                    name=c["name"],
                    strategy=c.get("strategy", doc.get("strategy")),
                    options={**doc.get("options", {}), **c.get("options", {})},
                    members=c["members"],
                    partitions=c.get("partitions", {}),
                    expected=c.get("expected"),
                    lags=c.get("lags"),
                    source=c.get("source"),
                    raw=c,
                )
            )
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"case names must be unique, repeated: {dupes}")
    return cases


def _racks(spec: Any, count: int) -> list[list[str] | None]:
    if not isinstance(spec, dict):
        return [None] * count
    if "racks" in spec:
        racks = spec["racks"]
        if len(racks) != count:
            raise ValueError(f"racks lists {len(racks)} partitions, count is {count}")
        return [list(r) if r is not None else None for r in racks]
    if "rack_cycle" in spec:
        names, replicas = spec["rack_cycle"]["racks"], spec["rack_cycle"]["replicas"]
        return [[names[(p + i) % len(names)] for i in range(replicas)] for p in range(count)]
    return [None] * count


def member_rows(cases: Iterable[Case]) -> list[tuple]:
    rows = []
    for c in cases:
        for m in c.members:
            owned = m.get("owned")
            rows.append(
                (
                    c.group_id,
                    m["member_id"],
                    m.get("group_instance_id"),
                    m.get("rack"),
                    [c.name + SEP + t for t in m.get("topics", [])],
                    None if owned is None else [(c.name + SEP + t, p) for t, p in map(parse_tp, owned)],
                    m.get("generation"),
                    m.get("assignors"),
                )
            )
    return rows


def partition_rows(cases: Iterable[Case]) -> list[tuple]:
    rows = []
    for c in cases:
        for topic, spec in c.partitions.items():
            if isinstance(spec, dict) and "numbers" in spec:  # partition numbers as listed
                rows += [(c.name + SEP + topic, p, None) for p in spec["numbers"]]
                continue
            count = spec if isinstance(spec, int) else spec["count"]
            for p, racks in enumerate(_racks(spec, count)):
                rows.append((c.name + SEP + topic, p, racks))
    return rows


def expected_rows(cases: Iterable[Case]) -> list[tuple]:
    rows = []
    for c in cases:
        for member, tps in (c.expected or {}).items():
            for t, p in map(parse_tp, tps or []):
                rows.append((c.group_id, member, c.name + SEP + t, p))
    return rows


def lag_rows(cases: Iterable[Case]) -> list[tuple]:
    rows = []
    for c in cases:
        for tp, lag in (c.lags or {}).items():
            t, p = parse_tp(tp)
            rows.append((c.group_id, c.name + SEP + t, p, int(lag)))
    return rows


def inputs(spark, cases: list[Case]):
    """``(members, partitions)`` DataFrames holding every case, one group per case."""
    return (
        spark.createDataFrame(member_rows(cases), MEMBER_SCHEMA),
        spark.createDataFrame(partition_rows(cases), PARTITION_SCHEMA),
    )


def expected(spark, cases: list[Case]):
    """The expected assignment of every case with an ``expected`` table."""
    return spark.createDataFrame(expected_rows(cases), ASSIGNMENT_SCHEMA)


def lags(spark, cases: list[Case]):
    """``group_id, topic, partition, lag`` of every case with a ``lags`` table."""
    return spark.createDataFrame(lag_rows(cases), LAG_SCHEMA)


def strip_topics(df):
    """Remove the ``<case>/`` prefix from the topic column (for readable diffs)."""
    from pyspark.sql import functions as F

    return df.withColumn("topic", F.substring_index("topic", SEP, -1))


def by_options(cases: list[Case]) -> dict[tuple, list[Case]]:
    """Cases grouped by (strategy, options), so each group runs as one assign() call."""
    out: dict[tuple, list[Case]] = {}
    for c in cases:
        key = (c.strategy, tuple(sorted((k, repr(v)) for k, v in c.options.items())))
        out.setdefault(key, []).append(c)
    return out


def run_cases(spark, cases: list[Case], strategy: str | None = None, **extra):
    """Run every case through ``spark_assign.assign`` (one call per strategy and
    option set) and return the union of the assignments."""
    from spark_assign import assign

    result = None
    for (strat, _), group in by_options(cases).items():
        members, partitions = inputs(spark, group)
        lag_df = lags(spark, group) if any(c.lags for c in group) else None
        a = assign(members, partitions, strategy or strat, lags=lag_df, **{**group[0].options, **extra})
        result = a if result is None else result.unionByName(a)
    return result


def assert_assignment_equal(actual, expected_df):
    """chispa comparison of two assignments, ignoring row order and nullability."""
    from chispa import assert_df_equality

    cols = ["group_id", "member_id", "topic", "partition"]
    assert_df_equality(
        strip_topics(actual.select(*cols)).orderBy(*cols),
        strip_topics(expected_df.select(*cols)).orderBy(*cols),
        ignore_row_order=True,
        ignore_nullable=True,
    )
