"""Issue 29, item 5: the bisection search of the max load under an SLO (``--llm-sweep`` with a
stated ``--llm-sweep-tolerance``) finds the simulator's analytic knee within its tolerance, in
closed loop (concurrency) and open loop (rate). The open-loop search starts past saturation:
the over-saturation guard ends that point early (in flight and latency grow without bound),
says so, and drains its backlog, so that the next points are measured from an empty queue and
the search still lands on the knee.

The simulator and SLO are those of tests/e2e/test_studies.py (its docstring derives the knees):
N* = 21 users; rate* = 73.0 req/s; beyond 1 / ((n - 1) s) = 111 req/s the running count (in
flight) grows without bound.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_studies import CLOSED_KNEE, KNEE_SIM, OPEN_KNEE, SLO
from tests.helpers import read_summary, run_locust

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # knees found from measured latencies: run alone (tests/sharding.py)

SATURATION_RATE = 1 / (9 * 0.001)  # 111 req/s: (n - 1) s = 9 ms per request of batch growth


def _search(sim_factory, tmp_path, *args: str) -> tuple[dict, str]:
    sim = sim_factory(*KNEE_SIM)
    report = tmp_path / "r"
    proc = run_locust(
        "vllm.py",
        "--host",
        sim.url,
        "--llm-slo",
        SLO,
        "--llm-seed",
        "1",
        "--llm-prometheus-port",
        "0",
        *args,
        report=report,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_summary(report)["sweep"], proc.stdout


def _points(sw: dict, key: str) -> list[tuple]:
    return [(p[key], p["passed"], p["reason"], p["requests"]) for p in sw["points"]]


def test_closed_loop_search_finds_the_knee_within_one_user(sim_factory, tmp_path) -> None:
    # 12, 24 then the bracket's middles 18, 21, 22: 5 points (6 when 21 fails: 19, 20); 7 for slack, each
    # of 3 s (2.9 s: settle 0.6, measurement 1.4, tail ~0.7; the shape ticks once a second)
    sw, stdout = _search(
        sim_factory,
        tmp_path,
        "-t",
        "23s",
        "--llm-sweep",
        "concurrency",
        "--llm-sweep-start",
        "12",
        "--llm-sweep-points",
        "7",
        "--llm-sweep-tolerance",
        "1",
    )
    assert sw["tolerance"] == {"value": 1.0, "relative": False, "text": "1 user"}
    assert sw["converged"] is True and sw["stopped"] == "converged", _points(sw, "concurrency")
    lo, hi = sw["bracket"]
    assert hi - lo <= 1 and sw["knee"]["concurrency"] == lo
    assert abs(lo - CLOSED_KNEE) <= 1, _points(sw, "concurrency")  # within the stated tolerance
    assert all(p["guard"]["signal"] == "ttft" for p in sw["points"])
    assert f"max load under the SLOs: {lo:g} users (within +-1 user: {hi:g} failed)" in stdout


def test_open_loop_search_finds_the_knee_within_five_percent(sim_factory, tmp_path) -> None:
    # 150, 75, then the bracket's middles to within 5%: 7 points, each measured 1.9 s (a shorter window
    # leaves the guard too few requests to see 150 req/s saturate); a settle of 0.2 s (the running
    # count is steady within one E2E, 0.3 s) and the tail make each point 3 s (the shape ticks once a second)
    sw, stdout = _search(
        sim_factory,
        tmp_path,
        "-t",
        "40s",
        "--llm-sweep",
        "rate",
        "--llm-arrival",
        "constant",
        "--llm-sweep-start",
        "150",
        "--llm-sweep-points",
        "10",
        "--llm-sweep-tolerance",
        "5%",
        "--llm-settle",
        "0.2s",
    )
    assert sw["tolerance"] == {"value": 0.05, "relative": True, "text": "5%"}
    assert sw["converged"] is True, _points(sw, "rate")
    lo, hi = sw["bracket"]
    assert hi - lo <= 0.05 * lo + 1e-9 and sw["knee"]["rate"] == lo
    assert abs(lo - OPEN_KNEE) <= 0.05 * OPEN_KNEE, _points(sw, "rate")  # within the stated tolerance
    # 150 req/s is past saturation: in flight and the latency grew, the guard ended the point
    # early, said so, and drained it; no point below the knee was ended by the guard
    first = sw["points"][0]
    assert first["rate"] == 150 > SATURATION_RATE
    g = first["guard"]
    assert g["ended_early"] is True and first["reason"] == "over-saturated", g
    assert g["in_flight_growth_per_s"] > 0.2 * (150 - SATURATION_RATE)
    assert g.get("not_returning") or g["latency_ratio"] >= 1.2
    assert g["drained"] is True and 0 < g["drain_s"] < 15
    assert first["measured_s"] < sw["point_s"] - sw["settle_s"] and "requests in flight grew" in first["note"]
    assert not any(p["guard"]["ended_early"] for p in sw["points"][1:]), _points(sw, "rate")
    assert all(p["passed"] for p in sw["points"] if p["rate"] < 0.9 * OPEN_KNEE), _points(sw, "rate")
    assert "fail: over-saturated (latency from the schedule grew without bound" in stdout
    assert f"max load under the SLOs: {lo:g} req/s (within +-5%: {hi:g} failed)" in stdout
