"""The trace formats users have (Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV), read
from the samples in tests/fixtures/traces/: times rebased, windowed, lengths as in the file; and
prompts fitted to the server's count, with equal hash ids giving identical prefix text."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from llm_users.errors import ConfigError
from llm_users.load.trace_formats import azure_time, detect, parse_window
from llm_users.load.trace_replay import BLOCK_TOKENS, TraceRow, TraceSource, read_trace

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"
MOONCAKE, BURSTGPT, AZURE = (str(TRACES / n) for n in
                             ("mooncake_trace.jsonl", "BurstGPT_1.csv", "AzureLLMInferenceTrace_conv.csv"))


def test_mooncake_sample() -> None:
    raw = [json.loads(x) for x in Path(MOONCAKE).read_text().splitlines()]
    fmt, rows, skipped = read_trace(MOONCAKE, "mooncake")
    assert (fmt, skipped, len(rows)) == ("mooncake", 0, len(raw))
    for r, d in zip(rows, raw, strict=True):
        assert r.offset_s == pytest.approx((d["timestamp"] - raw[0]["timestamp"]) / 1000, abs=1e-9)
        assert (r.input_tokens, r.output_tokens, list(r.hash_ids)) == (d["input_length"], d["output_length"],
                                                                       d["hash_ids"])
    assert read_trace(MOONCAKE)[0] == "jsonl"  # auto: a .jsonl file is read by the lenient JSONL reader


def test_burstgpt_sample_skips_failed_rows() -> None:
    raw = list(csv.DictReader(Path(BURSTGPT).read_text().splitlines()))
    fmt, rows, skipped = read_trace(BURSTGPT)
    kept = [d for d in raw if int(d["Response tokens"]) > 0]
    assert (fmt, skipped, len(rows)) == ("burstgpt", len(raw) - len(kept), len(kept))
    t0 = float(kept[0]["Timestamp"])
    assert [(r.offset_s, r.input_tokens, r.output_tokens) for r in rows] == \
        [(float(d["Timestamp"]) - t0, int(d["Request tokens"]), int(d["Response tokens"])) for d in kept]


def test_azure_sample_and_window() -> None:
    raw = list(csv.DictReader(Path(AZURE).read_text().splitlines()))
    fmt, rows, _ = read_trace(AZURE)
    assert fmt == "azure" and len(rows) == len(raw)
    t0 = azure_time(raw[0]["TIMESTAMP"])
    for r, d in zip(rows, raw, strict=True):
        assert r.offset_s == pytest.approx(azure_time(d["TIMESTAMP"]) - t0, abs=1e-6)
        assert (r.input_tokens, r.output_tokens) == (int(d["ContextTokens"]), int(d["GeneratedTokens"]))
    _, cut, _ = read_trace(AZURE, "azure", (1.0, 3.0))
    inside = [r for r in rows if 1.0 <= r.offset_s < 3.0]
    assert len(cut) == len(inside) > 3
    assert [round(r.offset_s, 9) for r in cut] == [round(r.offset_s - 1.0, 9) for r in inside]


def test_azure_time_forms() -> None:
    assert azure_time("2023-11-16 18:15:46.6805900") == pytest.approx(1700158546.68059, abs=1e-6)
    assert azure_time("2024-05-10 00:00:00.009930+00:00") == pytest.approx(1715299200.00993, abs=1e-6)
    assert azure_time("2024-05-10 02:00:00+02:00") == pytest.approx(1715299200.0, abs=1e-6)
    with pytest.raises(ValueError, match="TIMESTAMP"):
        azure_time("16/11/2023")


def test_detect_and_window_text() -> None:
    assert detect("x.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n") == "burstgpt"
    assert detect("x.txt", "TIMESTAMP,ContextTokens,GeneratedTokens\n") == "azure"
    assert detect("x", '{"timestamp": 0}') == "jsonl"
    assert parse_window("60:") == (60.0, float("inf")) and parse_window(":5") == (0.0, 5.0)
    assert parse_window(None) is None


@pytest.mark.parametrize(("text", "fmt", "says"), [
    ("a,b\n1,2\n", "auto", "BurstGPT's or Azure's header"),
    ("Timestamp,Model,Request tokens,Response tokens\nx,m,1,1\n", "burstgpt", "line 2: Timestamp must be a number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,0\n", "azure", "GeneratedTokens must be >= 1"),
    ('{"offset_ms": 0, "input_length": 5, "output_length": 3}\n', "mooncake", "line 1: timestamp"),
    ("TIMESTAMP,ContextTokens\n", "azure", "lacks GeneratedTokens"),
])
def test_bad_files_name_the_line(tmp_path, text, fmt, says) -> None:
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=says):
        read_trace(str(p), fmt)


def test_window_with_no_rows(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no requests inside --llm-trace-window"):
        read_trace(AZURE, "auto", (500.0, 600.0))


class CountingProbe:
    """A server whose tokenizer counts words and whose chat template adds 7 tokens."""

    backend = "toy"

    def __init__(self) -> None:
        self.calls = 0

    def tokenize(self, text: str) -> int:
        self.calls += 1
        return len(text.split())

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        return len(messages[0]["content"].split()) + 7


def test_prompts_fit_the_count_and_share_blocks_by_hash_id() -> None:
    rows = [TraceRow(0.0, 1300, 4, (0, 1, 5)), TraceRow(0.1, 1100, 4, (0, 1, 6)), TraceRow(0.2, 700, 4, (0, 9)),
            TraceRow(0.3, 900, 4, (3, 1)), TraceRow(0.4, 40, 4, ())]
    src = TraceSource(rows)
    probe = CountingProbe()
    src.prepare(probe)
    assert src.fitter.method == "tokenizer" and src.fitter.overhead == 7
    items = [it for _, it in src.rows(0, 1)]
    texts = [it.messages[0]["content"].split() for it in items]
    for r, it, words in zip(rows, items, texts, strict=True):
        assert len(words) + 7 == r.input_tokens == it.target_input_tokens  # exact, as the server counts
        assert it.max_tokens == r.output_tokens
    two = 2 * BLOCK_TOKENS
    assert texts[0][:two] == texts[1][:two]  # hash ids 0, 1: the same two blocks
    assert texts[0][:BLOCK_TOKENS] == texts[2][:BLOCK_TOKENS] and texts[0][:two] != texts[2][:two]
    assert texts[3][:BLOCK_TOKENS] != texts[0][:BLOCK_TOKENS]  # block 1 after block 3 is another prefix
    assert texts[0][two:] != texts[1][two:]
    # a block is the same text every time it is built (not a cache artefact): a fresh source agrees
    again = TraceSource([rows[1]])
    again.prepare(CountingProbe())
    assert next(again.rows(0, 1))[1].messages[0]["content"].split()[:two] == texts[0][:two]
