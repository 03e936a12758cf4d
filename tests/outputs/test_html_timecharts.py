"""outputs/html_timecharts.py: the charts chosen by the load type (open loop, stage marks)."""

from __future__ import annotations

from llm_users.outputs.html_report import render
from llm_users.outputs.html_timecharts import stage_marks, with_target
from tests.outputs.run_summary import rows as _rows
from tests.outputs.run_summary import summary as _summary


def test_open_loop_charts_and_stage_marks() -> None:
    rows = [{**r, "users": 1, "offered_rps": 20, "sent_rps": 19, "in_flight": 2.5, "schedule_lag_mean_ms": 1.0,
             "schedule_lag_max_ms": 3.0} for r in _rows()]
    s = _summary()
    s["setup"]["load_plan"] = {"text": "open loop: 20 req/s, poisson arrivals", "profiles": {"open_loop": {"rate": 20}}}
    page = render(s, rows)
    for title in ("Arrival rate: offered vs achieved", "In-flight requests over time", "Schedule lag over time"):
        assert title in page
    assert "active users" not in page and "Requests over time" not in page
    assert [r["target_rps"] for r in with_target(rows, s)] == [20] * 10
    stages = {"stages": [{"rate": 5, "start": 1000.0, "end": 1004.0}, {"rate": 10, "start": 1004.0, "end": 1010.0}]}
    assert stage_marks(stages) == [1004.0]
    assert [r["target_rps"] for r in with_target(rows, stages)] == [5] * 4 + [10] * 6
