"""spark-assign: Kafka consumer-group partition assignment as Spark DataFrame transformations.

>>> from spark_assign import assign
>>> assignment = assign(members, partitions, "cooperative-sticky")  # doctest: +SKIP
"""

from .assign import STRATEGIES, assign, strategy_name
from .errors import (
    AssignmentPropertyError,
    HistoryError,
    InvalidEventsError,
    InvalidInputError,
    InvalidLagsError,
    InvalidMembersError,
    InvalidPartitionsError,
    MissingColumnError,
    NoCommonAssignorError,
    SparkAssignError,
    UnknownStrategyError,
)
from .inputs import diagnostics
from .owned import resolve_owned
from .properties import (
    balance_violations,
    check_assignment,
    cooperative_violations,
    member_loads,
    revocations,
    validity_violations,
)

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "assign",
    "strategy_name",
    "diagnostics",
    "resolve_owned",
    "revocations",
    "member_loads",
    "check_assignment",
    "validity_violations",
    "balance_violations",
    "cooperative_violations",
    "SparkAssignError",
    "InvalidInputError",
    "MissingColumnError",
    "InvalidMembersError",
    "InvalidPartitionsError",
    "InvalidLagsError",
    "InvalidEventsError",
    "UnknownStrategyError",
    "NoCommonAssignorError",
    "AssignmentPropertyError",
    "HistoryError",
]
