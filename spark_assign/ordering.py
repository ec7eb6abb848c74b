"""Kafka's orderings, as Spark column expressions.

Java compares strings by UTF-16 code units; Spark compares UTF-8 bytes (code
points). The two differ for characters above U+FFFF against U+E000-U+FFFF, so
every sort that must match Kafka sorts by :func:`java_order` instead of the raw
string: the UTF-16BE encoding compared as bytes is exactly Java's order.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def java_order(col: Column | str) -> Column:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    >>> df.orderBy(java_order("member_id"))  # doctest: +SKIP
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
