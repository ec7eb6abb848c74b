"""Quota arithmetic shared by every strategy.

For ``P`` partitions over ``N`` members: the floor quota ``C_f = P // N``, the
ceiling quota ``C_c = ceil(P / N)`` and ``C_r = P % N``, the number of members
that end at ``C_c`` (KAFKA-12464). Every function takes Python ints or Spark
columns (mixing is fine) and returns the same kind; the quotas and
:func:`rank_for_position` also take SQL expression texts (``str``, mixed with ints), and
return SQL text (for ``selectExpr``:
one JVM call for a whole projection, where column functions take several each).

>>> min_quota(10, 3), max_quota(10, 3), num_max_quota(10, 3)
(3, 4, 1)
>>> min_quota("P", "N")
'CAST(floor((P) / (N)) AS BIGINT)'
>>> [quota_for_rank(10, 3, r) for r in range(3)]
[4, 3, 3]
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def _spark(*xs) -> bool:
    return any(isinstance(x, Column) for x in xs)


def _text(*xs) -> bool:
    return any(isinstance(x, str) for x in xs)


def _sql(template: str, p, n) -> str:
    return template.format(p=f"({p})", n=f"({n})")


def _c(x) -> Column:
    return x if isinstance(x, Column) else F.lit(x)


def min_quota(p, n):
    """``C_f``: partitions every member gets at least."""
    if _text(p, n):
        return _sql("CAST(floor({p} / {n}) AS BIGINT)", p, n)
    return F.floor(_c(p) / _c(n)).cast("long") if _spark(p, n) else p // n


def max_quota(p, n):
    """``C_c``: partitions no member gets more than."""
    if _text(p, n):
        return _sql("CAST(ceil({p} / {n}) AS BIGINT)", p, n)
    return F.ceil(_c(p) / _c(n)).cast("long") if _spark(p, n) else -(-p // n)


def num_max_quota(p, n):
    """``C_r``: how many members end at ``C_c`` (the others end at ``C_f``)."""
    if _text(p, n):
        return _sql("CAST(pmod({p}, {n}) AS BIGINT)", p, n)
    return F.pmod(_c(p), _c(n)).cast("long") if _spark(p, n) else p % n


def quota_for_rank(p, n, rank):
    """Partitions of the member at 0-based ``rank`` when the first ``C_r`` ranks get
    ``C_c`` and the rest ``C_f`` (range's rule)."""
    if _spark(p, n, rank):
        return min_quota(p, n) + F.when(_c(rank) < num_max_quota(p, n), 1).otherwise(0)
    return p // n + (1 if rank < p % n else 0)


def start_for_rank(p, n, rank):
    """First position of the block of the member at ``rank`` when ``p`` positions
    are cut into ``n`` consecutive blocks sized by :func:`quota_for_rank`."""
    if _spark(p, n, rank):
        return _c(rank) * min_quota(p, n) + F.least(_c(rank), num_max_quota(p, n))
    return rank * (p // n) + min(rank, p % n)


def rank_for_position(p, n, pos):
    """The inverse of :func:`start_for_rank`: the rank whose block holds ``pos``."""
    if _text(p, n, pos):
        q, r = min_quota(p, n), num_max_quota(p, n)
        return (f"CAST(CASE WHEN ({pos}) < {r} * ({q} + 1) THEN floor(({pos}) / ({q} + 1)) "
                f"ELSE {r} + floor((({pos}) - {r} * ({q} + 1)) / {q}) END AS BIGINT)")
    if _spark(p, n, pos):
        q, r = min_quota(p, n), num_max_quota(p, n)
        big = r * (q + 1)
        pos = _c(pos)
        return (
            F.when(pos < big, F.floor(pos / (q + 1)))
            .otherwise(r + F.floor((pos - big) / q))
            .cast("long")
        )
    q, r = p // n, p % n
    big = r * (q + 1)
    return pos // (q + 1) if pos < big else r + (pos - big) // q
