"""The LLM tab in Locust's web UI, its live charts, and ``GET /llm/summary.json`` beside it.

Uses Locust's documented extension points: ``template_args["extendedTabs"]`` and
``["extendedTables"]`` declare the tab, and the ``/stats/requests`` answer (polled by the UI)
carries the rows under ``extendedStats``. The rows come from a :class:`~llm_users.webui.live.LiveView`
fed by the merged statistics (master or local runner), so they are exact in distributed runs,
reset with Locust's own table (Reset stats, a new test), and give current rates.

Locust's tabs hold tables only, so the charts (output tokens/s, TTFT/ITL p50/p99, requests/s
with the users running and goodput with SLOs, in-flight requests and arrivals/s in open loop,
stage markers, GPU utilization with a sidecar, the server's queue; one unit per axis) are drawn by ``tab.js`` with ECharts, the charting library Locust's own charts use
(Locust bundles it unexported, so the same major version is vendored under ``vendor/``,
Apache-2.0, and served from ``GET /llm/echarts.min.js``: nothing is loaded from the internet).
``tab.js`` is loaded by the index page, polls ``GET /llm/live.json`` (its ``notes``, the console's
notes since the reset, go above the charts), and adds the start form's
LLM group from ``GET /llm/form.json`` (:mod:`llm_users.webui.form`). A ``/swarm`` form whose
``--llm-*`` fields do not make valid settings is answered with the one-line reason, as Locust
answers a bad user count; a test keeps the LLM settings it started with (the Edit form's
fields are dropped mid-run).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from llm_users.errors import ConfigError
from llm_users.outputs.console import connect_line
from llm_users.webui.form import fixed_reason, form_groups
from llm_users.webui.guard import key_notes
from llm_users.webui.live import KEEP_S, LiveView

TAB = "llm"
SCRIPT = Path(__file__).with_name("tab.js")
ECHARTS = Path(__file__).with_name("vendor") / "echarts.min.js"  # Apache-2.0: vendor/echarts.LICENSE
# (key, title, decimals)
COLUMNS = [
    ("name", "Name", None), ("requests", "Requests", None), ("failures", "Failures", None),
    ("ttftP50", "TTFT p50 (ms)", 1), ("ttftP99", "TTFT p99 (ms)", 1),
    # laid out before any answer: both always (TTFO equals TTFT without reasoning; docs/metrics.md)
    ("ttfoP50", "TTFO p50 (ms)", 1), ("ttstP50", "TTST p50 (ms)", 1),
    ("itlP50", "ITL p50 (ms)", 2), ("itlP99", "ITL p99 (ms)", 2), ("tpotP50", "TPOT p50 (ms)", 2),
    ("e2eP50", "E2E p50 (ms)", 0), ("e2eP99", "E2E p99 (ms)", 0),
    ("outTokS", "Output tok/s (now)", 1), ("reqS", "Req/s (now)", 2),
]
GOODPUT_COLUMN = ("goodputS", "Goodput/s (now)", 2)
#: embeddings and rerank Users in the run: their throughput since the reset (docs/metrics.md)
KIND_COLUMNS = [("inputsS", "Inputs/s", 1), ("inTokS", "Input tok/s", 0)]
DECIMALS = {k: d for k, _, d in [*COLUMNS, GOODPUT_COLUMN, *KIND_COLUMNS]}


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
            "ttfoP50": s["ttfo"]["p50"], "ttstP50": s["ttst"]["p50"],
            "itlP50": s["itl"]["p50"], "itlP99": s["itl"]["p99"], "tpotP50": s["tpot"]["p50"],
            "e2eP50": s["e2e"]["p50"], "e2eP99": s["e2e"]["p99"],
            "outTokS": r["tokens"], "reqS": r["requests"],
        }
        if live.slos:
            row["goodputS"] = r["good"]
        if s.get("inputs_per_s") is not None:
            row["inputsS"], row["inTokS"] = s["inputs_per_s"], s["input_tokens_per_s"]
        out.append({k: _r(k, v) for k, v in row.items()})
    return out


def notes(live: LiveView) -> list[str]:
    """The console's and report.html's notes on the requests since the last reset, for the tab's
    charts box: a connection opened per request (the openai SDK's habit, ``connect_line``)."""
    line = connect_line(live.stats.total.summary())  # the overall figures only, not every name's
    return [line] if line else []


def _has_kinds(run: Any) -> bool:
    """The run has an embeddings or rerank User (a route whose kind is not chat)."""
    for cls, settings in run.current_config.user_settings.items():
        descriptor = getattr(cls, "descriptor", None)
        if descriptor is not None and descriptor.route(settings.endpoint).kind != "chat":
            return True
    return False


def check_form(form: Any, config: Any, user_classes: list[Any], started: bool = False) -> str | None:
    """The reason the start form's ``llm_*`` fields make no valid configuration, or None: the
    fields over the run's options (``config``, a :class:`~llm_users.options.RunConfig`),
    through the command line's parser, so the reason is the line the command line would print;
    or the line saying a field the run cannot change now was changed (``started``: the run's
    first test has started; :func:`~llm_users.webui.form.fixed_reason`)."""
    given = {k: v for k, v in form.items() if k.startswith("llm_")}
    if not given:
        return None
    reason = fixed_reason(given, config.options, started)
    if reason:
        return reason
    try:
        config.with_form(given, user_classes)
    except ConfigError as e:
        return str(e)
    return None


def stage_marks(run: Any, since: float) -> list[dict[str, Any]]:
    """The starts of the run's stages or sweep points since the last reset (``--llm-steps``,
    ``--llm-stages``, ``--llm-sweep``): the charts' markers."""
    study = getattr(run, "study", None)
    marks = []
    for part in (study.runs.values() if study is not None else ()):
        for st in getattr(getattr(part, "book", None), "stages", ()):
            if st.end is None or st.end > since:  # a stage running at the reset: marked at the reset
                unit = "req/s" if st.kind == "rate" else "users"
                marks.append({"time": max(st.start, since), "label": f"{st.load:g} {unit}"})
    return marks


def users_by_second(run: Any, since: float, now: float) -> dict[int, int]:
    """The users running each second the charts may show (the run's per-second count: timeseries.csv's)."""
    timeline = run.collector.timeline if run.collector is not None else None
    first = max(int(since), int(now) - KEEP_S - 1)
    return dict(timeline.users_between(first, int(now))) if timeline is not None else {}


def install(web_ui: Any, run: Any) -> LiveView:
    """Add the LLM tab, its charts and the summary route to a Locust WebUI."""
    from flask import Response, jsonify, request
    from werkzeug.datastructures import ImmutableMultiDict

    environment = run.environment
    live = LiveView(run.slos, lag_s=run.data_lag_s)
    live.reset(time.time())
    if run.collector is not None:
        run.collector.live = live
    gpu = bool(run.config.gpu_sidecars)

    def table() -> None:  # the goodput column with SLOs (the form may set them for the first test)
        columns = COLUMNS + ([GOODPUT_COLUMN] if live.slos else []) + (KIND_COLUMNS if _has_kinds(run) else [])
        web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB}]
        web_ui.template_args["extendedTables"] = [
            {"key": TAB, "structure": [{"key": k, "title": t, **({"round": d} if d else {})} for k, t, d in columns]}
        ]

    def flushed() -> LiveView:  # records waiting for an idle loop (idle.py) go in first
        if run.collector is not None:
            run.collector.flush()
        return live

    def new_test(**_: Any) -> None:
        live.slos = dict(run.current_config.slos)  # read again as the test starts (options.for_test)
        flushed().reset(time.time())
        table()

    table()
    environment.events.reset_stats.add_listener(lambda **_: flushed().reset(time.time()))
    environment.events.test_start.add_listener(new_test)
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
        reason = check_form(request.form, run.current_config, list(environment.user_classes or []),
                            started=run.test_start is not None)
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

    @app.route("/llm/echarts.min.js")
    def _echarts() -> Any:
        response = Response(ECHARTS.read_bytes(), mimetype="application/javascript")
        response.cache_control.max_age = 86400
        return response

    @app.route("/llm/form.json")
    def _form() -> Any:
        groups = form_groups(run.current_config.options, started=run.test_start is not None)
        return Response(json.dumps({"groups": groups}), mimetype="application/json")

    @app.route("/llm/live.json")
    def _live() -> Any:
        now = time.time()
        extra = run.collector.timeline.extra if run.collector is not None else {}
        study = run.current_config.study
        server = any(k.startswith("server_") for k in extra.recent_columns(15)) if extra else False
        body = {"since": live.since, "slos": bool(live.slos), "gpu": gpu, "server": server, "rates": live.rates(now),
                "sloMs": {k: v / 1e6 for k, v in live.slos.items()},
                "openLoop": bool(study and study.open_loop), "stages": stage_marks(run, live.since),
                "series": live.series(now, extra, users_by_second(run, live.since, now)),
                "notes": notes(live) + key_notes(run.current_config, environment.host)}
        return Response(json.dumps(body), mimetype="application/json")

    @app.route("/llm/summary.json")
    def _summary() -> Any:
        body = json.dumps(run.summary() if run.collector is not None else {}, default=str)
        return Response(body, mimetype="application/json")

    return live
