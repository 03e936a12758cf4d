"""llm-compare's HTML page: self-contained like report.html (inline CSS and SVG from matplotlib,
no scripts, no external references): the configuration diff first (in red where it blocks the
verdicts), the side-by-side table, the verdicts, CDF overlays from
the per-request values, and per-turn and per-stage (Pareto) overlays where the runs have them.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from llm_users.outputs.atomic import write_atomic
from llm_users.outputs.compare_config import ConfigRow, blocking, describe
from llm_users.outputs.compare_stats import Rule, Run, Verdict, table
from llm_users.outputs.html_base import CSS as _CSS
from llm_users.outputs.html_base import plt
from llm_users.outputs.html_base import svg as _svg


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _table(head: list[str], rows: list[list[Any]], classes: list[str] | None = None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows):
        cls = f" class='{classes[i]}'" if classes and classes[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>")
    return "".join(out) + "</table>"


def cdf_overlay(runs: list[Run], metric: str) -> str | None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = False
    for r in runs:
        vals = sorted(r.values.get(metric) or [])
        if not vals:
            continue
        n = len(vals)
        ax.plot(vals, [(i + 1) / n for i in range(n)], drawstyle="steps-post", label=r.label)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("ms")
    ax.set_ylabel("share of requests ≤ x")
    ax.set_title(f"{metric.upper()} CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def turn_overlay(runs: list[Run]) -> str | None:
    if not any(r.summary.get("by_turn") for r in runs):
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in runs:
        bt = r.summary.get("by_turn") or []
        if bt:
            ax.plot([b["turn"] for b in bt], [b["ttft"]["p50"] for b in bt], marker="o", label=r.label)
    ax.set_xlabel("turn")
    ax.set_ylabel("TTFT p50 (ms)")
    ax.set_title("TTFT by session turn")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def pareto_overlay(runs: list[Run]) -> str | None:
    """Throughput vs TTFT p50 per stage, when the summaries carry per-stage statistics."""
    def points(r: Run) -> list[tuple[float, float]]:
        stages = r.summary.get("by_stage") or r.summary.get("stages") or []
        if isinstance(stages, dict):
            stages = list(stages.values())
        out = []
        for s in stages if isinstance(stages, list) else []:
            st = s.get("stats", s) if isinstance(s, dict) else {}
            x, y = st.get("output_tokens_per_s"), (st.get("ttft") or {}).get("p50")
            if isinstance(x, int | float) and isinstance(y, int | float):
                out.append((float(x), float(y)))
        return out

    series = {r.label: points(r) for r in runs}
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("TTFT p50 (ms)")
    ax.set_title("Per stage: throughput vs latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def config_section(runs: list[Run], rows: list[ConfigRow], allow: bool) -> str:
    """The configuration diff (first on the page): a red row where a difference blocks the
    verdicts, an amber one where it does not; a red paragraph per run not configured as the
    baseline."""
    out = []
    for i, run in enumerate(runs[1:], 1):
        if blocking(rows, i):
            what = _esc(describe(rows, i))
            out.append(f"<p class='bad' style='color:#b00'><b>Warning: {_esc(run.label)} was not configured as "
                       f"{_esc(runs[0].label)}</b> ({what}): the verdicts are given because of --allow-config-diff, "
                       "but a difference may come from the configuration, not the server.</p>" if allow else
                       f"<p class='bad' style='color:#b00'><b>Not comparable: {_esc(run.label)} was not configured "
                       f"as {_esc(runs[0].label)}</b> ({what}): no verdict is given (--allow-config-diff shows "
                       "them under a warning).</p>")
    classes = ["blocking" if r.critical and r.differs else "differs" if r.differs else "" for r in rows]
    table_html = _table(["configuration", *[r.label for r in runs]], [[r.key, *r.values] for r in rows], classes)
    return "<h2>Configuration</h2>" + "".join(out) + table_html


def render(runs: list[Run], results: list[list[Verdict]], failed: list[str], rules: list[Rule],
           config: list[ConfigRow] | None = None, allow_config_diff: bool = False) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>llm-compare</title><style>{_CSS}"
             ".regressed{background:#fde2e2}.improved{background:#e3f6e3}"
             ".blocking{background:#fde2e2;color:#b00;font-weight:bold}.differs{background:#fff4d6}"
             "</style></head><body><h1>llm-compare</h1>"]
    parts.append("<p>Baseline: <b>" + _esc(runs[0].path) + "</b>; compared: "
                 + ", ".join(f"<b>{_esc(r.path)}</b>" for r in runs[1:]) + "</p>")
    if config:
        parts.append(config_section(runs, config, allow_config_diff))
    if rules:
        skipped = [r.label for i, r in enumerate(runs[1:], 1)
                   if config and not allow_config_diff and blocking(config, i)]
        cls = "bad" if failed or skipped else "ok"
        text = "; ".join(failed) if failed else (f"every rule passed ({', '.join(r.text for r in rules)})"
                                                if len(skipped) < len(runs) - 1 else "")
        if skipped:
            text += ("; " if text else "") + f"not evaluated for {', '.join(skipped)} (not comparable)"
        parts.append(f"<p class='{cls}'><b>--fail-on:</b> {_esc(text)}</p>")
    for run, vs in zip(runs[1:], results, strict=True):
        rows, classes = [], []
        for v in vs:
            if v.verdict == "too few requests":
                rows.append([v.metric, "-", "-", "-", v.verdict])
            else:
                rel = f"{v.rel * 100:+.1f}%" if v.rel is not None else "-"
                rows.append([v.metric, f"{v.delta_ms:+.3f}", rel, f"[{v.low:+.3f}, {v.high:+.3f}]", v.verdict])
            classes.append(v.verdict if v.verdict in ("regressed", "improved") else
                           "blocking" if v.verdict == "not comparable" else "")
        parts.append(f"<h2>{_esc(run.label)} vs {_esc(runs[0].label)}: verdicts</h2>"
                     + _table(["metric", "Δ ms", "Δ %", "CI (ms)", "verdict"], rows, classes))
    head = ["metric"] + [r.label for r in runs] + [f"Δ {r.label}" for r in runs[1:]]
    parts.append("<h2>Every metric</h2>" + _table(head, table(runs)))
    charts = [cdf_overlay(runs, m) for m in ("ttft", "tpot", "e2e")] + [turn_overlay(runs), pareto_overlay(runs)]
    parts.append("<h2>Overlays</h2><div class='charts'>"
                 + "".join(f"<div class='chart'>{c}</div>" for c in charts if c) + "</div>")
    parts.append("</body></html>")
    return "".join(parts)


def write_page(path: str | Path, runs: list[Run], results: list[list[Verdict]], failed: list[str],
               rules: list[Rule], config: list[ConfigRow] | None = None, allow_config_diff: bool = False) -> Path:
    return write_atomic(path, render(runs, results, failed, rules, config, allow_config_diff))
