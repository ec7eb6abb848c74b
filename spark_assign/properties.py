"""Properties every assignment must hold, written once and shared by all strategies.

Each ``*_violations`` function returns a DataFrame of offending rows (empty when
the property holds); :func:`check_assignment` raises
:class:`~spark_assign.errors.AssignmentPropertyError` listing them.

* validity: each partition of a subscribed topic assigned exactly once, only to
  a member of the group subscribed to its topic;
* balance, by one of three rules (:data:`BALANCE_RULES`);
* cooperative safety: no partition handed to a member that does not hold it in
  the same rebalance in which other members still hold it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .errors import AssignmentPropertyError, InvalidOptionError, raise_if_rows
from .execution import entry_point, small_call_undecided
from .execution.small_inputs import decide_small_check
from .frames import sql_name, sql_string
from .inputs import normalize_members, normalize_partitions, subscriptions
from .owned import current_claims

#: ``count``: partitions per member differ by at most one across the group
#: (uniform subscriptions); ``topic``: per topic, partitions per subscribed member
#: differ by at most one (range, lag-aware); ``kafka``: no partition could move to
#: a member subscribed to its topic that holds two or more fewer partitions
#: (Kafka's rule for different subscriptions).
BALANCE_RULES = ("count", "topic", "kafka")

_PROBLEM_COLUMNS = ("group_id", "problem", "member_id", "topic", "partition", "detail")

#: the bound (in the rows of :func:`~spark_assign.execution.small_inputs.decide_small_inputs`) under which
#: :func:`check_assignment` runs as a small call, when ``spark.assign.smallCallRows`` is not
#: lower: a check is one plan, so the driver's single interpreted partition pays off only for
#: fewer rows than an ``assign()``'s
CHECK_SMALL_ROWS = 10_000
#: the fewest partitions per group :func:`check_assignment` assumes when it decides, from its
#: members alone, that it is not small (such a check runs as before, after that one narrow read)
CHECK_GROUP_PARTITIONS = 64


def _shape(df: DataFrame, problem: str, detail: str | None = None) -> DataFrame:
    """``df``'s rows as problem rows (:data:`_PROBLEM_COLUMNS`), ``detail`` a SQL expression
    over its columns. Written as SQL text: a column built in Python costs the driver several
    JVM round trips, and every check builds several of these."""
    present = set(df.columns)

    def column(c: str) -> str:
        if c == "problem":
            return f"{sql_string(problem)} AS problem"
        if c == "detail":
            return f"CAST({detail or 'NULL'} AS STRING) AS detail"
        return f"CAST({sql_name(c) if c in present else 'NULL'} AS {'INT' if c == 'partition' else 'STRING'}) AS {c}"

    return df.selectExpr(*map(column, _PROBLEM_COLUMNS))


def subscribed_partitions(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Every partition each group must assign: ``group_id, topic, partition``."""
    topics = subscriptions(members).select("group_id", "topic").distinct()
    return topics.join(partitions.select("topic", "partition"), "topic")


