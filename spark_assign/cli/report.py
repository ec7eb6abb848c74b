"""The HTML report of a recorded history: self-contained, charts as embedded PNGs.

    spark-assign report --history out/history --out out/report.html
    python pipelines/report.py --history out/history --out out/report.html   # from a checkout

Charts (matplotlib): partitions per member per generation, partitions moved
and unassigned per generation, lag per member, and the what-if comparison.
Spark aggregates first; pandas only ever sees the small per-generation /
per-member summaries.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import SparkAssignError
from ..frames import one_row
from . import failed

#: at most this many groups get their own charts; at most this many members per chart
MAX_GROUPS = 4
MAX_MEMBERS = 30

CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } .note { color: #666; font-size: 0.9em; }
"""


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _table(pdf) -> str:
    return pdf.to_html(index=False, border=0, float_format=lambda x: f"{x:,.1f}", na_rep="")


# ---------------------------------------------------------------------- aggregates (Spark)


def member_loads(history, group_id: str) -> DataFrame:
    """Partitions per member per generation of one group (small)."""
    return history.assignments(group_id).groupBy("generation", "member_id").agg(F.count("*").alias("partitions"))


def generation_summary(history, group_id: str) -> DataFrame:
    """Per generation: time, round, protocol, strategy, moved, unassigned, revoked, lost, max-min."""
    from spark_assign.simulate import run_analytics

    times = history.spark.table("generation_times").where(F.col("group_id") == group_id)
    moves = run_analytics(history, "moves_per_generation", register=False).where(F.col("group_id") == group_id)
    g = history.history(group_id).select("generation", "revoked", "lost", "max_min", "members")
    events = history.spark.table("simulation").where(F.col("group_id") == group_id).groupBy("generation").agg(
        F.max("event_kinds").alias("event_kinds"))
    return (
        times.select("generation", "round", "protocol", "strategy", "at", "unassigned")
        .join(moves.select("generation", "partitions_moved"), "generation", "left")
        .join(g, "generation", "left")
        .join(events, "generation", "left")
    )


def member_lags(history, group_id: str) -> DataFrame:
    """Lag per member in the group's latest generation (small)."""
    latest = one_row(history.history(group_id).agg(F.max("generation")))[0]
    return (
        history.assignments(group_id).where(F.col("generation") == latest)
        .groupBy("member_id").agg(F.sum(F.coalesce("lag", F.lit(0))).alias("lag"), F.count("*").alias("partitions"))
    )


# ---------------------------------------------------------------------- charts (pandas, small)


