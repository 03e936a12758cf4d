"""report.html sections of the shipped load profiles: the open-loop verdict, the per-stage table
and chart, the SLO sweep's knee and the Pareto frontier plots; one function per profile, each
reading the final summary only (the profiles hand them to the page: ``LoadProfile.report_sections``).
Inline SVG (matplotlib), like the rest."""

from __future__ import annotations

import html
from typing import Any

from llm_users.load.pareto import axes, frontiers, per_user_tokens_s
from llm_users.outputs.html_base import plt
from llm_users.outputs.html_base import svg as _svg


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def _kind(rows: list[dict[str, Any]]) -> str:
    return "concurrency" if "concurrency" in rows[0] else "rate" if "rate" in rows[0] else "users"


def stage_chart(stages: list[dict[str, Any]], title: str = "Per-stage latency and throughput") -> str | None:
    kind = _kind(stages)
    xs = [s[kind] for s in stages]
    if not xs:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    order = sorted(range(len(xs)), key=xs.__getitem__)
    for metric, style in (("ttft", "-"), ("tpot", "--"), ("e2e", ":")):
        for p in ("p50", "p99"):
            ys = [(stages[i].get(metric) or {}).get(p) for i in order]
            if any(y is not None for y in ys):
                ax.plot([xs[i] for i in order], [float("nan") if y is None else y for y in ys], style, marker="o",
                        markersize=3, label=f"{metric.upper()} {p}")
    ax.set_yscale("log")
    ax.set_xlabel({"users": "users (stage)", "concurrency": "users (point)", "rate": "arrival rate, req/s"}[kind])
    ax.set_ylabel("ms (settle window excluded)")
    ax2 = ax.twinx()
    ax2.plot([xs[i] for i in order], [stages[i].get("requests_per_s") or 0 for i in order], color="grey",
             marker="s", markersize=3, label="req/s")
    ax2.set_ylabel("requests/s (measured)")
    ax2.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    return _svg(fig)


def pareto_chart(points: list[dict[str, Any]], knee_index: int | None) -> str | None:
    fr = frontiers(points)
    fig, axs = plt.subplots(2, 2, figsize=(9, 6.4))
    drawn = False
    for ax, which in zip(axs.flat, ("ttft", "tpot", "e2e", "tokens"), strict=True):
        pts = [(i, axes(p, which)) for i, p in enumerate(points)]
        pts = [(i, a) for i, a in pts if a is not None]
        if not pts:
            ax.set_visible(False)
            continue
        drawn = True
        sign = -1 if which == "tokens" else 1
        ax.scatter([a[0] for _, a in pts], [sign * a[1] for _, a in pts], s=14, color="#888", label="measured point")
        line = [axes(points[i], which) for i in fr[which]]
        ax.plot([a[0] for a in line if a], [sign * a[1] for a in line if a], "-o", color="#c33", markersize=4,
                label="Pareto frontier")
        if knee_index is not None:
            k = [a for i, a in pts if points[i].get("index") == knee_index]
            if k:
                ax.scatter([k[0][0]], [sign * k[0][1]], marker="*", s=160, color="#1a7", zorder=5, label="knee (SLO)")
        if which == "tokens":
            ax.set_xlabel("total output tokens/s")
            ax.set_ylabel("output tokens/s per user")
            ax.set_title("Per-user vs total token throughput")
        else:
            ax.set_xlabel("requests/s")
            ax.set_ylabel(f"{which.upper()} p99, ms")
            ax.set_title(f"Throughput vs {which.upper()} p99")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle("Pareto frontier")
    fig.tight_layout()
    return _svg(fig)


def _stage_table(stages: list[dict[str, Any]], sweep: bool) -> str:
    kind = _kind(stages)
    head = [kind, "measured", "excluded", "req/s", "out tok/s", "tok/s per user", "TTFT p50", "TTFT p99", "TPOT p50",
            "TPOT p99", "E2E p50", "E2E p99", "lag p99", "SLO met"] + (["result"] if sweep else [])
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for s in stages:
        share = (s.get("slo") or {}).get("share_meeting_all")
        cells = [s[kind], s["requests"], s["excluded"], s.get("requests_per_s"), s.get("output_tokens_per_s"),
                 per_user_tokens_s(s)]
        cells += [(s.get(m) or {}).get(p) for m in ("ttft", "tpot", "e2e") for p in ("p50", "p99")]
        cells += [(s.get("schedule_lag") or {}).get("p99"), None if share is None else f"{share:.1%}"]
        if sweep:
            cells.append(("PASS: " if s.get("passed") else "FAIL: " if s.get("passed") is False else "") +
                         str(s.get("reason") or ""))
        out.append("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


def arrivals_section(summary: dict[str, Any]) -> list[str]:
    """The open-loop arrivals: target, achieved, schedule lag, latency from the schedule, verdict."""
    a = summary.get("arrivals")
    if not a:
        return []
    cls = "bad" if a.get("cap_reached") or a.get("client_behind") else "ok"
    target = f"{a['rate']:g} req/s" if a.get("rate") else "the trace's" if a.get("trace") else "per stage"
    return [f"<h2>Open-loop arrivals</h2><p>{html.escape(a['arrival'])} arrivals, seed {a['seed']}, target "
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
            if knee else "no measured load met the SLOs")
    parts = [f"<h2>SLO sweep ({html.escape(sw['mode'])})</h2><p class='{'ok' if knee else 'bad'}'>"
             f"<b>Knee:</b> {text}; target share {sw['target']:.0%}; {len(sw['points'])} points; "
             f"stopped: {html.escape(sw['stopped'])}.</p>" + _stage_table(sw["points"], True)]
    charts = [stage_chart(sw["points"], "Per-point latency and throughput"),
              pareto_chart(sw["points"], knee["point"] if knee else None)]
    parts.append("<div class='charts'>" + "".join(f"<div class='chart'>{c}</div>" for c in charts if c) + "</div>")
    return parts


def stages_section(summary: dict[str, Any]) -> list[str]:
    """The stages: their table, the per-stage chart and the Pareto frontier."""
    stages = summary.get("stages")
    if not stages:
        return []
    parts = ["<h2>Stages</h2><p>Each stage's first settle window is excluded (steady state); "
             "rates divide by the measured part of the stage.</p>" + _stage_table(stages, False)]
    charts = [stage_chart(stages), pareto_chart(stages, None)]
    parts.append("<div class='charts'>" + "".join(f"<div class='chart'>{c}</div>" for c in charts if c) + "</div>")
    return parts
