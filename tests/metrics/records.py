"""Records the metrics and outputs tests build: a chat record, a streamed one, embeddings and rerank
records with their stats, and reasoning records fed chunk by chunk."""

from __future__ import annotations

import random

from llm_users.metrics import RequestRecord, StatsByName

MS = 1_000_000


def rec(i: int, **kw) -> RequestRecord:
    base = dict(request_id=f"r{i}", name="/v1/chat/completions", backend="vllm", model="m", start_time=100.0 + i,
                ttfb_ns=1_000_000, ttft_ns=50_000_000 + i * 1000, e2e_ns=150_000_000, itl_ns=[10_000_000] * 10,
                output_tokens=11, input_tokens=7, tokens_source="usage")
    base.update(kw)
    return RequestRecord(**base)


def streamed(chunks: int, text: str = "ab") -> RequestRecord:
    rec = RequestRecord("r", "n", "b", "m", t0_ns=0)
    for i in range(chunks):
        rec.token_chunk(1000 * (i + 1), 1000 * i, len(text))
    return rec


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


def reasoning_rec(**kw: object) -> RequestRecord:
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


def reasoning_records(n: int, seed: int) -> list[RequestRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        r = reasoning_rec(request_id=f"r{i}", start_time=1000.0 + i)
        kinds = "R" * rnd.randint(0, 6) + "A" * rnd.randint(1, 8)
        feed(r, kinds, ttft=rnd.randint(50, 150) * MS, gap=rnd.randint(2, 20) * MS)
        r.e2e_ns = (r.ttft_ns or 0) + sum(r.itl_ns) + MS
        r.usage(10, len(kinds), kinds.count("R") if i % 2 else None)
        r.settle_tokens()
        out.append(r)
    return out
