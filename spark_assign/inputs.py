"""The input contract: normalizing and validating members, partitions and lags.

(Past 400 lines: the contract's tables below and the checks that hold inputs to them are
one reference, read together.)

``members``: one row per group member.

================== ======================================== =========
column             type                                     required
================== ======================================== =========
group_id           string                                   yes
member_id          string                                   yes
topics             array<string> (the subscription)         yes
group_instance_id  string (static membership)               no
rack               string                                   no
owned              array<struct<topic:string,partition:int>> no
generation         int (generation of ``owned``)            no
assignors          array<string> (preference order)         no
================== ======================================== =========

``partitions``: cluster metadata, one row per topic partition: ``topic string``,
``partition int`` and optionally ``racks array<string>`` (replica racks).

Optional columns may be absent; they are added as nulls. Validation runs one
Spark action (the members' checks and the partitions' per-topic summary, which it
returns; none in a small call whose rows on the driver pass every check) and raises an
:class:`~spark_assign.errors.InvalidInputError` subclass naming the offending rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import (
    ColumnTypeError,
    InvalidMembersError,
    InvalidPartitionsError,
    MissingColumnError,
    raise_if_rows,
)
from .execution import in_small_call, join_small, materialize
from .execution.small_inputs import clean_on_driver
from .frames import one_row, sql_name

TOPIC_PARTITION = T.StructType(
    [T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType())]
)
OWNED_TYPE = T.ArrayType(TOPIC_PARTITION)


def owned_or_empty(owned: str = "owned") -> str:
    """An owned list as SQL text over ``owned`` (a SQL expression), null read as the empty
    list, of the contract's type.

    >>> owned_or_empty("_o")
    'CAST(coalesce(_o, CAST(array() AS array<struct<topic:string,partition:int>>)) AS array<struct<topic:string,partition:int>>)'
    """
    return f"CAST(coalesce({owned}, CAST(array() AS {OWNED_TYPE.simpleString()})) AS {OWNED_TYPE.simpleString()})"

MEMBER_COLUMNS: dict[str, T.DataType] = {
    "group_id": T.StringType(),
    "member_id": T.StringType(),
    "group_instance_id": T.StringType(),
    "rack": T.StringType(),
    "topics": T.ArrayType(T.StringType()),
    "owned": OWNED_TYPE,
    "generation": T.IntegerType(),
    "assignors": T.ArrayType(T.StringType()),
    # KIP-848: the member's place in the coordinator's member map, as ConsumerGroupDescribe
    # lists the members (the broker's uniform assignor walks the members in an order it decides)
    "describe_position": T.IntegerType(),
}
REQUIRED_MEMBER_COLUMNS = ("group_id", "member_id", "topics")

PARTITION_COLUMNS: dict[str, T.DataType] = {
    "topic": T.StringType(),
    "partition": T.IntegerType(),
    "racks": T.ArrayType(T.StringType()),
    # the topic's id as Kafka prints a Uuid (the broker's uniform assignor orders topics by it)
    "topic_id": T.StringType(),
}
REQUIRED_PARTITION_COLUMNS = ("topic", "partition")

#: the columns every strategy returns
ASSIGNMENT_COLUMNS = ("group_id", "member_id", "topic", "partition")


def _same_type(a: T.DataType, b: T.DataType) -> bool:
    """Equal data types, nullability aside."""
    strip = lambda t: t.simpleString()  # noqa: E731  (names and types, no nullability)
    return strip(a) == strip(b)


def _type_problem(name: str, found: T.DataType, expected: T.DataType) -> str | None:
    """Why a column of type ``found`` cannot stand for ``expected`` (None when it can:
    the same type, an atomic value for a string, a number for a number, a string of
    numbers for a number (checked row by row), an array of such values for an array)."""
    if isinstance(expected, T.ArrayType):
        if not isinstance(found, T.ArrayType):
            return "an array"
        if isinstance(expected.elementType, T.StructType):  # owned: struct<topic, partition>
            fields = set(found.elementType.names) if isinstance(found.elementType, T.StructType) else set()
            return None if {"topic", "partition"} <= fields else "an array of struct<topic, partition>"
        return _type_problem(name, found.elementType, expected.elementType)
    if isinstance(found, (T.ArrayType, T.MapType, T.StructType, T.BinaryType)):
        return "a single value"
    if isinstance(expected, (T.IntegerType, T.LongType)) and not isinstance(
            found, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType)):
        return "a whole number"
    return None


def _check_numbers(df: DataFrame, name: str, dtype: T.DataType, what: str, error) -> None:
    """A string column that stands for a number: raise ``error`` naming the column and
    the first values that are not numbers (one Spark job, paid only for string input)."""
    bad = df.where(F.col(name).isNotNull() & F.col(name).try_cast(dtype).isNull()).select(name).limit(5).collect()
    if bad:
        raise error(f"{what} column {name!r}: expected {dtype.simpleString()}, found string values that are "
                    f"not numbers: {[r[0] for r in bad]}")


#: the SQL that normalizes an ``owned`` array of structs with other field orders or int widths
_OWNED_FIELDS = "transform({}, x -> named_struct('topic', CAST(x.topic AS string), 'partition', CAST(x.partition AS int)))"


def conform_columns(df: DataFrame, columns: dict[str, T.DataType], required, what: str, error,
                    normalized: dict[str, str] | None = None) -> DataFrame:
    """``df`` with exactly ``columns`` (name -> type), cast, absent optional ones
    null; ``error`` naming what is expected and found when a ``required`` one is missing,
    :class:`ColumnTypeError` naming the column, the expected and the found type when one
    cannot be cast (``topics`` given as a string, ``partition`` as a string that is not
    a number). ``normalized``: per column, a SQL expression of the cast column (``{}``)
    that it becomes.

    One projection, written as SQL text (a handful of JVM calls, where column functions
    take several each), and none when ``df`` has exactly ``columns`` already and nothing
    is ``normalized``: the library passes its own normalized frames on, call after call.

    >>> conform_columns(spark.range(1).selectExpr("'t' AS topic", "0L AS partition"), PARTITION_COLUMNS,
    ...                 REQUIRED_PARTITION_COLUMNS, "partitions", MissingColumnError).dtypes
    [('topic', 'string'), ('partition', 'int'), ('racks', 'array<string>'), ('topic_id', 'string')]
    """
    found_types = {f.name: f.dataType for f in df.schema.fields}  # one schema read
    missing = [c for c in required if c not in found_types]
    if missing:
        raise error(
            f"{what} is missing required column(s) {missing}: "
            f"expected at least {list(required)}, found {sorted(found_types)}"
        )
    exprs: list[str] = []
    unchanged = not normalized and list(found_types) == list(columns)
    for name, dtype in columns.items():
        sql_type, column = dtype.simpleString(), sql_name(name)
        found = found_types.get(name)
        if found is None:
            exprs.append(f"CAST(NULL AS {sql_type}) AS {column}")
            continue
        same = _same_type(found, dtype)
        unchanged = unchanged and same
        problem = None if same else _type_problem(name, found, dtype)
        if problem:
            raise ColumnTypeError(f"{what} column {name!r}: expected {sql_type} ({problem}), "
                                  f"found {found.simpleString()}")
        if isinstance(found, T.StringType) and isinstance(dtype, (T.IntegerType, T.LongType)):
            _check_numbers(df, name, dtype, what, ColumnTypeError)
        value = _OWNED_FIELDS.format(column) if name == "owned" and not same else column
        cast = f"CAST({value} AS {sql_type})"
        exprs.append(f"{(normalized or {}).get(name, '{}').format(cast)} AS {column}")
    return df if unchanged else df.selectExpr(*exprs)


def normalize_members(members: DataFrame, *, keep: dict[str, T.DataType] | None = None) -> DataFrame:
    """Members with every contract column, typed, subscriptions de-duplicated; ``keep``: more
    columns of ``members`` (name -> type) carried in the same projection, after them.

    >>> normalize_members(spark.createDataFrame(
    ...     [("g", "m1", ["t"])], "group_id string, member_id string, topics array<string>"
    ... )).columns
    ['group_id', 'member_id', 'group_instance_id', 'rack', 'topics', 'owned', 'generation', 'assignors', 'describe_position']
    """
    return conform_columns(members, {**MEMBER_COLUMNS, **(keep or {})}, REQUIRED_MEMBER_COLUMNS, "members",
                           MissingColumnError, normalized={"topics": "array_distinct({})"})


def normalize_partitions(partitions: DataFrame) -> DataFrame:
    """Partitions with ``topic, partition, racks``, typed."""
    return conform_columns(
        partitions, PARTITION_COLUMNS, REQUIRED_PARTITION_COLUMNS, "partitions", MissingColumnError
    )


#: partition numbers are counted in blocks of ``2**BLOCK_BITS``, one bit each in a long
BLOCK_BITS = 6


def partition_block(partition: str) -> str:
    """The block of a partition number (:data:`BLOCK_BITS`), as SQL text over ``partition``
    (a SQL expression).

    >>> partition_block("partition")
    'shiftright(partition, 6)'
    """
    return f"shiftright({partition}, {BLOCK_BITS})"


def partition_bit(partition: str) -> str:
    """A partition number's bit in its block's mask (a long), as SQL text over ``partition``:
    ``bit_or`` over a block's rows gives the set of its partition numbers, ``bit_count``
    their number."""
    return f"shiftleft(CAST(1 AS BIGINT), ({partition}) & {(1 << BLOCK_BITS) - 1})"


def member_problems(members: DataFrame) -> DataFrame:
    """The rows of normalized members that break the contract:
    ``problem, group_id, member_id, count, detail``.

    Problems: a null ``group_id`` or ``member_id``, a null ``topics`` array or a null topic in it, an empty
    ``group_id`` or ``member_id``, a member id repeated within a group, an owned partition with a null topic or a
    null or negative partition number.
    """
    nulls = members.where(
        F.col("group_id").isNull() | F.col("member_id").isNull() | F.col("topics").isNull()
    ).select(
        F.lit("null group_id, member_id or topics").alias("problem"),
        "group_id", "member_id", F.lit(None).cast("long").alias("count"),
        F.lit(None).cast("string").alias("detail"),
    )
    null_topic = members.where(F.expr("exists(topics, t -> t IS NULL)")).select(
        F.lit("null topic in topics (expected topic names)").alias("problem"),
        "group_id", "member_id", F.lit(None).cast("long").alias("count"),
        F.array_join("topics", ",", "null").alias("detail"),
    )
    empty = members.where((F.col("group_id") == "") | (F.col("member_id") == "")).select(
        F.lit("empty group_id or member_id (Kafka never has one)").alias("problem"),
        "group_id", "member_id", F.lit(None).cast("long").alias("count"),
        F.lit(None).cast("string").alias("detail"),
    )
    dupes = (
        members.where(F.col("group_id").isNotNull() & F.col("member_id").isNotNull())
        .groupBy("group_id", "member_id").count().where("count > 1")
        .select(F.lit("member_id repeated in group").alias("problem"), "group_id", "member_id",
                "count", F.lit(None).cast("string").alias("detail"))
    )
    # only members whose list may hold a bad claim are exploded: a null claim, topic or
    # partition makes array_contains null (counted as suspect, as is a "" topic or a
    # partition -1), a negative partition shows in the minimum (array functions over
    # the list, no row per claim)
    suspect = (
        F.coalesce(F.array_contains("owned.topic", ""), F.lit(True))
        | F.coalesce(F.array_contains("owned.partition", -1), F.lit(True))
        | (F.array_min("owned.partition") < 0)
    )
    bad_owned = (
        members.where(F.coalesce(suspect, F.lit(False)))
        .select("group_id", "member_id", F.explode("owned").alias("tp"))
        .where(F.col("tp.topic").isNull() | F.col("tp.partition").isNull() | (F.col("tp.partition") < 0))
        .select(F.lit("owned partition with null topic or null/negative partition").alias("problem"),
                "group_id", "member_id", F.lit(None).cast("long").alias("count"),
                F.concat_ws("-", F.coalesce("tp.topic", F.lit("null")),
                            F.coalesce(F.col("tp.partition").cast("string"), F.lit("null"))).alias("detail"))
    )
    return nulls.unionByName(null_topic).unionByName(empty).unionByName(dupes).unionByName(bad_owned)


def topic_sizes(partitions: DataFrame) -> DataFrame:
    """Per topic of normalized, valid partitions: ``topic, num_partitions,
    last_partition, topic_id`` (a topic is numbered ``0 .. n - 1``, as Kafka numbers it, when
    ``last_partition == num_partitions - 1``; ``topic_id`` is null when the rows have none).

    >>> topic_sizes(normalize_partitions(spark.createDataFrame([("t", 0), ("t", 1)], "topic string, partition int"))).collect()
    [Row(topic='t', num_partitions=2, last_partition=1, topic_id=None)]
    """
    sizes = partitions.groupBy("topic").agg(
        F.count("*").cast("int").alias("num_partitions"), F.max("partition").alias("last_partition"))
    return join_small(sizes, _topic_ids(partitions), "topic", "left")


#: the columns of :func:`topic_sizes`
_SIZES = ("topic", "num_partitions", "last_partition", "topic_id")


def _topic_ids(partitions: DataFrame) -> DataFrame:
    """``topic, topic_id`` of the topics whose partition rows give an id (the greatest).

    An aggregate of a string keeps no fixed-width buffer, so Spark sorts its rows to run it:
    only the rows with an id are read, where the sizes' aggregation reads them all."""
    return partitions.where("topic_id IS NOT NULL").groupBy("topic").agg(F.max("topic_id").alias("topic_id"))


