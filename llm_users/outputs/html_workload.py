"""The workload sections of report.html: latency by session turn (table and chart), achieved
vs target input length, TTFT by shared prefix, and cost. Each is drawn only when the summary
has its data; static inline SVG like the rest of the page.
"""

from __future__ import annotations

import html
from typing import Any

from llm_users.outputs.cost import unit
from llm_users.outputs.html_base import fmt as _fmt
from llm_users.outputs.html_base import plt
from llm_users.outputs.html_base import svg as _svg


def _rows(head: list[str], rows: list[list[Any]]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>")
    return "".join(out) + "</table>"


def turn_chart(by_turn: list[dict[str, Any]]) -> str | None:
    if not by_turn:
        return None
    xs = [b["turn"] for b in by_turn]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for metric, key, label in (("ttft", "p50", "TTFT p50"), ("ttft", "p99", "TTFT p99"), ("e2e", "p50", "E2E p50")):
        ys = [b[metric][key] for b in by_turn]
        ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=label)
    ax2 = ax.twinx()
    tokens = [b["input_tokens_mean"] for b in by_turn]
    ax2.plot(xs, [float("nan") if t is None else t for t in tokens], color="grey", linestyle=":", marker=".",
             label="input tokens (mean)")
    ax2.set_ylabel("input tokens")
    ax.set_xticks(xs)
    ax.set_xlabel("turn")
    ax.set_ylabel("ms")
    ax.set_title("Latency by session turn")
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    return _svg(fig)


def error_chart(err: dict[str, Any]) -> str | None:
    hist = err.get("histogram") or {}
    if not hist:
        return None
    xs = [int(k) for k in hist]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(xs, list(hist.values()), width=0.8)
    ax.set_xlabel("achieved - target input tokens")
    ax.set_ylabel("requests")
    ax.set_title("Input length: server count vs target")
    ax.grid(alpha=0.3)
    return _svg(fig)


def sections(summary: dict[str, Any]) -> str:
    parts: list[str] = []
    by_turn = summary.get("by_turn") or []
    if by_turn:
        rows = [[b["turn"], b["requests"], b["failures"], b["ttft"]["p50"], b["ttft"]["p99"], b["e2e"]["p50"],
                 b["e2e"]["p99"], b["input_tokens_mean"], b["output_tokens_mean"]] for b in by_turn]
        table = _rows(["turn", "requests", "failures", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99",
                       "input tokens (mean)", "output tokens (mean)"], rows)
        chart = turn_chart(by_turn) or ""
        parts.append(f"<h2>Sessions: latency by turn</h2>{table}<div class='chart'>{chart}</div>")
    workload = summary.get("workload") or {}
    err = workload.get("input_tokens_error")
    if err:
        src = workload.get("source") or {}
        how = html.escape(str(src.get("method", "?")))
        parts.append(
            f"<h2>Input length: achieved vs target</h2><p>Target {html.escape(str(src.get('input_tokens', '?')))}"
            f" tokens, made exact by <b>{how}</b> (overhead {_fmt(src.get('overhead_tokens'))} tokens); the server "
            f"counted {err['requests']} prompts, {err['exact_share']:.1%} exactly on target.</p>"
            + _rows(["error", "p50", "p99", "max"],
                    [["tokens", err["abs_tokens"]["p50"], err["abs_tokens"]["p99"], err["abs_tokens"]["max"]],
                     ["percent", err["pct"]["p50"], err["pct"]["p99"], err["pct"]["max"]]])
            + f"<div class='chart'>{error_chart(err) or ''}</div>")
    pre = workload.get("prefixes")
    if pre:
        rows = [[f"prefix {p['prefix']}", p["requests"], p["ttft"]["p50"], p["ttft"]["p99"]]
                for p in pre.get("by_prefix", [])]
        rows += [[f"cache {k}", v["requests"], v["ttft"]["p50"], v["ttft"]["p99"]]
                 for k, v in (pre.get("by_cache_hit") or {}).items()]
        parts.append("<h2>Shared prefixes: TTFT</h2>" + _rows(["group", "requests", "TTFT p50", "TTFT p99"], rows))
    cost = summary.get("cost")
    if cost:
        cur = html.escape(unit(cost))  # "price units" when --llm-price named no currency
        parts.append(
            "<h2>Cost</h2>" + _rows(
                ["", f"total {cur}", "per request", "per 1k output tokens", "input", "cached input", "output"],
                [["measured requests", cost["total"], cost["per_request"], cost["per_1k_output_tokens"],
                  cost["input_cost"], cost["cached_input_cost"], cost["output_cost"]]])
            + f"<p>Prices per million tokens: {html.escape(cost['prices_text'])}.</p>")
    return "".join(parts)
