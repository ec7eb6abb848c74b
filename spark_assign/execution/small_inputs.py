"""A small call's inputs on the driver: deciding that a call is small from limited reads of
its inputs, and checking the rows it then holds there before any Spark check runs.

>>> from spark_assign.execution import call_scope
>>> from spark_assign.inputs import normalize_members, normalize_partitions
>>> m = normalize_members(spark.createDataFrame([("g", "m", ["t"])], "group_id string, member_id string, topics array<string>"))
>>> p = normalize_partitions(spark.createDataFrame([("t", 0), ("t", 1)], "topic string, partition int"))
>>> with call_scope(spark) as policy:
...     m, p = decide_small_inputs(m, p)
...     policy.decisions, clean_on_driver(m, p)
(['small'], True)
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from ..frames import sql_name
from .policy import decide_small_call, in_small_call, small_call_rows
from .store import local_relation, relation_of, rows_within, stored_rows

#: the longest owned list the first read of :func:`decide_small_inputs` brings to the driver
#: whole: a small call whose lists are all this short reads its members once
SHORT_OWNED = 32
#: a member's subscriptions as a small call's bound counts them (SQL over the member rows)
_SUBSCRIBED = "greatest(coalesce(size(topics), 0), 0)"


def _groups_and_subscriptions(rows: Any) -> tuple[int, int]:
    """The groups and the subscriptions of member ``rows`` (a ``pyarrow.Table`` with
    ``group_id`` and ``_subscribed``), as a small call's bound counts them."""
    import pyarrow.compute as pc

    return int(pc.count_distinct(rows["group_id"]).as_py()), int(pc.sum(rows["_subscribed"]).as_py() or 0)


def may_be_small(members: DataFrame, max_rows: int, partitions_per_group: int) -> bool:
    """Whether a call's state (subscriptions plus groups x partitions, as :func:`decide_small_inputs`
    counts it) may be at most ``max_rows`` rows, from one narrow limited read of the members (a
    group id and a subscription count each), taking each group to have ``partitions_per_group``
    partitions at least. False says the call is not small with no other read: a read of the
    members' whole rows (owned lists included) or of a partitions list costs several times this one.

    >>> may_be_small(spark.createDataFrame([("g", ["t"])], "group_id string, topics array<string>"), 100, 64)
    True
    """
    rows = rows_within(members.selectExpr("group_id", f"{_SUBSCRIBED} AS _subscribed"), max_rows)
    if rows is None:
        return False
    groups, subscribed = _groups_and_subscriptions(rows)
    return subscribed + groups * partitions_per_group <= max_rows


