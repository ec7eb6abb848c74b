"""The README's quick start: the sample jobs one after the other in one Spark session.

    python pipelines/quickstart.py          # from the checkout's root

runs the same jobs, with the same outputs under ``out/``, as

    python pipelines/rebalance.py --config conf/sample.yaml
    python pipelines/rebalance.py --config conf/sample.yaml --members data/sample/members-next.jsonl
    python pipelines/simulate.py --config conf/scenario.yaml

in one process, so Spark starts once and its JVM warms up once: a new JVM runs Spark's
own code slowly until its JIT has compiled it. As three processes the jobs took about
200 s on 2 cores; in one, about 150 s (BENCHMARKS.md). It stops at the first job that
fails and exits with that job's code. The jobs share the session the first one opens (the
rebalance's, with ``conf/spark-local.conf``'s settings).
"""

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

if importlib.util.find_spec("spark_assign") is None:  # a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_assign.cli import JOBS

#: (job, argv) in order: the sample rebalance, again from a membership export whose
#: ownership comes from the history, then the scenario and its what-if variants
QUICKSTART = (
    ("rebalance", ["--config", "conf/sample.yaml"]),
    ("rebalance", ["--config", "conf/sample.yaml", "--members", "data/sample/members-next.jsonl"]),
    ("simulate", ["--config", "conf/scenario.yaml"]),
)


def main(jobs: Sequence[tuple[str, list[str]]] = QUICKSTART) -> int:
    """Run ``jobs`` (names of :data:`spark_assign.cli.JOBS`, each with its flags) in order
    in this process; the first non-zero exit code, else 0."""
    for job, argv in jobs:
        module = importlib.import_module(JOBS[job][0])
        print(f"== spark-assign {job} {' '.join(argv)}", flush=True)
        code = module.main(list(argv))
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
