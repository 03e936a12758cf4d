"""report.html sections of the shipped load profiles: the open-loop verdict, the per-stage table
and chart, the SLO sweep's knee and the Pareto frontier plots; one function per profile, each
reading the final summary only (the profiles hand them to the page: ``LoadProfile.report_sections``).
Inline SVG (matplotlib), like the rest; the study charts page-wide, every point labelled with
its load, the SLO limits as labelled dashed lines; with SLOs each row says pass or fail and
which SLO failed, the knee's row marked (:mod:`.study_slo`)."""

from __future__ import annotations

import html
import re
from typing import Any

from llm_users.load.pareto import axes, frontiers, per_user_tokens_s
from llm_users.outputs.html_base import plt
from llm_users.outputs.html_base import svg as _svg
from llm_users.outputs.study_console import trace_text
from llm_users.outputs.study_slo import (
    kind_of,
    knee_sentence,
    load_label,
    pooled_goodput_text,
    slo_limits,
    verdicts,
)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


_LOAD_AXIS = {"users": "users (stage)", "concurrency": "users (point)", "rate": "arrival rate, req/s"}
_SLO_COLOURS = {"ttft": "#d62728", "tpot": "#9467bd", "e2e": "#8c564b"}


def wide(svg_text: str) -> str:
    """An SVG that fills the page's width (its viewBox keeps the proportions) instead of the
    560 px of the other charts."""
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 width="100%"', svg_text, count=1)


def slo_lines(ax: Any, limits_ms: dict[str, float], metrics: tuple[str, ...]) -> None:
    """A labelled horizontal line at each SLO limit of these metrics."""
    for m in metrics:
        if m in limits_ms:
            ax.axhline(limits_ms[m], color=_SLO_COLOURS.get(m, "#c00"), linestyle="--", linewidth=1.2,
                       label=f"SLO {m.upper()} ≤ {limits_ms[m]:g} ms")


def _err(ci: dict[str, Any] | None, metric: str, at: float | None) -> tuple[float, float]:
    """(below, above) of ``at`` for an error bar: the point's Student-t 95% interval of ``metric``
    over its repeats (``--llm-repeat``); (0, 0) without one."""
    c = (ci or {}).get(metric) or {}
    if at is None or c.get("low") is None or c.get("high") is None:
        return 0.0, 0.0
    return max(at - c["low"], 0.0), max(c["high"] - at, 0.0)


def error_bars(ax: Any, xs: list[float], ys: list[float | None], errs: list[tuple[float, float]],
               xerrs: list[tuple[float, float]] | None = None, color: str = "#333") -> None:
    """Draw the repeats' intervals as error bars (nothing when no point has one)."""
    pts = [(x, y, e, xe) for x, y, e, xe in zip(xs, ys, errs, xerrs or [(0.0, 0.0)] * len(xs), strict=True)
           if y is not None and (any(e) or any(xe))]
    if not pts:
        return
    ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[[p[2][0] for p in pts], [p[2][1] for p in pts]],
                xerr=[[p[3][0] for p in pts], [p[3][1] for p in pts]], fmt="none", ecolor=color, elinewidth=1,
                capsize=3, alpha=0.8)


