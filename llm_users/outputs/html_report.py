"""report.html: one self-contained page (inline SVG charts, inline CSS, no scripts, no URLs).

Charts are drawn with matplotlib (the ``report`` extra) to SVG and embedded: static, crisp at
any zoom, readable offline and in any browser, nothing fetched at view time.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from llm_users.load.registry import report_sections
from llm_users.metrics import LATENCY_METRICS, PERCENTILES, Distribution
from llm_users.outputs.atomic import write_atomic
from llm_users.outputs.console import connect_line, tools_line
from llm_users.outputs.html_base import CSS, plt, svg
from llm_users.outputs.html_base import fmt as _fmt
from llm_users.outputs.html_header import header
from llm_users.outputs.html_headline import CSS as HEADLINE_CSS
from llm_users.outputs.html_headline import headline
from llm_users.outputs.html_timecharts import time_charts
from llm_users.outputs.html_workload import sections as workload_sections
from llm_users.outputs.reasoning_view import first_token_metrics, reasoning_html

_CDF_POINTS = [p / 10 for p in range(0, 1000)] + [99.9, 99.95, 99.99, 100.0]


def cdf_chart(dists: dict[str, Distribution], title: str) -> str | None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = False
    for label, d in dists.items():
        if not d.count:
            continue
        at = d.hist.get_percentile_to_value_dict(_CDF_POINTS)  # one pass, not one per point
        xs = [at[p] / 1000 for p in _CDF_POINTS]
        ax.plot(xs, [p / 100 for p in _CDF_POINTS], label=label, drawstyle="steps-post")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("ms")
    ax.set_ylabel("share of values ≤ x")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg(fig)


def _table(summary: dict[str, Any]) -> str:
    metrics = ("ttft", *first_token_metrics(summary["overall"]), "itl", "tpot", "e2e")
    head = ["name", "requests", "failures"] + [f"{m.upper()} {k}" for m in metrics
                                                 for k in ("p50", "p99")] + ["out tok/s", "req/s"]
    kinds = bool(summary["overall"].get("request_kinds"))  # embeddings, rerank: their throughput too
    head += ["inputs/s", "in tok/s"] if kinds else []
    rows = list(summary["by_name"].items()) + [("Aggregated", summary["overall"])]
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for name, s in rows:
        cells = [name, s["requests"], s["failures"]]
        cells += [(s.get(m) or {}).get(k) for m in metrics for k in ("p50", "p99")]
        cells += [s["output_tokens_per_s"], s["requests_per_s"]]
        cells += [s.get("inputs_per_s"), s.get("input_tokens_per_s")] if kinds else []
        out.append("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _percentile_table(summary: dict[str, Any]) -> str:
    ov = summary["overall"]
    keys = [*PERCENTILES, "mean", "min", "max"]
    out = ["<table><tr><th>metric (ms)</th>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>"]
    for m in (*LATENCY_METRICS, *first_token_metrics(ov)):
        out.append(f"<tr><td>{m.upper()}</td>" + "".join(f"<td>{_fmt(ov[m].get(k))}</td>" for k in keys) + "</tr>")
    out.append("</table>")
    return "".join(out)


def self_check_details(check: dict[str, Any]) -> str:
    """The nodes' own reasons and warnings behind the one verdict, folded away: the verdict in the
    headline carries the colour, these are its evidence (a summary without a level: in red)."""
    lines = [f"{n['node']}: {r}" for n in check.get("nodes", []) for r in n.get("reasons", []) + n.get("warnings", [])]
    if not lines:
        return ""
    if not check.get("level"):
        return "".join(f"<p class='bad'>{html.escape(x)}</p>" for x in lines)
    items = "".join(f"<li>{html.escape(x)}</li>" for x in lines)
    return f"<details class='note'><summary>Self-check details ({len(lines)})</summary><ul>{items}</ul></details>"


def _breakdown(b: dict[str, Any] | None) -> str:
    """Where the latency goes, by the server's own timings (metrics/breakdown.py)."""
    if not b:
        return ""
    from llm_users.metrics.breakdown import PARTS, console_line

    keys = ("p50", "p90", "p99", "mean")
    rows = "".join(f"<tr><td>{p.replace('_', ' ')}</td>" + "".join(
        f"<td>{(b[p] or {}).get(k) or 0:.2f}</td>" if b.get(p) else "<td>-</td>" for k in keys) + "</tr>"
        for p in PARTS)
    return (f"<h2>Where the latency goes (server timings)</h2><p>{html.escape(console_line(b))}</p>"
            "<p>TTFT = client and network + queue + prefill; E2E = TTFT's parts + decode (ms).</p>"
            f"<table><tr><th>part</th>{''.join(f'<th>{k}</th>' for k in keys)}</tr>{rows}</table>")


