"""OpenAI Responses API: request dialects, and streams recorded from llama.cpp's server, LiteLLM's
bridge and the simulator (OpenAI's event sequence, with reasoning), each cut at every byte."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ConfigError, ProtocolError
from llm_users.protocols.backend import get_backend
from llm_users.protocols.base import Content, Finish, ModelName, ServerError, Usage
from llm_users.protocols.responses import ResponsesStreamParser, build_request, split_input
from llm_users.protocols.sampling import Sampling
from llm_users.settings import settings_for

P = "responses"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def body(req) -> dict:
    return orjson.loads(req.body)


def test_openai_body_one_user_message_as_text() -> None:
    req = build_request(model="gpt-5-mini", messages=[{"role": "user", "content": "Hi"}], sampling=Sampling(),
                        api_key="sk-x")
    assert (req.method, req.path, req.name) == ("POST", "/v1/responses", "/v1/responses")
    assert body(req) == {"model": "gpt-5-mini", "input": "Hi", "max_output_tokens": 512, "temperature": 0.0,
                         "top_p": 1.0, "stream": True}
    assert req.headers["Accept"] == "text/event-stream" and req.redacted_headers()["Authorization"] == "***"


def test_message_items_carry_their_type() -> None:
    """llama.cpp's server refuses an assistant item without ``type: message``: every item has it."""
    history = [*MESSAGES, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}]
    b = body(build_request(model="m", messages=history, sampling=Sampling(max_tokens=40)))
    assert b["input"] == [{"type": "message", "role": m["role"], "content": m["content"]} for m in history]
    assert b["max_output_tokens"] == 40 and "previous_response_id" not in b


def test_openai_floor_of_16_and_vllm_extras() -> None:
    s = Sampling(max_tokens=1, seed=7, stop=("END",))
    assert body(build_request(model="m", messages=MESSAGES, sampling=s))["max_output_tokens"] == 16
    v = body(build_request(model="m", messages=MESSAGES, sampling=s, dialect="vllm"))
    assert (v["max_output_tokens"], v["ignore_eos"], v["seed"], v["stop"]) == (1, True, 7, ["END"])
    assert "min_tokens" not in v  # vLLM's ResponsesRequest has no min_tokens
    with pytest.raises(ValueError, match="unknown Responses dialect"):
        build_request(model="m", messages=MESSAGES, sampling=s, dialect="compat")  # type: ignore[arg-type]


def test_a_chained_history_sends_the_previous_id_and_the_new_message_only() -> None:
    history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": " a", "response_id": "resp_1"},
               {"role": "user", "content": "two"}, {"role": "assistant", "content": " b", "response_id": "resp_2"},
               {"role": "user", "content": "three"}]
    assert split_input(history) == ("resp_2", "three")
    b = body(build_request(model="m", messages=history, sampling=Sampling()))
    assert (b["previous_response_id"], b["input"]) == ("resp_2", "three")
    assert split_input(history[:3]) == ("resp_1", "two")


def test_openai_refuses_less_than_16_tokens_at_start() -> None:
    class U:
        max_tokens, temperature, top_p, ignore_eos, seed, client = 8, 0.0, 1.0, False, None, "raw"
        endpoint, model, prompts, api_key_env = "responses", None, None, None
        descriptor = get_backend("openai")

    opts = type("O", (), {"llm_endpoint": "responses"})()
    with pytest.raises(ConfigError, match="--llm-max-tokens must be at least 16 for openai's responses endpoint"):
        settings_for(U, opts)
    U.descriptor = get_backend("vllm")
    assert settings_for(U, opts).sampling.max_tokens == 8  # vLLM takes any length


def test_llamacpp_stream(harness) -> None:
    """llama.cpp: full event sequence, no sequence_number/output_index, completed even at the
    maximum, its ``timings`` beside the response."""
    data = harness.read(P, "llamacpp.sse")
    s = harness.check(ResponsesStreamParser, data)
    assert s.complete and s.errors == [] and s.finishes == ["completed"]
    assert s.chunks == 4 and s.text == "Say hello mendatanguser"
    assert (s.usage.input_tokens, s.usage.output_tokens, s.usage.reasoning_tokens) == (11, 4, None)
    assert s.usage.server["timings"]["predicted_n"] == 4
    assert s.usage.server["response_id"].startswith("resp_") and s.usage.server["cached_tokens"] == 6
    assert s.models == ["gemma-3-270m"]
    harness.check_truncated(ResponsesStreamParser, data, b"event: response.completed")


def test_litellm_bridge_stream(harness) -> None:
    """LiteLLM's bridge: no ``event:`` lines, ids that change per event, ``[DONE]`` at the end."""
    data = harness.read(P, "litellm_bridge.sse")
    s = harness.check(ResponsesStreamParser, data)
    assert s.complete and s.errors == [] and s.finishes == ["completed"] and s.text == "Say hello mendatanguser"
    assert (s.usage.input_tokens, s.usage.output_tokens, s.usage.reasoning_tokens) == (11, 4, 0)
    assert s.models == ["gemma-3-270m"]  # from response.created (its completed says hosted_vllm/...)
    harness.check_truncated(ResponsesStreamParser, data, b'data: {"type":"response.completed"')
    without_done = data[: data.index(b"data: [DONE]")]
    assert harness.check(ResponsesStreamParser, without_done).complete  # [DONE] is not the end signal


