"""A normal (non-editable) install: build the wheel, install it into a fresh virtual
environment, and run the jobs from another directory, as a `pip install spark-assign`
user would (the SQL queries come from the wheel, not from the checkout). Its Spark runs take
tests/short_run.py's settings (C1 only, interpreted plans): what is tested here is the packaging."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from short_run import submit_args

ROOT = Path(__file__).resolve().parents[1]


def run(cmd, cwd, **kw):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=900, **kw)


def clean_env() -> dict[str, str]:
    """The environment of a new user's shell (none of the test run's PySpark or path settings),
    except that a Spark run gets tests/short_run.py's settings (C1 only, interpreted plans: what
    this module tests is the packaging)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HOME", "PYTHONPATH"))}
    return {**env, "PYSPARK_SUBMIT_ARGS": submit_args()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, and a fresh virtual environment with it installed.

    The wheel's dependencies (PySpark's 400 MB among them) are not installed again: the new
    environment reads them from the test environment's site-packages (a ``.pth`` line, which
    does not carry over that environment's editable install of the checkout); ``pip check``
    proves that they satisfy every requirement the wheel declares, and the report extra's
    matplotlib imports (that ``spark_assign`` comes from the wheel, the pipeline test checks)."""
    work = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", ROOT], cwd=work)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((work / "dist").glob("spark_assign-*.whl"))
    venv = work / "venv"
    made = run([sys.executable, "-m", "venv", venv], cwd=work)
    assert made.returncode == 0, made.stderr
    site = run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=work)
    assert site.returncode == 0, site.stderr
    dependencies = sysconfig.get_path("purelib")  # the test environment's site-packages
    (Path(site.stdout.strip()) / "test_environment.pth").write_text(dependencies + "\n")
    pip = run([venv / "bin" / "pip", "install", "-q", "--no-deps", wheel], cwd=work)
    assert pip.returncode == 0, pip.stderr[-2000:]
    checked = run([venv / "bin" / "pip", "check"], cwd=work)
    assert checked.returncode == 0, checked.stdout[-2000:]
    extra = run([venv / "bin" / "python", "-c", "import matplotlib"], cwd=work)  # the report extra's dependency
    assert extra.returncode == 0, extra.stderr[-2000:]
    return wheel, venv, work


def test_the_wheel_carries_the_sql_and_the_console_script(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    queries = {p.name for p in (ROOT / "sql" / "analytics").glob("*.sql")}
    assert queries and {f"spark_assign/sql/analytics/{q}" for q in queries} <= names
    schemas = {p.name for p in (ROOT / "spark_assign" / "kafka" / "schemas").glob("*.json")}  # KIP-848's request
    assert schemas and {f"spark_assign/kafka/schemas/{s}" for s in schemas} <= names
    assert "spark-assign = spark_assign.cli:main" in entry_points


def test_console_script_help_lists_jobs_and_config_keys(installed):
    _, venv, work = installed
    jobs = run([venv / "bin" / "spark-assign", "--help"], cwd=work)
    assert jobs.returncode == 0 and all(j in jobs.stdout for j in ("rebalance", "simulate", "report"))
    helped = run([venv / "bin" / "spark-assign", "rebalance", "--help"], cwd=work)
    assert helped.returncode == 0 and "config keys" in helped.stdout
    assert all(k in helped.stdout for k in ("owned_from", "protocol_rule", "max_rounds", "spark_conf"))
    sim = run([venv / "bin" / "spark-assign", "simulate", "--help"], cwd=work)
    assert all(k in sim.stdout for k in ("events", "what_if", "heartbeat_interval_ms"))


def test_pipelines_run_from_another_directory_on_the_installed_wheel(installed, tmp_path):
    _, venv, _ = installed
    python = venv / "bin" / "python"
    # pipelines/rebalance.py from the checkout runs the installed package (it is importable); range
    # for every group: the assignors themselves are the in-process tests' (tests/test_pipeline.py).
    # It runs beside the scenario below (two new JVMs: 34 s together, 43 s one after the other)
    out_log, err_log = tmp_path / "rebalance.out", tmp_path / "rebalance.err"  # files: a full pipe would block it
    with open(out_log, "w") as out, open(err_log, "w") as err:
        rebalancing = subprocess.Popen(
            [str(c) for c in (python, ROOT / "pipelines" / "rebalance.py", "--config", ROOT / "conf" / "sample.yaml",
                              "--strategy", "range", "--history", tmp_path / "history")],
            cwd=tmp_path, env=clean_env(), stdout=out, stderr=err, text=True)
    try:
        where = run([python, "-c", "import spark_assign; print(spark_assign.__file__)"], cwd=tmp_path)
        assert str(venv) in where.stdout
        # a three-event scenario through the console script: history, then the report (packaged SQL)
        events = (ROOT / "data" / "scenario" / "events.csv").read_text().splitlines()[:4]
        (tmp_path / "events.csv").write_text("\n".join(events) + "\n")
        (tmp_path / "partitions.csv").write_text("topic,partitions\norders,12\npayments,6\n")
        (tmp_path / "scenario.yaml").write_text("events: events.csv\npartitions: partitions.csv\nout: sim\n"
                                                "strategy: range\n")
        simulated = run([venv / "bin" / "spark-assign", "simulate", "--config", "scenario.yaml"], cwd=tmp_path)
        assert simulated.returncode == 0, simulated.stderr[-3000:]
        rebalancing.wait(timeout=900)
    finally:
        rebalancing.kill()  # a no-op once it has ended
        rebalancing.wait()
    assert rebalancing.returncode == 0, err_log.read_text()[-3000:]
    assert "rebalanced 3 group(s)" in out_log.read_text()
    report = (tmp_path / "sim" / "report.html").read_text()
    assert "<img" in report and "orders" in report
    # a bad config: one line on stderr, exit code 2
    (tmp_path / "bad.yaml").write_text("events: events.csv\npartitions: partitions.csv\nstrategy: rnage\n")
    bad = run([venv / "bin" / "spark-assign", "simulate", "--config", "bad.yaml"], cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert bad.stderr.strip().splitlines()[-1].startswith("simulate failed: UnknownStrategyError: unknown strategy")
