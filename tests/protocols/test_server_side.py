"""The server's own timings and request id per source (protocols/server_side.py) and the request
state that reads them at the end of a stream (the breakdown of one request:
tests/metrics/test_breakdown.py)."""

from __future__ import annotations

import pytest

from llm_users.client.request_state import RequestState
from llm_users.errors import ServerStreamError, StreamTruncated
from llm_users.metrics import RequestRecord
from llm_users.protocols.backend import get_backend
from llm_users.protocols.server_side import (
    ANTHROPIC,
    OPENAI,
    make,
    ollama_timings,
    openai_timings,
    tgi_timings,
)

MS = 1_000_000


def test_vllm_per_request_metrics() -> None:
    server = {"time_to_first_token_ms": 12.5, "generation_time_ms": 40.0, "queue_time_ms": 3.25,
              "mean_itl_ms": 5.0, "cached_tokens": 0}
    assert openai_timings(server, {}) == {"queue_ns": 3_250_000, "prefill_ns": 12_500_000, "decode_ns": 40 * MS,
                                          "server_total_ns": 55_750_000, "source": "vllm"}


def test_llamacpp_timings_leave_the_queue_unknown() -> None:
    server = {"timings": {"prompt_n": 9, "prompt_ms": 4.2, "predicted_n": 16, "predicted_ms": 80.5}}
    st = openai_timings(server, {})
    assert st == {"queue_ns": None, "prefill_ns": 4_200_000, "decode_ns": 80_500_000, "server_total_ns": None,
                  "source": "llama.cpp"}


def test_openai_processing_ms_header_is_a_total_only() -> None:
    assert openai_timings(None, {b"openai-processing-ms": b"231"}) == {
        "queue_ns": None, "prefill_ns": None, "decode_ns": None, "server_total_ns": 231 * MS, "source": "openai"}
    assert openai_timings(None, {b"openai-processing-ms": b"soon"}) is None
    assert openai_timings({"cached_tokens": 3}, {}) is None  # nothing about time: no timings


def test_ollama_durations_queue_is_what_precedes_prefill() -> None:
    server = {"total_duration": 100 * MS, "load_duration": 5 * MS, "prompt_eval_count": 8,
              "prompt_eval_duration": 20 * MS, "eval_count": 16, "eval_duration": 60 * MS}
    assert ollama_timings(server, {}) == {"queue_ns": 20 * MS, "prefill_ns": 20 * MS, "decode_ns": 60 * MS,
                                          "server_total_ns": 100 * MS, "source": "ollama"}
    assert ollama_timings({"total_duration": 0}, {}) is None  # zero-valued fields are left out by Ollama


def test_tgi_headers() -> None:
    st = tgi_timings(None, {b"x-queue-time": b"7", b"x-total-time": b"120", b"x-inference-time": b"113"})
    assert st == {"queue_ns": 7 * MS, "prefill_ns": None, "decode_ns": None, "server_total_ns": 120 * MS,
                  "source": "tgi"}
    assert tgi_timings(None, {}) is None  # TGI's streams carry none


def test_make_rounds_and_sums_only_when_all_parts_are_known() -> None:
    assert make(None, None, None, None, "x") is None
    assert make(1.4, 2.6, None, None, "x")["server_total_ns"] is None
    assert make(1.4, 2.6, 3.0, None, "x") == {"queue_ns": 1, "prefill_ns": 3, "decode_ns": 3, "server_total_ns": 7,
                                              "source": "x"}


def test_request_id_header_first_unless_it_echoes_ours() -> None:
    assert OPENAI.request_id({b"x-request-id": b"req_abc"}, "ours") == "req_abc"
    assert OPENAI.request_id({b"x-request-id": b"ours"}, "ours") is None  # vLLM and the simulator echo ours
    assert ANTHROPIC.request_id({b"request-id": b"req_011"}, "ours") == "req_011"


def _state(backend: str, endpoint: str | None = None) -> tuple[RequestState, RequestRecord]:
    route = get_backend(backend).route(endpoint)
    rec = RequestRecord("ours", "n", backend, "m")
    state = RequestState(rec, route.parser(), side=route.server_side)
    state.start()
    return state, rec


VLLM_STREAM = (b'data: {"id":"chatcmpl-7","model":"m","choices":[{"index":0,"delta":{"content":"hi"},'
               b'"finish_reason":"length"}]}\n\n'
               b'data: {"id":"chatcmpl-7","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1},'
               b'"metrics":{"queue_time_ms":1.5,"time_to_first_token_ms":2.25,"generation_time_ms":3}}\n\n'
               b'data: [DONE]\n\n')


@pytest.mark.parametrize(("headers", "expected"), [({b"x-request-id": b"ours"}, "chatcmpl-7"),
                                                   ({b"x-request-id": b"req_9"}, "req_9"), ({}, "chatcmpl-7")])
def test_request_state_reads_timings_and_the_id(headers: dict, expected: str) -> None:
    state, rec = _state("vllm")
    state.response(200, rec.t0_ns + 10, headers)
    state.handle(state.parser.feed(VLLM_STREAM), rec.t0_ns + 100)
    state.finish(rec.t0_ns + 200)
    assert rec.server_request_id == expected
    assert rec.server_timings == {"queue_ns": 1_500_000, "prefill_ns": 2_250_000, "decode_ns": 3 * MS,
                                  "server_total_ns": 6_750_000, "source": "vllm"}
    assert "server_timings" in rec.to_dict() and "server_request_id" in rec.to_dict()


def test_anthropic_message_id_and_gemini_response_id() -> None:
    state, rec = _state("claude")
    state.response(200, rec.t0_ns + 10, {})
    state.handle(state.parser.feed(b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01",'
                                   b'"model":"c","usage":{"input_tokens":3,"output_tokens":1}}}\n\n'), rec.t0_ns + 20)
    with pytest.raises(StreamTruncated):  # a cut stream keeps the id it had
        state.finish(rec.t0_ns + 30)
    assert rec.server_request_id == "msg_01"
    state, rec = _state("gemini")
    state.handle(state.parser.feed(b'data: {"candidates":[{"content":{"parts":[{"text":"a"}],"role":"model"},'
                                   b'"finishReason":"STOP"}],"modelVersion":"g","responseId":"resp-5"}\r\n\r\n'),
                 rec.t0_ns + 20)
    state.finish(rec.t0_ns + 30)
    assert rec.server_request_id == "resp-5"


def test_an_in_stream_error_keeps_the_streams_id() -> None:
    state, rec = _state("vllm")
    with pytest.raises(ServerStreamError):
        state.handle(state.parser.feed(b'data: {"id":"chatcmpl-8","model":"m","choices":[{"index":0,"delta":'
                                       b'{"content":"a"}}]}\n\ndata: {"error":{"message":"boom","code":500}}\n\n'),
                     rec.t0_ns + 20)
    assert rec.server_request_id == "chatcmpl-8"


def test_every_route_of_the_openai_shape_reads_the_same_timings() -> None:
    for backend, endpoint in (("vllm", "chat"), ("vllm", "completions"), ("openai", None), ("tgi", "chat"),
                              ("ollama", "openai")):
        assert get_backend(backend).route(endpoint).server_side is OPENAI, (backend, endpoint)
