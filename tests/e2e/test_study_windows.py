"""Issue 29, item 1: every stage measured on the same rule, the last one included.

The simulator's capacity model gives each stage's throughput exactly (docs/simulator.md, "The
analytic limit"): with defaults TTFT 50 ms, chunk gap 10 ms, slope 1 ms per running stream and 64
output tokens, N closed-loop users run N streams and one request takes
S(N) = 50 + 63 (10 + (N - 1)) ms, so the throughput is N / S(N). Before the fix the last stage
lost the requests still running at the stop while its window counted their time (-16%).
"""

from __future__ import annotations

import pytest

from tests.helpers import read_summary, run_locust

pytestmark = pytest.mark.slow

SIM = ("--itl-slope-ms", "1", "--output-tokens", "64", "--seed", "1")


def service_s(n: int, ttft_ms: float = 50.0, itl_ms: float = 10.0, slope_ms: float = 1.0, tokens: int = 64) -> float:
    """S(N): one request's E2E with N streams running (the simulator's analytic model)."""
    return (ttft_ms + (tokens - 1) * (itl_ms + slope_ms * (n - 1))) / 1000.0


def test_every_step_within_5_percent_of_analytic_the_last_included(sim_factory, tmp_path) -> None:
    sim = sim_factory(*SIM)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "--llm-steps", "2:8:2:10s",
                      "--llm-prometheus-port", "0", report=report, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(report)["stages"]
    assert [st["users"] for st in stages] == [2, 4, 6, 8]
    got = {st["users"]: (st["requests_per_s"], st["users"] / service_s(st["users"])) for st in stages}
    for n, (measured, analytic) in got.items():
        assert measured == pytest.approx(analytic, rel=0.05), (n, got)
    last = stages[-1]
    assert last["excluded_tail"] > 0  # the load stayed on past the plan: what started then is not measured
    assert last["measured_s"] == pytest.approx(10 - last["settle_s"], abs=0.05)


def test_open_loop_rate_steps_each_within_5_percent_of_the_asked_rate(sim_factory, tmp_path) -> None:
    sim = sim_factory(*SIM)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "--llm-steps", "4:12:4:6s", "--llm-arrival", "constant",
                      "--llm-seed", "1", "--llm-prometheus-port", "0", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(report)["stages"]
    assert [st["rate"] for st in stages] == [4, 8, 12]
    for st in stages:
        assert st["requests_per_s"] == pytest.approx(st["rate"], rel=0.05), [(s["rate"], s["requests_per_s"])
                                                                           for s in stages]
