"""``--usage-zero output|input|both``: every answer's usage says 0 output tokens, 0 input tokens
or both (LiteLLM's Gemini bridge streams text with ``usageMetadata`` counts of 0), in every
dialect, streamed and not, while the text, the frames and the ground truth stay as they were.

The official SDKs parse the streams (as in test_judges.py) and must see the zeros; the raw
frames, usage taken out, must equal those of a simulator with the same settings but no
``--usage-zero``. ``--reasoning-tokens 2``: the first two tokens stream as reasoning text (where the
dialect has it) and their count is zeroed with the output's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import types
from huggingface_hub import InferenceClient

from llm_users.sim.cli import config_from_args
from llm_users.sim.config import SimConfig
from llm_users.sim.launcher import SimProcess, start_simulator
from llm_users.sim.text import expected_text, expected_tokens
from tests.sim import simhttp
from tests.sim.simsettings import SEED, SIM_ARGS

PROMPT = "Tell me a story about a lighthouse keeper"
N = 8  # below --output-tokens: every answer ends by length
REASONING = 2
TIMEOUT = 10.0
MODES = {"both": (True, True), "output": (False, True), "input": (True, False)}  # zero (input, output)


ZARGS = [*SIM_ARGS, "--ttft-ms", "5", "--itl-ms", "1", "--reasoning-tokens", str(REASONING), "--prefix-cache-block", "2"]


@pytest.fixture(scope="module", params=list(MODES))
def zsim(request) -> Iterator[tuple[str, SimProcess]]:
    """The session simulator's settings (so the same text), fast timing, usage zeroed as the param says."""
    mode = request.param
    with start_simulator([*ZARGS, "--usage-zero", mode]) as s:
        yield mode, s
        errors = s.stderr_text()
    assert "Traceback" not in errors, errors


@pytest.fixture(scope="module")
def rsim() -> Iterator[SimProcess]:
    """The same settings without ``--usage-zero``: the frames to compare with."""
    with start_simulator(ZARGS) as s:
        yield s


class Want:
    """What the answer must report, from the ground truth and the mode."""

    def __init__(self, mode: str, rec: dict[str, Any], n: int = N) -> None:
        zero_in, zero_out = MODES[mode]
        assert rec["completed"] and rec["outcome"] == "ok", rec
        assert rec["output_tokens"] == n and sum(k for _, k in rec["chunks"]) == n  # the truth is kept
        assert rec["input_tokens"] == len(PROMPT.split()) > 0
        self.zero_out = zero_out
        self.input = 0 if zero_in else rec["input_tokens"]
        self.output = 0 if zero_out else n
        self.total = self.input + self.output
        self.reasoning = 0 if zero_out else REASONING
        self.text = expected_text(SEED, PROMPT, n)
        self.thought = "".join(expected_tokens(SEED, PROMPT, n)[:REASONING])  # streamed as reasoning where it can be
        self.answer = self.text[len(self.thought):]
        assert self.text and self.answer and self.text.startswith(self.thought)

    def running(self, seen: list[int], n: int = N) -> None:
        """Per-chunk cumulative output counts: all 0 when zeroed, else growing to n."""
        if self.zero_out:
            assert set(seen) == {0}, seen
        else:
            assert seen == sorted(seen) and seen[-1] == n, seen


# --------------------------------------------------------------------------- OpenAI


def _openai(sim: SimProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


def test_openai_chat_stream(zsim, rid):
    mode, sim = zsim
    stream = _openai(sim).chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], stream=True, max_completion_tokens=N,
        stream_options={"include_usage": True, "continuous_usage_stats": True}, extra_headers={"X-Request-Id": rid})
    chunks = list(stream)
    want = Want(mode, simhttp.trace(sim.url, rid))
    content = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in content) == want.answer
    assert "".join(getattr(c.choices[0].delta, "reasoning", None) or "" for c in content) == want.thought
    assert content[-1].choices[0].finish_reason == "length"
    for c in content:  # continuous_usage_stats: usage on every chunk
        assert c.usage.prompt_tokens == want.input
        assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    want.running([c.usage.completion_tokens for c in content])
    final = chunks[-1]
    assert not final.choices
    u = final.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (want.input, want.output, want.total)
    details = u.completion_tokens_details
    assert (details.reasoning_tokens if details else 0) == want.reasoning


