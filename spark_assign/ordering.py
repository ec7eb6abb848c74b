"""Kafka's orderings, as Spark column expressions.

Java compares strings by UTF-16 code units; Spark compares UTF-8 bytes (code
points). The two differ for characters above U+FFFF against U+E000-U+FFFF, so
every sort that must match Kafka sorts by :func:`java_order` instead of the raw
string: the UTF-16BE encoding compared as bytes is exactly Java's order.
"""

from __future__ import annotations

from pyspark.sql import Column, Window
from pyspark.sql import functions as F


def java_order(col: Column | str) -> Column:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    >>> df.orderBy(java_order("member_id"))  # doctest: +SKIP
    """
    c = F.col(col) if isinstance(col, str) else col
    return F.encode(c, "UTF-16BE")


def kafka_member_order() -> list[Column]:
    """Sort keys of Kafka's ``MemberInfo`` order: static members first, by
    ``group.instance.id``, then dynamic members by member id."""
    return [
        F.col("group_instance_id").isNull().asc(),
        java_order("group_instance_id").asc(),
        java_order("member_id").asc(),
    ]


def with_member_index(members, name: str = "member_index"):
    """Add the 0-based position of each member in its group, in Kafka's member order."""
    w = Window.partitionBy("group_id").orderBy(*kafka_member_order())
    return members.withColumn(name, F.row_number().over(w) - 1)