def stage_chart(stages: list[dict[str, Any]], title: str = "Per-stage latency and throughput",
                limits_ms: dict[str, float] | None = None) -> str | None:
    """TTFT/TPOT/E2E p50 and p99 against the load, measured req/s on the right axis, each stage
    (point) labelled on the req/s line, the SLO limits as dashed lines."""
    kind = kind_of(stages)
    xs = [s[kind] for s in stages]
    if not xs:
        return None
    fig, ax = plt.subplots(figsize=(11, 5.5))
    order = sorted(range(len(xs)), key=xs.__getitem__)
    for metric, style in (("ttft", "-"), ("tpot", "--"), ("e2e", ":")):
        for p in ("p50", "p99"):
            ys = [(stages[i].get(metric) or {}).get(p) for i in order]
            if any(y is not None for y in ys):
                lines = ax.plot([xs[i] for i in order], [float("nan") if y is None else y for y in ys], style,
                                marker="o", markersize=3, label=f"{metric.upper()} {p}")
                if p == "p99":  # --llm-repeat: the 95% interval over the repeats
                    error_bars(ax, [xs[i] for i in order], ys, [_err(stages[i].get("ci"), f"{metric}_p99_ms", y)
                                                                for i, y in zip(order, ys, strict=True)],
                               color=lines[0].get_color())
    slo_lines(ax, limits_ms or {}, ("ttft", "tpot", "e2e"))
    ax.set_yscale("log")
    ax.set_xlabel(_LOAD_AXIS[kind])
    ax.set_ylabel("ms (settle window excluded)")
    ax2 = ax.twinx()
    rps = [stages[i].get("requests_per_s") or 0 for i in order]
    ax2.plot([xs[i] for i in order], rps, color="grey", marker="s", markersize=3, label="req/s")
    error_bars(ax2, [xs[i] for i in order], list(rps), [_err(stages[i].get("ci"), "throughput_rps", y)
                                                         for i, y in zip(order, rps, strict=True)], color="grey")
    word = "point" if kind == "concurrency" or "passed" in stages[0] else "stage"
    for i, y in zip(order, rps, strict=True):
        ax2.annotate(f"{word} {stages[i].get('index', i)}\n{load_label(stages[i], kind)}", (xs[i], y),
                     textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7, color="#444")
    ax2.set_ylabel("requests/s (measured)")
    ax2.set_ylim(bottom=0, top=max(rps + [0]) * 1.25 + 1e-9)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return wide(_svg(fig))


def pareto_chart(points: list[dict[str, Any]], knee_index: int | None,
                 limits_ms: dict[str, float] | None = None) -> str | None:
    """The four frontiers, every point labelled with its load, the knee starred, the SLO limit
    as a labelled dashed line on the TTFT, TPOT and E2E panels."""
    fr = frontiers(points)
    kind = kind_of(points) if points else "users"
    fig, axs = plt.subplots(2, 2, figsize=(13, 9.5))
    drawn = False
    for ax, which in zip(axs.flat, ("ttft", "tpot", "e2e", "tokens"), strict=True):
        pts = [(i, axes(p, which)) for i, p in enumerate(points)]
        pts = [(i, a) for i, a in pts if a is not None]
        if not pts:
            ax.set_visible(False)
            continue
        drawn = True
        sign = -1 if which == "tokens" else 1
        ax.scatter([a[0] for _, a in pts], [sign * a[1] for _, a in pts], s=22, color="#888", label="measured point")
        if which != "tokens":  # --llm-repeat: req/s and p99 intervals over the repeats
            error_bars(ax, [a[0] for _, a in pts], [a[1] for _, a in pts],
                       [_err(points[i].get("ci"), f"{which}_p99_ms", a[1]) for i, a in pts],
                       [_err(points[i].get("ci"), "throughput_rps", a[0]) for i, a in pts], color="#888")
        for i, a in pts:
            ax.annotate(load_label(points[i], kind), (a[0], sign * a[1]), textcoords="offset points", xytext=(5, 4),
                        fontsize=8, color="#333")
        line = [axes(points[i], which) for i in fr[which]]
        ax.plot([a[0] for a in line if a], [sign * a[1] for a in line if a], "-o", color="#c33", markersize=4,
                label="Pareto frontier")
        if knee_index is not None:
            k = [a for i, a in pts if points[i].get("index") == knee_index]
            if k:
                ax.scatter([k[0][0]], [sign * k[0][1]], marker="*", s=220, color="#1a7", zorder=5, label="knee (SLO)")
        if which == "tokens":
            ax.set_xlabel("total output tokens/s")
            ax.set_ylabel("output tokens/s per user")
            ax.set_title("Per-user vs total token throughput")
        else:
            slo_lines(ax, limits_ms or {}, (which,))
            ax.set_xlabel("requests/s")
            ax.set_ylabel(f"{which.upper()} p99, ms")
            ax.set_title(f"Throughput vs {which.upper()} p99")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle(f"Pareto frontier (points labelled by load: {'u = users' if kind != 'rate' else 'r/s = arrival rate'})")
    fig.tight_layout()
    return wide(_svg(fig))


