"""outputs/files.py, outputs/console.py and redaction.py: files, CSV columns, redaction, the console table."""

from __future__ import annotations

import json
from argparse import Namespace

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.console import summary_table
from llm_users.outputs.files import RecordWriter, csv_columns, write_summary
from llm_users.redaction import redact_config


def summary() -> dict:
    s = StatsByName()
    for i in range(5):
        s.add(RequestRecord(f"r{i}", "/v1/chat/completions", "vllm", "m", start_time=i, ttft_ns=40_000_000 + i,
                            e2e_ns=90_000_000, itl_ns=[5_000_000] * 10, output_tokens=11, tokens_source="usage"))
    return s.summary()


def test_record_writer_flushes_every_line(tmp_path) -> None:
    w = RecordWriter(tmp_path)
    w.write(RequestRecord("a", "n", "b", "m"))
    # readable before close: a crash now would keep it
    assert json.loads((tmp_path / "requests.jsonl").read_text())["request_id"] == "a"
    w.close()


def test_summary_files(tmp_path) -> None:
    jpath, cpath = write_summary(tmp_path, summary())
    data = json.loads(jpath.read_text())
    assert abs(data["overall"]["ttft"]["p50"] - 40.0) < 0.001
    lines = cpath.read_text().splitlines()
    assert lines[0].split(",") == csv_columns()
    assert lines[1].startswith("/v1/chat/completions,5,5,0") and lines[2].startswith("Aggregated,5")


def test_redaction() -> None:
    cfg = redact_config(Namespace(llm_model="m", api_key="SECRET", llm_api_key_env="OPENAI_API_KEY",
                                  auth_token="T", host="h"))
    assert cfg == {"llm_model": "m", "llm_api_key_env": "OPENAI_API_KEY", "host": "h"}


def test_console_table() -> None:
    text = summary_table(summary())
    assert "TTFT p50" in text and "/v1/chat/completions" in text and "Aggregated" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("Aggregated"))
    # TTFT p50 40 ms from 5 requests (marked: fewer than 20 samples), ITL p50 5 ms from 50 gaps
    assert " 40.0* " in row and " 5.00 " in row
