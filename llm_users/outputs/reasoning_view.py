"""How the outputs show TTFO, TTST and reasoning vs answer (console table, report.html).

The decision (docs/metrics.md): summary.json, requests.jsonl and the Prometheus exporter always
carry ``ttfo`` and ``ttst`` (both are defined for every stream). The console table and the
report show TTST whenever it was measured (a stream of two chunks or more), and TTFO, with the
reasoning-vs-answer figures, only when at least one measured request streamed reasoning: without
reasoning TTFO equals TTFT exactly, and a second column of the same numbers would only confuse.
"""

from __future__ import annotations

import html
from typing import Any


def reasoned(stats: dict[str, Any]) -> bool:
    """True when some measured request of these statistics streamed reasoning text."""
    return bool((stats.get("reasoning") or {}).get("requests"))


def measured(stats: dict[str, Any], metric: str) -> bool:
    return bool((stats.get(metric) or {}).get("count"))


def first_token_metrics(overall: dict[str, Any]) -> list[str]:
    """The metrics to show beside TTFT, in order: ``ttfo`` when the run reasoned, ``ttst`` when measured."""
    out = ["ttfo"] if reasoned(overall) and measured(overall, "ttfo") else []
    if measured(overall, "ttst"):
        out.append("ttst")
    return out


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return "-" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _hidden(overall: dict[str, Any]) -> str | None:
    """The line for a server that counted reasoning tokens but streamed no reasoning text."""
    r = overall.get("reasoning") or {}
    if reasoned(overall) or not r.get("reasoning_tokens"):
        return None
    return (f"reasoning: the server counted {r['reasoning_tokens']} reasoning tokens but streamed none of them "
            f"(answer tokens {r['answer_tokens']}): TTFO = TTFT, the hidden reasoning is inside TTFT"
            f"{_tpot_basis(overall)}")


def _tpot_basis(overall: dict[str, Any]) -> str:
    """The clause for TPOTs that counted the answer's tokens only (metrics/record.py ``tpot_basis``)."""
    n = (overall.get("tpot_basis") or {}).get("answer") or 0
    return f"; TPOT counts the answer's tokens in {n} requests (reasoning hidden or summarised)" if n else ""


def reasoning_line(overall: dict[str, Any]) -> str | None:
    """One console line: reasoning vs answer tokens and inter-token gaps, or None without reasoning."""
    if not reasoned(overall):
        return _hidden(overall)
    r = overall["reasoning"]
    est = r.get("reasoning_tokens_estimated_requests") or 0
    src = f" ({est} counts estimated from reasoning chunks: the server gave none)" if est else ""
    return (f"reasoning: {r['requests']} requests reasoned; tokens reasoning {r['reasoning_tokens']}, answer "
            f"{r['answer_tokens']}{src}; chunks reasoning {r['reasoning_chunks']}, answer {r['answer_chunks']}; "
            f"ITL p50 reasoning {_ms(r.get('itl_reasoning'), 'p50')} ms, answer {_ms(r.get('itl_answer'), 'p50')} ms; "
            f"TTFO - TTFT p50 {_gap(overall)} ms{_tpot_basis(overall)}")


def _gap(overall: dict[str, Any]) -> str:
    a, b = (overall.get("ttfo") or {}).get("p50"), (overall.get("ttft") or {}).get("p50")
    return "-" if a is None or b is None else f"{a - b:.1f}"


def reasoning_html(overall: dict[str, Any]) -> str:
    """report.html's "Reasoning and answer" section, or "" without reasoning."""
    if not reasoned(overall):
        hidden = _hidden(overall)
        return f"<p class='note'>{html.escape(hidden[0].upper() + hidden[1:])}.</p>" if hidden else ""
    r = overall["reasoning"]
    rows = [("requests that reasoned", r["requests"]), ("reasoning tokens", r["reasoning_tokens"]),
            ("answer tokens (output - reasoning)", r["answer_tokens"]),
            ("reasoning counts estimated from chunks (requests)", r.get("reasoning_tokens_estimated_requests", 0)),
            ("reasoning chunks", r["reasoning_chunks"]), ("answer chunks", r["answer_chunks"])]
    for label, key in (("ITL between reasoning chunks", "itl_reasoning"), ("ITL between answer chunks", "itl_answer")):
        d = r.get(key) or {}
        rows.append((f"{label}, p50 / p99 (ms)", f"{_ms(d, 'p50')} / {_ms(d, 'p99')}"))
    for label, key in (("TTFT", "ttft"), ("TTFO (first answer chunk)", "ttfo")):
        d = overall.get(key) or {}
        rows.append((f"{label}, p50 / p99 (ms)", f"{_ms(d, 'p50')} / {_ms(d, 'p99')}"))
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return ("<h2>Reasoning and answer</h2><p class='note'>TTFO is the first answer chunk (reasoning excluded); "
            "TTFT the first chunk of either kind. See docs/metrics.md.</p>"
            f"<table><tr><th>figure</th><th>value</th></tr>{body}</table>")
