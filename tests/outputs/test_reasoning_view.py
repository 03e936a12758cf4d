"""outputs/reasoning_view.py: TTFO and the reasoning line shown on the console, in report.html
and in llm-compare only when the run reasoned (issue 30 item 3)."""

from __future__ import annotations

from llm_users.metrics import StatsByName
from llm_users.outputs.compare_stats import headline, table
from llm_users.outputs.console import summary_table
from llm_users.outputs.html_report import render
from tests.metrics.records import MS, feed
from tests.metrics.records import reasoning_rec as rec
from tests.metrics.records import reasoning_records as _records


def _summary(reasoning: bool) -> dict:
    s = StatsByName()
    for r in _records(30, 3):
        if not reasoning:
            r = rec(request_id=r.request_id, start_time=r.start_time)
            feed(r, "AAAA")
            r.e2e_ns = 200 * MS
            r.usage(10, 4)
        s.add(r)
    return s.summary()


def test_console_and_report_show_ttfo_only_when_the_run_reasoned() -> None:
    plain, reasoned = _summary(False), _summary(True)
    text = summary_table(plain)
    assert "TTST p50" in text and "TTFO" not in text and "reasoning:" not in text
    text = summary_table(reasoned)
    head = text.splitlines()[1]
    assert head.index("TTFT p50") < head.index("TTFO p50") < head.index("TTST p50") < head.index("ITL p50")
    line = next(ln for ln in text.splitlines() if ln.startswith("reasoning:"))
    r = reasoned["overall"]["reasoning"]
    assert f"tokens reasoning {r['reasoning_tokens']}, answer {r['answer_tokens']}" in line
    assert "estimated from reasoning chunks" in line
    assert "TPOT counts the answer's tokens" not in line  # streamed in full (one token a chunk): every token
    html = render(reasoned, [])
    assert "Reasoning and answer" in html and "TTFO p50" in html and "TTST p50" in html
    html = render(plain, [])
    assert "Reasoning and answer" not in html and "TTFO" not in html and "TTST p50" in html


def test_reasoning_counted_but_not_streamed_gets_one_line() -> None:
    """OpenAI's o-series reports reasoning_tokens without streaming the reasoning: no TTFO columns
    (TTFO is TTFT), one line that says where the reasoning time went."""
    s = StatsByName()
    for i in range(5):
        r = rec(request_id=f"h{i}", start_time=1000.0 + i)
        feed(r, "AAA")
        r.e2e_ns = 200 * MS
        r.usage(10, 40, 37)
        r.settle_tokens()
        s.add(r)
    summary = s.summary()
    assert summary["overall"]["reasoning"]["reasoning_tokens"] == 185
    text = summary_table(summary)
    assert "TTFO" not in text.splitlines()[1]
    assert "the server counted 185 reasoning tokens but streamed none of them (answer tokens 15)" in text
    # issue 53 item 4: their TPOT counted the answer's 3 tokens, and the line says so
    assert summary["overall"]["tpot_basis"] == {"all": 0, "answer": 5}
    assert "; TPOT counts the answer's tokens in 5 requests (reasoning hidden or summarised)" in text
    assert "streamed none of them" in render(summary, [])


def test_compare_shows_ttfo_only_when_a_run_reasoned() -> None:
    class R:  # the part of compare_stats.Run that table() reads
        def __init__(self, s: dict) -> None:
            self.summary, self.metrics = s, headline(s)

    plain, reasoned = _summary(False), _summary(True)
    assert headline(reasoned)["ttfo.p50"] == reasoned["overall"]["ttfo"]["p50"]
    assert headline(reasoned)["reasoning_tokens"] == reasoned["overall"]["reasoning"]["reasoning_tokens"]
    rows = {row[0] for row in table([R(plain), R(plain)])}  # type: ignore[list-item]
    assert "ttst.p50" in rows and "ttfo.p50" not in rows
    rows = {row[0] for row in table([R(plain), R(reasoned)])}  # type: ignore[list-item]
    assert {"ttfo.p50", "ttst.p99"} <= rows
