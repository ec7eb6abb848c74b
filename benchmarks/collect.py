"""Assemble BENCHMARKS.md from benchmarks/results/*.md (one section per benchmark script)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["oracle", "capture", "small", "small_session", "fixed_floor", "floors", "interpreted_tests", "rack_small_call", "broadcast_jobs", "joins_of_joins", "round_trips", "small_call_aqe", "limited_reads", "python_sockets", "python_sockets_found", "recording", "recording_small_call", "small_check", "check_small_call", "connect_one_jvm", "small_call_result", "new_jvm_tests", "driver_time", "kafka_tests", "pairing_stops", "sticky_rounds", "plans_as_text", "small_inputs", "small_shuffles", "small_validation", "interpreted", "one_session", "jvm_profile", "small_call_stores", "simulate", "simulate_sticky_1000", "replay_shuffles", "eager_revocations", "simulate_1000_step", "simulate_cooperative-sticky_1000", "simulate_profile", "fixed_cost", "replay_step", "rebalance_round", "small_calls", "one_partition", "pipeline", "range_roundrobin", "sticky", "uniform", "sticky_general", "driver_memory", "lag_aware", "targets_history"]

#: the introduction and the targets table (edited by hand), then each results file in ORDER
INTRO = HERE / "intro.md"


def main() -> None:
    parts = [INTRO.read_text()]
    found = {p.stem: p for p in (HERE / "results").glob("*.md")}
    for name in ORDER + sorted(set(found) - set(ORDER)):
        if name in found:
            parts.append(found[name].read_text())
    (HERE.parent / "BENCHMARKS.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