def _stage_table(summary: dict[str, Any], stages: list[dict[str, Any]]) -> str:
    """One row per stage (point); with SLOs its goodput and result (which SLO failed), the knee's
    row marked."""
    kind = kind_of(stages)
    vs = verdicts(summary, stages)
    head = [kind, "measured", "excluded", "req/s", "out tok/s", "tok/s per user", "TTFT p50", "TTFT p99", "TPOT p50",
            "TPOT p99", "E2E p50", "E2E p99", "lag p99", "SLO met"] + (["goodput req/s", "result"] if vs else [])
    out = ["<table class='study'><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for i, s in enumerate(stages):
        share = (s.get("slo") or {}).get("share_meeting_all")
        cells = [s[kind], s["requests"], s["excluded"], s.get("requests_per_s"), s.get("output_tokens_per_s"),
                 per_user_tokens_s(s)]
        cells += [(s.get(m) or {}).get(p) for m in ("ttft", "tpot", "e2e") for p in ("p50", "p99")]
        cells += [(s.get("schedule_lag") or {}).get("p99"), None if share is None else f"{share:.1%}"]
        row = "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in cells)
        style = ""
        if vs:
            v = vs[i]
            row += f"<td>{html.escape(_fmt((s.get('slo') or {}).get('goodput_rps')))}</td>"
            colour = "#1a7" if v.passed else "#c00" if v.passed is False else "#555"
            row += (f"<td style='text-align:left;white-space:nowrap;color:{colour}'>" + ("<b>KNEE</b> " if v.knee else "")
                    + f"{html.escape(v.text)}</td>")
            style = " style='background:#e3f6e3;font-weight:bold'" if v.knee else ""
        out.append(f"<tr{style}>{row}</tr>")
    out.append("</table>")
    return "".join(out)


def _pooled(summary: dict[str, Any]) -> str:
    text = pooled_goodput_text(summary)
    return f"<p class='note'><b>Overall goodput</b>, {html.escape(text)}.</p>" if text else ""


def arrivals_section(summary: dict[str, Any]) -> list[str]:
    """The open-loop arrivals: target, achieved, schedule lag, latency from the schedule, verdict."""
    a = summary.get("arrivals")
    if not a:
        return []
    cls = "bad" if a.get("cap_reached") or a.get("client_behind") else "ok"
    trace = trace_text(a)  # the trace decides the times: no arrival law or seed to name
    target = f"{a['rate']:g} req/s" if a.get("rate") else "the trace's schedule" if trace else "per stage"
    law = trace[0].upper() + trace[1:] if trace else f"{a['arrival']} arrivals, seed {a['seed']}"
    return [f"<h2>Open-loop arrivals</h2><p>{html.escape(law)}, target "
            f"{html.escape(target)}, achieved {_fmt(a.get('achieved_rps'))} req/s; "
            f"schedule lag p50 {_fmt(a['schedule_lag'].get('p50'))} ms, p99 "
            f"{_fmt(a['schedule_lag'].get('p99'))} ms; TTFT from schedule p99 "
            f"{_fmt(a['ttft_from_schedule'].get('p99'))} ms (from send "
            f"{_fmt(summary['overall']['ttft'].get('p99'))} ms); E2E from schedule p99 "
            f"{_fmt(a['e2e_from_schedule'].get('p99'))} ms (from send "
            f"{_fmt(summary['overall']['e2e'].get('p99'))} ms).</p>"
            f"<p class='{cls}'><b>Schedule:</b> {html.escape(a['verdict'])}</p>"]


def sweep_section(summary: dict[str, Any]) -> list[str]:
    """The SLO sweep: its knee, the points' table, the per-point chart and the Pareto frontier."""
    sw = summary.get("sweep")
    if not sw:
        return []
    key = "concurrency" if sw["mode"] == "concurrency" else "rate"
    knee = sw.get("knee")
    limits = ", ".join(f"{k.upper()} ≤ {v:g} ms" for k, v in ((summary["overall"].get("slo") or {})
                                                             .get("limits_ms") or {}).items())
    text = (f"knee at {key} {knee[key]:g}: goodput {_fmt(knee.get('goodput_rps'))} req/s, "
            f"{(knee.get('share_meeting_all') or 0):.1%} of requests met every SLO ({html.escape(limits)})"
            if knee else html.escape(sw.get("verdict") or "no measured load met the SLOs"))
    parts = [f"<h2>SLO sweep ({html.escape(sw['mode'])})</h2><p class='{'ok' if knee else 'bad'}'>"
             f"<b>Knee:</b> {text}; target share {sw['target']:.0%}; {len(sw['points'])} points; "
             f"stopped: {html.escape(sw['stopped'])}.</p>" + _why(summary) + _knee_interval(sw, key)
             + (f"<p><b>Search:</b> {html.escape(str(sw['max_load']))}.</p>" if sw.get("max_load") else "")
             + (f"<p><b>Plan:</b> {html.escape(str(sw['plan_note']))}.</p>" if sw.get("plan_note") else "")
             + _stage_table(summary, sw["points"]) + _pooled(summary)]
    lim = slo_limits(summary)
    charts = [stage_chart(sw["points"], "Per-point latency and throughput", lim),
              pareto_chart(sw["points"], knee["point"] if knee else None, lim)]
    parts.append("".join(f"<div class='chart-wide'>{c}</div>" for c in charts if c))
    return parts


def _why(summary: dict[str, Any]) -> str:
    """The knee's explanation (summary.json ``knee.explanation``), one paragraph."""
    why = (summary.get("knee") or {}).get("explanation")
    return f"<p class='why'><b>Why the knee:</b> {html.escape(why)}.</p>" if why else ""


def _knee_interval(sw: dict[str, Any], key: str) -> str:
    """The knee's interval of a repeated sweep (load/repeats.py) and how the bars are drawn."""
    ki = sw.get("knee_interval")
    if not ki:
        return ""
    ends = ["-" if v is None else f"{v:g}" for v in (ki.get("low"), ki.get("high"))]
    return (f"<p><b>Knee interval</b> ({sw.get('repeat')} repeats per point): {key} {ends[0]} (the 95% interval "
            f"of the share meeting every SLO is above the target) to {ends[1]} (below it). Error bars: "
            f"Student-t 95% intervals over each point's repeats.</p>")


def stages_section(summary: dict[str, Any]) -> list[str]:
    """The stages: their table, the per-stage chart and the Pareto frontier."""
    stages = summary.get("stages")
    if not stages:
        return []
    parts = ["<h2>Stages</h2><p>Each stage's first settle window is excluded (steady state); "
             "rates divide by the measured part of the stage.</p>"]
    knee = knee_sentence(summary, stages)
    if knee:
        found = any(v.knee for v in verdicts(summary, stages))
        parts.append(f"<p class='{'ok' if found else 'bad'}'><b>SLOs:</b> {html.escape(knee)}.</p>" + _why(summary))
    k = max(((st.get("ci") or {}).get("repeats", 1) for st in stages), default=1)
    if k > 1:
        parts.append(f"<p>Each stage measured {k} times (<code>--llm-repeat</code>): its figures pool the repeats; "
                     f"error bars are Student-t 95% intervals over the repeats' own figures.</p>")
    parts.append(_stage_table(summary, stages) + _pooled(summary))
    lim = slo_limits(summary)
    knee_index = next((v.index for v in verdicts(summary, stages) if v.knee), None)
    charts = [stage_chart(stages, limits_ms=lim), pareto_chart(stages, knee_index, lim)]
    parts.append("".join(f"<div class='chart-wide'>{c}</div>" for c in charts if c))
    return parts
