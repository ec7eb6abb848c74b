"""The jobs as a command line: ``spark-assign rebalance|capture|simulate|report``.

``pip install spark-assign`` puts ``spark-assign`` on the PATH; ``pipelines/*.py`` in a
checkout run the same code (``spark-submit pipelines/rebalance.py``, a Databricks Python
task). Every job prints a :class:`~spark_assign.errors.SparkAssignError` as one line on
stderr and exits with code 2; ``spark-assign <job> --help`` lists its flags and config keys.

    spark-assign rebalance --config conf/sample.yaml
    spark-assign capture --bootstrap-servers broker:9092 --history out/history
    spark-assign simulate --config conf/scenario.yaml
    spark-assign report --history out/history --out out/report.html
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from ..errors import InvalidConfigError

#: job -> (module, one-line description)
JOBS: dict[str, tuple[str, str]] = {
    "rebalance": ("spark_assign.cli.rebalance", "one full rebalance of every group, recorded in the history"),
    "capture": ("spark_assign.cli.capture", "live consumer groups from a Kafka cluster into the history's snapshots"),
    "simulate": ("spark_assign.cli.simulate", "replay membership events (and what-if variants), write the report"),
    "report": ("spark_assign.cli.report", "the HTML report of a recorded history"),
}


def one_line(exc: BaseException) -> str:
    """An error's message on one line (the offending rows joined with ``; ``).

    >>> one_line(ValueError("invalid members: 1 problem row(s):\\n  group_id='g'"))
    "invalid members: 1 problem row(s): group_id='g'"
    """
    parts = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(parts[:1] + ["; ".join(parts[1:])]).strip()


def key_values(items: Sequence[str], flag: str) -> dict[str, Any]:
    """Repeated ``KEY=VALUE`` flags as a dict, each value read as a YAML scalar.

    >>> key_values(["rack_aware=true", "sasl_mechanism=PLAIN"], "--option")
    {'rack_aware': True, 'sasl_mechanism': 'PLAIN'}
    """
    settings: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InvalidConfigError(f"{flag} expects KEY=VALUE, found {item!r}")
        key, value = item.split("=", 1)
        settings[key.strip()] = yaml.safe_load(value)
    return settings


def id_list(text: str | None) -> list[str] | None:
    """A comma-separated list of ids (None when not given).

    >>> id_list("orders, payments,")
    ['orders', 'payments']
    """
    return [i.strip() for i in text.split(",") if i.strip()] if text else None


#: the exit code of a job that failed for a reason a retry may not meet (another writer committed
#: the same generations meanwhile: a retryable HistoryError), as in BSD's sysexits (EX_TEMPFAIL)
RETRY_EXIT = 75


def failed(job: str, exc: BaseException) -> int:
    """Print a job's failure as one line on stderr; return its exit code: :data:`RETRY_EXIT` when
    a retry may succeed, else 2."""
    print(f"{job} failed: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
    return RETRY_EXIT if getattr(exc, "retryable", False) else 2


def usage() -> str:
    lines = ["usage: spark-assign <job> [--help | flags]", "", "jobs:"]
    lines += [f"  {name:<10} {doc}" for name, (_, doc) in JOBS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-assign <job> ...``: runs the job's ``main`` and returns its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    job, rest = args[0], args[1:]
    if job not in JOBS:
        print(f"spark-assign: unknown job {job!r}: expected one of {list(JOBS)}", file=sys.stderr)
        return 2
    return importlib.import_module(JOBS[job][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
