"""spark-assign: Kafka consumer-group partition assignment as Spark DataFrame transformations.

The public API, in the order a newcomer meets it (README.md, then docs/design.md): one
assignment (:func:`assign`, checked by :func:`check_assignment`), a rebalance's rounds
(:func:`rebalance`), an event log replayed (:func:`simulate`, :func:`what_if`), the generation
history (:class:`AssignmentHistory`), the lag input (:func:`partition_lags`), and the errors'
base classes (every error is a :class:`SparkAssignError`; the specific ones are in
:mod:`spark_assign.errors`). Capture from a live cluster is :func:`spark_assign.kafka.capture`.
Everything else is reachable from its module, without being advertised here.

>>> from spark_assign import assign, check_assignment
>>> members = spark.createDataFrame([("g1", "c0", ["t0"]), ("g1", "c1", ["t0"])],
...                                 "group_id string, member_id string, topics array<string>")
>>> partitions = spark.createDataFrame([("t0", p) for p in range(3)], "topic string, partition int")
>>> assignment = check_assignment(assign(members, partitions, "cooperative-sticky"), members, partitions)
>>> assignment.groupBy("member_id").count().orderBy("member_id").collect()
[Row(member_id='c0', count=2), Row(member_id='c1', count=1)]
"""

from .assign import assign
from .errors import (
    AssignmentPropertyError,
    ExecutorLostError,
    HistoryError,
    InvalidInputError,
    InvalidOptionError,
    SparkAssignError,
)
from .history import AssignmentHistory
from .lags import partition_lags
from .properties import check_assignment
from .rebalance import RebalanceResult, rebalance
from .simulate import SimulationResult, simulate, what_if

__version__ = "0.1.0"

__all__ = [
    "assign",
    "check_assignment",
    "rebalance",
    "RebalanceResult",
    "simulate",
    "what_if",
    "SimulationResult",
    "AssignmentHistory",
    "partition_lags",
    "SparkAssignError",
    "InvalidInputError",
    "InvalidOptionError",
    "HistoryError",
    "AssignmentPropertyError",
    "ExecutorLostError",
]
