"""sim/base.py: a reasoning job's frames, rendered by each dialect's route module, parse as
reasoning first through our client's parsers."""

from __future__ import annotations

import pytest

from llm_users.client.request_state import RequestState
from llm_users.metrics import RequestRecord
from llm_users.protocols.anthropic import AnthropicStreamParser
from llm_users.protocols.gemini import GeminiStreamParser
from llm_users.protocols.ollama import OllamaStreamParser
from llm_users.protocols.openai import OpenAIStreamParser
from llm_users.sim.base import Job
from llm_users.sim.routes_anthropic import AnthropicRenderer
from llm_users.sim.routes_gemini import GeminiRenderer
from llm_users.sim.routes_ollama import OllamaRenderer
from llm_users.sim.routes_openai import ChatRenderer


def rec(**kw: object) -> RequestRecord:
    fields: dict = {"request_id": "r", "name": "/v1/chat/completions", "backend": "vllm", "model": "m", **kw}
    return RequestRecord(**fields)


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
