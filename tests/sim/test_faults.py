"""Faults forced with ``X-Sim-Fault`` do what they say, on the wire and in the ground truth."""

from __future__ import annotations

import json
import random
import statistics

import anthropic
import openai
import pytest

from llm_users.sim.config import FAULT_KINDS
from llm_users.sim.faults import Fault, FaultHeaderError, draw_fault, parse_fault_header
from llm_users.sim.launcher import start_simulator
from tests.sim import simhttp
from tests.sim.simsettings import ITL_MS, OUTPUT_TOKENS, STALL_MS

MS = 1_000_000
CHAT = {"model": "m", "messages": [{"role": "user", "content": "fault please"}], "stream": True,
        "max_tokens": 100, "stream_options": {"include_usage": True}}


def _chat(sim, rid, fault: str, body=None) -> simhttp.Raw:
    return simhttp.request(sim.url, "/v1/chat/completions", body or CHAT, {"X-Request-Id": rid, "X-Sim-Fault": fault})


def _data_lines(body: bytes) -> list[bytes]:
    return [line[len(b"data: "):] for line in body.split(b"\n") if line.startswith(b"data: ")]


def _content_chunks(body: bytes) -> int:
    n = 0
    for payload in _data_lines(body):
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        n += sum(1 for c in obj.get("choices") or [] if c.get("delta", {}).get("content"))
    return n


def test_http_429_openai(sim, rid):
    r = _chat(sim, rid, "http_429")
    assert r.status == 429 and r.headers["retry-after"] == "1"
    err = r.json()["error"]
    assert err["code"] == 429 and err["message"] and "type" in err and "param" in err
    rec = simhttp.trace(sim.url, rid)
    assert rec["status"] == 429 and not rec["completed"] and rec["fault"] == "http_429" and rec["chunks"] == []


@pytest.mark.parametrize(("path", "body", "check"), [
    ("/v1/messages", {"model": "c", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "x"}]},
     lambda j: j["type"] == "error" and j["error"]["type"] == "rate_limit_error"),
    ("/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": [{"parts": [{"text": "x"}]}]},
     lambda j: j["error"]["code"] == 429 and j["error"]["status"] == "RESOURCE_EXHAUSTED"),
    ("/api/chat", {"model": "o", "messages": [{"role": "user", "content": "x"}]}, lambda j: j["error"]),
    ("/generate_stream", {"inputs": "x"}, lambda j: j["error_type"] == "overloaded"),
])
def test_http_429_shapes(sim, rid, path, body, check):
    r = simhttp.request(sim.url, path, body, {"X-Request-Id": rid, "X-Sim-Fault": "http_429"})
    assert r.status == 429 and r.headers["retry-after"] == "1"
    assert check(r.json()), r.body


@pytest.mark.parametrize("status", [500, 503])
def test_http_5xx(sim, rid, status):
    r = _chat(sim, rid, f"http_{status}")
    assert r.status == status and r.json()["error"]["code"] == status
    assert "retry-after" not in r.headers


def test_reset_closes_the_connection(sim, rid):
    r = _chat(sim, rid, "reset;after=3")
    assert r.status == 200 and (r.reset or not r.chunked_complete)
    assert not r.chunked_complete
    assert b"[DONE]" not in r.body
    rec = simhttp.trace(sim.url, rid)
    assert rec["outcome"] == "reset" and not rec["completed"] and len(rec["chunks"]) == 3


def test_reset_seen_by_the_sdk(sim, rid):
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=5)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True,
                                            extra_headers={"X-Sim-Fault": "reset;after=2"})
    with pytest.raises(openai.APIConnectionError):
        list(stream)


def test_truncate_lacks_the_terminator(sim, rid):
    r = _chat(sim, rid, "truncate;after=4")
    assert r.status == 200 and r.chunked_complete  # the HTTP body ends cleanly...
    assert b"[DONE]" not in r.body and b"finish_reason\":\"" not in r.body  # ...without the protocol's end
    assert _content_chunks(r.body) == 4
    rec = simhttp.trace(sim.url, rid)
    assert rec["outcome"] == "truncated" and not rec["completed"] and rec["output_tokens"] == 4


def test_malformed_line_present(sim, rid):
    r = _chat(sim, rid, "malformed;after=2")
    assert r.status == 200 and r.chunked_complete
    bad = []
    for payload in _data_lines(r.body):
        if payload == b"[DONE]":
            continue
        try:
            json.loads(payload)
        except ValueError:
            bad.append(payload)
    assert len(bad) == 1
    assert r.body.rstrip().endswith(b"data: [DONE]")  # the stream goes on after the bad line
    assert _content_chunks(r.body) == OUTPUT_TOKENS
    rec = simhttp.trace(sim.url, rid)
    assert rec["fault"] == "malformed" and not rec["completed"] and rec["output_tokens"] == OUTPUT_TOKENS


def test_malformed_rejected_by_the_sdk(sim):
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=5)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True,
                                            extra_headers={"X-Sim-Fault": "malformed;after=1"})
    with pytest.raises(ValueError):  # json.JSONDecodeError
        list(stream)


