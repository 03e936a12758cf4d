"""The first screen of report.html: what ran, when, for how long, against what, with how many
users, and a failures-over-time chart, before any table. Also the rule for the last second:
a run stops mid-second, so the timeline's last row covers only part of a second and would be
drawn as a throughput dip; :func:`complete_rows` leaves it out of per-second rates.
"""

from __future__ import annotations

import html
import time
from typing import Any

from llm_users.outputs.html_base import fmt as _fmt
from llm_users.outputs.html_base import time_chart


def complete_rows(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` without a last second that the run did not cover whole."""
    stop = (summary.get("window") or {}).get("test_stop")
    if rows and stop is not None and rows[-1]["time"] + 1 > stop:
        return rows[:-1]
    return rows


def _when(t: float | None) -> str:
    if not t:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def header(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    env = summary.get("environment") or {}
    opts = env.get("options") or summary.get("config") or {}
    w = summary.get("window") or {}
    start, stop = w.get("test_start"), w.get("test_stop")
    duration = (stop - start) if start and stop else None
    bm = env.get("backends_models") or []
    backends = ", ".join(sorted({b["backend"] for b in bm})) or "-"
    models = ", ".join(sorted({str(b["model"]) for b in bm})) or (env.get("server") or {}).get("model_id") or "-"
    users = opts.get("num_users")
    rate = opts.get("spawn_rate")
    load = f"{users} users" if users is not None else "-"
    if rate is not None:
        load += f", spawned at {rate:g}/s" if isinstance(rate, int | float) else f", spawn rate {rate}"
    locustfile = opts.get("locustfile") or "-"
    if isinstance(locustfile, list):
        locustfile = ", ".join(map(str, locustfile))
    server = env.get("server") or {}
    srv = " ".join(x for x in (server.get("server_header"), server.get("model_id"),
                               server.get("model_file") and f"[{server['model_file']}]",
                               server.get("version") and f"(version {server['version']})") if x) or "-"
    cells = [
        ("Date", _when(start)), ("Duration", f"{_fmt(duration)} s (measured window {_fmt(w.get('measured_s'))} s)"),
        ("Backend", backends), ("Model", models), ("Server", srv), ("Host", str(summary.get("host"))),
        ("Locustfile", str(locustfile)), ("Load", load),
        ("Requests", f"{summary['overall']['requests']} measured, {summary['overall']['failures']} failed"),
    ]
    table = "<table class='first'>" + "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in cells) + "</table>"
    chart = time_chart(complete_rows(rows, summary), {"failures": "failures/s"}, "failures per second",
                       "Failures over time vs active users")
    return f"<div class='charts'><div>{table}</div><div class='chart'>{chart or ''}</div></div>"