def _topic_summary(partitions: DataFrame) -> DataFrame:
    """Per topic of normalized partitions (null topics are one row): the
    :func:`topic_sizes` columns, ``_bad`` (a null topic, a null or negative
    partition, a malformed ``topic_id`` or two ids) and ``_repeats`` (a partition listed
    twice: the topic's distinct partitions, a bit mask per block of partition numbers, are
    fewer than its rows). Two small hash aggregations, and one of the ids of the rows that have one:
    only topics that offend are looked at row by row."""
    # written as SQL text: a handful of JVM calls, where column functions take several each;
    # the ids are compared by hash (fixed width: the aggregation hashes its rows, no sort)
    blocks = partitions.selectExpr(
        "topic", "partition", f"{partition_block('partition')} AS _block", f"{partition_bit('partition')} AS _bit",
        "CASE WHEN topic_id IS NOT NULL THEN xxhash64(topic_id) END AS _idh",
    ).groupBy("topic", "_block").agg(*map(F.expr, (
        "count(*) AS _rows", "count(partition) AS _numbered", "bit_count(bit_or(_bit)) AS _distinct",
        "min(partition) AS _first", "max(partition) AS _last", "min(_idh) AS _id_min", "max(_idh) AS _id_max")))
    summary = blocks.groupBy("topic").agg(*map(F.expr, (
        "CAST(sum(_rows) AS INT) AS num_partitions", "max(_last) AS last_partition",
        "topic IS NULL OR min(_first) < 0 OR sum(_numbered) < sum(_rows) OR min(_id_min) != max(_id_max) AS _bad",
        "sum(_distinct) < sum(_numbered) AS _repeats")))
    # one id per topic (else _bad already): that one is the one to check
    return join_small(summary, _topic_ids(partitions), "topic", "left").selectExpr(
        "topic", "num_partitions", "last_partition", f"_bad OR {_malformed_topic_id()} AS _bad", "_repeats",
        "topic_id")


