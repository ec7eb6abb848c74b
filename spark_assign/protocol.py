"""Assignor selection and the rebalance protocol (EAGER / COOPERATIVE).

**Selection**, as Kafka's group coordinator does it (``ClassicGroup.selectProtocol``,
formerly ``GroupMetadata.selectProtocol``): the candidates are the assignors
every member of the group lists in its ``partition.assignment.strategy``; each
member votes for the first candidate in its own preference order; the candidate
with the most votes wins. Kafka breaks ties by ``HashMap`` iteration order (in
effect arbitrary); spark-assign breaks them deterministically: most votes, then
the lowest sum of the candidate's positions in the members' lists (the
candidate the group as a whole prefers), then the name in Java ``String`` order.

A member whose ``assignors`` is null uses Kafka's default list (ConsumerConfig
since 3.0): ``[range, cooperative-sticky]``. Kafka class names are accepted
(``org.apache.kafka.clients.consumer.RangeAssignor`` is ``range``).

**Protocol.** Kafka's rule (``ConsumerCoordinator``, "static"): a member follows
the highest protocol that every assignor in its list supports: range,
roundrobin, sticky (and lag-aware) support EAGER only; cooperative-sticky
supports COOPERATIVE and EAGER. KIP-726's dynamic rule ("dynamic"): the whole
group follows the highest protocol of the *selected* assignor; members that
held partitions under COOPERATIVE and now see an EAGER assignor selected lose
them (``onPartitionsLost``), they do not hand them over as revoked.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .errors import InvalidOptionError, NoCommonAssignorError, raise_if_rows
from .frames import sql_string
from .inputs import normalize_members
from .ordering import java_order_sql
from .strategies.registry import ALIASES, COOPERATIVE, COOPERATIVE_ASSIGNORS, EAGER

#: Kafka's default ``partition.assignment.strategy`` since 3.0 (ConsumerConfig)
DEFAULT_ASSIGNORS: tuple[str, ...] = ("range", "cooperative-sticky")

#: the protocol of a group under KIP-848 (``group_protocol="consumer"``): the broker
#: assigns and the members reconcile, no JoinGroup rounds
CONSUMER = "CONSUMER"

PROTOCOL_RULES = ("static", "dynamic")


def canonical_assignors(assignors: str = "assignors") -> str:
    """The member's assignor list with Kafka class names mapped to short names,
    nulls dropped, duplicates removed (first position kept), Kafka's default
    list when the column is null or empty: SQL text over ``assignors`` (a SQL expression).

    >>> members = spark.createDataFrame(
    ...     [("a", ["org.apache.kafka.clients.consumer.CooperativeStickyAssignor", None, "cooperative-sticky"]),
    ...      ("b", None)], "member_id string, assignors array<string>")
    >>> [(r.member_id, r.assignors) for r in members.selectExpr("member_id", f"{canonical_assignors()} AS assignors").collect()]
    [('a', ['cooperative-sticky']), ('b', ['range', 'cooperative-sticky'])]
    """
    aliases = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in ALIASES.items())
    cleaned = f"array_distinct(filter(transform({assignors}, a -> coalesce(map({aliases})[a], a)), a -> a IS NOT NULL))"
    default = f"array({', '.join(map(sql_string, DEFAULT_ASSIGNORS))})"
    return f"CASE WHEN {assignors} IS NULL OR size({cleaned}) = 0 THEN {default} ELSE {cleaned} END"


def _cooperative(assignor: str) -> str:
    return f"{assignor} IN ({', '.join(map(sql_string, COOPERATIVE_ASSIGNORS))})"


def assignor_protocol(assignor: str) -> str:
    """The highest protocol an assignor supports: COOPERATIVE or EAGER (SQL text over
    ``assignor``, a SQL expression)."""
    return f"CASE WHEN {_cooperative(assignor)} THEN {sql_string(COOPERATIVE)} ELSE {sql_string(EAGER)} END"


def member_protocol(assignors: str = "assignors") -> str:
    """Kafka's static rule: the highest protocol every assignor of the (canonical)
    list supports (SQL text over ``assignors``, a SQL expression)."""
    return (f"CASE WHEN forall({assignors}, a -> {_cooperative('a')}) THEN {sql_string(COOPERATIVE)} "
            f"ELSE {sql_string(EAGER)} END")


def _preferences(members: DataFrame) -> DataFrame:
    """group_id, member_id, pos, assignor (one row per listed assignor)."""
    m = members.selectExpr("group_id", "member_id", f"{canonical_assignors()} AS assignors")
    return m.selectExpr("group_id", "member_id", "posexplode(assignors) AS (pos, assignor)")


def _eligible(prefs: DataFrame) -> DataFrame:
    """The rows of ``prefs`` whose assignor every member of the group lists. Windows
    only, the first over the group: one shuffle, by group, serves them all (a window
    over the group and another column is clustered by the group already)."""
    return (
        prefs.selectExpr("*", "size(collect_set(member_id) OVER (PARTITION BY group_id)) AS _members")
        .selectExpr("*", "size(collect_set(member_id) OVER (PARTITION BY group_id, assignor)) AS _listing")
        .where("_listing = _members").drop("_members", "_listing")
    )


def _candidates(prefs: DataFrame) -> DataFrame:
    """The assignors every member of the group lists: group_id, assignor."""
    return _eligible(prefs).select("group_id", "assignor").distinct()


def disagreements(members: DataFrame) -> DataFrame:
    """Groups whose members support no assignor in common: ``group_id, members``
    where ``members`` lists each member's (canonical) assignor list."""
    m = normalize_members(members)
    prefs = _preferences(m)
    cand = _candidates(prefs).selectExpr("group_id").distinct()
    listing = (
        m.selectExpr("group_id", "member_id", f"{canonical_assignors()} AS a").groupBy("group_id")
        .agg(F.expr(f"sort_array(collect_list(named_struct('k', {java_order_sql('member_id')}, 'member_id', member_id, "
                    "'a', a))) AS l"))
        .selectExpr("group_id", "array_join(transform(l, x -> concat(x.member_id, '=[', array_join(x.a, ', '), ']')), "
                                "'; ') AS members")
    )
    return listing.join(cand, "group_id", "left_anti")


