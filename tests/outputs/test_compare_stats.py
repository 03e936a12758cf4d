"""outputs/compare_stats.py: llm-compare's rows (embeddings and rerank figures, issue 31 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.compare import main as compare_main
from llm_users.outputs.compare_stats import headline as compare_headline


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
