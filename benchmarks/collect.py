"""Assemble BENCHMARKS.md from benchmarks/results/*.md (one section per benchmark script)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["range_roundrobin", "sticky", "sticky_general", "lag_aware", "simulate"]

INTRO = """# Benchmarks

Measured with the scripts in `benchmarks/` (run one with `python benchmarks/bench_<area>.py`; each
writes `benchmarks/results/<area>.md`, and `python benchmarks/collect.py` rebuilds this file). Every
figure is one run on the machine named in its section, spark-assign and its peer (kafka-python's
assignor of the same name) timed in the same run on the same input. spark-assign times are end to
end: building the plan, running the Spark job and computing every output row (Spark's `noop` sink);
the peer's time covers its `assign` calls only, not building its input objects.
"""


def main() -> None:
    parts = [INTRO]
    found = {p.stem: p for p in (HERE / "results").glob("*.md")}
    for name in ORDER + sorted(set(found) - set(ORDER)):
        if name in found:
            parts.append(found[name].read_text())
    (HERE.parent / "BENCHMARKS.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