def test_openai_cached_tokens(zsim, rid):
    """With the input count zeroed, cached_tokens (part of it) says 0 too."""
    mode, sim = zsim
    prompt = f"{rid} {PROMPT}"  # a prompt never seen: the second request finds it cached
    usages = []
    for _ in range(2):
        chunks = list(_openai(sim).chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}], stream=True, max_completion_tokens=N,
            stream_options={"include_usage": True}))
        usages.append(chunks[-1].usage)
    assert [u.prompt_tokens_details.cached_tokens for u in usages] == [0, 0 if MODES[mode][0] else 8]
    assert {u.prompt_tokens for u in usages} == {0 if MODES[mode][0] else len(prompt.split())}


def test_openai_completions_stream(zsim, rid):
    mode, sim = zsim
    stream = _openai(sim).completions.create(
        model="m", prompt=PROMPT, max_tokens=N, stream=True, stream_options={"include_usage": True},
        extra_headers={"X-Request-Id": rid})
    chunks = list(stream)
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert "".join(ch.text for c in chunks for ch in c.choices) == want.text
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    u = chunks[-1].usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (want.input, want.output, want.total)


def test_openai_chat_non_streaming(zsim, rid):
    mode, sim = zsim
    resp = _openai(sim).chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], max_completion_tokens=N,
        extra_headers={"X-Request-Id": rid})
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert resp.choices[0].message.content == want.answer and resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.reasoning == want.thought  # type: ignore[attr-defined]
    u = resp.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (want.input, want.output, want.total)


def test_openai_completions_non_streaming(zsim, rid):
    mode, sim = zsim
    resp = _openai(sim).completions.create(model="m", prompt=PROMPT, max_tokens=N,
                                           extra_headers={"X-Request-Id": rid})
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert resp.choices[0].text == want.text
    u = resp.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (want.input, want.output, want.total)


# --------------------------------------------------------------------------- TGI


def _hf(sim: SimProcess, rid: str) -> InferenceClient:
    return InferenceClient(sim.url, headers={"X-Request-Id": rid}, timeout=TIMEOUT)


def test_tgi_stream(zsim, rid):
    mode, sim = zsim
    client = _hf(sim, rid)  # keep it referenced: its exit stack owns the open stream
    outs = list(client.text_generation(PROMPT, stream=True, details=True, max_new_tokens=N))
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert [o.index for o in outs] == list(range(1, N + 1))
    assert "".join(o.token.text for o in outs) == outs[-1].generated_text == want.text
    d = outs[-1].details
    assert (d.generated_tokens, d.input_length, d.finish_reason) == (want.output, want.input, "length")


def test_tgi_generate_stream_raw(zsim, rid):
    mode, sim = zsim
    r = simhttp.request(sim.url, "/generate_stream", {"inputs": PROMPT, "parameters": {"max_new_tokens": N,
                        "details": True}}, {"X-Request-Id": rid})
    frames = [json.loads(line[5:]) for line in r.lines() if line.startswith(b"data:")]
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert len(frames) == N and "".join(f["token"]["text"] for f in frames) == want.text
    d = frames[-1]["details"]
    assert (d["generated_tokens"], d["input_length"]) == (want.output, want.input)


def test_tgi_non_streaming(zsim, rid):
    mode, sim = zsim
    out = _hf(sim, rid).text_generation(PROMPT, details=True, max_new_tokens=N)
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert out.generated_text == want.text
    assert out.details.generated_tokens == want.output and len(out.details.tokens) == N


def test_tgi_generate_headers(zsim, rid):
    mode, sim = zsim
    r = simhttp.request(sim.url, "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": N}},
                        {"X-Request-Id": rid})
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert r.json()["generated_text"] == want.text
    assert (r.headers["x-generated-tokens"], r.headers["x-prompt-tokens"]) == (str(want.output), str(want.input))


# --------------------------------------------------------------------------- Ollama


def _ollama(sim: SimProcess, rid: str) -> ollama.Client:
    return ollama.Client(host=sim.url, headers={"X-Request-Id": rid}, timeout=TIMEOUT)


