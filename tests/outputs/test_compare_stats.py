"""outputs/compare_stats.py: llm-compare's rows (embeddings and rerank figures, issue 31 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_users.outputs.compare import main as compare_main
from llm_users.outputs.compare_stats import headline as compare_headline
from tests.metrics.records import stats


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
