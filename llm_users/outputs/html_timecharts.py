"""report.html's charts over time, chosen by the load type: latency and output tokens/s always;
requests finished per second, with failures only when there were any; for open loop, where
Locust's users idle, the offered and achieved arrival rate, the requests in flight and the
schedule lag (timeseries.csv's open-loop columns, :mod:`llm_users.load.schedule_series`) instead
of active users; a dashed line at each stage's or sweep point's start; each outage (summary.json ``outages``)
shaded on the requests (or arrival-rate) chart, from its first failure to the first success after.
"""

from __future__ import annotations

from typing import Any

from llm_users.outputs.html_base import time_chart
from llm_users.outputs.html_header import complete_rows
from llm_users.outputs.html_server import scraped_charts, server_charts


def stage_marks(summary: dict[str, Any]) -> list[float]:
    """The start of every stage (or sweep point) after the first (Unix s)."""
    return [st["start"] for st in (summary.get("stages") or [])[1:] if st.get("start")]


def is_open_loop(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("sent_rps") is not None for r in rows)


def with_target(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` with ``target_rps``: the rate asked for in each second (``--llm-rate``, or the
    rate of the stage or sweep point under way); the rows as they are when none was asked."""
    stages = [st for st in summary.get("stages") or [] if st.get("rate") is not None]
    plan = (summary.get("setup") or {}).get("load_plan") or {}
    rate = ((plan.get("profiles") or {}).get("open_loop") or {}).get("rate")
    if not stages and rate is None:
        return rows
    out = []
    for r in rows:
        t = r["time"] + 0.5
        here = next((st["rate"] for st in stages if st["start"] <= t < (st.get("end") or float("inf"))), None)
        out.append({**r, "target_rps": here if stages else rate})
    return out


def time_charts(summary: dict[str, Any], rows: list[dict[str, Any]]) -> list[str | None]:
    """The charts over time, in order (None: a chart with nothing to draw)."""
    whole = complete_rows(rows, summary)
    marks = stage_marks(summary)
    open_loop = is_open_loop(rows)
    users = not open_loop
    failed = (summary["overall"].get("failures") or 0) > 0
    charts = [
        time_chart(
            rows,
            {
                "ttft_p50_ms": "TTFT p50",
                "ttft_p99_ms": "TTFT p99",
                "itl_p50_ms": "ITL p50",
                "itl_p99_ms": "ITL p99",
            },
            "ms",
            "Latency over time" + (" vs active users" if users else ""),
            users,
            marks,
        ),
        time_chart(
            whole,
            {"output_tokens_per_s": "output tokens/s"},
            "tokens/s",
            "Throughput over time" + (" vs active users" if users else ""),
            users,
            marks,
        ),
    ]
    fails = {"failures": "failures/s"} if failed else {}
    shade = [(o["start"], o.get("recovered_at") or o["end"]) for o in summary.get("outages") or []]
    if open_loop:
        charts.append(
            time_chart(
                with_target(whole, summary),
                {
                    "target_rps": "asked (--llm-rate or stage)",
                    "offered_rps": "offered (scheduled)",
                    "sent_rps": "achieved (sent)",
                    **fails,
                },
                "requests/s",
                "Arrival rate: offered vs achieved",
                False,
                marks,
                shade,
            )
        )
        charts.append(
            time_chart(
                whole,
                {"in_flight": "requests in flight (mean per second)"},
                "requests",
                "In-flight requests over time",
                False,
                marks,
            )
        )
        charts.append(
            time_chart(
                rows,
                {"schedule_lag_mean_ms": "schedule lag mean", "schedule_lag_max_ms": "schedule lag max"},
                "ms",
                "Schedule lag over time (send - scheduled)",
                False,
                marks,
            )
        )
    else:
        charts.append(
            time_chart(
                whole,
                {"requests_finished": "requests finished/s", **fails},
                "requests/s",
                "Requests over time vs active users",
                True,
                marks,
                shade,
            )
        )
    charts += server_charts(rows, users, marks)
    charts += scraped_charts(rows, users, marks)
    return charts
