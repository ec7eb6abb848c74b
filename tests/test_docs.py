"""The Python blocks of docs/*.md run as tests, in order, one namespace per page, as a reader
pastes them: ``spark`` is the suite's session and ``bootstrap`` the test broker's address
(docs/kafka.md's examples run against Apache Kafka)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if "```python" in p.read_text())


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(request, spark, page):
    namespace = {"spark": spark}
    if "bootstrap" in (DOCS / page).read_text():
        namespace["bootstrap"] = request.getfixturevalue("broker").bootstrap
    for k, block in enumerate(blocks(page)):
        exec(compile(block, f"docs/{page}[python block {k}]", "exec"), namespace)


def test_the_pages_have_examples():
    assert "kafka.md" in PAGES and len(blocks("kafka.md")) >= 4