def test_ollama_chat_stream(zsim, rid):
    mode, sim = zsim
    parts = list(_ollama(sim, rid).chat(model="llama-sim", messages=[{"role": "user", "content": PROMPT}],
                                        stream=True, options={"num_predict": N}))
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert "".join(p.message.content for p in parts) == want.answer
    assert "".join(p.message.thinking or "" for p in parts) == want.thought
    last = parts[-1]
    assert last.done and last.done_reason == "length"
    assert (last.eval_count, last.prompt_eval_count) == (want.output, want.input)  # 0 is written, not left out
    assert last.total_duration > last.eval_duration > 0


def test_ollama_generate_stream(zsim, rid):
    mode, sim = zsim
    parts = list(_ollama(sim, rid).generate(model="llama-sim", prompt=PROMPT, stream=True,
                                            options={"num_predict": N}))
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert "".join(p.response for p in parts) == want.answer
    assert "".join(p.thinking or "" for p in parts) == want.thought
    assert (parts[-1].eval_count, parts[-1].prompt_eval_count) == (want.output, want.input)


def test_ollama_chat_non_streaming(zsim, rid):
    mode, sim = zsim
    resp = _ollama(sim, rid).chat(model="llama-sim", messages=[{"role": "user", "content": PROMPT}],
                                  stream=False, options={"num_predict": N})
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert resp.message.content == want.answer and resp.message.thinking == want.thought
    assert (resp.eval_count, resp.prompt_eval_count) == (want.output, want.input)


# --------------------------------------------------------------------------- Anthropic


def _anthropic(sim: SimProcess, rid: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key="x", max_retries=0, timeout=TIMEOUT,
                               default_headers={"X-Request-Id": rid})


def test_anthropic_stream(zsim, rid):
    mode, sim = zsim
    events = list(_anthropic(sim, rid).messages.create(
        model="claude-sim", max_tokens=N, messages=[{"role": "user", "content": PROMPT}], stream=True))
    want = Want(mode, simhttp.trace(sim.url, rid))
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == want.thought
    assert "".join(d.text for d in deltas if d.type == "text_delta") == want.answer
    start = events[0].message.usage
    assert (start.input_tokens, start.output_tokens) == (want.input, 0 if want.zero_out else 1)
    delta = next(e for e in events if e.type == "message_delta")
    assert (delta.usage.input_tokens, delta.usage.output_tokens) == (want.input, want.output)
    assert delta.delta.stop_reason == "max_tokens"


