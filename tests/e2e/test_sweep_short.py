"""Issue 53 item 2: a short SLO sweep gave a false verdict. ``-t 60s --llm-sweep concurrency
--llm-slo ttft=500ms,tpot=25ms`` stopped with "no load met the SLOs; even the lowest load misses
the SLOs" while its only point (1 user, 2 requests) met both SLOs, and the knee's explanation
said "TTFT p95 passes 500 ms from 1 u (101 ms)".

The same shape, shorter: a real headless run, ``-t 12s`` with the default 12 points, against
requests of about 3 s (TTFT 100 ms, 150 tokens 20 ms apart: every request meets both SLOs).
Twelve points cannot fit 10 s of budget: the plan is resized at start to the 4 that do, in one
console line. The first point (1 user) ends its window with no measured request back; it is
measured longer once, still holds fewer than 5, and the budget is spent: not enough data, never
a miss, in the console and in summary.json.
"""

from __future__ import annotations

import pytest

from tests.helpers import read_summary, run_locust

pytestmark = pytest.mark.slow

SIM = ("--ttft-ms", "100", "--itl-ms", "20", "--output-tokens", "150", "--seed", "1")


def test_a_sweep_too_short_to_judge_says_not_enough_data_and_what_fits(sim_factory, tmp_path) -> None:
    sim = sim_factory(*SIM)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-t", "12s", "--llm-sweep", "concurrency",
                      "--llm-slo", "ttft=500ms,tpot=25ms", "--llm-output-tokens", "150", "--llm-prometheus-port", "0",
                      report=report, timeout=90)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    sw = read_summary(report)["sweep"]
    # the plan: 12 points of 0.8 s cannot hold a settle window, 1 s measured and a tail; 4 of 2.5 s can
    note = ("SLO sweep: -t 12s holds 4 points of 2.5 s (a settle window, at least 1 s measured and its "
            "requests' tail), not the 12 asked; sweeping 4 points (for more, lengthen -t)")
    assert sw["plan_note"] == note and sw["points_planned"] == 4 and sw["point_s"] == 2.5
    assert proc.stderr.count(note) == 1, proc.stderr[-3000:]
    # the only point: every request it measured met both SLOs, too few to judge
    first = sw["points"][0]
    n = first["requests"]
    assert first["concurrency"] == 1 and n < 5 and first["verdict"] == "not enough data", first
    assert first["passed"] is None and first["reason"] == f"not enough data: {n} request{'s' * (n != 1)} measured, 5 needed"
    assert first["lengthened_s"] > 0 and first["note"].startswith("lengthened by ")
    if n:
        assert first["slo"]["share_meeting_all"] == 1.0 and first["ttft"]["p95"] < 500
    said = f"not enough data at 1 user ({n} request{'s' * (n != 1)} measured, 5 needed): lengthen -t or use fewer --llm-sweep-points"
    assert sw["knee"] is None and sw["verdict"] == said and sw["bracket"] == [None, None]
    assert sw["max_load"] == "max load under the SLOs: not known (not enough data at 1 user)"
    assert f"SLO sweep (concurrency): {said}; stopped: {sw['stopped']}" in proc.stdout, proc.stdout[-3000:]
    assert sw["max_load"] in proc.stdout
    for text in (proc.stdout, str(sw)):
        assert "misses" not in text and "no load met" not in text and " passes 500 ms from" not in text
