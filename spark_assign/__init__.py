"""spark-assign: Kafka consumer-group partition assignment as Spark DataFrame transformations.

>>> from spark_assign import assign
>>> assignment = assign(members, partitions, "cooperative-sticky")  # doctest: +SKIP
"""

from .assign import assign
from .errors import (
    AssignmentPropertyError,
    ColumnTypeError,
    ConcurrentWriteError,
    ExecutorLostError,
    HistoryError,
    InvalidConfigError,
    InvalidEventsError,
    InvalidInputError,
    InvalidLagsError,
    InvalidMembersError,
    InvalidOptionError,
    InvalidPartitionsError,
    MissingColumnError,
    NoCommonAssignorError,
    SparkAssignError,
    UnknownStrategyError,
)
from .history import AssignmentHistory
from .input_files import read_input
from .inputs import diagnostics
from .lags import compare_strategies, lag_balance, lag_report, partition_lags
from .lineage import materialization
from .owned import resolve_owned
from .ownership import CarriedOwnership, owned_from_history
from .properties import (
    balance_violations,
    check_assignment,
    cooperative_violations,
    member_loads,
    revocations,
    validity_violations,
)
from .protocol import group_protocols, member_protocols, select_assignor
from .rebalance import RebalanceResult, rebalance
from .simulate import SimulationResult, run_analytics, simulate, what_if
from .strategies.cooperative_sticky import next_round_members
from .strategies.registry import STRATEGIES, strategy_name

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "assign",
    "strategy_name",
    "diagnostics",
    "next_round_members",
    "partition_lags",
    "lag_report",
    "lag_balance",
    "compare_strategies",
    "select_assignor",
    "member_protocols",
    "group_protocols",
    "rebalance",
    "RebalanceResult",
    "simulate",
    "what_if",
    "SimulationResult",
    "AssignmentHistory",
    "run_analytics",
    "read_input",
    "resolve_owned",
    "owned_from_history",
    "CarriedOwnership",
    "revocations",
    "member_loads",
    "check_assignment",
    "validity_violations",
    "balance_violations",
    "cooperative_violations",
    "SparkAssignError",
    "InvalidInputError",
    "MissingColumnError",
    "ColumnTypeError",
    "InvalidConfigError",
    "InvalidMembersError",
    "InvalidPartitionsError",
    "InvalidLagsError",
    "InvalidEventsError",
    "UnknownStrategyError",
    "NoCommonAssignorError",
    "InvalidOptionError",
    "AssignmentPropertyError",
    "HistoryError", "ConcurrentWriteError",
    "ExecutorLostError",
    "materialization",
]
