"""THE JUDGES: each official client parses the simulator's streams without error (no retries)
and reads exactly the text and usage the simulator's ground truth says it sent.

A failure here is a simulator bug: fix the simulator, never loosen the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import types
from huggingface_hub import InferenceClient

from llm_users.sim.text import expected_text
from tests.helpers import get_json
from tests.sim.simhttp import trace
from tests.sim.simsettings import OUTPUT_TOKENS, SEED

PROMPT = "Tell me a story about a lighthouse keeper"
TIMEOUT = 10.0


def _check(rec: dict, n: int, *, input_tokens: int | None = None) -> None:
    assert rec["completed"] and rec["outcome"] == "ok", rec
    assert rec["output_tokens"] == n
    assert sum(k for _, k in rec["chunks"]) == n
    if input_tokens is not None:
        assert rec["input_tokens"] == input_tokens


# --------------------------------------------------------------------------- OpenAI


def _openai(sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


@pytest.mark.parametrize("length_param", ["max_completion_tokens", "max_tokens"])
def test_openai_chat_stream(sim, rid, length_param):
    """OpenAI/vLLM style (max_completion_tokens) and the compat dialect of TGI Messages API
    and Ollama /v1 (max_tokens only)."""
    client = _openai(sim)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], stream=True,
        stream_options={"include_usage": True}, extra_headers={"X-Request-Id": rid},
        temperature=0.0, top_p=1.0, **{length_param: 8},
    )
    text, usage, finish, roles = "", None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    rec = trace(sim.url, rid)
    _check(rec, 8)
    assert roles == ["assistant"]
    assert text == expected_text(SEED, PROMPT, 8)
    assert finish == "length"
    assert usage.completion_tokens == rec["output_tokens"] == 8
    assert usage.prompt_tokens == rec["input_tokens"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_openai_chat_stream_stop(sim, rid):
    """A max above --output-tokens: the answer ends on its own (finish_reason stop)."""
    client = _openai(sim)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], stream=True, max_tokens=100,
        stream_options={"include_usage": True}, extra_headers={"X-Request-Id": rid},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    rec = trace(sim.url, rid)
    _check(rec, OUTPUT_TOKENS)
    assert text == expected_text(SEED, PROMPT, OUTPUT_TOKENS)
    assert finish == ["stop"]
    assert chunks[-1].usage.completion_tokens == OUTPUT_TOKENS


def test_openai_completions_stream(sim, rid):
    client = _openai(sim)
    stream = client.completions.create(
        model="m", prompt=PROMPT, max_tokens=6, stream=True, stream_options={"include_usage": True},
        extra_headers={"X-Request-Id": rid},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.text
    rec = trace(sim.url, rid)
    _check(rec, 6)
    assert text == expected_text(SEED, PROMPT, 6)
    assert usage.completion_tokens == 6
    assert usage.prompt_tokens == rec["input_tokens"] == len(PROMPT.split())


def test_openai_chat_non_streaming(sim, rid):
    client = _openai(sim)
    resp = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], max_completion_tokens=5,
        extra_headers={"X-Request-Id": rid},
    )
    rec = trace(sim.url, rid)
    _check(rec, 5)
    assert not rec["stream"]
    assert resp.choices[0].message.content == expected_text(SEED, PROMPT, 5)
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 5
    assert resp.usage.prompt_tokens == rec["input_tokens"]


def test_openai_models(sim):
    client = _openai(sim)
    assert [m.id for m in client.models.list()] == ["sim-model"]


# --------------------------------------------------------------------------- Anthropic


def _anthropic(sim, rid) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key="x", max_retries=0, timeout=TIMEOUT,
                               default_headers={"X-Request-Id": rid})


def test_anthropic_create_stream(sim, rid):
    client = _anthropic(sim, rid)
    events = list(client.messages.create(
        model="claude-sim", max_tokens=7, messages=[{"role": "user", "content": PROMPT}], stream=True))
    types_seen = [e.type for e in events]
    assert types_seen[0] == "message_start" and types_seen[-1] == "message_stop"
    assert types_seen[1] == "content_block_start"
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    start = events[0].message.usage
    delta = next(e for e in events if e.type == "message_delta")
    rec = trace(sim.url, rid)
    _check(rec, 7)
    assert text == expected_text(SEED, PROMPT, 7)
    assert start.input_tokens == rec["input_tokens"]
    assert delta.usage.output_tokens == rec["output_tokens"] == 7
    assert delta.delta.stop_reason == "max_tokens"


def test_anthropic_stream_helper(sim, rid):
    client = _anthropic(sim, rid)
    with client.messages.stream(model="claude-sim", max_tokens=50, system="Be brief.",
                                messages=[{"role": "user", "content": PROMPT}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    prompt = "Be brief.\n" + PROMPT
    rec = trace(sim.url, rid)
    _check(rec, OUTPUT_TOKENS)
    assert streamed == final.content[0].text == expected_text(SEED, prompt, OUTPUT_TOKENS)
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == OUTPUT_TOKENS
    assert final.usage.input_tokens == rec["input_tokens"] == len(prompt.split())


def test_anthropic_thinking(sim, rid):
    client = _anthropic(sim, rid)
    with client.messages.stream(model="claude-sim", max_tokens=12, thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": PROMPT}]) as stream:
        final = stream.get_final_message()
    rec = trace(sim.url, rid)
    _check(rec, 12)
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking + final.content[1].text == expected_text(SEED, PROMPT, 12)
    assert final.content[0].thinking == expected_text(SEED, PROMPT, 3)
    assert final.usage.output_tokens == 12


def test_anthropic_non_streaming(sim, rid):
    msg = _anthropic(sim, rid).messages.create(model="claude-sim", max_tokens=4,
                                               messages=[{"role": "user", "content": PROMPT}])
    rec = trace(sim.url, rid)
    _check(rec, 4)
    assert msg.content[0].text == expected_text(SEED, PROMPT, 4)
    assert msg.usage.output_tokens == 4 and msg.stop_reason == "max_tokens"


# --------------------------------------------------------------------------- Gemini


def _genai(sim, rid, version: str) -> genai.Client:
    return genai.Client(api_key="x", http_options=types.HttpOptions(
        base_url=sim.url, api_version=version, headers={"X-Request-Id": rid}, timeout=int(TIMEOUT * 1000)))


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_gemini_stream(sim, rid, version):
    client = _genai(sim, rid, version)
    chunks = list(client.models.generate_content_stream(
        model="gemini-sim", contents=PROMPT, config=types.GenerateContentConfig(max_output_tokens=10)))
    text = "".join(c.text or "" for c in chunks)
    last = chunks[-1]
    rec = trace(sim.url, rid)
    _check(rec, 10)
    assert rec["route"] == f"/{version}/models:streamGenerateContent"
    assert len(chunks) == 3  # 4 tokens per chunk
    assert text == expected_text(SEED, PROMPT, 10)
    assert last.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert last.usage_metadata.candidates_token_count == 10
    assert last.usage_metadata.prompt_token_count == rec["input_tokens"]
    assert last.usage_metadata.total_token_count == 10 + rec["input_tokens"]


def test_gemini_non_streaming(sim, rid):
    client = _genai(sim, rid, "v1beta")
    resp = client.models.generate_content(model="gemini-sim", contents=PROMPT,
                                          config=types.GenerateContentConfig(max_output_tokens=64))
    rec = trace(sim.url, rid)
    _check(rec, OUTPUT_TOKENS)
    assert resp.text == expected_text(SEED, PROMPT, OUTPUT_TOKENS)
    assert resp.candidates[0].finish_reason == types.FinishReason.STOP
    assert resp.usage_metadata.candidates_token_count == OUTPUT_TOKENS


# --------------------------------------------------------------------------- Ollama


def _ollama(sim, rid) -> ollama.Client:
    return ollama.Client(host=sim.url, headers={"X-Request-Id": rid}, timeout=TIMEOUT)


def test_ollama_chat_stream(sim, rid):
    parts = list(_ollama(sim, rid).chat(model="llama-sim", messages=[{"role": "user", "content": PROMPT}],
                                        stream=True, options={"num_predict": 9}))
    text = "".join(p.message.content for p in parts)
    last = parts[-1]
    rec = trace(sim.url, rid)
    _check(rec, 9)
    assert all(p.message.role == "assistant" for p in parts)
    assert text == expected_text(SEED, PROMPT, 9)
    assert last.done and last.done_reason == "length"
    assert last.eval_count == 9 and last.prompt_eval_count == rec["input_tokens"]
    assert last.total_duration > last.eval_duration > 0


def test_ollama_generate_stream(sim, rid):
    parts = list(_ollama(sim, rid).generate(model="llama-sim", prompt=PROMPT, stream=True,
                                            options={"num_predict": 100}))
    rec = trace(sim.url, rid)
    _check(rec, OUTPUT_TOKENS)
    assert "".join(p.response for p in parts) == expected_text(SEED, PROMPT, OUTPUT_TOKENS)
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count == OUTPUT_TOKENS


def test_ollama_chat_non_streaming(sim, rid):
    resp = _ollama(sim, rid).chat(model="llama-sim", messages=[{"role": "user", "content": PROMPT}],
                                  stream=False, options={"num_predict": 3})
    rec = trace(sim.url, rid)
    _check(rec, 3)
    assert resp.message.content == expected_text(SEED, PROMPT, 3) and resp.eval_count == 3


def test_ollama_list(sim):
    assert [m.model for m in ollama.Client(host=sim.url).list().models] == ["sim-model:latest"]


# --------------------------------------------------------------------------- TGI (huggingface_hub)


def _hf(sim, rid) -> InferenceClient:
    return InferenceClient(sim.url, headers={"X-Request-Id": rid}, timeout=TIMEOUT)


def test_tgi_stream_details_length(sim, rid):
    client = _hf(sim, rid)  # keep it referenced: its exit stack owns the open stream
    outs = list(client.text_generation(PROMPT, stream=True, details=True, max_new_tokens=8))
    rec = trace(sim.url, rid)
    _check(rec, 8)
    assert rec["route"] == "/"
    assert [o.index for o in outs] == list(range(1, 9))
    assert not any(o.token.special for o in outs)
    assert "".join(o.token.text for o in outs) == expected_text(SEED, PROMPT, 8)
    assert outs[-1].generated_text == expected_text(SEED, PROMPT, 8)
    details = outs[-1].details
    assert details.finish_reason == "length"
    assert details.generated_tokens == rec["output_tokens"] == 8
    assert details.input_length == rec["input_tokens"]


def test_tgi_stream_eos(sim, rid):
    """Ends on its own: the last token is the special </s>, not text, counted in generated_tokens."""
    client = _hf(sim, rid)
    outs = list(client.text_generation(PROMPT, stream=True, details=True, max_new_tokens=100))
    rec = trace(sim.url, rid)
    _check(rec, OUTPUT_TOKENS)
    assert outs[-1].token.special and outs[-1].token.text == "</s>"
    text = "".join(o.token.text for o in outs if not o.token.special)
    assert text == outs[-1].generated_text == expected_text(SEED, PROMPT, OUTPUT_TOKENS - 1)
    assert outs[-1].details.finish_reason == "eos_token"
    assert outs[-1].details.generated_tokens == OUTPUT_TOKENS


def test_tgi_non_streaming(sim, rid):
    out = _hf(sim, rid).text_generation(PROMPT, details=True, max_new_tokens=6)
    rec = trace(sim.url, rid)
    _check(rec, 6)
    assert out.generated_text == expected_text(SEED, PROMPT, 6)
    assert out.details.generated_tokens == 6 and out.details.finish_reason == "length"


# --------------------------------------------------------------------------- hang-up after the answer


def _busy_on(cpus: set[int]) -> subprocess.Popen:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(hog.pid, cpus)
    return hog


@pytest.mark.slow
def test_a_client_that_hangs_up_on_done_was_served(sim_factory) -> None:
    """The openai SDK closes the response as soon as it parses ``[DONE]``, before the body's
    terminating chunk: when the simulator is starved of CPU (here three busy processes share
    its two cores) the terminator can find the connection closed. The client got every token;
    the simulator must count the request served, not aborted (it once counted 1-3% aborted)."""
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "25")
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    os.sched_setaffinity(sim.pid, cpus)
    hogs = [_busy_on(cpus) for _ in range(3)]
    client = _openai(sim)

    def one(_: int) -> int:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}],
                                                stream=True, max_tokens=25)
        return sum(1 for c in stream if c.choices and c.choices[0].delta.content)

    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(one, range(400)))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    stats = get_json(sim.url + "/_sim/stats")
    assert got == [25] * 400
    assert (stats["started"], stats["served"], stats["aborted"]) == (400, 400, 0), f"simulator {stats}"
