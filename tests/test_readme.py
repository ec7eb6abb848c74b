"""The README's examples run as tests, and its test command is the one CI runs."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def bash_commands():
    return [c.strip() for c in re.findall(r"```bash\n(.*?)```", README, flags=re.S)]


def test_readme_has_exactly_two_commands():
    cmds = bash_commands()
    assert len(cmds) == 2, cmds
    assert any("pytest" in c for c in cmds) and any("pipelines/" in c for c in cmds)


def test_ci_runs_the_readme_test_command():
    test_cmd = next(c for c in bash_commands() if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci


@pytest.fixture(scope="module")
def readme_session(spark):
    """The README's Python blocks run in order in one namespace, as a reader pastes them,
    each once: ``ran`` counts the blocks run, ``failed`` names the first that raised."""
    return {"namespace": {"spark": spark}, "ran": 0, "failed": None}


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(readme_session, index):
    blocks = python_blocks()
    while readme_session["ran"] <= index:  # later examples build on earlier ones
        k = readme_session["ran"]
        readme_session["ran"] = k + 1
        if readme_session["failed"] is not None:
            pytest.fail(f"README python block {readme_session['failed']} failed, and block {k} builds on it")
        try:
            exec(compile(blocks[k], f"README.md[python block {k}]", "exec"), readme_session["namespace"])
        except BaseException:
            readme_session["failed"] = k
            raise
