"""Reasoning-aware metrics (issue 30 item 3), units: TTFO and TTST per record, reasoning counts
(server's or estimated), the reasoning block and its exact merge, the simulator's reasoning
frames through each dialect's client parser, and how the outputs show them."""

from __future__ import annotations

import random

import pytest

from llm_users.client.request_state import RequestState
from llm_users.metrics import RequestRecord, Stats, StatsByName
from llm_users.outputs.compare_stats import headline, table
from llm_users.outputs.console import summary_table
from llm_users.outputs.html_report import render
from llm_users.protocols.anthropic import AnthropicStreamParser
from llm_users.protocols.base import Content, Usage
from llm_users.protocols.gemini import GeminiStreamParser
from llm_users.protocols.ollama import OllamaStreamParser
from llm_users.protocols.openai import OpenAIStreamParser
from llm_users.sim.base import Job
from llm_users.sim.routes_anthropic import AnthropicRenderer
from llm_users.sim.routes_gemini import GeminiRenderer
from llm_users.sim.routes_ollama import OllamaRenderer
from llm_users.sim.routes_openai import ChatRenderer

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


def test_ttfo_is_the_first_answer_chunk_and_ttst_the_second_chunk() -> None:
    r = rec()
    feed(r, "RRRRAAA")
    assert r.ttft_ns == 100 * MS and r.ttst_ns == 110 * MS and r.ttfo_ns == 140 * MS
    assert r.ttfo_ns - r.ttft_ns == sum(r.itl_ns[:4]) == 4 * 10 * MS  # N reasoning chunks x ITL
    assert r.chunks == 7 and r.reasoning_chunks == 4 and r.output_chars == 9 and len(r.itl_ns) == 6


def test_without_reasoning_ttfo_equals_ttft_and_one_chunk_has_no_ttst() -> None:
    r = rec()
    feed(r, "AAA")
    assert r.ttfo_ns == r.ttft_ns == 100 * MS and r.ttst_ns == 110 * MS and r.reasoning_chunks == 0
    one = rec()
    feed(one, "A")
    assert one.ttst_ns is None and one.ttfo_ns == one.ttft_ns
    only = rec()  # max tokens ran out while reasoning: no answer, no TTFO
    feed(only, "RR")
    assert only.ttfo_ns is None and only.ttst_ns == 110 * MS


def test_reasoning_tokens_from_usage_else_estimated_from_reasoning_chunks() -> None:
    r = rec()
    feed(r, "RRRAA")
    r.usage(5, 9, 6)  # the server's counts (a chunk may carry several tokens)
    r.settle_tokens()
    assert (r.reasoning_tokens, r.reasoning_tokens_source, r.answer_tokens) == (6, "usage", 3)
    e = rec()
    feed(e, "RRRAA")
    e.usage(5, 9)  # no reasoning count (llama.cpp, Ollama)
    e.settle_tokens()
    assert (e.reasoning_tokens, e.reasoning_tokens_source, e.answer_tokens) == (3, "estimated", 6)
    z = rec()
    feed(z, "RRAA")
    z.usage(5, 4, 0)  # 0 reasoning tokens for streamed reasoning cannot be true
    z.settle_tokens()
    assert (z.reasoning_tokens, z.reasoning_tokens_source) == (2, "estimated")
    n = rec()
    feed(n, "AA")
    n.settle_tokens()
    assert (n.reasoning_tokens, n.reasoning_tokens_source, n.answer_tokens, n.tokens_source) == (
        None, "none", 2, "estimated")
    d = e.to_dict()
    assert (d["ttfo_ns"], d["ttst_ns"], d["reasoning_chunks"], d["answer_tokens"]) == (e.ttfo_ns, e.ttst_ns, 3, 6)
    assert RequestRecord.from_dict(d).ttfo_ns == e.ttfo_ns  # answer_tokens (derived) is dropped on the way back


def test_request_state_passes_the_reasoning_flag() -> None:
    r = rec()
    st = RequestState(r, OpenAIStreamParser())
    r.t0_ns = 0
    st.handle([Content("think", reasoning=True)], 10)
    st.handle([Content("think", reasoning=True), Content("Hi")], 20)  # one delta with both: two chunks
    st.handle([Usage(3, 4, 2)], 30)
    assert (r.ttft_ns, r.ttst_ns, r.ttfo_ns, r.reasoning_chunks, r.output_chars) == (10, 20, 20, 2, 2)


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


# ------------------------------------------------- the simulator's reasoning frames, each dialect's parser

def _job(k: int = 1, n: int = 8, reasoning: int = 3) -> Job:
    job = Job(protocol="p", route="/r", model="m", prompt="hello", input_tokens=1, max_tokens=n, k=k)
    job.plan(None, list(range(n)))
    job.reasoning = reasoning
    return job


def _chunks(job: Job) -> list[tuple[int, int]]:
    """The streamer's chunking: k tokens a chunk, never across the reasoning boundary."""
    out, i = [], 0
    while i < job.n:
        j = min(i + job.k, job.n)
        if i < job.thinking < j:
            j = job.thinking
        out.append((i, j))
        i = j
    return out


