"""metrics/reasoning.py: the reasoning block (reasoning and answer apart) and its exact merge
(issue 30 item 3)."""

from __future__ import annotations

import random

from llm_users.metrics import RequestRecord, Stats, StatsByName

MS = 1_000_000


def rec(**kw: object) -> RequestRecord:
    fields: dict = {"request_id": "r", "name": "/v1/chat/completions", "backend": "vllm", "model": "m", **kw}
    return RequestRecord(**fields)


def feed(r: RequestRecord, kinds: str, t0: int = 1000 * MS, ttft: int = 100 * MS, gap: int = 10 * MS) -> None:
    """Chunks at t0 + ttft + k * gap; ``kinds``: one letter a chunk, R reasoning, A answer."""
    r.t0_ns = t0
    prev = 0
    for k, kind in enumerate(kinds):
        now = t0 + ttft + k * gap
        r.token_chunk(now, prev, 0 if kind == "R" else 3, kind == "R")
        prev = now


def _records(n: int, seed: int) -> list[RequestRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        r = rec(request_id=f"r{i}", start_time=1000.0 + i)
        kinds = "R" * rnd.randint(0, 6) + "A" * rnd.randint(1, 8)
        feed(r, kinds, ttft=rnd.randint(50, 150) * MS, gap=rnd.randint(2, 20) * MS)
        r.e2e_ns = (r.ttft_ns or 0) + sum(r.itl_ns) + MS
        r.usage(10, len(kinds), kinds.count("R") if i % 2 else None)
        r.settle_tokens()
        out.append(r)
    return out


def test_reasoning_block_splits_itl_and_counts() -> None:
    s = Stats()
    for r in _records(40, 1):
        s.add(r)
    recs = _records(40, 1)
    reasoned = [r for r in recs if r.reasoning_chunks]
    out = s.summary()
    block = out["reasoning"]
    assert block["requests"] == len(reasoned) > 0
    assert block["reasoning_tokens"] == sum(r.reasoning_tokens or 0 for r in recs)
    assert block["answer_tokens"] == out["output_tokens"] - block["reasoning_tokens"]
    assert block["reasoning_tokens_estimated_requests"] == sum(r.reasoning_tokens_source == "estimated" for r in recs)
    assert block["reasoning_chunks"] == sum(r.reasoning_chunks for r in recs)
    assert block["answer_chunks"] == sum(r.chunks - r.reasoning_chunks for r in reasoned)
    assert block["itl_reasoning"]["count"] == sum(r.reasoning_chunks - 1 for r in reasoned)
    assert block["itl_answer"]["count"] == sum(r.chunks - r.reasoning_chunks - 1 for r in reasoned)
    assert out["ttfo"]["count"] == len(recs) and out["ttst"]["count"] == sum(r.chunks > 1 for r in recs)
    assert out["ttfo"]["max"] == max(r.ttfo_ns or 0 for r in recs) / MS


def test_merge_in_wire_form_is_exact() -> None:
    recs = _records(60, 2)
    whole, a, b = StatsByName(), StatsByName(), StatsByName()
    for i, r in enumerate(recs):
        whole.add(r)
        (a if i % 2 else b).add(r)
    merged = StatsByName()
    merged.merge_wire(a.to_wire())
    merged.merge_wire(b.to_wire())
    got, want = merged.summary()["overall"], whole.summary()["overall"]
    for key in ("ttfo", "ttst", "reasoning"):
        assert got[key] == want[key], key
