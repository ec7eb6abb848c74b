"""``spark-assign capture``, runnable from a checkout without installing:

    python pipelines/capture.py --help
    spark-submit pipelines/capture.py ...

It runs the installed package when there is one, else the checkout's. The job itself is :mod:`spark_assign.cli.capture`.
"""

import importlib.util
import os
import sys

if importlib.util.find_spec("spark_assign") is None:  # a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_assign.cli.capture import main

if __name__ == "__main__":
    sys.exit(main())
