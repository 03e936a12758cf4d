"""sim/routes_openai.py: the OpenAI-compatible routes in vLLM's dialect: a chat stream's role chunk
first, the finish on the last token's chunk, the usage chunk only when asked (cumulative usage on
every chunk with continuous_usage_stats), [DONE]; the length from max_completion_tokens or
max_tokens (chat 512, completions 16 by default); a prompt of token ids counted as given; the
request checks vLLM makes, in its error shape; /v1/models."""

from __future__ import annotations

import orjson
import pytest

from llm_users.sim.routes_openai import _common
from llm_users.sim.text import expected_tokens
from tests.sim.inproc import FAST, exchange, one

MESSAGES = [{"role": "user", "content": "hello there"}]


def _events(body: bytes) -> list[dict | str]:
    out: list[dict | str] = []
    for line in body.split(b"\n\n"):
        if line.startswith(b"data: "):
            data = line[6:]
            out.append(data.decode() if data == b"[DONE]" else orjson.loads(data))
    return out


def test_a_chat_stream_role_first_finish_last_then_usage_and_done() -> None:
    r = one("POST", "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "max_tokens": 8, "stream": True,
                                             "stream_options": {"include_usage": True}})
    events = _events(r.body)
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream") and events[-1] == "[DONE]"
    role, *tokens, usage, _ = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    words = expected_tokens(FAST["seed"], "hello there", 5)
    assert [e["choices"][0]["delta"]["content"] for e in tokens] == words
    assert [e["choices"][0]["finish_reason"] for e in tokens] == [None] * 4 + ["stop"]  # 5 of 8: stopped
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 2, "total_tokens": 7, "completion_tokens": 5}
    assert {e["id"] for e in events[:-1]} == {"chatcmpl-sim000000000001"} and role["object"] == "chat.completion.chunk"


def test_usage_only_when_asked_and_continuous_usage_on_every_chunk() -> None:
    plain, continuous = exchange(
        ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 3, "stream": True}),
        ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 3, "stream": True,
                                          "stream_options": {"include_usage": True, "continuous_usage_stats": True}}))
    assert not any("usage" in e for e in _events(plain.body) if isinstance(e, dict))
    counts = [e["usage"]["completion_tokens"] for e in _events(continuous.body) if isinstance(e, dict)]
    assert counts == [0, 1, 2, 3, 3]  # the role chunk, each token's, the usage chunk


def test_the_length_field_and_its_defaults() -> None:
    chat_default, completion_default, newer_field, ids = exchange(
        ("POST", "/v1/chat/completions", {"messages": MESSAGES}),
        ("POST", "/v1/completions", {"prompt": "hello"}),
        ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_completion_tokens": 2, "max_tokens": 4}),
        ("POST", "/v1/completions", {"prompt": [101, 102, 103], "max_tokens": 2}),
        output_tokens=None)
    assert chat_default.json()["usage"]["completion_tokens"] == 512
    assert completion_default.json()["usage"]["completion_tokens"] == 16 and completion_default.json()["object"] == "text_completion"
    assert newer_field.json()["usage"]["completion_tokens"] == 2  # max_completion_tokens first
    assert ids.json()["usage"]["prompt_tokens"] == 3 and ids.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(("path", "body", "says"), [
    ("/v1/chat/completions", {"messages": []}, "messages: a non-empty list of messages is required"),
    ("/v1/chat/completions", {"messages": MESSAGES, "stream_options": {"include_usage": True}},
     "Stream options can only be defined when `stream=True`."),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 0}, "max_tokens must be at least 1, got 0"),
    ("/v1/chat/completions", {"messages": MESSAGES, "temperature": -1}, "temperature must be a non-negative number, got -1"),
    ("/v1/completions", {"prompt": 5}, "prompt: a string, a list of strings or a list of token ids is required"),
    ("/v1/completions", {"prompt": "x", "top_p": True}, "top_p must be a non-negative number, got True"),
])
def test_vllms_checks_in_its_error_shape(path: str, body: dict, says: str) -> None:
    r = one("POST", path, body)
    assert r.status == 400 and r.json() == {"error": {"message": says, "type": "BadRequestError", "param": None,
                                                      "code": 400}}


def test_common_reads_the_stream_flags_and_the_length() -> None:
    assert _common({}, 512, ("max_completion_tokens", "max_tokens")) == (False, False, False, 512)
    assert _common({"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    "max_tokens": 9}, 16, ("max_tokens",)) == (True, True, True, 9)
    assert _common({"stream": True, "stream_options": {"continuous_usage_stats": True}}, 16, ("max_tokens",)) == (
        True, False, False, 16)  # continuous needs include_usage


def test_models_lists_the_served_model_and_wants_the_key() -> None:
    listed, refused = exchange(("GET", "/v1/models", None, {"Authorization": "Bearer k"}), ("GET", "/v1/models", None),
                               model="served", require_api_key="k")
    data = listed.json()["data"]
    assert listed.json()["object"] == "list" and [m["id"] for m in data] == ["served"] and data[0]["owned_by"] == "llm-sim"
    assert refused.status == 401 and refused.json()["error"]["message"] == "Incorrect API key provided."
