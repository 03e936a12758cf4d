"""metrics/record.py: a request's record: TPOT, TTFO and TTST, reasoning counts (server's or
estimated), the dict round trip."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord
from tests.metrics.records import MS, feed, rec
from tests.metrics.records import reasoning_rec as rec_reasoning


def test_tpot_definition() -> None:
    r = rec(0, ttft_ns=50_000_000, e2e_ns=150_000_000, output_tokens=11)
    assert r.tpot_ns == pytest.approx(10_000_000)  # (150 - 50) / (11 - 1) ms
    assert rec(0, output_tokens=1).tpot_ns is None
    assert rec(0, ttft_ns=None).tpot_ns is None


def test_record_dict_roundtrip() -> None:
    r = rec(5, server={"eval_count": 3})
    d = r.to_dict()
    assert d["tpot_ns"] == r.tpot_ns
    assert RequestRecord.from_dict(d) == r


def test_ttfo_is_the_first_answer_chunk_and_ttst_the_second_chunk() -> None:
    r = rec_reasoning()
    feed(r, "RRRRAAA")
    assert r.ttft_ns == 100 * MS and r.ttst_ns == 110 * MS and r.ttfo_ns == 140 * MS
    assert r.ttfo_ns - r.ttft_ns == sum(r.itl_ns[:4]) == 4 * 10 * MS  # N reasoning chunks x ITL
    assert r.chunks == 7 and r.reasoning_chunks == 4 and r.output_chars == 9 and len(r.itl_ns) == 6


def test_without_reasoning_ttfo_equals_ttft_and_one_chunk_has_no_ttst() -> None:
    r = rec_reasoning()
    feed(r, "AAA")
    assert r.ttfo_ns == r.ttft_ns == 100 * MS and r.ttst_ns == 110 * MS and r.reasoning_chunks == 0
    one = rec_reasoning()
    feed(one, "A")
    assert one.ttst_ns is None and one.ttfo_ns == one.ttft_ns
    only = rec_reasoning()  # max tokens ran out while reasoning: no answer, no TTFO
    feed(only, "RR")
    assert only.ttfo_ns is None and only.ttst_ns == 110 * MS


def test_reasoning_tokens_from_usage_else_estimated_from_reasoning_chunks() -> None:
    r = rec_reasoning()
    feed(r, "RRRAA")
    r.usage(5, 9, 6)  # the server's counts (a chunk may carry several tokens)
    r.settle_tokens()
    assert (r.reasoning_tokens, r.reasoning_tokens_source, r.answer_tokens) == (6, "usage", 3)
    e = rec_reasoning()
    feed(e, "RRRAA")
    e.usage(5, 9)  # no reasoning count (llama.cpp, Ollama)
    e.settle_tokens()
    assert (e.reasoning_tokens, e.reasoning_tokens_source, e.answer_tokens) == (3, "estimated", 6)
    z = rec_reasoning()
    feed(z, "RRAA")
    z.usage(5, 4, 0)  # 0 reasoning tokens for streamed reasoning cannot be true
    z.settle_tokens()
    assert (z.reasoning_tokens, z.reasoning_tokens_source) == (2, "estimated")
    n = rec_reasoning()
    feed(n, "AA")
    n.settle_tokens()
    assert (n.reasoning_tokens, n.reasoning_tokens_source, n.answer_tokens, n.tokens_source) == (
        None, "none", 2, "estimated")
    d = e.to_dict()
    assert (d["ttfo_ns"], d["ttst_ns"], d["reasoning_chunks"], d["answer_tokens"]) == (e.ttfo_ns, e.ttst_ns, 3, 6)
    assert RequestRecord.from_dict(d).ttfo_ns == e.ttfo_ns  # answer_tokens (derived) is dropped on the way back


def _answered(kinds: str, output: int, reasoning: int | None) -> RequestRecord:
    """Chunks at 100 ms + k x 10 ms (``kinds``: R reasoning, A answer), the stream's end at the last
    chunk, the server's counts as given."""
    r = rec_reasoning()
    feed(r, kinds)
    r.e2e_ns = (r.ttft_ns or 0) + sum(r.itl_ns)
    r.usage(5, output, reasoning)
    r.settle_tokens()
    return r


def test_hidden_reasoning_tpot_counts_the_answer_tokens() -> None:
    """Issue 53 item 4: 30 reasoning tokens counted, none streamed (OpenAI o-series, Gemini without
    includeThoughts): TPOT is the answer's pace, (E2E - TTFT) / (10 - 1), not / (40 - 1)."""
    r = _answered("A" * 10, 40, 30)
    assert r.reasoning_chunks == 0 and r.answer_tokens == 10 and r.reasoning_hidden
    assert r.tpot_basis == "answer" and r.tpot_ns == pytest.approx(10 * MS)  # was 90 / 39 = 2.3 ms
    d = r.to_dict()
    assert (d["tpot_ns"], d["tpot_basis"]) == (r.tpot_ns, "answer")
    assert RequestRecord.from_dict(d) == r


def test_summarised_reasoning_tpot_is_the_answer_after_its_first_token() -> None:
    """A summary (3 chunks) of 30 counted reasoning tokens: the hidden part's time is between
    TTFT and TTFO, so the answer's TPOT runs from TTFO: (E2E - TTFO) / (answer - 1)."""
    r = _answered("RRR" + "A" * 10, 40, 30)
    assert r.reasoning_hidden and r.tpot_basis == "answer"
    assert r.ttfo_ns - r.ttft_ns == 30 * MS and r.tpot_ns == pytest.approx(10 * MS)  # 90 ms / 9


def test_reasoning_streamed_in_full_keeps_every_output_token() -> None:
    full = _answered("RRRRRR" + "AAAA", 10, 6)  # one token a chunk, reasoning and answer alike
    assert not full.reasoning_hidden and full.tpot_basis == "all" and full.tpot_ns == pytest.approx(10 * MS)
    multi = _answered("RR" + "AAA", 20, 8)  # 4 tokens a chunk (Gemini): 8 reasoning tokens fit 2 chunks
    assert not multi.reasoning_hidden and multi.tpot_basis == "all"
    assert multi.tpot_ns == pytest.approx(40 * MS / 19)
    ollama = _answered("RRR" + "AAA", 6, None)  # no count: estimated from the chunks, streamed by definition
    assert ollama.reasoning_tokens_source == "estimated" and ollama.tpot_basis == "all"
    plain = _answered("AAAA", 4, None)
    assert plain.tpot_basis == "all" and plain.tpot_ns == pytest.approx(10 * MS)


def test_no_tpot_no_basis() -> None:
    one = _answered("A", 31, 30)  # hidden reasoning and a one-token answer: no gap to divide
    assert one.reasoning_hidden and one.tpot_ns is None and one.tpot_basis is None
    spent = _answered("RR", 30, 30)  # summary only, the answer never started (no TTFO)
    assert spent.tpot_ns is None and spent.tpot_basis is None
    assert rec(0, output_tokens=1).tpot_basis is None and rec(0).tpot_basis == "all"
