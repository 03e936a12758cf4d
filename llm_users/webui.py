"""The LLM tab in Locust's web UI, and ``GET /llm/summary.json`` beside it.

Uses Locust's documented extension points: ``template_args["extendedTabs"]`` and
``["extendedTables"]`` declare the tab, and the ``/stats/requests`` answer (polled by the UI)
carries the rows under ``extendedStats``. Rows come from the merged statistics (master or
local runner), so they are exact in distributed runs too.
"""

from __future__ import annotations

import json
from typing import Any

TAB = "llm"
COLUMNS = [
    ("name", "Name"), ("requests", "Requests"), ("failures", "Failures"),
    ("ttftP50", "TTFT p50 (ms)"), ("ttftP99", "TTFT p99 (ms)"),
    ("itlP50", "ITL p50 (ms)"), ("itlP99", "ITL p99 (ms)"), ("tpotP50", "TPOT p50 (ms)"),
    ("e2eP50", "E2E p50 (ms)"), ("e2eP99", "E2E p99 (ms)"),
    ("outTokS", "Output tok/s"), ("reqS", "Req/s"),
]


def _r(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else ("" if v is None else v)


def rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    items = list(summary["by_name"].items()) + [("Aggregated", summary["overall"])]
    for name, s in items:
        out.append({
            "name": name, "requests": s["requests"], "failures": s["failures"],
            "ttftP50": _r(s["ttft"]["p50"]), "ttftP99": _r(s["ttft"]["p99"]),
            "itlP50": _r(s["itl"]["p50"]), "itlP99": _r(s["itl"]["p99"]), "tpotP50": _r(s["tpot"]["p50"]),
            "e2eP50": _r(s["e2e"]["p50"]), "e2eP99": _r(s["e2e"]["p99"]),
            "outTokS": _r(s["output_tokens_per_s"]), "reqS": _r(s["requests_per_s"]),
        })
    return out


def install(web_ui: Any, run: Any) -> None:
    """Add the LLM tab and the summary route to a Locust WebUI."""
    from flask import Response, request

    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB}]
    web_ui.template_args["extendedTables"] = [
        {"key": TAB, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}
    ]
    app = web_ui.app

    @app.after_request
    def _extend_stats(response: Any) -> Any:
        if request.path != "/stats/requests" or run.collector is None:
            return response
        data = response.get_json(silent=True)
        if isinstance(data, dict):
            data["extendedStats"] = [{"key": TAB, "data": rows(run.collector.stats.summary())}]
            response.set_data(json.dumps(data))
        return response

    @app.route("/llm/summary.json")
    def _summary() -> Any:
        body = json.dumps(run.summary() if run.collector is not None else {}, default=str)
        return Response(body, mimetype="application/json")
