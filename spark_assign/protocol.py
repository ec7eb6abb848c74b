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

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .assign import ALIASES
from .errors import InvalidOptionError, NoCommonAssignorError, raise_if_rows
from .inputs import normalize_members
from .ordering import java_order

#: Kafka's default ``partition.assignment.strategy`` since 3.0 (ConsumerConfig)
DEFAULT_ASSIGNORS: tuple[str, ...] = ("range", "cooperative-sticky")

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"
PROTOCOLS = (EAGER, COOPERATIVE)  # in increasing order, as Kafka's enum
#: the protocol of a group under KIP-848 (``group_protocol="consumer"``): the broker
#: assigns and the members reconcile, no JoinGroup rounds
CONSUMER = "CONSUMER"

#: assignors that support COOPERATIVE (they support EAGER too); every other
#: assignor supports EAGER only
COOPERATIVE_ASSIGNORS: tuple[str, ...] = ("cooperative-sticky",)

PROTOCOL_RULES = ("static", "dynamic")


def canonical_assignors(col: Column | str = "assignors") -> Column:
    """The member's assignor list with Kafka class names mapped to short names,
    nulls dropped, duplicates removed (first position kept), Kafka's default
    list when the column is null or empty."""
    c = F.col(col) if isinstance(col, str) else col
    alias_map = F.create_map(*[x for k, v in ALIASES.items() for x in (F.lit(k), F.lit(v))])
    mapped = F.transform(c, lambda a: F.coalesce(alias_map[a], a))
    cleaned = F.array_distinct(F.filter(mapped, lambda a: a.isNotNull()))
    default = F.array(*[F.lit(a) for a in DEFAULT_ASSIGNORS])
    return F.when(c.isNull() | (F.size(cleaned) == 0), default).otherwise(cleaned)


def assignor_protocol(col: Column | str) -> Column:
    """The highest protocol an assignor supports: COOPERATIVE or EAGER."""
    c = F.col(col) if isinstance(col, str) else col
    return F.when(c.isin(*COOPERATIVE_ASSIGNORS), F.lit(COOPERATIVE)).otherwise(F.lit(EAGER))


def member_protocol(col: Column | str = "assignors") -> Column:
    """Kafka's static rule: the highest protocol every assignor of the (canonical)
    list supports."""
    c = F.col(col) if isinstance(col, str) else col
    coop = F.forall(c, lambda a: a.isin(*COOPERATIVE_ASSIGNORS))
    return F.when(coop, F.lit(COOPERATIVE)).otherwise(F.lit(EAGER))


def _preferences(members: DataFrame) -> DataFrame:
    """group_id, member_id, pos, assignor (one row per listed assignor)."""
    m = members.select("group_id", "member_id", canonical_assignors("assignors").alias("assignors"))
    return m.select("group_id", "member_id", F.posexplode("assignors").alias("pos", "assignor"))


def _eligible(prefs: DataFrame) -> DataFrame:
    """The rows of ``prefs`` whose assignor every member of the group lists. Windows
    only, the first over the group: one shuffle, by group, serves them all (a window
    over the group and another column is clustered by the group already)."""
    g, ga = Window.partitionBy("group_id"), Window.partitionBy("group_id", "assignor")
    return (
        prefs.withColumn("_members", F.size(F.collect_set("member_id").over(g)))
        .withColumn("_listing", F.size(F.collect_set("member_id").over(ga)))
        .where(F.col("_listing") == F.col("_members")).drop("_members", "_listing")
    )


def _candidates(prefs: DataFrame) -> DataFrame:
    """The assignors every member of the group lists: group_id, assignor."""
    return _eligible(prefs).select("group_id", "assignor").distinct()


def disagreements(members: DataFrame) -> DataFrame:
    """Groups whose members support no assignor in common: ``group_id, members``
    where ``members`` lists each member's (canonical) assignor list."""
    m = normalize_members(members)
    prefs = _preferences(m)
    cand = _candidates(prefs).select("group_id").distinct()
    listing = (
        m.select("group_id", "member_id", canonical_assignors("assignors").alias("a"))
        .groupBy("group_id")
        .agg(F.sort_array(F.collect_list(F.struct(java_order("member_id").alias("k"), "member_id", "a"))).alias("l"))
        .select(
            "group_id",
            F.array_join(
                F.transform("l", lambda x: F.concat(x["member_id"], F.lit("=["), F.array_join(x["a"], ", "), F.lit("]"))),
                "; ",
            ).alias("members"),
        )
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

    >>> select_assignor(spark.createDataFrame(
    ...     [("g", "a", ["t"], ["cooperative-sticky", "range"]), ("g", "b", ["t"], ["range", "cooperative-sticky"])],
    ...     "group_id string, member_id string, topics array<string>, assignors array<string>")).show()  # doctest: +SKIP
    +--------+------------------+-----+
    |group_id|          assignor|votes|
    +--------+------------------+-----+
    |       g|cooperative-sticky|    1|   (tie 1-1; both rank sums are 1; name order)
    +--------+------------------+-----+

    With ``validate`` (default) groups without a common assignor raise
    NoCommonAssignorError first (one job); otherwise they are absent.
    """
    m = normalize_members(members)
    if validate:
        check_common_assignor(m)
    # each member votes for its first candidate (windows by group, as in _eligible)
    eligible = _eligible(_preferences(m))
    ga = Window.partitionBy("group_id", "assignor")
    first = F.min("pos").over(Window.partitionBy("group_id", "member_id"))
    scored = eligible.withColumn("_vote", (F.col("pos") == first).cast("long")).select(
        "group_id", "assignor", F.sum("_vote").over(ga).alias("votes"), F.sum("pos").over(ga).alias("rank_sum"))
    wg = Window.partitionBy("group_id").orderBy(
        F.col("votes").desc(), F.col("rank_sum").asc(), java_order("assignor").asc()
    )
    return scored.withColumn("_r", F.row_number().over(wg)).where("_r = 1").select("group_id", "assignor", "votes")


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
        return m.select("group_id", "member_id", member_protocol(canonical_assignors("assignors")).alias("protocol"))
    sel = selection if selection is not None else select_assignor(m)
    return m.select("group_id", "member_id").join(
        sel.select("group_id", assignor_protocol("assignor").alias("protocol")), "group_id"
    )


def protocol_columns(rule: Column) -> tuple[Column, Column]:
    """The member's protocol and its group's, as columns over members (``assignors``)
    joined with their group's selected ``assignor``, under ``rule`` (a column of
    ``static`` / ``dynamic``): static from the member's own list, dynamic from the
    selected assignor; the group follows COOPERATIVE only when every member does
    (one window over ``group_id``).

    >>> member, group = protocol_columns(F.lit("static"))  # doctest: +SKIP
    """
    static, selected = member_protocol(canonical_assignors("assignors")), assignor_protocol("assignor")
    dyn = rule == "dynamic"
    all_coop = F.min((static == COOPERATIVE).cast("int")).over(Window.partitionBy("group_id")) == 1
    return F.when(dyn, selected).otherwise(static), F.when(dyn | all_coop, selected).otherwise(F.lit(EAGER))


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
    _, group = protocol_columns(F.lit(protocol_rule))
    return m.join(sel.select("group_id", "assignor", "votes"), "group_id").select(
        "group_id", "assignor", "votes", group.alias("protocol")).distinct()
