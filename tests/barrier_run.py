"""Run by tests/test_spark_submit.py under ``spark-submit``: the rebalance job, its generations
commit held at a barrier until every one of PEERS runs has reached its own, so that they commit
at the same moment. The barrier is set here, by wrapping the Spark-Delta store's conditional
commit: nothing in the library waits for a test.

usage: spark-submit ... tests/barrier_run.py BARRIER_DIR NAME PEERS <rebalance flags>
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from spark_assign.cli.rebalance import main
from spark_assign.storage.spark_delta import SparkDeltaStore


def hold_generations_commits(barrier: Path, name: str, peers: int) -> None:
    """Hold each ``generations`` conditional commit until ``peers`` runs have reached theirs."""
    commit = SparkDeltaStore.append_new

    def at_barrier(self, df, keys, **kwargs):
        if self.location.rstrip("/").endswith("generations"):
            (barrier / name).write_text("ready")
            deadline = time.monotonic() + 300
            while len(list(barrier.iterdir())) < peers and time.monotonic() < deadline:
                time.sleep(0.02)
        return commit(self, df, keys, **kwargs)

    SparkDeltaStore.append_new = at_barrier  # type: ignore[method-assign]


if __name__ == "__main__":
    folder, run_name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    folder.mkdir(parents=True, exist_ok=True)
    hold_generations_commits(folder, run_name, count)
    try:
        code = main(sys.argv[4:])
    finally:  # a run that ends before its generations commit holds no one up
        (folder / run_name).write_text("done")
    sys.exit(code)