def test_reasoning_and_incomplete_at_the_maximum(harness) -> None:
    """OpenAI's sequence (the simulator's): reasoning deltas first, then text; cut at
    max_output_tokens it ends with response.incomplete: a success with that finish reason."""
    data = harness.read(P, "openai_reasoning_incomplete.sse")
    s = harness.check(ResponsesStreamParser, data)
    assert s.complete and s.errors == [] and s.finishes == ["max_output_tokens"]
    assert s.chunks == 5 and len(s.reasoning.split()) == 2 and len(s.text.split()) == 3
    assert (s.usage.output_tokens, s.usage.reasoning_tokens) == (5, 2)
    assert s.models == ["gpt-5-mini"]
    harness.check_truncated(ResponsesStreamParser, data, b"event: response.incomplete")


def _frames(*objs: dict) -> bytes:
    return b"".join(b"event: %b\ndata: %b\n\n" % (o["type"].encode(), orjson.dumps(o)) for o in objs)


CREATED = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "model": "m"}}


def test_summary_reasoning_and_tool_deltas(harness) -> None:
    data = _frames(
        CREATED,
        {"type": "response.reasoning_summary_text.delta", "delta": "think", "item_id": "rs", "output_index": 0,
         "summary_index": 0, "sequence_number": 1},
        {"type": "response.function_call_arguments.delta", "delta": '{"city"', "item_id": "fc", "output_index": 1,
         "sequence_number": 2},
        {"type": "response.function_call_arguments.delta", "delta": "", "item_id": "fc", "output_index": 1,
         "sequence_number": 3},
        {"type": "response.refusal.delta", "delta": "no", "item_id": "m", "output_index": 2, "content_index": 0,
         "sequence_number": 4},
        {"type": "response.completed", "sequence_number": 5,
         "response": {"id": "resp_1", "usage": {"input_tokens": 3, "output_tokens": 9,
                                                "output_tokens_details": {"reasoning_tokens": 4}}}},
    )
    events, complete = harness.parse(ResponsesStreamParser, data)
    assert complete
    assert [e for e in events if isinstance(e, Content)] == [
        Content("think", reasoning=True), Content('{"city"', tool=True), Content("no")]
    assert events[0] == ModelName("m") and Finish("completed") in events
    usage = next(e for e in events if isinstance(e, Usage))
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (3, 9, 4)
    assert usage.server == {"response_id": "resp_1"}


@pytest.mark.parametrize(("payload", "message", "status", "kind"), [
    ({"type": "error", "code": "server_is_overloaded", "message": "busy", "param": None, "sequence_number": 3},
     "busy", None, "server_is_overloaded"),
    ({"type": "error", "error": {"type": "invalid_request_error", "code": 400, "message": "bad"}},
     "bad", 400, "invalid_request_error"),
    ({"error": {"message": "boom", "type": "None", "code": "500"}}, "boom", 500, "None"),  # LiteLLM's shape
    ({"type": "response.failed", "sequence_number": 9,
      "response": {"id": "r", "status": "failed", "error": {"code": "server_error", "message": "died"}}},
     "died", None, "server_error"),
    ({"type": "response.failed", "response": {"id": "r", "status": "failed", "error": None}},
     "the response failed (response.failed without an error)", None, None),
])
def test_error_events(harness, payload: dict, message: str, status: int | None, kind: str | None) -> None:
    name = payload.get("type", "error").encode()
    data = b"event: %b\ndata: %b\n\n" % (name, orjson.dumps(payload))
    s = harness.check(ResponsesStreamParser, _frames(CREATED) + data)
    assert s.errors == [ServerError(message, status=status, kind=kind)]
    assert not s.complete


def test_sdk_payloads_go_through_the_same_rules() -> None:
    """SDK mode hands the events as decoded objects with their type as the name."""
    p = ResponsesStreamParser()
    assert p.payload({"type": "response.output_text.delta", "delta": "x"}, b"response.output_text.delta") == [
        Content("x")]
    ended = p.payload({"type": "response.incomplete", "response": {"id": "r9", "incomplete_details": {
        "reason": "max_output_tokens"}, "usage": {"input_tokens": 1, "output_tokens": 1}}}, b"response.incomplete")
    assert ended[-1] == Finish("max_output_tokens") and p.complete and p.frames == 2


@pytest.mark.parametrize("frame", [
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":\n\n',
    b"data: [1, 2]\n\n",
    b'data: {"type":"response.completed","response":[1]}\n\n',
])
def test_malformed_payload_raises(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        p = ResponsesStreamParser()
        p.feed(frame)
        p.close()