def test_anthropic_stream_helper(zsim, rid):
    mode, sim = zsim
    with _anthropic(sim, rid).messages.stream(model="claude-sim", max_tokens=N,
                                              messages=[{"role": "user", "content": PROMPT}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert streamed == final.content[1].text == want.answer and final.content[0].thinking == want.thought
    assert (final.usage.input_tokens, final.usage.output_tokens) == (want.input, want.output)


def test_anthropic_non_streaming(zsim, rid):
    mode, sim = zsim
    msg = _anthropic(sim, rid).messages.create(model="claude-sim", max_tokens=N,
                                               messages=[{"role": "user", "content": PROMPT}])
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert msg.content[1].text == want.answer and msg.stop_reason == "max_tokens"
    assert msg.content[0].thinking == want.thought
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (want.input, want.output)


# --------------------------------------------------------------------------- Gemini


def _genai(sim: SimProcess, rid: str) -> genai.Client:
    return genai.Client(api_key="x", http_options=types.HttpOptions(
        base_url=sim.url, api_version="v1beta", headers={"X-Request-Id": rid}, timeout=int(TIMEOUT * 1000)))


def test_gemini_stream(zsim, rid):
    mode, sim = zsim
    client = _genai(sim, rid)  # keep it referenced: closing it closes the stream
    chunks = list(client.models.generate_content_stream(
        model="gemini-sim", contents=PROMPT, config=types.GenerateContentConfig(max_output_tokens=N)))
    want = Want(mode, simhttp.trace(sim.url, rid))
    assert len(chunks) == 3  # 4 tokens per chunk, cut where the thoughts end (2 + 4 + 2): the same in every mode
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert "".join(p.text for p in parts if p.thought) == want.thought
    assert "".join(p.text for p in parts if not p.thought) == want.answer
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    for c in chunks:  # every chunk carries usageMetadata
        u = c.usage_metadata
        assert u.prompt_token_count == want.input
        assert u.total_token_count == want.input + (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
        assert (u.thoughts_token_count or 0) == want.reasoning
    # candidates leave the thoughts out, as Gemini counts: they grow to the answer's length
    want.running([c.usage_metadata.candidates_token_count or 0 for c in chunks], N - want.reasoning)
    u = chunks[-1].usage_metadata
    assert (u.candidates_token_count + (u.thoughts_token_count or 0), u.total_token_count) == (want.output, want.total)


def test_gemini_non_streaming(zsim, rid):
    mode, sim = zsim
    client = _genai(sim, rid)
    resp = client.models.generate_content(model="gemini-sim", contents=PROMPT,
                                          config=types.GenerateContentConfig(max_output_tokens=N))
    want = Want(mode, simhttp.trace(sim.url, rid))
    parts = resp.candidates[0].content.parts
    assert [p.text for p in parts] == [want.thought, want.answer] and parts[0].thought
    u = resp.usage_metadata
    assert (u.prompt_token_count, u.candidates_token_count + (u.thoughts_token_count or 0), u.total_token_count) == (
        want.input, want.output, want.total)


# --------------------------------------------------------------------------- only usage differs

# Keys that carry usage, identity or timing: taken out before comparing frames with the session simulator's.
VARYING = {"usage", "usageMetadata", "generated_tokens", "input_length", "eval_count", "prompt_eval_count",
           "id", "created", "responseId", "created_at", "total_duration", "load_duration", "prompt_eval_duration",
           "eval_duration"}

RAW = [
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": N,
                              "stream": True, "stream_options": {"include_usage": True,
                                                                 "continuous_usage_stats": True}}),
    ("/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": N, "stream": True,
                         "stream_options": {"include_usage": True}}),
    ("/generate_stream", {"inputs": PROMPT, "parameters": {"max_new_tokens": N, "details": True}}),
    ("/api/chat", {"model": "o", "messages": [{"role": "user", "content": PROMPT}], "options": {"num_predict": N}}),
    ("/api/generate", {"model": "o", "prompt": PROMPT, "options": {"num_predict": N}}),
    ("/v1/messages", {"model": "c", "max_tokens": N, "stream": True, "messages": [{"role": "user",
                                                                                   "content": PROMPT}]}),
    ("/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": [{"parts": [{"text": PROMPT}]}],
                                                        "generationConfig": {"maxOutputTokens": N}}),
]


def _strip(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in VARYING}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def _frames(body: bytes) -> list[Any]:
    out: list[Any] = []
    for line in body.splitlines():
        if not line or line.startswith(b"event:"):
            out.append(line.decode())
            continue
        payload = line[5:].strip() if line.startswith(b"data:") else line
        out.append(payload.decode() if payload == b"[DONE]" else _strip(json.loads(payload)))
    return out


@pytest.mark.parametrize(("path", "body"), RAW, ids=[p.split("?")[0] for p, _ in RAW])
def test_only_usage_differs(zsim, rsim, rid, path, body):
    """The same frames and the same writes as a simulator with the same settings without the
    option for the same request, once usage (the reasoning count too), ids and timings are taken out."""
    _, zs = zsim
    got = simhttp.request(zs.url, path, body, {"X-Request-Id": rid})
    base = simhttp.request(rsim.url, path, body, {"X-Request-Id": rid})
    assert got.status == base.status == 200 and got.chunked_complete and base.chunked_complete
    assert _frames(got.body) == _frames(base.body)
    chunks = [k for _, k in simhttp.trace(zs.url, rid)["chunks"]]
    assert chunks == [k for _, k in simhttp.trace(rsim.url, rid)["chunks"]] and sum(chunks) == N


# --------------------------------------------------------------------------- settings


def test_config_reports_the_mode(zsim):
    mode, sim = zsim
    assert simhttp.get_json(sim.url, "/_sim/config")["usage_zero"] == mode


def test_cli_accepts_the_modes_and_defaults_off():
    assert config_from_args([])[0].usage_zero is None
    for mode in MODES:
        assert config_from_args(["--usage-zero", mode])[0].usage_zero == mode


def test_cli_rejects_an_unknown_mode(capsys):
    with pytest.raises(SystemExit) as e:
        config_from_args(["--usage-zero", "all"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--usage-zero" in err and "invalid choice: 'all'" in err
    assert "'output', 'input', 'both'" in err
    with pytest.raises(ValueError, match="usage_zero must be one of output, input, both"):
        SimConfig(usage_zero="all")