def check_common_assignor(members: DataFrame) -> DataFrame:
    """Raise NoCommonAssignorError (one Spark job) naming each group whose members
    share no assignor, with each member's list; return ``members`` unchanged."""
    raise_if_rows(
        disagreements(members),
        NoCommonAssignorError,
        "no assignor supported by every member of the group (member=[assignors in preference order])",
    )
    return members


def select_assignor(members: DataFrame, *, validate: bool = True) -> DataFrame:
    """The assignor the coordinator selects for each group: ``group_id, assignor, votes``.

    A tie, one vote each and a rank sum of 1 each, goes to the name first in Java's order:

    >>> select_assignor(spark.createDataFrame(
    ...     [("g", "a", ["t"], ["cooperative-sticky", "range"]), ("g", "b", ["t"], ["range", "cooperative-sticky"])],
    ...     "group_id string, member_id string, topics array<string>, assignors array<string>")).show()
    +--------+------------------+-----+
    |group_id|          assignor|votes|
    +--------+------------------+-----+
    |       g|cooperative-sticky|    1|
    +--------+------------------+-----+
    <BLANKLINE>

    With ``validate`` (default) groups without a common assignor raise
    NoCommonAssignorError first (one job); otherwise they are absent.
    """
    m = normalize_members(members)
    if validate:
        check_common_assignor(m)
    # each member votes for its first candidate (windows by group, as in _eligible)
    eligible = _eligible(_preferences(m))
    ga = "PARTITION BY group_id, assignor"
    scored = eligible.selectExpr(
        "*", "CAST(pos = min(pos) OVER (PARTITION BY group_id, member_id) AS BIGINT) AS _vote").selectExpr(
        "group_id", "assignor", f"sum(_vote) OVER ({ga}) AS votes", f"sum(pos) OVER ({ga}) AS rank_sum")
    best = f"PARTITION BY group_id ORDER BY votes DESC, rank_sum ASC, {java_order_sql('assignor')} ASC"
    return scored.selectExpr("*", f"row_number() OVER ({best}) AS _r").where("_r = 1").selectExpr(
        "group_id", "assignor", "votes")


