"""outputs/html_header.py: the report's first screen and the partial last second."""

from __future__ import annotations

from llm_users.outputs.html_header import complete_rows, header


def _rows(n: int, t0: int = 1000) -> list[dict]:
    return [{"time": t0 + i, "users": 4, "failures": i % 2, "output_tokens_per_s": 100.0} for i in range(n)]


def test_partial_last_second_is_left_out() -> None:
    rows = _rows(10)
    assert complete_rows(rows, {"window": {"test_stop": 1009.4}}) == rows[:-1]  # second 1009 only 0.4 s long
    assert complete_rows(rows, {"window": {"test_stop": 1010.0}}) == rows  # ended on the second: whole
    assert complete_rows(rows, {"window": {}}) == rows


def test_first_screen_says_what_ran() -> None:
    summary = {
        "host": "http://h:1", "overall": {"requests": 40, "failures": 3},
        "window": {"test_start": 1796000000.0, "test_stop": 1796000030.5, "measured_s": 29.0},
        "environment": {"options": {"locustfile": "locustfiles/vllm.py", "num_users": 8, "spawn_rate": 2.0},
                        "backends_models": [{"backend": "vllm", "model": "m1"}],
                        "server": {"model_id": "m1", "version": "0.9"}},
    }
    page = header(summary)  # an older summary (no "setup" block): the load from the options
    for text in ("2026-", "30.5", "vllm", "m1", "(version 0.9)", "locustfiles/vllm.py", "8 users, spawned at 2/s",
                 "40 measured, 3 failed"):
        assert text in page, text
    assert "<svg" not in page  # the charts over time are below, chosen by the load type


def test_outages_are_a_header_row_and_shaded_on_the_requests_chart() -> None:
    from llm_users.outputs.html_timecharts import time_charts

    outage = {"start": 1003.2, "end": 1004.7, "failures": 24, "cause": "connect_error",
              "categories": {"connect_error": 20, "connection_reset": 4}, "recovered_at": 1007.0, "recovery_s": 3.8}
    summary = {"host": "h", "overall": {"requests": 40, "failures": 24},
               "window": {"test_start": 1000.0, "test_stop": 1010.0}}
    rows = [{**r, "requests_finished": 2} for r in _rows(10)]
    plain = time_charts(summary, rows)
    assert "Outages" not in header(summary) and "outage" not in (plain[2] or "")
    summary["outages"] = [outage]
    page = header(summary)
    assert ("<th>Outages</th><td>outage at 3.2 s for 1.5 s: 24 failures (20 connect_error, 4 connection_reset); "
            "recovered 3.8 s after the first failure</td>") in page
    requests_chart = time_charts(summary, rows)[2] or ""
    assert "Requests over time" in requests_chart and "outage" in requests_chart  # the shaded span's legend
    assert "#ee3333" in requests_chart


def test_the_load_plan_says_the_users_that_ran_in_the_window() -> None:
    """Issue 53 item 1: the plan said "8 users" of a run that never had more than 5."""
    users = {"min": 3, "max": 5, "target": 8, "reached": False, "ramp_s": None, "ramp_share": 1.0, "spawn_rate": 1}
    summary = {"host": "h", "overall": {"requests": 40, "failures": 0},
               "setup": {"load_plan": {"text": "8 users, spawned at 1/s; for 5 s"}},
               "window": {"test_start": 1000.0, "test_stop": 1005.0, "measured_s": 3.6, "users": users}}
    page = header(summary)
    assert ("8 users, spawned at 1/s; for 5 s (measured at 3-5 users; the target of 8 users was never reached "
            "(raise -r or -t))") in page
    summary["window"]["users"] = {**users, "min": 2, "max": 8, "reached": True, "ramp_s": 7.0, "ramp_share": 0.4}
    assert "(measured at 2-8 users; the ramp to 8 users took 40% of the window)" in header(summary)
    assert header(summary).count("measured window") == 1
