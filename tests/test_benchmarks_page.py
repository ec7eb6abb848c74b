"""BENCHMARKS.md is generated from benchmarks/results/*.json (benchmarks/collect.py): the page in
the tree is what its results give, and every target reads a cell that exists."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import collect  # noqa: E402


def test_the_page_is_generated_from_the_results():
    targets = json.loads((BENCHMARKS / "targets.json").read_text())
    assert collect.PAGE.read_text() == collect.render(collect.load_results(), targets), (
        "BENCHMARKS.md differs from its results: run python benchmarks/collect.py")


@pytest.mark.parametrize("target", json.loads((BENCHMARKS / "targets.json").read_text()), ids=lambda t: t["target"])
def test_each_target_reads_a_measured_cell(target):
    row = collect.target_row(target, collect.load_results())
    assert row[2] != "not measured", f"{target['area']}: no row {target['row']} with column {target['column']!r}"


def test_a_target_is_met_by_its_bound():
    results = {"a": {"header": ["case", "seconds"], "rows": [["x", "1.53 s"], ["y", "12.0 s"]],
                     "run_at": "2026-12-05 23:00 UTC"}}
    fast = {"target": "x under 2 s", "issue": 1, "area": "a", "row": {"case": "x"}, "column": "seconds", "at_most": 2}
    slow = {**fast, "target": "y under 2 s", "row": {"case": "y"}}
    missing = {**fast, "row": {"case": "z"}}
    assert collect.target_row(fast, results)[3] == "yes"
    assert collect.target_row(slow, results)[3] == "no"
    assert collect.target_row(missing, results)[2:] == ["not measured", "no"]
