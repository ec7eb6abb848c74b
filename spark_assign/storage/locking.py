"""One writer at a time per embedded history: a lock file around each record's commits.

Delta appends do not conflict with each other, so two pipelines recording the same
generation of a group into one history at the same moment would both land it. The
``spark-delta`` backend commits its ``generations`` conditionally
(:meth:`~spark_assign.storage.spark_delta.SparkDeltaStore.append_new`) and takes no lock; delta-rs,
which commits the embedded backend's files, has no such commit here, so there the
writer (:func:`spark_assign.history.commit.write_generations`) therefore holds
``<history>/_commit.lock`` from the check of which generations are already recorded to
its last commit: the second writer waits, then finds the generation recorded. The
same assignment is then a no-op (idempotence); a different one fails with
:class:`~spark_assign.errors.HistoryError` and records nothing, and re-running the
pipeline (which numbers its generations from the history) records the next generation.

The lock is an exclusively created file, atomic on local and network file systems.
On object stores (``s3://``, ``abfss://``: no exclusive create) no lock is taken, and
concurrent writers into one history there must be scheduled apart. A lock left by a
killed writer is broken: at once when its writer ran on this host and its process is
gone, otherwise once it is older than :data:`STALE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

from ..errors import HistoryError

LOCK_NAME = "_commit.lock"
#: how long a writer waits for another's lock
WAIT_SECONDS = float(os.environ.get("SPARK_ASSIGN_LOCK_WAIT_SECONDS", "300"))
#: a lock this old is left over from a killed writer
STALE_SECONDS = 1800.0


@contextlib.contextmanager
def history_lock(root: str | None, *, wait_seconds: float | None = None) -> Iterator[None]:
    """Hold the history's commit lock (``root``: the history's local folder; None: no
    lock). Raises HistoryError, a retryable one, after ``wait_seconds``.

    >>> with history_lock("out/history"):  # doctest: +SKIP
    ...     ...
    """
    if root is None:
        yield
        return
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, LOCK_NAME)
    deadline = time.monotonic() + (WAIT_SECONDS if wait_seconds is None else wait_seconds)
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            break
        except FileExistsError:
            try:
                if _abandoned(path):
                    os.unlink(path)
                    continue
            except FileNotFoundError:
                continue
            if time.monotonic() > deadline:
                raise HistoryError(
                    f"another writer holds {path} (see its content): nothing was recorded; retry when it is "
                    f"done, or delete the file if no writer runs") from None
            time.sleep(0.05)
    try:
        with os.fdopen(fd, "w") as fh:  # who holds it: read by _abandoned
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, fh)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _abandoned(path: str) -> bool:
    """Whether the lock at ``path`` was left by a writer that no longer runs."""
    if time.time() - os.stat(path).st_mtime > STALE_SECONDS:
        return True
    try:
        with open(path) as fh:
            holder = json.load(fh)
        pid, host = int(holder["pid"]), holder["host"]
    except (ValueError, KeyError, TypeError, OSError):  # being written (or not ours): wait
        return False
    if host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # runs, as another user
        return False
    return False
