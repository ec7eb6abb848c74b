"""Kafka's orderings, as Spark column expressions.

Java compares strings by UTF-16 code units; Spark compares UTF-8 bytes (code
points). The two differ for characters above U+FFFF against U+E000-U+FFFF, so
every sort that must match Kafka sorts by :func:`java_order` instead of the raw
string: the UTF-16BE encoding compared as bytes is exactly Java's order. Kafka's
sticky assignors also walk Java ``HashMap``s, whose order follows ``String.hashCode``:
:func:`member_order_keys` gives either order.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from .frames import sql_name

#: the member orders the sticky assignors' quotas can follow (:func:`member_order_keys`)
MEMBER_ORDERS = ("member_id", "java_hash")


def java_order(col: Column | str) -> Column:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    >>> df = spark.createDataFrame([("\uff5e",), ("\U0001F600",), ("z",)], "member_id string")
    >>> [hex(ord(r.member_id)) for r in df.orderBy(java_order("member_id")).collect()]  # UTF-16: a surrogate first
    ['0x7a', '0x1f600', '0xff5e']
    """
    c = F.col(col) if isinstance(col, str) else col
    return F.encode(c, "UTF-16BE")


def java_order_sql(expr: str) -> str:
    """:func:`java_order` of a SQL expression, as SQL text (for ``selectExpr`` and windows
    written as text).

    >>> java_order_sql("member_id")
    "encode(member_id, 'UTF-16BE')"
    """
    return f"encode({expr}, 'UTF-16BE')"


#: Kafka's ``MemberInfo`` order as the SQL text of an ORDER BY: static members first, by
#: ``group.instance.id``, then dynamic members by member id
KAFKA_MEMBER_ORDER = (f"group_instance_id IS NULL, {java_order_sql('group_instance_id')}, "
                      f"{java_order_sql('member_id')}")


def with_member_index(members, name: str = "member_index"):
    """Add the 0-based position of each member in its group, in Kafka's member order."""
    return members.selectExpr(
        "*", f"row_number() OVER (PARTITION BY group_id ORDER BY {KAFKA_MEMBER_ORDER}) - 1 AS {name}")


def java_string_hash(column: str) -> Column:
    """Java's ``String.hashCode()`` of a string column as an unsigned 32-bit value in a
    long column (UTF-16 code units, ``h = 31 * h + c`` modulo 2^32). ANSI-safe."""
    return F.expr(string_hash(sql_name(column)))


def string_hash(expr: str) -> str:
    """:func:`java_string_hash` of a SQL expression, as SQL text."""
    hx = f"hex({java_order_sql(expr)})"
    units = (f"CASE WHEN length({hx}) = 0 THEN CAST(array() AS array<bigint>) ELSE transform("
             f"sequence(0, CAST(greatest(length({hx}) / 4 - 1, -1) AS INT)), "
             f"i -> CAST(conv(substring({hx}, i * 4 + 1, 4), 16, 10) AS BIGINT)) END")
    return f"aggregate({units}, CAST(0 AS BIGINT), (acc, u) -> pmod(acc * 31 + u, {1 << 32}))"


def _hashmap_bucket(expr: str, n: str) -> tuple[str, str]:
    """Bucket of a key in a Java HashMap holding ``n`` entries (default capacity 16,
    load factor 0.75): ``(h ^ (h >>> 16)) & (capacity - 1)``; SQL texts of the bucket and
    the spread hash."""
    h = f"({string_hash(expr)})"
    return hash_bucket(h, hashmap_capacity(n)), f"({h} ^ shiftright({h}, 16))"


def member_order_keys(order: str, n: str | None = None) -> list[str]:
    """Sort keys of the member order in which the owned-partition quotas are handed out
    (SQL texts; ``n``: the group's member count, for ``java_hash``)."""
    if order == "member_id":
        return [java_order_sql("member_id")]
    if order == "java_hash":
        if n is None:
            raise ValueError("member_order='java_hash' needs the group's member count")
        bucket, spread = _hashmap_bucket("member_id", n)
        return [bucket, spread, java_order_sql("member_id")]
    raise ValueError(f"unknown member_order {order!r}: expected one of {MEMBER_ORDERS}")


# --- the broker's (KIP-848 group coordinator's) iteration orders --------------------------------
# The coordinator's UniformAssignor walks Java hash structures; each function below gives the
# order of one of them as SQL text, from the keys the broker hashes (member ids, topic ids).


