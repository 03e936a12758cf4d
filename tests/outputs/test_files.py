"""outputs/files.py, outputs/console.py and redaction.py: files, CSV columns, redaction, the console table."""

from __future__ import annotations

import json
from argparse import Namespace

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.console import summary_table
from llm_users.outputs.files import csv_columns, write_summary
from llm_users.outputs.records_file import RecordWriter
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


def test_a_merged_records_packed_gaps_are_written_as_the_same_numbers_with_or_without_numpy(tmp_path, monkeypatch) -> None:
    """A master's record holds its gaps as an array("q"): the records file writes them through
    numpy's view (the fast extra) or as a list without it, the same line either way."""
    import sys

    from llm_users.metrics.record import pack_gaps

    gaps = [20_000_000 + 13 * k for k in range(200)] + [2**62]
    plain = RequestRecord("r1", "/x", "vllm", "m", ttft_ns=5, e2e_ns=9, itl_ns=gaps, output_tokens=202)
    merged = RequestRecord.from_dict({**plain.to_dict(), "itl_ns": pack_gaps(gaps)})
    lines = []
    for name, numpy_gone in (("with", False), ("without", True)):
        if numpy_gone:
            monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
        w = RecordWriter(tmp_path / name)
        w.write(plain)
        w.write(merged)
        w.close()
        lines += (tmp_path / name / "requests.jsonl").read_bytes().splitlines()
    assert len(lines) == 4 and len(set(lines)) == 1
    assert b"4611686018427387904]" in lines[0]
