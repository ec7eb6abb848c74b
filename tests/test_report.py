"""spark-assign report (pipelines/report.py): the HTML report of a real history, charts embedded."""

import base64
import re

import pytest
from test_analytics_sql import build_history

from spark_assign.cli.report import write_report


@pytest.mark.connect
def test_report_is_self_contained_with_charts(spark, tmp_path):
    history = build_history(spark, tmp_path / "history")
    what_if = spark.createDataFrame(
        [("range", "g", 3, 3, 2, 8, 0, 10.0, 1, 100, 80.0), ("coop", "g", 3, 4, 1, 1, 0, 20.0, 1, 100, 80.0)],
        "variant string, group_id string, rebalances long, rounds long, partitions_moved long, revoked long, "
        "lost long, unassigned_partition_seconds double, max_min_partitions long, max_member_lag long, "
        "mean_member_lag double")
    out = write_report(history, tmp_path / "report.html", what_if=what_if, title="test report",
                       variants=[{"name": "range"}, {"name": "coop", "protocol_rule": "dynamic",
                                                     "scheduled_rebalance_max_delay_ms": 30000}])
    text = out.read_text()
    # what the variants follow that is not the consumer's own behaviour, labelled
    assert re.findall(r'<p class="note">(coop: [^<]+)</p>', text) == [
        "coop: KIP-726&#x27;s dynamic protocol rule, a proposal that Kafka&#x27;s Java client does not implement",
        "coop: the deferred resolution of incremental cooperative rebalancing (Kafka Connect&#x27;s "
        "scheduled.rebalance.max.delay.ms = 30 s), not a consumer setting"]
    assert "<title>test report</title>" in text and "What-if comparison" in text
    assert "src=\"http" not in text and "<script" not in text  # nothing fetched from outside
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    # partitions per member, moves/unassigned, lag per member, what-if
    assert len(pngs) == 4
    for b64 in pngs:
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    alts = re.findall(r'<img alt="([^"]+)"', text)
    assert alts == ["g partitions per member", "g moves and unassigned", "g lag per member", "what-if comparison"]
    # the generations table lists the five generations with their unassigned counts
    assert text.count("<details>") == 1 and "cooperative-sticky" in text