def validity_violations(assignment: DataFrame, members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Partitions unassigned, assigned twice, assigned to a member not subscribed
    to the topic (or not in the group), or not in the metadata.

    Columns: ``group_id, problem, member_id, topic, partition, detail``.
    """
    m, p = normalize_members(members), normalize_partitions(partitions)
    a = assignment.select("group_id", "member_id", "topic", "partition")
    needed = subscribed_partitions(m, p)
    counts = a.groupBy("group_id", "topic", "partition").agg(
        F.count("*").alias("n"), F.sort_array(F.collect_list("member_id")).alias("owners")
    )
    unassigned = needed.join(counts, ["group_id", "topic", "partition"], "left_anti")
    twice = counts.where("n > 1")
    unsubscribed = a.join(subscriptions(m), ["group_id", "member_id", "topic"], "left_anti")
    unknown = a.join(p.select("topic", "partition"), ["topic", "partition"], "left_anti")
    return (
        _shape(unassigned, "unassigned")
        .unionByName(_shape(twice, "assigned more than once", "concat_ws(',', owners)"))
        .unionByName(_shape(unsubscribed, "member not subscribed to topic (or not in group)"))
        .unionByName(_shape(unknown, "partition not in metadata"))
    )


def member_loads(assignment: DataFrame, members: DataFrame) -> DataFrame:
    """Partitions per member, members with none included: ``group_id, member_id, partitions``."""
    m = normalize_members(members).select("group_id", "member_id")
    counts = assignment.groupBy("group_id", "member_id").agg(F.count("*").alias("partitions"))
    return m.join(counts, ["group_id", "member_id"], "left").select(
        "group_id", "member_id", F.coalesce("partitions", F.lit(0)).cast("long").alias("partitions")
    )


def balance_violations(
    assignment: DataFrame, members: DataFrame, partitions: DataFrame, rule: str = "kafka"
) -> DataFrame:
    """Members that break the balance ``rule`` (one of :data:`BALANCE_RULES`).

    Columns: ``group_id, problem, member_id, topic, partition, detail``.
    """
    if rule not in BALANCE_RULES:
        raise InvalidOptionError(f"unknown balance rule {rule!r}: expected one of {BALANCE_RULES}")
    m = normalize_members(members)
    loads = member_loads(assignment, m)
    if rule == "count":
        w = Window.partitionBy("group_id")
        bad = (
            loads.withColumn("lo", F.min("partitions").over(w))
            .withColumn("hi", F.max("partitions").over(w))
            .where(F.col("hi") - F.col("lo") > 1)
            .where(F.col("partitions") == F.col("hi"))
        )
        return _shape(bad, "partitions per member differ by more than one",
                      f"format_string({sql_string('holds %d, group min %d')}, partitions, lo)")
    subs = subscriptions(m)
    # only topics present in the metadata take part
    subs = subs.join(normalize_partitions(partitions).select("topic").distinct(), "topic", "left_semi")
    if rule == "topic":
        per_topic = assignment.groupBy("group_id", "member_id", "topic").agg(F.count("*").alias("n"))
        tl = subs.join(per_topic, ["group_id", "member_id", "topic"], "left").withColumn(
            "n", F.coalesce("n", F.lit(0))
        )
        w = Window.partitionBy("group_id", "topic")
        bad = (
            tl.withColumn("lo", F.min("n").over(w)).withColumn("hi", F.max("n").over(w))
            .where((F.col("hi") - F.col("lo") > 1) & (F.col("n") == F.col("hi")))
        )
        return _shape(bad, "partitions of topic per member differ by more than one",
                      f"format_string({sql_string('holds %d of topic, topic min %d')}, n, lo)")
    # kafka rule: a member holding a partition of topic t has >= 2 more than some subscriber of t
    sub_loads = subs.join(loads, ["group_id", "member_id"])
    min_per_topic = sub_loads.groupBy("group_id", "topic").agg(F.min("partitions").alias("lo"))
    holders = (
        assignment.select("group_id", "member_id", "topic").distinct()
        .join(loads, ["group_id", "member_id"])
        .join(min_per_topic, ["group_id", "topic"])
        .where(F.col("partitions") - F.col("lo") >= 2)
    )
    return _shape(holders, "a partition could move to a subscriber with two or more fewer",
                  f"format_string({sql_string('holds %d, a subscriber of the topic holds %d')}, partitions, lo)")


def cooperative_violations(assignment: DataFrame, members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Partitions assigned to a member that does not hold them while other members
    do: under the cooperative protocol these must wait for the next round. The
    holders of a partition are every member that lists it at its highest claimed
    generation, subscribed to its topic or not
    (:func:`spark_assign.owned.current_claims` with ``subscribed_only=False``).

    Columns: ``group_id, problem, member_id, topic, partition, detail``.
    """
    m, p = normalize_members(members), normalize_partitions(partitions)
    tp = ["group_id", "topic", "partition"]
    claims = current_claims(m, p, subscribed_only=False)
    holders = claims.groupBy(*tp).agg(F.concat_ws(",", F.sort_array(F.collect_list("member_id"))).alias("holders"))
    bad = (
        assignment.select("group_id", "member_id", *tp[1:])
        .join(claims.select("group_id", "member_id", *tp[1:]), ["group_id", "member_id", *tp[1:]], "left_anti")
        .join(holders, tp)
    )
    return _shape(bad, "assigned while other members still hold it", "concat('held by ', holders)")


def revocations(members: DataFrame, assignment: DataFrame, partitions: DataFrame | None = None) -> DataFrame:
    """What each member must revoke this round: its owned partitions minus its
    new assignment. Columns: ``group_id, member_id, topic, partition``.

    With ``partitions``, owned claims on partitions the metadata no longer has
    are left out (they are gone, not revoked).
    """
    m = normalize_members(members)
    owned = m.select("group_id", "member_id", F.explode("owned").alias("tp")).select(
        "group_id", "member_id", "tp.topic", "tp.partition"
    ).distinct()
    if partitions is not None:
        owned = owned.join(normalize_partitions(partitions).select("topic", "partition"),
                           ["topic", "partition"], "left_semi")
    return owned.join(
        assignment.select("group_id", "member_id", "topic", "partition"),
        ["group_id", "member_id", "topic", "partition"], "left_anti",
    ).select("group_id", "member_id", "topic", "partition")


@entry_point
def check_assignment(
    assignment: DataFrame,
    members: DataFrame,
    partitions: DataFrame,
    *,
    balance: str | None = "kafka",
    cooperative: bool = False,
    require_complete: bool = True,
) -> DataFrame:
    """Raise AssignmentPropertyError if ``assignment`` breaks a property; else return it.

    ``balance``: a rule from :data:`BALANCE_RULES`, or None to skip.
    ``cooperative``: also check cooperative safety; a cooperative round leaves
    transferring partitions out, so completeness is then not required.

    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", 0), ("t", 1)], "topic string, partition int")
    >>> both_to_a = spark.createDataFrame([("g", "a", "t", 0), ("g", "a", "t", 1)],
    ...                                   "group_id string, member_id string, topic string, partition int")
    >>> check_assignment(both_to_a, members, parts, balance="topic")
    Traceback (most recent call last):
    ...
    spark_assign.errors.AssignmentPropertyError: assignment breaks property checks: 1 problem row(s):
    ...

    Small inputs (at most :data:`CHECK_SMALL_ROWS`, and ``spark.assign.smallCallRows``:
    :mod:`spark_assign.execution`) are read to the driver first, a limited read each, and checked
    as one-partition local relations, as a small ``assign()`` runs; a check inside such a call
    uses its relations.
    """
    a = assignment.select("group_id", "member_id", "topic", "partition")
    if small_call_undecided(assignment.sparkSession):
        a, members, partitions = decide_small_check(
            a, normalize_members(members), normalize_partitions(partitions),
            max_rows=CHECK_SMALL_ROWS, partitions_per_group=CHECK_GROUP_PARTITIONS)
    problems = validity_violations(a, members, partitions)
    if not require_complete or cooperative:
        problems = problems.where(F.col("problem") != "unassigned")
    if balance is not None and not cooperative:
        problems = problems.unionByName(balance_violations(a, members, partitions, balance))
    if cooperative:
        problems = problems.unionByName(cooperative_violations(a, members, partitions))
    raise_if_rows(problems, AssignmentPropertyError, "assignment breaks property checks")
    return assignment
