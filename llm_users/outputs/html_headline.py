"""The headline strip at the top of report.html: the run's few numbers a reader wants first
(goodput and SLO attainment when SLOs were given, output tokens/s, requests/s, for embeddings and
rerank inputs/s, input tokens/s and E2E, TTFT and TPOT p50/p99, tokens per request in and out),
then the client's self-check verdict in one sentence, coloured by its level.

It reads the final summary only. Tokens per request come from ``overall.input_tokens_per_request``
and ``overall.output_tokens_per_request`` (``{"p50", "mean"}``) where the summary has them, else
the mean is worked out from the totals (``input_tokens`` / ``output_tokens`` over successes).
"""

from __future__ import annotations

import html
from typing import Any

from llm_users.outputs.html_base import fmt
from llm_users.outputs.study_slo import headline_cells

#: the self-check's ``level`` -> the strip's CSS class (an unknown or absent level: from ``saturated``)
LEVEL_CLASS = {"healthy": "lv-ok", "caution": "lv-warn", "saturated": "lv-bad", "failed": "lv-bad",
               "unmeasured": "lv-none"}

CSS = """
.headline{display:flex;flex-wrap:wrap;gap:.6em;margin:.8em 0}
.headline .cell{border:1px solid #ccc;border-radius:4px;padding:.4em .8em;min-width:8em;background:#fafafa}
.headline .k{font-size:.75em;color:#555}.headline .v{font-size:1.35em;font-weight:600}
.headline .s{font-size:.75em;color:#555}
.verdict{padding:.5em .8em;border-radius:4px;margin:.4em 0 1em}
.lv-ok{background:#e3f6e3;border:1px solid #9c9}.lv-warn{background:#fff3d6;border:1px solid #e0b050}
.lv-bad{background:#fde2e2;border:1px solid #e99}.lv-none{background:#eee;border:1px solid #bbb}
table.first td{text-align:left}
"""


def _ms(d: dict[str, Any] | None) -> str:
    d = d or {}
    return f"{fmt(d.get('p50'))} / {fmt(d.get('p99'))}"


def _per_request(ov: dict[str, Any], which: str) -> tuple[Any, Any]:
    """(p50, mean) tokens per request: the summary's own figures, else the mean from the totals."""
    given = ov.get(f"{which}_tokens_per_request")
    if isinstance(given, dict):
        return given.get("p50"), given.get("mean")
    total, done = ov.get(f"{which}_tokens"), ov.get("successes")
    return None, (round(total / done, 1) if total is not None and done else None)


def _tokens_cell(ov: dict[str, Any]) -> tuple[str, str, str] | None:
    (in50, in_mean), (out50, out_mean) = _per_request(ov, "input"), _per_request(ov, "output")
    if in_mean is None and out_mean is None:
        return None
    sub = "p50 in / out" if in50 is not None else "mean in / out"
    a, b = (in50, out50) if in50 is not None else (in_mean, out_mean)
    extra = f"; mean {fmt(in_mean)} / {fmt(out_mean)}" if in50 is not None else ""
    return "Tokens per request", f"{fmt(a)} / {fmt(b)}", sub + extra


def cells(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The strip's cells: (label, value, small print)."""
    ov = summary["overall"]
    out: list[tuple[str, str, str]] = []
    slo = ov.get("slo")
    if slo and slo.get("pooled_over_loads"):  # a study: the knee's goodput first, the pooled one labelled
        out += headline_cells(summary)
    elif slo:
        share = slo.get("share_meeting_all")
        limits = ", ".join(f"{k.upper()} ≤ {v:g} ms" for k, v in (slo.get("limits_ms") or {}).items())
        out.append(("Goodput", f"{fmt(slo.get('goodput_rps'))} req/s", f"met every SLO ({limits})"))
        out.append(("SLO attainment", "-" if share is None else f"{share:.1%}", "of measured requests"))
    out.append(("Output tokens/s", fmt(ov.get("output_tokens_per_s")), "warm-up excluded"))
    total = ov.get("total_tokens_per_s")
    if total is not None:
        out.append(("Total tokens/s", fmt(total), "input + output"))
    out.append(("Requests/s", fmt(ov.get("requests_per_s")), f"{ov.get('requests', 0)} measured, "
                                                             f"{ov.get('failures', 0)} failed"))
    kinds = ov.get("request_kinds") or {}
    if kinds:  # embeddings, rerank: one answer per batch, latency is E2E (docs/metrics.md)
        what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        out.append(("Inputs/s", fmt(ov.get("inputs_per_s")), f"texts or documents ({what} requests)"))
        out.append(("Input tokens/s", fmt(ov.get("input_tokens_per_s")), "embeddings/rerank inputs"))
        out.append(("E2E p50 / p99", _ms(ov.get("e2e")), "ms"))
    out.append(("TTFT p50 / p99", _ms(ov.get("ttft")), "ms"))
    out.append(("TPOT p50 / p99", _ms(ov.get("tpot")), "ms"))
    tokens = _tokens_cell(ov)
    if tokens:
        out.append(tokens)
    return out


def verdict(summary: dict[str, Any]) -> str:
    """The self-check in one sentence, coloured by its ``level`` (or by ``saturated`` and
    ``failing`` where the summary has no level)."""
    check = summary.get("self_check") or {}
    level = check.get("level")
    if level not in LEVEL_CLASS:
        level = "saturated" if check.get("saturated") or check.get("failing") else (
            "healthy" if check.get("message") else "unmeasured")
    message = check.get("message") or "not measured"
    return (f"<p class='verdict {LEVEL_CLASS[level]}' data-level='{html.escape(level)}'>"
            f"<b>Client self-check:</b> {html.escape(message)}</p>")


def headline(summary: dict[str, Any]) -> str:
    """The strip and the verdict, as HTML."""
    strip = "".join(f"<div class='cell'><div class='k'>{html.escape(k)}</div><div class='v'>{html.escape(v)}</div>"
                    f"<div class='s'>{html.escape(s)}</div></div>" for k, v, s in cells(summary))
    return f"<div class='headline'>{strip}</div>{verdict(summary)}"