def _malformed_topic_id(column: str = "topic_id") -> str:
    """``column`` (SQL text) is a topic id but not a Uuid as Kafka prints it (22 URL-safe
    base64 characters), as SQL text."""
    return f"coalesce(NOT regexp_like({column}, '^[A-Za-z0-9_-]{{21}}[AQgw]$'), false)"


def _partition_problems(partitions: DataFrame, repeating: DataFrame) -> DataFrame:
    """The offending partition rows: ``problem, topic, partition, count``
    (``repeating``: the topics that list a partition twice)."""
    bad = partitions.where(
        F.col("topic").isNull() | F.col("partition").isNull() | (F.col("partition") < 0)
    ).select(F.lit("null topic/partition or negative partition").alias("problem"),
             "topic", "partition", F.lit(None).cast("long").alias("count"))
    ids = partitions.groupBy("topic").agg(F.expr(f"bool_or({_malformed_topic_id()}) AS _bad_id"), F.expr(
        "count(DISTINCT topic_id) AS count")).where("_bad_id OR count > 1").selectExpr(
        "CASE WHEN _bad_id THEN 'topic_id is not a Uuid as Kafka prints it (22 URL-safe base64 characters)' "
        "ELSE 'topic listed with different topic_ids' END AS problem", "topic", "CAST(NULL AS INT) AS partition",
        "count")
    dupes = (
        partitions.where(F.col("partition") >= 0).join(F.broadcast(repeating), "topic", "left_semi")
        .groupBy("topic", "partition").count().where("count > 1")
        .select(F.lit("topic partition repeated").alias("problem"), "topic", "partition", "count")
    )
    return bad.unionByName(dupes).unionByName(ids)


