"""outputs/html_report.py: report.html's first screen (the header says each thing once, warnings
agree with the verdict, notes as on the console) and the embeddings headline and table."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.html_headline import cells
from llm_users.outputs.html_report import render


def embed(i: int, *, inputs: int = 4, tokens: int = 256, e2e_ms: float = 50.0, kind: str = "embed",
          ok: bool = True) -> RequestRecord:
    r = RequestRecord(f"r{i}", "/v1/embeddings" if kind == "embed" else "/v1/rerank", "vllm", "m",
                      start_time=1000.0 + i * 0.1, t0_ns=1, ttfb_ns=int(e2e_ms * 1e6), e2e_ns=int(e2e_ms * 1e6),
                      input_tokens=tokens, input_tokens_source="usage", status="ok" if ok else "error")
    r.kind, r.inputs = kind, inputs
    if not ok:
        r.error_category = "wrong_result_count"
    return r


def stats() -> StatsByName:
    s = StatsByName()
    for i in range(100):  # 10 s: 100 embed requests of 4 inputs, 256 tokens each; 10 rerank of 8
        s.add(embed(i, e2e_ms=40 + i % 10))
    for i in range(10):
        s.add(embed(i * 10, inputs=8, tokens=100, kind="rerank"))
    s.add(embed(5, ok=False))
    return s


def test_report_html_headline_and_table() -> None:
    summary = stats().summary()
    got = {k: v for k, v, _ in cells(summary)}
    ov = summary["overall"]
    assert float(got["Inputs/s"]) == pytest.approx(ov["inputs_per_s"], rel=0.01)
    assert "Input tokens/s" in got and got["E2E p50 / p99"].startswith(str(int(ov["e2e"]["p50"])))
    page = render(summary, [])
    assert "<th>inputs/s</th>" in page and "<th>in tok/s</th>" in page


def _summary(failures: int = 0, level: str | None = "healthy", **overall: object) -> dict:
    dist = {"p50": 20.0, "p99": 30.0, "p90": 25.0, "p95": 27.0, "p99.9": 31.0, "mean": 21.0, "min": 10.0,
            "max": 40.0, "count": 100}
    ov = {"requests": 100, "successes": 100 - failures, "failures": failures, "excluded_warmup": 4,
          "output_tokens_per_s": 950.0, "requests_per_s": 31.5, "input_tokens": 10000, "output_tokens": 3000,
          "ttft": dist, "ttfb": dist, "itl": dist, "tpot": {**dist, "p50": 3.0, "p99": 3.5}, "e2e": dist,
          "failures_by_category": {"http_500": failures} if failures else {},
          "slo": {"limits_ms": {"ttft": 60.0}, "goodput_rps": 30.0, "share_meeting_all": 0.96}, **overall}
    check = {"message": "client healthy: its own delay stayed small", "saturated": False, "nodes": []}
    if level:
        check["level"] = level
    return {"host": "http://h:1", "overall": ov, "by_name": {"/x": ov}, "self_check": check,
            "window": {"test_start": 1000.0, "test_stop": 1010.0, "measured_s": 9.5},
            "environment": {"options": {"locustfile": "vllm.py"}, "backends_models": [{"backend": "vllm",
                                                                                      "model": "m1"}],
                            "server": {"version": "0.9"}},
            "setup": {"backend": "vllm", "model": None, "load_plan": {"text": "8 users, spawned at 2/s; for 10 s"},
                      "input_tokens": "100", "output_tokens": "30", "max_tokens": 64, "temperature": 0.0,
                      "ignore_eos": True, "slos_ms": {"ttft": 60.0}}}


def _rows(failures: int = 0) -> list[dict]:
    return [{"time": 1000 + i, "users": 8, "requests_started": 3, "requests_finished": 3, "failures": failures,
             "output_tokens_per_s": 90, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "itl_p50_ms": 3.0,
             "itl_p99_ms": 4.0} for i in range(10)]


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