def test_stall_pauses_then_continues(sim, rid):
    r = _chat(sim, rid, "stall;after=5")
    assert r.status == 200 and r.chunked_complete and r.body.rstrip().endswith(b"data: [DONE]")
    rec = simhttp.trace(sim.url, rid)
    times = [t for t, _ in rec["chunks"]]
    assert len(times) == OUTPUT_TOKENS  # one token a chunk: chunk k is due at first + k x ITL
    # The simulator paces by schedule (its first chunk's target in the trace): the stall moves every
    # later chunk by STALL_MS. Read against that schedule, not by the clock's luck: no chunk is
    # written before its slot (the timer runs at most 0.5 ms early), so the pause is never cut short;
    # and how many stalls each chunk's slot holds (its lateness in whole stalls, rounded) is 0 for
    # the median chunk before the fault and 1 after it: one stall, not none, not more. One late timer
    # on a busy box (CI: a gap of 215 ms, the next 5.3 ms as the schedule caught up) moves one chunk.
    first = rec["ttft_target_ns"]
    slots = [first + k * ITL_MS * MS + (STALL_MS * MS if k >= 5 else 0) for k in range(len(times))]
    early = [(k, (slot - t) / MS) for k, (t, slot) in enumerate(zip(times, slots, strict=True)) if t < slot - MS]
    assert early == [], early
    stalls = [round((t - first - k * ITL_MS * MS) / (STALL_MS * MS)) for k, t in enumerate(times)]
    assert statistics.median(stalls[:5]) == 0 and statistics.median(stalls[5:]) == 1, stalls
    assert rec["completed"] and rec["output_tokens"] == OUTPUT_TOKENS


def test_midstream_error_openai(sim, rid):
    r = _chat(sim, rid, "midstream_error;after=3")
    assert r.status == 200
    lines = _data_lines(r.body)
    assert lines[-1] == b"[DONE]"
    err = json.loads(lines[-2])["error"]
    assert err["code"] == 500 and err["message"]
    rec = simhttp.trace(sim.url, rid)
    assert rec["outcome"] == "error" and not rec["completed"]


def test_midstream_error_raised_by_sdks(sim):
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=5)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True,
                                            extra_headers={"X-Sim-Fault": "midstream_error;after=1"})
    with pytest.raises(openai.APIError):
        list(stream)
    claude = anthropic.Anthropic(base_url=sim.url, api_key="x", max_retries=0, timeout=5)
    with pytest.raises(anthropic.APIStatusError):
        list(claude.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}],
                                    stream=True, extra_headers={"X-Sim-Fault": "midstream_error;after=1"}))


@pytest.mark.parametrize(("path", "body", "marker"), [
    ("/v1/messages", {"model": "c", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "x"}]},
     b"event: error\ndata: {\"type\":\"error\""),
    ("/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": [{"parts": [{"text": "x"}]}]},
     b'data: {"error":{"code":500'),
    ("/api/chat", {"model": "o", "messages": [{"role": "user", "content": "x"}]}, b'\n{"error":"'),
    ("/generate_stream", {"inputs": "x"}, b'data:{"error":"'),
])
def test_midstream_error_shapes(sim, rid, path, body, marker):
    r = simhttp.request(sim.url, path, body, {"X-Request-Id": rid, "X-Sim-Fault": "midstream_error;after=2"})
    assert r.status == 200 and r.chunked_complete
    assert marker in r.body, r.body[-300:]


@pytest.mark.parametrize(("path", "body", "terminator"), [
    ("/v1/messages", {"model": "c", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "x"}]},
     b"message_stop"),
    ("/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": [{"parts": [{"text": "x"}]}]}, b"finishReason"),
    ("/api/chat", {"model": "o", "messages": [{"role": "user", "content": "x"}]}, b'"done":true'),
    ("/generate_stream", {"inputs": "x"}, b'"generated_text":"'),
])
def test_truncate_shapes(sim, rid, path, body, terminator):
    r = simhttp.request(sim.url, path, body, {"X-Request-Id": rid, "X-Sim-Fault": "truncate;after=2"})
    assert r.status == 200 and r.chunked_complete and r.body
    assert terminator not in r.body


def test_bad_fault_header(sim):
    r = _chat(sim, "bad", "explode")
    assert r.status == 400 and "unknown kind" in r.json()["error"]["message"]


def test_fault_rate_is_seeded():

    args = ["--fault-rate", "0.5", "--fault-kinds", "http_503", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens",
            "2", "--seed", "9"]
    runs = []
    for _ in range(2):
        with start_simulator(args) as s:
            runs.append([simhttp.request(s.url, "/v1/chat/completions", CHAT).status for _ in range(20)])
    assert runs[0] == runs[1]
    assert set(runs[0]) == {200, 503}


def test_fault_header_parsing():
    assert parse_fault_header("reset") == Fault("reset", None)
    assert parse_fault_header(" truncate ; after=3 ") == Fault("truncate", 3)
    assert parse_fault_header("HTTP_429").http_status == 429
    for bad in ("boom", "reset;after=x", "reset;after=-1", "reset;when=2"):
        with pytest.raises(FaultHeaderError):
            parse_fault_header(bad)
    assert Fault("reset", 100).chunk_index(10) == 9
    assert Fault("reset").chunk_index(10) == 5 and Fault("reset").chunk_index(1) == 0


def test_fault_draw():
    rng = random.Random(3)
    draws = [draw_fault(rng, 0.3, FAULT_KINDS, 10) for _ in range(2000)]
    hit = [d for d in draws if d is not None]
    assert 0.25 < len(hit) / len(draws) < 0.35
    assert {d.kind for d in hit} == set(FAULT_KINDS)
    assert all(0 <= d.after < 10 for d in hit)
    assert draw_fault(rng, 0.0, FAULT_KINDS, 10) is None