@dataclass(frozen=True)
class InputCheck:
    """A caller's own check of the inputs, run in :func:`validate_inputs`' one action:
    ``offending`` is a frame whose rows, if it has any, are a problem, and ``explain`` raises
    the error that names them (it runs only then).

    >>> m = normalize_members(spark.createDataFrame([("g", "m1", [])], "group_id string, member_id string, topics array<string>"))
    >>> p = normalize_partitions(spark.createDataFrame([("t", 0)], "topic string, partition int"))
    >>> check = InputCheck(m.where("size(topics) = 0"), lambda: print("a member subscribes to nothing"))
    >>> validate_inputs(m, p, checks=[check], sizes=False)
    a member subscribes to nothing
    """

    offending: DataFrame
    explain: Callable[[], object]


def validate_inputs(
    members: DataFrame, partitions: DataFrame, *, checks: Sequence[InputCheck] = (), sizes: bool = True,
) -> DataFrame | None:
    """Check normalized members and partitions; raise :class:`InvalidMembersError`
    (:func:`member_problems`) or :class:`InvalidPartitionsError` (a null topic or
    partition, a negative partition, a topic partition listed twice), naming the
    offending rows. Returns the partitions' :func:`topic_sizes` (one row per topic),
    which strategies take as ``topic_sizes=`` instead of counting the partitions again.

    Valid inputs (the usual case) take no Spark action in a small call whose rows are on
    the driver and pass every check there (:func:`~spark_assign.execution.small_inputs.clean_on_driver`),
    else one: the members' checks together with the flags of the partitions' per-topic
    summary, whose last stage that action computes and stores (a lazy checkpoint: under adaptive execution the summary's
    shuffles run when it is defined; in a small call the summary is a short plan over
    the stored partitions, not stored again); the offending rows are looked up only when
    there are some. ``checks``: the caller's own (:class:`InputCheck`), in the same action,
    explained in their order after the members' problems and before the partitions'.
    ``sizes=False``: returns None, for a caller that does not read the sizes (a small call
    whose rows pass on the driver then builds no plan at all).

    >>> members = spark.createDataFrame([("g", "a", ["t"]), ("g", "a", ["t"])],
    ...                                 "group_id string, member_id string, topics array<string>")
    >>> partitions = spark.createDataFrame([("t", 0)], "topic string, partition int")
    >>> validate_inputs(normalize_members(members), normalize_partitions(partitions))
    Traceback (most recent call last):
    ...
    spark_assign.errors.InvalidMembersError: invalid members: 1 problem row(s):
      problem='member_id repeated in group', group_id='g', member_id='a', count=2, detail=None
    """
    if in_small_call() and not checks and clean_on_driver(members, partitions):
        # a small call whose rows on the driver pass every check: no action
        return _topic_summary(partitions).select(*_SIZES) if sizes else None
    # lazy: the flags aggregation below reads every summary row and stores them (a
    # deterministic aggregation), so the summary costs no action of its own
    summary = _topic_summary(partitions)
    if not in_small_call():
        summary = materialize(summary, eager=False)
    flags = member_problems(members).select(F.lit("members").alias("_input")).unionByName(
        summary.where(F.col("_bad") | F.col("_repeats")).select(F.lit("partitions").alias("_input")))
    for i, check in enumerate(checks):
        flags = flags.unionByName(check.offending.select(F.lit(f"check {i}").alias("_input")))
    found = one_row(flags.agg(  # one row of flags, never the rows themselves
        F.bool_or(F.col("_input") == "members").alias("members"),
        F.bool_or(F.col("_input") == "partitions").alias("partitions"),
        *[F.bool_or(F.col("_input") == f"check {i}").alias(f"check {i}") for i in range(len(checks))],
    ))
    if found["members"]:
        raise_if_rows(member_problems(members), InvalidMembersError, "invalid members")
    for i, check in enumerate(checks):
        if found[f"check {i}"]:
            check.explain()
    if found["partitions"]:
        repeating = summary.where(F.col("_repeats")).select("topic")
        raise_if_rows(_partition_problems(partitions, repeating), InvalidPartitionsError, "invalid partitions")
    return summary.select(*_SIZES) if sizes else None


