"""Ownership carried from the history: who owns what going into the next rebalance.

A membership export (``group_id, member_id, group_instance_id, topics, ...``)
says who is in each group, not what each member owns. The history does: the
group's latest recorded generation. :func:`owned_from_history` gives each
member of the input the partitions it holds there, as Kafka's members send
them in their JoinGroup subscription:

* a member is matched by its ``member_id``; a static member
  (``group_instance_id``) that rejoins with a new ``member_id`` takes over the
  generation's member with the same ``group_instance_id`` (KIP-345), found in the
  history's ``members`` table;
* a matched member's ``owned`` is its partitions in that generation,
  ``generation`` the group's latest recorded generation and ``protocol`` the
  protocol the group followed there (``EAGER`` / ``COOPERATIVE``);
* a member the history does not know joins with nothing owned;
* members of the generation that the input no longer lists have departed: their
  partitions are returned as ``departed`` rows, ``revoked`` (they left the group)
  or ``lost`` (``departed="crash"``: they vanished without a revocation);
* groups the history does not know start fresh.

The result feeds :func:`spark_assign.rebalance` as its members::

    rebalance(owned_from_history(members, history), partitions, history=history)
"""

from __future__ import annotations

from typing import NamedTuple

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .errors import InvalidOptionError
from .inputs import OWNED_TYPE, normalize_members

_G = "group_id"
_TP = ["topic", "partition"]
#: how the departed members of a generation gave up their partitions
DEPARTURES = {"leave": "revoked", "crash": "lost"}


class CarriedOwnership(NamedTuple):
    """What :func:`owned_from_history` returns: ``members`` (the input contract, with
    ``owned``, ``generation`` and ``protocol`` from the history), ``departed``
    (``group_id, member_id, topic, partition, kind``) and ``rejoined`` (``group_id,
    member_id, previous_member_id``: the static members that hold the partitions of
    their previous member id)."""

    members: DataFrame
    departed: DataFrame
    rejoined: DataFrame


def owned_from_history(members: DataFrame, history, *, departed: str = "leave",
                       before_generation: int | None = None) -> CarriedOwnership:
    """Each member's owned partitions and generation from its group's latest
    generation in ``history`` (an :class:`~spark_assign.history.AssignmentHistory`);
    see the module doc. ``departed``: ``"leave"`` (the partitions of members gone
    from the input are ``revoked``) or ``"crash"`` (``lost``). ``before_generation``:
    take the latest generation below it (a re-run of a recorded rebalance).

    >>> import tempfile
    >>> from spark_assign import AssignmentHistory, assign
    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "b", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> parts = spark.createDataFrame([("t", p) for p in range(4)], "topic string, partition int")
    >>> history = AssignmentHistory(tempfile.mkdtemp(), spark, backend="embedded")
    >>> _ = history.record(assign(members, parts, "range"), members=members, partitions=parts, strategy="range")
    >>> carried = owned_from_history(members.where("member_id = 'b'"), history, departed="crash")
    >>> carried.members.select("member_id", "owned", "generation", "protocol").show(truncate=False)
    +---------+----------------+----------+--------+
    |member_id|owned           |generation|protocol|
    +---------+----------------+----------+--------+
    |b        |[{t, 2}, {t, 3}]|1         |EAGER   |
    +---------+----------------+----------+--------+
    <BLANKLINE>
    >>> carried.departed.orderBy("partition").show()  # a crashed: its partitions are lost
    +--------+---------+-----+---------+----+
    |group_id|member_id|topic|partition|kind|
    +--------+---------+-----+---------+----+
    |       g|        a|    t|        0|lost|
    |       g|        a|    t|        1|lost|
    +--------+---------+-----+---------+----+
    <BLANKLINE>
    """
    if departed not in DEPARTURES:
        raise InvalidOptionError(f"departed={departed!r}: expected one of {sorted(DEPARTURES)}")
    m = normalize_members(members)
    extra = [c for c in members.columns if c not in m.columns and c != "protocol"]
    gens = history.history()
    if before_generation is not None:
        gens = gens.where(F.col("generation") < int(before_generation))
    latest = gens.groupBy(_G).agg(F.max_by(F.struct("generation", "protocol"), "generation").alias("_l")).select(
        _G, F.col("_l.generation").alias("_gen"), F.upper("_l.protocol").alias("_proto"))
    latest = latest.join(m.select(_G).distinct(), _G, "left_semi")  # only the input's groups rebalance
    pair = latest.select(_G, F.col("_gen").alias("generation"))
    rows = history.rows_of("assignments", pair).select(_G, "member_id", *_TP)
    # the generation's members: the recorded ones (with their instance ids), and every holder
    known = history.rows_of("members", pair).select(
        _G, "member_id", F.col("group_instance_id").alias("_iid"))
    prior = (known.unionByName(rows.select(_G, "member_id", F.lit(None).cast("string").alias("_iid")))
             .groupBy(_G, "member_id").agg(F.max("_iid").alias("_iid")))
    # who each input member was: the same member id, else the same group.instance.id
    # (a static member back with a new member id) unless that old id is still in the input
    by_id = m.select(_G, "member_id").join(prior.select(_G, "member_id"), [_G, "member_id"], "left_semi").select(
        _G, "member_id", F.col("member_id").alias("_from"), F.lit(0).alias("_pref"))
    replaced = prior.join(m.select(_G, "member_id"), [_G, "member_id"], "left_anti").where(F.col("_iid").isNotNull())
    by_iid = m.where(F.col("group_instance_id").isNotNull()).select(
        _G, "member_id", F.col("group_instance_id").alias("_iid")).join(
        replaced.select(_G, F.col("member_id").alias("_from"), "_iid"), [_G, "_iid"]).select(
        _G, "member_id", "_from", F.lit(1).alias("_pref"))
    first = Window.partitionBy(_G, "member_id").orderBy("_pref", "_from")
    match = (by_id.unionByName(by_iid).withColumn("_r", F.row_number().over(first))
             .where("_r = 1").select(_G, "member_id", "_from"))
    owned = rows.groupBy(_G, F.col("member_id").alias("_from")).agg(F.array_sort(F.collect_list(
        F.struct("topic", F.col("partition").cast("int").alias("partition")))).alias("_o"))
    matched = match.join(owned, [_G, "_from"], "left").join(latest, _G)
    carried = (
        m.drop("owned", "generation").join(matched.select(_G, "member_id", "_o", "_gen", "_proto"),
                                           [_G, "member_id"], "left")
        .select(*[c for c in m.columns if c not in ("owned", "generation")],
                F.coalesce("_o", F.array().cast(OWNED_TYPE)).cast(OWNED_TYPE).alias("owned"),
                F.col("_gen").cast("int").alias("generation"),
                F.col("_proto").alias("protocol"))
        .select(*m.columns, "protocol")
    )
    if extra:
        carried = carried.join(members.select(_G, "member_id", *extra), [_G, "member_id"], "left")
    gone = rows.join(match.select(_G, F.col("_from").alias("member_id")), [_G, "member_id"], "left_anti")
    return CarriedOwnership(
        members=carried,
        departed=gone.select(_G, "member_id", *_TP, F.lit(DEPARTURES[departed]).alias("kind")),
        rejoined=match.where(F.col("_from") != F.col("member_id")).select(
            _G, "member_id", F.col("_from").alias("previous_member_id")),
    )