RENDERERS = {
    "openai": (lambda j: ChatRenderer(j, include_usage=True, continuous=False), OpenAIStreamParser, 1),
    "anthropic": (lambda j: AnthropicRenderer(j, thinking_budget=None), AnthropicStreamParser, 1),
    "gemini": (GeminiRenderer, GeminiStreamParser, 4),
    "ollama-chat": (lambda j: OllamaRenderer(j, chat=True), OllamaStreamParser, 1),
    "ollama-generate": (lambda j: OllamaRenderer(j, chat=False), OllamaStreamParser, 1),
}


@pytest.mark.parametrize("dialect", list(RENDERERS))
def test_simulator_reasoning_frames_parse_as_reasoning_first(dialect: str) -> None:
    make, parser_cls, k = RENDERERS[dialect]
    job = _job(k=k)
    render = make(job)
    assert job.thinking == 3 and job.n_chunks == len(_chunks(job))
    r = rec()
    st = RequestState(r, parser_cls())
    r.t0_ns = 0
    st.handle(st.parser.feed(render.head()), 1)
    for c, (i, j) in enumerate(_chunks(job)):
        st.handle(st.parser.feed(render.chunk(i, j, j == job.n)), 10 * (c + 1))
    st.handle(st.parser.close(), 10_000)
    st.finish(10_000)
    reasoning_chunks = -(-3 // k)
    assert r.reasoning_chunks == reasoning_chunks and r.chunks == job.n_chunks
    assert r.ttft_ns == 10 and r.ttst_ns == 20 and r.ttfo_ns == 10 * (reasoning_chunks + 1)
    assert r.output_tokens == 8 and r.answer_tokens == 5
    assert r.reasoning_tokens == 3
    assert r.reasoning_tokens_source == ("estimated" if dialect.startswith("ollama") else "usage")
    assert r.output_chars == len(job.text(3).decode())  # the answer's text only


# ------------------------------------------------- outputs

def _summary(reasoning: bool) -> dict:
    s = StatsByName()
    for r in _records(30, 3):
        if not reasoning:
            r = rec(request_id=r.request_id, start_time=r.start_time)
            feed(r, "AAAA")
            r.e2e_ns = 200 * MS
            r.usage(10, 4)
        s.add(r)
    return s.summary()


def test_console_and_report_show_ttfo_only_when_the_run_reasoned() -> None:
    plain, reasoned = _summary(False), _summary(True)
    text = summary_table(plain)
    assert "TTST p50" in text and "TTFO" not in text and "reasoning:" not in text
    text = summary_table(reasoned)
    head = text.splitlines()[1]
    assert head.index("TTFT p50") < head.index("TTFO p50") < head.index("TTST p50") < head.index("ITL p50")
    line = next(ln for ln in text.splitlines() if ln.startswith("reasoning:"))
    r = reasoned["overall"]["reasoning"]
    assert f"tokens reasoning {r['reasoning_tokens']}, answer {r['answer_tokens']}" in line
    assert "estimated from reasoning chunks" in line
    html = render(reasoned, [])
    assert "Reasoning and answer" in html and "TTFO p50" in html and "TTST p50" in html
    html = render(plain, [])
    assert "Reasoning and answer" not in html and "TTFO" not in html and "TTST p50" in html


def test_reasoning_counted_but_not_streamed_gets_one_line() -> None:
    """OpenAI's o-series reports reasoning_tokens without streaming the reasoning: no TTFO columns
    (TTFO is TTFT), one line that says where the reasoning time went."""
    s = StatsByName()
    for i in range(5):
        r = rec(request_id=f"h{i}", start_time=1000.0 + i)
        feed(r, "AAA")
        r.e2e_ns = 200 * MS
        r.usage(10, 40, 37)
        r.settle_tokens()
        s.add(r)
    summary = s.summary()
    assert summary["overall"]["reasoning"]["reasoning_tokens"] == 185
    text = summary_table(summary)
    assert "TTFO" not in text.splitlines()[1]
    assert "the server counted 185 reasoning tokens but streamed none of them (answer tokens 15)" in text
    assert "streamed none of them" in render(summary, [])


def test_compare_shows_ttfo_only_when_a_run_reasoned() -> None:
    class R:  # the part of compare_stats.Run that table() reads
        def __init__(self, s: dict) -> None:
            self.summary, self.metrics = s, headline(s)

    plain, reasoned = _summary(False), _summary(True)
    assert headline(reasoned)["ttfo.p50"] == reasoned["overall"]["ttfo"]["p50"]
    assert headline(reasoned)["reasoning_tokens"] == reasoned["overall"]["reasoning"]["reasoning_tokens"]
    rows = {row[0] for row in table([R(plain), R(plain)])}  # type: ignore[list-item]
    assert "ttst.p50" in rows and "ttfo.p50" not in rows
    rows = {row[0] for row in table([R(plain), R(reasoned)])}  # type: ignore[list-item]
    assert {"ttfo.p50", "ttst.p99"} <= rows
