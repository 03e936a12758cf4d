"""Embeddings and rerank figures in every output (issue 31 item 2): the statistics (inputs,
inputs/s, input tokens/s, request kinds, merged exactly), the console line, report.html's
headline and table, llm-compare's table, the live tab's rows and the self-check's reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_users.health.verdict import first_answer_ms
from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.compare import main as compare_main
from llm_users.outputs.compare_stats import headline as compare_headline
from llm_users.outputs.console import kinds_line, summary_table
from llm_users.outputs.html_headline import cells
from llm_users.outputs.html_report import render
from llm_users.webui.live import LiveView
from llm_users.webui.tab import rows


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


def test_summary_figures_and_exact_merge() -> None:
    ov = stats().summary()["overall"]
    dur = ov["duration_s"]
    assert ov["request_kinds"] == {"embed": 101, "rerank": 10} and ov["requests"] == 111
    assert ov["inputs"] == 100 * 4 + 10 * 8  # successful requests only
    assert ov["inputs_per_s"] == pytest.approx(480 / dur)
    assert ov["input_tokens_per_s"] == pytest.approx((100 * 256 + 10 * 100) / dur)
    assert ov["ttft"]["count"] == 0 and ov["e2e"]["count"] == 110 and ov["ttfb"]["count"] == 110
    assert ov["failures_by_category"] == {"wrong_result_count": 1}
    by = stats().summary()["by_name"]
    assert by["/v1/rerank"]["inputs"] == 80 and by["/v1/embeddings"]["request_kinds"] == {"embed": 101}
    # two workers' halves merge to the whole
    a, b = StatsByName(), StatsByName()
    for i in range(100):
        (a if i % 2 else b).add(embed(i, e2e_ms=40 + i % 10))
    merged = StatsByName()
    merged.merge_wire(json.loads(json.dumps(a.to_wire())))
    merged.merge_wire(json.loads(json.dumps(b.to_wire())))
    whole = StatsByName()
    for i in range(100):
        whole.add(embed(i, e2e_ms=40 + i % 10))
    assert merged.summary() == whole.summary()


def test_a_chat_request_is_one_input() -> None:
    s = StatsByName()
    s.add(RequestRecord("c", "/v1/chat/completions", "vllm", "m", start_time=1.0, e2e_ns=10**9, ttft_ns=10**8,
                        input_tokens=7))
    ov = s.summary()["overall"]
    assert ov["inputs"] == 1 and ov["request_kinds"] == {}
    assert kinds_line(ov) is None


def test_console_line_and_self_check_reference() -> None:
    summary = stats().summary()
    ov = summary["overall"]
    line = kinds_line(ov)
    assert line is not None and line.startswith("embeddings/rerank (embed 101, rerank 10 requests): ")
    assert f"{ov['inputs_per_s']:.1f} inputs/s" in line and "E2E p50" in line
    assert line in summary_table(summary)
    assert first_answer_ms(ov) == (ov["e2e"]["p50"], ov["e2e"]["p99"])  # no TTFT: judged against E2E
    chat = {"ttft": {"p50": 5.0, "p99": 9.0}, "e2e": {"p50": 50.0}, "request_kinds": {}}
    assert first_answer_ms(chat) == (5.0, 9.0)


def test_report_html_headline_and_table() -> None:
    summary = stats().summary()
    got = {k: v for k, v, _ in cells(summary)}
    ov = summary["overall"]
    assert float(got["Inputs/s"]) == pytest.approx(ov["inputs_per_s"], rel=0.01)
    assert "Input tokens/s" in got and got["E2E p50 / p99"].startswith(str(int(ov["e2e"]["p50"])))
    page = render(summary, [])
    assert "<th>inputs/s</th>" in page and "<th>in tok/s</th>" in page


def test_llm_compare_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = stats().summary()
    flat = compare_headline(summary)
    assert flat["inputs_per_s"] == summary["overall"]["inputs_per_s"] and "input_tokens_per_s" in flat
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    code = compare_main([str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on", "inputs_per_s<-5%"])
    out = capsys.readouterr().out
    assert code == 0 and "inputs_per_s" in out and "input_tokens_per_s" in out


def test_live_tab_rows() -> None:
    live = LiveView(lag_s=1)
    live.reset(999.0)
    for i in range(100):
        r = embed(i)
        live.stats.add(r)
        live.count(r)
    table = {row["name"]: row for row in rows(live, 1020.0)}
    agg = live.stats.summary()["overall"]
    assert table["Aggregated"]["inputsS"] == pytest.approx(agg["inputs_per_s"], abs=0.1)
    assert table["/v1/embeddings"]["inTokS"] == pytest.approx(agg["input_tokens_per_s"], abs=1)
    assert table["Aggregated"]["reqS"] > 0 and table["Aggregated"]["ttftP50"] == ""


def test_live_tab_shows_the_columns_for_an_embeddings_run() -> None:
    from types import SimpleNamespace

    from llm_users.settings import settings_for
    from llm_users.users import VLLMEmbedUser, VLLMUser
    from llm_users.webui.tab import _has_kinds

    def run(*classes: type) -> SimpleNamespace:
        return SimpleNamespace(current_config=SimpleNamespace(user_settings={c: settings_for(c, None) for c in classes}))

    assert _has_kinds(run(VLLMUser, VLLMEmbedUser)) and not _has_kinds(run(VLLMUser))


def test_self_check_says_e2e_when_it_judged_against_e2e() -> None:
    from llm_users.health.verdict import verdict
    from tests.health.test_verdict import node

    ov = stats().summary()["overall"]
    out = verdict([node("local", {"lag_ms": 6.0})], *first_answer_ms(ov), overall=ov)
    assert out["level"] == "saturated" and "> 5% of E2E p50" in out["message"] and "TTFT" not in out["message"]
    assert "E2E p50" in out["nodes"][0]["reasons"][0]


def test_llm_compare_calls_runs_of_other_batch_sizes_not_comparable() -> None:
    from llm_users.outputs.compare_config import blocking, config_rows

    def summary(batch: str) -> dict:
        return {**stats().summary(), "config": {"llm_batch_size": batch, "llm_dataset": "short"}}

    assert blocking(config_rows([summary("4"), summary("8")]), 1) == ["workload"]
    assert blocking(config_rows([summary("4"), summary("4")]), 1) == []