def render(summary: dict[str, Any], rows: list[dict[str, Any]], stats: Any = None) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>locust-llm report</title>"
             f"<style>{CSS}{HEADLINE_CSS}</style></head><body><h1>locust-llm report</h1>"]
    parts.append(headline(summary))  # the few numbers first, then the self-check in one sentence
    parts.append(header(summary))  # what ran: backend, model, load plan, lengths, SLOs (each once)
    parts.append(self_check_details(summary.get("self_check") or {}))
    ov = summary["overall"]
    for reason, r in (ov.get("estimated_token_reasons") or {}).items():  # the console says the same
        cls = "bad" if reason == "usage_implausible" else "note"
        parts.append(f"<p class='{cls}'>Token counts of {r['requests']} requests are estimates "
                     f"({html.escape(reason)}): {html.escape(r['hint'])}.</p>")
    for kind, issue in (ov.get("sampling_issues") or {}).items():
        parts.append(f"<p class='bad'>Sampling not honoured ({html.escape(kind)}): {issue['requests']} requests; "
                     f"{html.escape(issue['hint'])}.</p>")
    answers = tools_line(ov)  # tool calls and structured answers, as the console says them
    if answers:
        parts.append(f"<p class='note'>{html.escape(answers[0].upper() + answers[1:])}.</p>")
    churn = connect_line(ov)  # a connection per request (the openai SDK's habit), as the console says it
    if churn:
        parts.append(f"<p class='note'>{html.escape(churn)}.</p>")
    for lost in (summary.get("workers") or {}).get("lost", []):
        parts.append(f"<p class='bad'>Worker {html.escape(lost['worker'])} was lost; up to "
                     f"{lost['window_at_risk_s']:.1f} s of its data may be missing.</p>")
    parts.append("<h2>Over time</h2><div class='charts'>" +  # by the load type: html_timecharts.py
                 "".join(f"<div class='chart'>{c}</div>" for c in time_charts(summary, rows) if c) + "</div>")
    parts.append("<h2>Per request name</h2>" + _table(summary))
    parts.append("<h2>Latency percentiles (all names)</h2>" + _percentile_table(summary))
    parts.append(reasoning_html(ov))
    parts.append(_breakdown(ov.get("breakdown")))
    parts.append(workload_sections(summary))
    parts += report_sections(summary)  # the load profiles' (open loop, stages, sweep: outputs/study_report.py)
    charts = []
    if stats is not None:
        for metric, title in (("ttft", "TTFT distribution (CDF)"), ("itl", "ITL distribution (CDF)")):
            dists = {name: s.dists[metric] for name, s in stats.by_name.items()}
            charts.append(cdf_chart(dists, title))
    if any(charts):
        parts.append("<h2>Distributions</h2><div class='charts'>" +
                     "".join(f"<div class='chart'>{c}</div>" for c in charts if c) + "</div>")
    fails = summary["overall"].get("failures_by_category") or {}
    parts.append("<h2>Failures</h2>" + ("<table><tr><th>category</th><th>count</th></tr>" + "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in sorted(fails.items())) + "</table>"
        if fails else "<p>None.</p>"))
    parts.append("</body></html>")
    return "".join(parts)


def write_html(directory: str | Path, summary: dict[str, Any], rows: list[dict[str, Any]], stats: Any = None) -> Path:
    path = Path(directory) / "report.html"
    return write_atomic(path, render(summary, rows, stats))