def chart_member_loads(pdf, group_id: str) -> str:
    wide = pdf.pivot_table(index="generation", columns="member_id", values="partitions", fill_value=0).sort_index()
    if wide.shape[1] > MAX_MEMBERS:
        wide = wide[wide.sum().sort_values(ascending=False).index[:MAX_MEMBERS]]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    wide.plot(kind="bar", stacked=True, ax=ax, width=0.85, colormap="tab20")
    ax.set_title(f"{group_id}: partitions per member per generation")
    ax.set_xlabel("generation")
    ax.set_ylabel("partitions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(title="member", bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=8)
    ax.tick_params(axis="x", rotation=0)
    return _png(fig)


#: event kinds as tick labels
SHORT_KINDS = {"config_change": "config", "partitions_added": "grow", "subscribe": "sub", "unsubscribe": "unsub",
               "lag_change": "lag"}


def chart_moves(pdf, group_id: str) -> str:
    pdf = pdf.sort_values("generation")
    x = range(len(pdf))
    fig, ax = plt.subplots(figsize=(12, 4.2))
    w = 0.27
    ax.bar([i - w for i in x], pdf["partitions_moved"].fillna(0), w, label="moved", color="#4c72b0")
    ax.bar(list(x), pdf["unassigned"].fillna(0), w, label="unassigned", color="#dd8452")
    ax.bar([i + w for i in x], (pdf["revoked"].fillna(0) + pdf["lost"].fillna(0)), w, label="revoked + lost", color="#937860")
    kinds = pdf["event_kinds"] if "event_kinds" in pdf else [None] * len(pdf)

    def short(k):
        return "\n".join(SHORT_KINDS.get(x, x) for x in (k or "").split(",") if x)

    protos = [p.lower() for p in pdf["protocol"].fillna("")]
    labels = [f"{int(g)}\n" + (("hand-over" if p == "consumer" else "round 2") if r and r > 1 else short(k))
              for g, r, k, p in zip(pdf["generation"], pdf["round"].fillna(1), kinds, protos)]
    # the protocol of each generation as background: the rolling upgrade shows as the switch,
    # and KIP-848 (consumer) generations in their own colour
    shades = {"cooperative": "#55a868", "consumer": "#8172b2"}
    for i, proto in zip(x, protos):
        if proto in shades:
            ax.axvspan(i - 0.5, i + 0.5, color=shades[proto], alpha=0.12, lw=0)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlim(-0.5, len(pdf) - 0.5)
    ax.set_title(f"{group_id}: partitions moved, unassigned and revoked per generation")
    ax.set_xlabel("generation / the events that triggered it")
    ax.set_ylabel("partitions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    handles, names = ax.get_legend_handles_labels()
    handles.append(Patch(color="#55a868", alpha=0.12))
    names.append("COOPERATIVE protocol")
    if "consumer" in protos:
        handles.append(Patch(color="#8172b2", alpha=0.12))
        names.append("CONSUMER protocol (KIP-848)")
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return _png(fig)


def chart_lags(pdf, group_id: str) -> str:
    pdf = pdf.sort_values("member_id").head(MAX_MEMBERS)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(pdf["member_id"], pdf["lag"], color="#55a868")
    ax.set_title(f"{group_id}: total lag per member (latest generation)")
    ax.set_ylabel("lag (messages)")
    ax.tick_params(axis="x", rotation=45)
    return _png(fig)


def chart_what_if(pdf) -> str:
    metrics = [("rebalances", "rebalances"), ("rounds", "rounds (generations)"),
               ("partitions_moved", "partitions moved"), ("unassigned_partition_seconds", "partition-seconds unassigned"),
               ("max_min_partitions", "max-min partitions per member")]
    agg = pdf.groupby("variant")[[m for m, _ in metrics]].sum()
    fig, axes = plt.subplots(1, len(metrics), figsize=(14, 3.6))
    for ax, (m, title) in zip(axes, metrics):
        ax.bar(agg.index, agg[m], color="#8172b2")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", rotation=60, labelsize=8)
        if m != "unassigned_partition_seconds":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(1.0, float(agg[m].max()) * 1.1))
    fig.suptitle("what-if: the same events under each variant")
    fig.tight_layout()
    return _png(fig)


# ---------------------------------------------------------------------- the report


def variant_notes(variants: list[dict[str, Any]] | None) -> list[str]:
    """What a what-if's variants follow that is not the consumer's own behaviour, or that their
    name may not say: one line per variant on KIP-726's proposed rule, on Connect's deferred
    resolution, or on an online migration.

    >>> variant_notes([{"name": "dynamic", "protocol_rule": "dynamic"}])
    ["dynamic: KIP-726's dynamic protocol rule, a proposal that Kafka's Java client does not implement"]
    """
    notes = []
    for v in variants or []:
        if v.get("protocol_rule") == "dynamic":
            notes.append(f"{v['name']}: KIP-726's dynamic protocol rule, a proposal that Kafka's Java client "
                         "does not implement")
        if v.get("restart_protocol") == "consumer":
            notes.append(f"{v['name']}: an online migration to KIP-848, member by member: each config_change "
                         "restarts its member on group.protocol=consumer, and the first converts the group")
        delay = v.get("scheduled_rebalance_max_delay_ms") or 0
        if delay:
            notes.append(f"{v['name']}: the deferred resolution of incremental cooperative rebalancing "
                         f"(Kafka Connect's scheduled.rebalance.max.delay.ms = {delay / 1000:g} s), not a "
                         "consumer setting")
    return notes


def write_report(history, path, *, what_if: DataFrame | None = None, title: str = "spark-assign report",
                 groups: list[str] | None = None, timing: Any = None,
                 variants: list[dict[str, Any]] | None = None) -> Path:
    """Write the HTML report of ``history`` (and a what-if table) to ``path``. ``timing``: the
    simulation's clock (:class:`~spark_assign.simulation.timing.Timing`), stated beside the
    what-if; ``variants``: the what-if's variants, those not the consumer's own behaviour labelled."""
    from spark_assign.simulate import register_analytics_views, run_analytics

    register_analytics_views(history)
    if groups is None:
        groups = [r.group_id for r in history.history().select("group_id").distinct()
                  .orderBy("group_id").limit(MAX_GROUPS).collect()]
    parts = [f"<h1>{html.escape(title)}</h1>"]
    overview = run_analytics(history, "unassigned_partition_seconds", register=False).join(
        run_analytics(history, "rounds_per_rebalance", register=False).groupBy("group_id").agg(
            F.count("*").alias("rebalances"), F.max("rounds").alias("max_rounds")), "group_id", "left")
    parts.append("<h2>Groups</h2>" + _table(overview.toPandas()))
    for g in groups:
        parts.append(f"<h2>Group {html.escape(g)}</h2>")
        loads = member_loads(history, g).toPandas()
        if len(loads):
            parts.append(_img(chart_member_loads(loads, g), f"{g} partitions per member"))
        summary = generation_summary(history, g).orderBy("generation").toPandas()
        if len(summary):
            parts.append(_img(chart_moves(summary, g), f"{g} moves and unassigned"))
            parts.append("<details><summary>generations</summary>" + _table(summary) + "</details>")
        lags: Any = member_lags(history, g).toPandas()
        if len(lags) and lags["lag"].sum() > 0:
            parts.append(_img(chart_lags(lags, g), f"{g} lag per member"))
        elif len(lags):
            parts.append('<p class="note">No lag recorded for this group.</p>')
    if what_if is not None:
        wi = what_if.toPandas()
        parts.append("<h2>What-if comparison</h2>")
        parts.append('<p class="note">partition-seconds unassigned: partitions with no active owner '
                     "(unassigned, revoked during an EAGER join phase, or held by a member that crashed or left "
                     "before the group noticed) times seconds, every variant on the same clock.</p>")
        if timing is not None:
            parts.append('<p class="note">The clock assumed (the variants\' own timing apart): '
                         + html.escape(timing.describe()).replace("\n", "<br>") + "</p>")
        for note in variant_notes(variants):
            parts.append(f'<p class="note">{html.escape(note)}</p>')
        if len(wi):
            parts.append(_img(chart_what_if(wi), "what-if comparison"))
        parts.append(_table(wi))
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)
    return path


def main(argv=None) -> int:
    """Entry point (``spark-assign report``): returns the exit code, 2 with one line on
    stderr for a :class:`~spark_assign.errors.SparkAssignError`."""
    from ..history import AssignmentHistory
    from ..session import local_session

    parser = argparse.ArgumentParser(prog="spark-assign report", description="HTML report of a recorded history")
    parser.add_argument("--history", default="out/history", help="the history folder (default out/history)")
    parser.add_argument("--out", default="out/report.html", help="the report file (default out/report.html)")
    args = parser.parse_args(argv)
    try:
        spark = local_session("spark-assign-report")
        print(write_report(AssignmentHistory(args.history, spark), args.out))
    except SparkAssignError as exc:
        return failed("report", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
