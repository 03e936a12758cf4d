"""outputs/html_report.py: report.html's first screen (the header says each thing once, warnings
agree with the verdict, notes as on the console) and the embeddings headline and table."""

from __future__ import annotations

import pytest

from llm_users.outputs.html_headline import cells
from llm_users.outputs.html_report import render
from tests.metrics.records import stats
from tests.outputs.run_summary import rows as _rows
from tests.outputs.run_summary import summary as _summary


def test_report_html_headline_and_table() -> None:
    summary = stats().summary()
    got = {k: v for k, v, _ in cells(summary)}
    ov = summary["overall"]
    assert float(got["Inputs/s"]) == pytest.approx(ov["inputs_per_s"], rel=0.01)
    assert "Input tokens/s" in got and got["E2E p50 / p99"].startswith(str(int(ov["e2e"]["p50"])))
    page = render(summary, [])
    assert "<th>inputs/s</th>" in page and "<th>in tok/s</th>" in page


def test_header_says_each_thing_once_and_no_empty_failures_chart() -> None:
    page = render(_summary(), _rows())
    for text in ("8 users, spawned at 2/s", "synthetic prompts of 100 input tokens", "30 output tokens",
                 "64 (temperature 0.0, ignore_eos on)", "TTFT ≤ 60 ms", "(version 0.9)", "Goodput"):
        assert text in page, text
    assert page.count("http://h:1") == 1 and page.count("measured window") == 1
    assert page.index("Goodput") < page.index("Load plan") < page.index("Per request name")
    assert "failures/s" not in page and "Failures over time" not in page
    failing = render(_summary(failures=5), _rows(failures=1))
    assert "failures/s" in failing  # folded into the requests chart when there were failures


def test_node_warnings_do_not_contradict_the_verdict_colour() -> None:
    s = _summary(level="caution")
    s["self_check"]["nodes"] = [{"node": "local", "reasons": [], "warnings": ["other processes held the core"]}]
    page = render(s, _rows())
    # the verdict carries the colour; the nodes' evidence is folded under it, uncoloured
    assert ("<details class='note'><summary>Self-check details (1)</summary><ul>"
            "<li>local: other processes held the core</li></ul></details>") in page
    assert "<p class='bad'>" not in page
    s["self_check"].pop("level")  # an older self-check: its warnings stay red, as before
    assert "<p class='bad'>local: other processes held the core</p>" in render(s, _rows())


def test_a_connection_per_request_is_a_note_as_on_the_console() -> None:
    dist = {"p50": 0.61, "p99": 2.3, "count": 100}
    page = render(_summary(connections_opened=100, connect=dist), _rows())
    assert ("<p class='note'>100 of 100 requests opened their own connection (connect p50 0.61 ms, p99 2.30 ms): "
            "before t0, so in no latency figure here, only in the request rate.</p>") in page
    assert "opened their own connection" not in render(_summary(connections_opened=4, connect=dist), _rows())