def pow2_at_least(expr: str) -> str:
    """The smallest power of two >= ``expr`` (a positive integer SQL expression), as SQL
    text: Java's ``HashMap.tableSizeFor`` (the bit length of ``expr - 1`` is the exponent).

    >>> spark.sql(f"SELECT {pow2_at_least('CAST(17 AS BIGINT)')} AS c, {pow2_at_least('16')} AS d").first()
    Row(c=32, d=16)
    """
    return (f"(CASE WHEN ({expr}) <= 1 THEN CAST(1 AS BIGINT) "
            f"ELSE shiftleft(CAST(1 AS BIGINT), length(bin(({expr}) - 1))) END)")


def hashset_copy_capacity(n: str) -> str:
    """The table size of ``new HashSet<>(collection)`` holding ``n`` elements (Java 17's
    ``HashSet(Collection)``: ``tableSizeFor(max((int) (n / .75f) + 1, 16))``), as SQL text."""
    return pow2_at_least(f"greatest(CAST(floor(({n}) / 0.75D) AS BIGINT) + 1, 16)")


def uuid_hash(topic_id: str) -> str:
    """Kafka's ``Uuid.hashCode()`` of a topic id printed as Kafka prints it (URL-safe base64
    of the 16 bytes, no padding), as SQL text of an unsigned 32-bit value in a long: the xor
    of the id's four 32-bit words."""
    hx = f"hex(unbase64(concat(translate({topic_id}, '-_', '+/'), '==')))"
    words = [f"CAST(conv(substring({hx}, {1 + 8 * i}, 8), 16, 10) AS BIGINT)" for i in range(4)]
    return "(" + " ^ ".join(words) + ")"


def default_topic_id(topic: str) -> str:
    """The topic id spark-assign takes for a topic whose ``topic_id`` is not given: the MD5
    of its name, printed as Kafka prints a ``Uuid`` (the oracle derives it so too). A real
    broker's ids are random: capture them (``capture()`` does) for Kafka's exact answer.

    >>> spark.sql(f"SELECT {default_topic_id(repr('orders'))} AS id").first().id
    'EsUA7Qt4eRBftGrw8ka-hw'
    """
    return f"rtrim('=', translate(base64(unhex(md5({topic}))), '+/', '-_'))"


def hash_bucket(h: str, capacity: str) -> str:
    """The bucket of a key of hash ``h`` (unsigned 32-bit, SQL text) in a Java ``HashMap`` or
    ``HashSet`` of table size ``capacity``: ``(h ^ (h >>> 16)) & (capacity - 1)``."""
    return f"((({h}) ^ shiftright({h}, 16)) & (({capacity}) - 1))"


def hashmap_capacity(n: str) -> str:
    """The table size of a default ``new HashMap<>()`` after ``n`` puts (16, doubled while
    ``n > 0.75 * capacity``), as SQL text."""
    return pow2_at_least(f"greatest(CAST(ceil(({n}) / 0.75D) AS BIGINT), 16)")


def timeline_capacity(n: str) -> str:
    """The table size of Kafka's ``TimelineHashMap`` created empty (``BaseHashTable``: 2,
    doubled before an insert while ``(size + 1) * 0.75 > capacity``) after ``n`` inserts."""
    return pow2_at_least(f"greatest(CAST(ceil(({n}) * 0.75D) AS BIGINT), 2)")


def timeline_slot(h: str, capacity: str) -> str:
    """The slot of a key of hash ``h`` (unsigned 32-bit) in a ``TimelineHashMap`` of table size
    ``capacity`` (``BaseHashTable.findSlot``: Fibonacci hashing, the top bits of the 64-bit
    product of the signed hash and -7046029254386353131), as SQL text. Exact decimal
    arithmetic: the product needs 94 bits."""
    signed = f"CAST(CASE WHEN ({h}) >= {1 << 31} THEN ({h}) - {1 << 32} ELSE ({h}) END AS DECIMAL(38, 0))"
    product = f"pmod({signed} * CAST(-7046029254386353131 AS DECIMAL(38, 0)), CAST({1 << 64} AS DECIMAL(38, 0)))"
    width = f"floor(CAST({1 << 64} AS DECIMAL(38, 0)) / CAST({capacity} AS DECIMAL(38, 0)))"
    return f"CAST({product} DIV {width} AS BIGINT)"
