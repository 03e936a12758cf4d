"""The LLM tab in Locust's web UI, its live charts, and ``GET /llm/summary.json`` beside it.

Uses Locust's documented extension points: ``template_args["extendedTabs"]`` and
``["extendedTables"]`` declare the tab, and the ``/stats/requests`` answer (polled by the UI)
carries the rows under ``extendedStats``. The rows come from a :class:`~llm_users.webui.live.LiveView`
fed by the merged statistics (master or local runner), so they are exact in distributed runs,
reset with Locust's own table (Reset stats, a new test), and give current rates.

Locust's tabs hold tables only, so the charts (TTFT/ITL p50/p99, output tokens/s, goodput with
SLOs, GPU utilization with a sidecar) are drawn by ``tab.js``, which the index page loads
and which polls ``GET /llm/live.json``. A ``/swarm`` form whose ``--llm-*`` fields do not make
valid settings is answered with the one-line reason, as Locust answers a bad user count; a
test keeps the LLM settings it started with (the Edit form's fields are dropped mid-run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from llm_users.errors import ConfigError
from llm_users.webui.live import LiveView

TAB = "llm"
SCRIPT = Path(__file__).with_name("tab.js")
# (key, title, decimals)
COLUMNS = [
    ("name", "Name", None), ("requests", "Requests", None), ("failures", "Failures", None),
    ("ttftP50", "TTFT p50 (ms)", 1), ("ttftP99", "TTFT p99 (ms)", 1),
    ("itlP50", "ITL p50 (ms)", 2), ("itlP99", "ITL p99 (ms)", 2), ("tpotP50", "TPOT p50 (ms)", 2),
    ("e2eP50", "E2E p50 (ms)", 0), ("e2eP99", "E2E p99 (ms)", 0),
    ("outTokS", "Output tok/s (now)", 1), ("reqS", "Req/s (now)", 2),
]
GOODPUT_COLUMN = ("goodputS", "Goodput/s (now)", 2)
DECIMALS = {k: d for k, _, d in [*COLUMNS, GOODPUT_COLUMN]}


def _r(key: str, v: Any) -> Any:
    if v is None:
        return ""
    d = DECIMALS.get(key)
    return round(v, d) if isinstance(v, float) and d is not None else v


def rows(live: LiveView, now: float) -> list[dict[str, Any]]:
    """Table rows since the last reset: percentiles of the merged statistics, current rates."""
    summary = live.stats.summary()
    rates = live.rates(now)
    out = []
    items = list(summary["by_name"].items()) + [("Aggregated", summary["overall"])]
    for name, s in items:
        r = rates if name == "Aggregated" else live.rates(now, name)
        row = {
            "name": name, "requests": s["requests"], "failures": s["failures"],
            "ttftP50": s["ttft"]["p50"], "ttftP99": s["ttft"]["p99"],
            "itlP50": s["itl"]["p50"], "itlP99": s["itl"]["p99"], "tpotP50": s["tpot"]["p50"],
            "e2eP50": s["e2e"]["p50"], "e2eP99": s["e2e"]["p99"],
            "outTokS": r["tokens"], "reqS": r["requests"],
        }
        if live.slos:
            row["goodputS"] = r["good"]
        out.append({k: _r(k, v) for k, v in row.items()})
    return out


def check_form(form: Any, parsed_options: Any, user_classes: list[Any]) -> str | None:
    """The reason the start form's ``llm_*`` fields make no valid settings, or None."""
    from llm_users.options import settings_for
    from llm_users.users import LLMUser

    given = {k: v for k, v in form.items() if k.startswith("llm_")}
    if not given:
        return None
    numbers = {"llm_max_tokens": int, "llm_temperature": float, "llm_top_p": float, "llm_connect_timeout": float,
               "llm_first_byte_timeout": float, "llm_read_timeout": float, "llm_timeout": float}
    for key, kind in numbers.items():
        value = str(given.get(key, "")).strip()
        if value:
            try:
                kind(value)
            except ValueError:
                noun = "an integer" if kind is int else "a number"
                return f"--{key.replace('_', '-')} must be {noun}, got {value!r}"
    opts = argparse.Namespace(**{**vars(parsed_options or argparse.Namespace()), **given})
    try:
        for cls in user_classes:
            if isinstance(cls, type) and issubclass(cls, LLMUser):
                settings_for(cls, opts)
    except ConfigError as e:
        return str(e)
    return None


def install(web_ui: Any, run: Any) -> LiveView:
    """Add the LLM tab, its charts and the summary route to a Locust WebUI."""
    from flask import Response, jsonify, request
    from werkzeug.datastructures import ImmutableMultiDict

    environment = run.environment
    opts = environment.parsed_options
    live = LiveView(run.slos, lag_s=run.data_lag_s)
    live.reset(time.time())
    if run.collector is not None:
        run.collector.live = live
    gpu = bool(getattr(opts, "llm_gpu_sidecar", None))
    columns = COLUMNS + ([GOODPUT_COLUMN] if run.slos else [])
    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB}]
    web_ui.template_args["extendedTables"] = [
        {"key": TAB, "structure": [{"key": k, "title": t, **({"round": d} if d else {})} for k, t, d in columns]}
    ]

    def flushed() -> LiveView:  # records waiting for an idle loop (idle.py) go in first
        if run.collector is not None:
            run.collector.flush()
        return live

    environment.events.reset_stats.add_listener(lambda **_: flushed().reset(time.time()))
    environment.events.test_start.add_listener(lambda **_: flushed().reset(time.time()))
    app = web_ui.app

    @app.before_request
    def _check_swarm() -> Any:
        if not (request.path.endswith("/swarm") and request.method == "POST"):
            return None
        runner = environment.runner
        if runner is not None and runner.state in ("running", "spawning"):
            # Locust's Edit form (users mid-run) re-sends the custom fields with their start-up
            # values; a test keeps the LLM settings it started with, so they are dropped here.
            request.form = ImmutableMultiDict(
                [(k, v) for k, v in request.form.items(multi=True) if not k.startswith("llm_")])
            return None
        reason = check_form(request.form, environment.parsed_options, list(environment.user_classes or []))
        if reason:
            return jsonify({"success": False, "message": reason, "host": environment.host})
        return None

    @app.after_request
    def _extend(response: Any) -> Any:
        path = request.path
        if path.endswith("/stats/requests"):
            data = response.get_json(silent=True)
            if isinstance(data, dict):
                data["extendedStats"] = [{"key": TAB, "data": rows(flushed(), time.time())}]
                response.set_data(json.dumps(data))
        elif response.mimetype == "text/html" and request.method == "GET" and not path.startswith("/llm"):
            html = response.get_data(as_text=True)
            if "</body>" in html and "webui_tab.js" not in html:
                response.set_data(html.replace("</body>", '<script src="./llm/webui_tab.js"></script></body>', 1))
        return response

    @app.route("/llm/webui_tab.js")
    def _script() -> Any:
        return Response(SCRIPT.read_text(), mimetype="application/javascript")

    @app.route("/llm/live.json")
    def _live() -> Any:
        now = time.time()
        extra = run.collector.timeline.extra if run.collector is not None else {}
        body = {"since": live.since, "slos": bool(run.slos), "gpu": gpu, "rates": live.rates(now),
                "series": live.series(now, extra)}
        return Response(json.dumps(body), mimetype="application/json")

    @app.route("/llm/summary.json")
    def _summary() -> Any:
        body = json.dumps(run.summary() if run.collector is not None else {}, default=str)
        return Response(body, mimetype="application/json")

    return live