def member_protocols(
    members: DataFrame, selection: DataFrame | None = None, *, protocol_rule: str = "static"
) -> DataFrame:
    """Each member's protocol for the coming rebalance: ``group_id, member_id, protocol``.

    ``static``: Kafka's rule from the member's own assignor list. ``dynamic``
    (KIP-726): the protocol of the group's selected assignor (``selection`` from
    :func:`select_assignor`, computed when not given).
    """
    if protocol_rule not in PROTOCOL_RULES:
        raise InvalidOptionError(f"unknown protocol_rule {protocol_rule!r}: expected one of {PROTOCOL_RULES}")
    m = normalize_members(members)
    if protocol_rule == "static":
        return m.selectExpr("group_id", "member_id", f"{member_protocol(canonical_assignors())} AS protocol")
    sel = selection if selection is not None else select_assignor(m)
    return m.selectExpr("group_id", "member_id").join(
        sel.selectExpr("group_id", f"{assignor_protocol('assignor')} AS protocol"), "group_id")


def protocol_columns(rule: str) -> tuple[str, str]:
    """The member's protocol and its group's, as SQL texts over members (``assignors``)
    joined with their group's selected ``assignor``, under ``rule`` (a SQL expression of
    ``static`` / ``dynamic``): static from the member's own list, dynamic from the
    selected assignor; the group follows COOPERATIVE only when every member does
    (one window over ``group_id``).

    >>> member, group = protocol_columns("'static'")
    >>> m = spark.createDataFrame([("g", "a", ["cooperative-sticky"], "cooperative-sticky"),
    ...                            ("g", "b", ["range", "cooperative-sticky"], "cooperative-sticky")],
    ...                           "group_id string, member_id string, assignors array<string>, assignor string")
    >>> [tuple(r) for r in m.selectExpr("member_id", member, group).orderBy("member_id").collect()]
    [('a', 'COOPERATIVE', 'EAGER'), ('b', 'EAGER', 'EAGER')]
    """
    static, selected = member_protocol(canonical_assignors()), assignor_protocol("assignor")
    dyn = f"({rule}) = 'dynamic'"
    all_coop = f"min(CAST(({static}) = {sql_string(COOPERATIVE)} AS INT)) OVER (PARTITION BY group_id) = 1"
    return (f"CASE WHEN {dyn} THEN {selected} ELSE {static} END",
            f"CASE WHEN {dyn} OR {all_coop} THEN {selected} ELSE {sql_string(EAGER)} END")


def group_protocols(
    members: DataFrame, selection: DataFrame | None = None, *, protocol_rule: str = "static"
) -> DataFrame:
    """Per group: the selected assignor, its votes and the protocol the rebalance
    follows: ``group_id, assignor, votes, protocol`` (COOPERATIVE only when every
    member follows COOPERATIVE)."""
    if protocol_rule not in PROTOCOL_RULES:
        raise InvalidOptionError(f"unknown protocol_rule {protocol_rule!r}: expected one of {PROTOCOL_RULES}")
    m = normalize_members(members)
    sel = selection if selection is not None else select_assignor(m)
    _, group = protocol_columns(sql_string(protocol_rule))
    return m.join(sel.selectExpr("group_id", "assignor", "votes"), "group_id").selectExpr(
        "group_id", "assignor", "votes", f"{group} AS protocol").distinct()
