"""Kafka's own assignors as the suite's oracle: ``tests/oracle/KafkaAssignors.java``, compiled
against the cached Kafka jars (``jars/fetch.py``) and run in a JVM of its own, so Kafka's
jars never meet Spark's.

>>> run([{"id": "g", "assignor": "range", "topics": {"t": {"count": 2}},
...       "members": [{"id": "a", "topics": ["t"]}, {"id": "b", "topics": ["t"]}]}])  # doctest: +SKIP
{'g': {'a': [('t', 0)], 'b': [('t', 1)]}}
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from kafka_broker import KAFKA_VERSION as KAFKA_VERSION
from kafka_broker import ROOT, cache_dir, classpath

SOURCE = Path(__file__).resolve().parent / "oracle" / "KafkaAssignors.java"
#: the assignors the oracle runs: the client's, and the broker's (KIP-848)
CLIENT = ("range", "roundrobin", "sticky", "cooperative-sticky")
SERVER = ("uniform", "server-range")


class OracleError(RuntimeError):
    pass


def compiled(source: Path) -> Path:
    """``source`` compiled against the cached Kafka jars, in the jar cache under the source's
    hash (compiled once): the folder of its classes."""
    digest = hashlib.sha256(source.read_bytes() + KAFKA_VERSION.encode()).hexdigest()[:16]
    out = cache_dir() / "java" / f"{source.stem}-{digest}"
    if not (out / f"{source.stem}.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", classpath("kafka"), str(source)],
                              capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise OracleError(f"compiling {source.name} failed:\n{done.stdout}{done.stderr}")
    return out


def _answers(cases: list[dict]) -> list[dict]:
    """The oracle's raw answers to ``cases``, one dict per case."""
    for c in cases:
        c["topics"] = {t: (v if isinstance(v, dict) else {"count": v}) for t, v in c["topics"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        answer = Path(tmp) / "answer.json"
        done = subprocess.run(["java", "-Xmx1g", "-cp", os.pathsep.join([str(compiled(SOURCE)), classpath("kafka")]),
                               "KafkaAssignors", str(answer)], input=json.dumps({"cases": cases}),
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise OracleError(f"the oracle failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        return json.loads(answer.read_text())


def run(cases: list[dict], *, refused: dict[str, str] | None = None) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """Each case's assignment by Kafka's assignor: ``{case id: {member id: [(topic, partition)]}}``.
    A case Kafka's assignor refused (an exception) raises OracleError naming it and Kafka's
    message, or, given ``refused``, is left out and put there (case id -> Kafka's message)."""
    out: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for r in _answers(cases):
        if "error" in r and refused is not None:
            refused[r["id"]] = r["error"]
        elif "error" in r:
            raise OracleError(f"Kafka's assignor refused case {r['id']}: {r['error']}")
        else:
            out[r["id"]] = {m: [(t, p) for t, p in tps] for m, tps in r["assignment"].items()}
    return out


def run_broker(cases: list[dict]) -> dict[str, dict]:
    """The broker's assignors (``uniform``, ``server-range``) on ``cases`` as the coordinator
    calls them: per case id, ``assignment`` (as :func:`run`), ``held`` (each member's target
    in the order the broker holds it: the next generation's ``owned``) and ``describe_order``
    (the members in the coordinator's member map order, as ConsumerGroupDescribe lists them;
    a case's member marked ``"joining": true`` is not in it yet)."""
    out: dict[str, dict] = {}
    for r in _answers(cases):
        if "error" in r:
            raise OracleError(f"Kafka's assignor refused case {r['id']}: {r['error']}")
        out[r["id"]] = {"assignment": {m: [(t, p) for t, p in tps] for m, tps in r["assignment"].items()},
                        "held": {m: [(t, p) for t, p in tps] for m, tps in r["broker_order"].items()},
                        "describe_order": list(r["describe_order"])}
    return out
