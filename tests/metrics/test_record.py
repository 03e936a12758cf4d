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