def decide_small_inputs(members: DataFrame, partitions: DataFrame, *,
                        max_rows: int | None = None) -> tuple[DataFrame, DataFrame]:
    """Decide whether the call in progress is small (:func:`~spark_assign.execution.policy.decide_small_call`)
    from its normalized inputs, read before anything else with limited reads
    (:func:`~spark_assign.execution.store.rows_within`): the members (at most ``spark.assign.smallCallRows``
    of them, an owned list only when it has at most :data:`SHORT_OWNED` claims), then as many
    partitions as the call's bound leaves room for (the rows its state can reach: subscriptions
    plus groups times partitions, an estimate for the threshold). A small call gets both inputs
    back as local relations of the rows read (its members read again, whole, only when a list
    was longer), so that its validation and its strategy run over one-partition relations from
    the start; any other call gets them back as they were, having read at most
    :data:`SHORT_OWNED` claims per member (a large call's can be millions). ``max_rows``
    lowers the bound below ``spark.assign.smallCallRows`` for a call whose work is one plan
    (:func:`~spark_assign.properties.check_assignment`).

    (The module's example decides a call of one member and two partitions.)
    """
    import pyarrow.compute as pc

    spark = members.sparkSession
    limit = small_call_rows(spark) if max_rows is None else min(max_rows, small_call_rows(spark))
    # one read: the members' rows, each long owned list left out (null, and flagged)
    has_owned = "owned" in members.columns
    long_list = f"coalesce(size(owned), 0) > {SHORT_OWNED}"
    m_rows = rows_within(members.selectExpr(
        *[f"CASE WHEN {long_list} THEN NULL ELSE owned END AS owned" if c == "owned" else sql_name(c)
          for c in members.columns],
        f"{_SUBSCRIBED} AS _subscribed",
        f"{long_list} AS _long_list" if has_owned else "false AS _long_list"), limit)
    p_rows, bound = None, limit + 1
    if m_rows is not None:
        groups, subscribed = _groups_and_subscriptions(m_rows)
        if not groups:  # no members: nothing reads the partitions, whatever their number
            bound = subscribed
        elif (p_rows := rows_within(partitions, (limit - subscribed) // groups)) is not None:
            bound = subscribed + groups * p_rows.num_rows
    if not decide_small_call(spark, lambda: bound, max_rows=limit):
        return members, partitions
    assert m_rows is not None  # a small call's bound counts the members read
    whole = not pc.any(m_rows["_long_list"]).as_py()
    m = relation_of(members, m_rows.drop(["_subscribed", "_long_list"])) if whole else local_relation(members)
    return m, partitions if p_rows is None else relation_of(partitions, p_rows)


def decide_small_check(assignment: DataFrame, members: DataFrame, partitions: DataFrame, *, max_rows: int,
                       partitions_per_group: int) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Decide whether a property check (:func:`~spark_assign.properties.check_assignment`) is a
    small call, at most ``max_rows`` rows: one narrow read of the members first
    (:func:`may_be_small`, each group taken to have ``partitions_per_group`` partitions), then
    :func:`decide_small_inputs`. Returns the assignment, members and partitions (normalized), as
    local relations when the call is small and each input fits, else as they were.

    >>> from spark_assign.execution import call_scope
    >>> m = spark.createDataFrame([("g", "m", ["t"])], "group_id string, member_id string, topics array<string>")
    >>> with call_scope(spark) as policy:
    ...     _ = decide_small_check(spark.range(0), m, spark.range(0), max_rows=10, partitions_per_group=64)
    ...     policy.decisions  # one member, and 64 partitions taken for its group: over 10 rows
    ['large']
    """
    spark = members.sparkSession
    if not may_be_small(members, max_rows, partitions_per_group):
        decide_small_call(spark, lambda: max_rows + 1, max_rows=max_rows)  # decided: not small
        return assignment, members, partitions
    members, partitions = decide_small_inputs(members, partitions, max_rows=max_rows)
    if in_small_call() and (rows := rows_within(assignment, max_rows)) is not None:
        assignment = relation_of(assignment, rows)
    return assignment, members, partitions


def clean_on_driver(members: DataFrame, partitions: DataFrame) -> bool:
    """Whether a small call's inputs, whose rows are on the driver already (the local
    relations :func:`decide_small_inputs` returns), surely pass the checks of
    :func:`~spark_assign.inputs.validate_inputs`: no null or empty ids, no null topic, no member id twice in a group, no null claim or claim
    with a null topic or a null or negative partition, no null topic or null or negative
    partition, no topic partition twice. Read with Arrow compute on those rows, no Spark
    action. False when any rows are not on the driver, or when anything may offend: the
    Spark checks then decide, and name the rows.

    >>> clean_on_driver(spark.range(1), spark.range(1))  # no stored rows
    False
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    m, p = stored_rows(members), stored_rows(partitions)
    if m is None or p is None or not m.num_rows:
        return False

    def any_true(values) -> bool:
        return bool(pc.any(values).as_py())

    def repeats(table, *keys: str) -> bool:
        return table.group_by(list(keys)).aggregate([]).num_rows < table.num_rows

    if any(m[c].null_count for c in ("group_id", "member_id", "topics")) or pc.list_flatten(m["topics"]).null_count:
        return False
    if any_true(pc.equal(m["group_id"], "")) or any_true(pc.equal(m["member_id"], "")) or repeats(
            m.select(["group_id", "member_id"]), "group_id", "member_id"):
        return False
    claims = pc.list_flatten(m["owned"])
    if claims.null_count or len(claims) and (
            pc.struct_field(claims, "topic").null_count or pc.struct_field(claims, "partition").null_count
            or pc.min(pc.struct_field(claims, "partition")).as_py() < 0):
        return False
    if "topic_id" in p.column_names and p["topic_id"].null_count < p.num_rows:
        return False  # topic ids: the Spark checks name a malformed or inconsistent one
    if p["topic"].null_count or p["partition"].null_count or (p.num_rows and pc.min(p["partition"]).as_py() < 0):
        return False
    return not repeats(pa.table({"topic": p["topic"], "partition": p["partition"]}), "topic", "partition")
