"""sim/base.py: a reasoning job's frames, rendered by each dialect's route module, parse as
reasoning first through our client's parsers; with ``--reasoning-stream`` hidden or summary
(issue 53 item 4) the parsers find the server's count without the text, and TPOT counts the answer."""

from __future__ import annotations

import pytest

from llm_users.client.request_state import RequestState
from llm_users.metrics import RequestRecord
from llm_users.protocols.anthropic import AnthropicStreamParser
from llm_users.protocols.gemini import GeminiStreamParser
from llm_users.protocols.ollama import OllamaStreamParser
from llm_users.protocols.openai import OpenAIStreamParser
from llm_users.protocols.responses import ResponsesStreamParser
from llm_users.sim.base import Job
from llm_users.sim.routes_anthropic import AnthropicRenderer
from llm_users.sim.routes_gemini import GeminiRenderer
from llm_users.sim.routes_ollama import OllamaRenderer
from llm_users.sim.routes_openai import ChatRenderer
from llm_users.sim.routes_responses import ResponsesRenderer


def rec(**kw: object) -> RequestRecord:
    fields: dict = {"request_id": "r", "name": "/v1/chat/completions", "backend": "vllm", "model": "m", **kw}
    return RequestRecord(**fields)


def _job(k: int = 1, n: int = 8, reasoning: int = 3) -> Job:
    job = Job(protocol="p", route="/r", model="m", prompt="hello", input_tokens=1, max_tokens=n, k=k)
    job.plan(None, list(range(n)))
    job.reasoning = reasoning
    return job


def _chunks(job: Job) -> list[tuple[int, int]]:
    """The streamer's chunking: k tokens a chunk, never across the hidden or the reasoning boundary."""
    out, i = [], 0
    while i < job.n:
        j = min(i + job.k, job.n)
        if i < job.hidden < j:
            j = job.hidden
        elif i < job.thinking < j:
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


#: Every dialect that can hide or summarise reasoning, and the form it shows for each setting.
HIDING = {
    "openai": (lambda j: ChatRenderer(j, include_usage=True, continuous=False), OpenAIStreamParser,
               {"hidden": "hidden", "summary": "hidden"}),  # chat completions has no summary
    "responses": (lambda j: ResponsesRenderer(j, request={}, store=None), ResponsesStreamParser,
                  {"hidden": "hidden", "summary": "summary"}),
    "anthropic": (lambda j: AnthropicRenderer(j, thinking_budget=None), AnthropicStreamParser,
                  {"hidden": "summary", "summary": "summary"}),  # Claude 4 always shows a summary
    "gemini": (GeminiRenderer, GeminiStreamParser, {"hidden": "hidden", "summary": "summary"}),
}


@pytest.mark.parametrize("mode", ["hidden", "summary"])
@pytest.mark.parametrize("dialect", list(HIDING))
def test_hidden_or_summarised_reasoning_is_counted_and_tpot_counts_the_answer(dialect: str, mode: str) -> None:
    """20 tokens, 12 of them reasoning, one a chunk: hidden, none is written (its time passes:
    TTFT is the answer's first chunk); summary, the last 3 are (as a summary). The server's count
    still says 12, and the record's TPOT is the answer's pace (10 per chunk here), basis "answer"."""
    make, parser_cls, shows = HIDING[dialect]
    job = _job(k=1, n=20, reasoning=12)
    job.shown = mode
    render = make(job)
    shown = shows[mode]
    assert job.shown == shown and job.thinking == 12
    assert job.hidden == (12 if shown == "hidden" else 9) and job.n_chunks == len(_chunks(job)) == 20
    r = rec()
    st = RequestState(r, parser_cls())
    r.t0_ns = 0
    st.handle(st.parser.feed(render.head()), 1)
    for c, (i, j) in enumerate(_chunks(job)):
        if i >= job.hidden:  # the streamer writes nothing for a hidden token: only its time passes
            st.handle(st.parser.feed(render.chunk(i, j, j == job.n)), 10 * (c + 1))
    st.handle(st.parser.close(), 10_000)
    st.finish(10_000)
    r.e2e_ns = 200
    written = 12 - job.hidden
    assert (r.reasoning_chunks, r.chunks) == (written, 20 - job.hidden)
    assert (r.output_tokens, r.reasoning_tokens, r.reasoning_tokens_source, r.answer_tokens) == (20, 12, "usage", 8)
    assert r.ttft_ns == 10 * (job.hidden + 1) and r.ttfo_ns == 130  # the answer's first token: the 13th
    assert r.reasoning_hidden and r.tpot_basis == "answer"
    assert r.tpot_ns == pytest.approx(10.0)  # (200 - 130) / (8 - 1); every output token: (200 - TTFT) / 19
    assert r.output_chars == len(job.text(12).decode())


def test_full_reasoning_keeps_tpot_over_every_token() -> None:
    job = _job(k=1, n=20, reasoning=12)
    render = ChatRenderer(job, include_usage=True, continuous=False)
    assert job.hidden == 0
    r = rec()
    st = RequestState(r, OpenAIStreamParser())
    r.t0_ns = 0
    for c, (i, j) in enumerate(_chunks(job)):
        st.handle(st.parser.feed(render.chunk(i, j, j == job.n)), 10 * (c + 1))
    st.finish(10_000)
    r.e2e_ns = 200
    assert r.reasoning_chunks == 12 and not r.reasoning_hidden and r.tpot_basis == "all"
    assert r.tpot_ns == pytest.approx(10.0)  # (200 - 10) / 19
