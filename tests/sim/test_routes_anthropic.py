"""sim/routes_anthropic.py: Anthropic Messages as the API streams them: every frame's ``event:``
its payload's type, message_start then the blocks then message_delta (stop reason, output count)
and message_stop; thinking asked for: the first quarter of the answer (at most the budget) as a
thinking block closed by its signature; the non-streaming message; the checks, in Anthropic's
error shape."""

from __future__ import annotations

import orjson
import pytest

from llm_users.sim.routes_anthropic import _thinking_budget
from llm_users.sim.text import expected_tokens
from tests.sim.inproc import FAST, one

BODY = {"model": "claude-x", "max_tokens": 8, "system": "be brief",
        "messages": [{"role": "user", "content": "hello there"}]}
PROMPT = "be brief\nhello there"  # the system text and the messages, joined as the simulator joins them


def _frames(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for frame in body.split(b"\n\n"):
        if frame:
            event, data = frame.split(b"\n")
            out.append((event.removeprefix(b"event: ").decode(), orjson.loads(data.removeprefix(b"data: "))))
    return out


def test_a_stream_every_event_named_as_its_payload() -> None:
    r = one("POST", "/v1/messages", {**BODY, "stream": True})
    frames = _frames(r.body)
    assert all(name == payload["type"] for name, payload in frames)
    names = [name for name, _ in frames]
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"] * 5,
                     "content_block_stop", "message_delta", "message_stop"]
    start = frames[0][1]["message"]
    assert start["model"] == "claude-x" and start["usage"]["input_tokens"] == 4 and start["usage"]["output_tokens"] == 1
    words = expected_tokens(FAST["seed"], PROMPT, 5)
    assert [p["delta"]["text"] for n, p in frames if n == "content_block_delta"] == words
    delta = frames[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 5  # 5 of 8: its own end


def test_thinking_asked_for_is_a_first_block_closed_by_its_signature() -> None:
    r = one("POST", "/v1/messages", {**BODY, "stream": True, "max_tokens": 5,
                                     "thinking": {"type": "enabled", "budget_tokens": 1024}})
    frames = _frames(r.body)
    thinking = [p["delta"]["thinking"] for n, p in frames if n == "content_block_delta"
                and p["delta"]["type"] == "thinking_delta"]
    text = [p["delta"]["text"] for n, p in frames if n == "content_block_delta" and p["delta"]["type"] == "text_delta"]
    words = expected_tokens(FAST["seed"], PROMPT, 5)
    assert thinking == words[:1] and text == words[1:]  # a quarter of 5 tokens: one
    blocks = [p["content_block"]["type"] for n, p in frames if n == "content_block_start"]
    assert blocks == ["thinking", "text"]
    assert any(p["delta"].get("type") == "signature_delta" for n, p in frames if n == "content_block_delta")
    assert frames[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_the_thinking_budget() -> None:
    assert _thinking_budget({}, 100) is None and _thinking_budget({"thinking": {"type": "disabled"}}, 100) is None
    assert _thinking_budget({"thinking": {"type": "enabled", "budget_tokens": 30}}, 100) == 30
    assert _thinking_budget({"thinking": {"type": "adaptive"}}, 100) == 100  # no budget: the max
    assert _thinking_budget({"thinking": {"type": "enabled", "budget_tokens": 0}}, 100) == 100


def test_the_non_streaming_message() -> None:
    msg = one("POST", "/v1/messages", BODY).json()
    assert (msg["type"], msg["role"], msg["model"], msg["stop_reason"]) == ("message", "assistant", "claude-x", "end_turn")
    assert msg["content"] == [{"type": "text", "text": "".join(expected_tokens(FAST["seed"], PROMPT, 5))}]
    assert msg["usage"]["input_tokens"] == 4 and msg["usage"]["output_tokens"] == 5


@pytest.mark.parametrize(("body", "says"), [
    ({"model": "c", "max_tokens": 5, "messages": []}, "messages: Field required"),
    ({"model": "c", "messages": [{"role": "user", "content": "x"}]}, "max_tokens: Field required"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model: Field required"),
    ({"model": "c", "max_tokens": 1.5, "messages": [{"role": "user", "content": "x"}]},
     "max_tokens must be an integer, got 1.5"),
])
def test_the_checks_in_anthropics_error_shape(body: dict, says: str) -> None:
    r = one("POST", "/v1/messages", body)
    assert r.status == 400 and r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                                       "message": says}}
