"""Issue 28: the report of a --llm-steps run, a --llm-sweep run and an open-loop run states its
load plan in the header, and the open-loop report draws in-flight requests, the arrival rate and
the schedule lag (not Locust's idle users); the open-loop columns of timeseries.csv agree with
requests.jsonl. Three short runs (a few seconds each) against the embedded simulator."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.helpers import read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

SIM = ("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8", "--seed", "1")
RUNS = {
    "steps": (["--llm-steps", "2:4:2:2s"], "2 stages: 2 users for 2 s, 4 users for 2 s"),
    "sweep": (["--llm-sweep", "concurrency", "--llm-sweep-start", "2", "--llm-sweep-points", "2",
               "--llm-slo", "tpot=50ms", "-t", "6s"],
              "SLO sweep of concurrency: from 2 users, at most 2 points, target 95% of requests meeting every SLO"),
    "open": (["--llm-rate", "20", "--llm-seed", "3", "-t", "4s"], "open loop: 20 req/s, poisson arrivals (seed 3)"),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    from llm_users.sim.launcher import start_simulator

    out = {}
    with start_simulator(list(SIM)) as sim:
        for name, (args, _) in RUNS.items():
            report = tmp_path_factory.mktemp(name)
            proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "--llm-prometheus-port", "0", "--stop-timeout", "5",
                              *args, report=report, timeout=90)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
            out[name] = report
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_the_header_states_the_load_plan(reports: dict[str, Path], name: str) -> None:
    text = (reports[name] / "report.html").read_text()
    plan = RUNS[name][1]
    header = text[text.index("<table class='first'>"):text.index("Over time")]
    assert f"<th>Load plan</th><td>{plan}" in header
    assert "1 users, spawned at 1/s" not in text
    assert read_summary(reports[name])["setup"]["load_plan"]["text"].startswith(plan)


def test_open_loop_report_has_in_flight_arrivals_and_schedule_lag(reports: dict[str, Path]) -> None:
    report = reports["open"]
    text = (report / "report.html").read_text()
    for title in ("In-flight requests over time", "Schedule lag over time", "Arrival rate: offered vs achieved"):
        assert title in text, title
    assert "active users" not in text  # Locust's one idle user says nothing in open loop
    rows = list(csv.DictReader((report / "timeseries.csv").open()))
    recs = [r for r in read_records(report) if r["scheduled_ns"] is not None and r["t0_ns"]]
    assert len(recs) > 40  # 20 req/s for about 3.5 s
    assert sum(int(r["sent_rps"] or 0) for r in rows) == len(recs)
    assert sum(int(r["offered_rps"] or 0) for r in rows) == len(recs)
    # in flight: request-seconds per second, so their sum is every request's E2E (Little's law, exactly)
    busy = sum(float(r["in_flight"] or 0) for r in rows)
    assert busy == pytest.approx(sum(r["e2e_ns"] for r in recs) / 1e9, rel=0.01, abs=0.01)
    lag_max = max(float(r["schedule_lag_max_ms"] or 0) for r in rows)
    assert lag_max == pytest.approx(max(r["t0_ns"] - r["scheduled_ns"] for r in recs) / 1e6, abs=0.01)


def test_steps_report_marks_the_stages(reports: dict[str, Path]) -> None:
    s = read_summary(reports["steps"])
    assert [st["users"] for st in s["stages"]] == [2, 4]
    assert "Requests over time vs active users" in (reports["steps"] / "report.html").read_text()