def subscriptions(members: DataFrame) -> DataFrame:
    """One row per (group_id, member_id, topic) of each member's subscription."""
    return members.selectExpr("group_id", "member_id", "explode(topics) AS topic")


def owned_claims(members: DataFrame, *extra: str) -> DataFrame:
    """One row per owned-partition claim: ``group_id, member_id, generation, topic,
    partition`` and the ``extra`` member columns."""
    cols = ["group_id", "member_id", "generation", *extra]
    return members.selectExpr(*cols, "explode(owned) AS tp").selectExpr(*cols, "tp.topic", "tp.partition")


def ignored_claims(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Per group of normalized members, the owned claims on partitions the metadata
    does not have (Kafka ignores them): ``group_id, ignored_owned_claims`` (groups with
    none are absent)."""
    return (
        owned_claims(members).join(partitions.select("topic", "partition"), ["topic", "partition"], "left_anti")
        .groupBy("group_id").agg(F.count("*").alias("ignored_owned_claims"))
    )


def diagnostics(members: DataFrame, partitions: DataFrame) -> DataFrame:
    """Per group: members, subscribed topics missing from the metadata (skipped, as
    Kafka does), owned claims, and owned claims on partitions the metadata does not
    have (ignored, as Kafka ignores claims on deleted topics).

    Columns: ``group_id, members, missing_topics, owned_claims, ignored_owned_claims``.
    """
    m, p = normalize_members(members), normalize_partitions(partitions)
    topics = p.select("topic").distinct()
    missing = (
        subscriptions(m).select("group_id", "topic").distinct()
        .join(topics, "topic", "left_anti")
        .groupBy("group_id").agg(F.sort_array(F.collect_list("topic")).alias("missing_topics"))
    )
    claims = owned_claims(m).join(
        p.select("topic", "partition", F.lit(True).alias("_known")), ["topic", "partition"], "left"
    )
    claim_counts = claims.groupBy("group_id").agg(
        F.count("*").alias("owned_claims"),
        F.count(F.when(F.col("_known").isNull(), 1)).alias("ignored_owned_claims"),
    )
    return (
        m.groupBy("group_id").agg(F.count("*").alias("members"))
        .join(missing, "group_id", "left")
        .join(claim_counts, "group_id", "left")
        .select(
            "group_id", "members",
            F.coalesce("missing_topics", F.array().cast("array<string>")).alias("missing_topics"),
            F.coalesce("owned_claims", F.lit(0)).cast("long").alias("owned_claims"),
            F.coalesce("ignored_owned_claims", F.lit(0)).cast("long").alias("ignored_owned_claims"),
        )
    )
