"""Anthropic Messages API: versions, auth header styles, and recorded event streams."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ProtocolError
from llm_users.protocols.anthropic import AnthropicStreamParser, build_request
from llm_users.protocols.base import Content, Finish, ModelName, ServerError, Usage
from llm_users.protocols.sampling import Sampling

P = "anthropic"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "How are you?"},
]
CONVO = MESSAGES[1:]


def body(req) -> dict:
    return orjson.loads(req.body)


def test_default_body_and_headers() -> None:
    req = build_request(model="claude-sonnet-4-5", messages=MESSAGES, sampling=Sampling(), api_key="sk-ant-SECRET")
    assert (req.method, req.path, req.name) == ("POST", "/v1/messages", "/v1/messages")
    assert body(req) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "messages": CONVO,
        "system": "You are terse.",
        "stream": True,
        "temperature": 0.0,
    }
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["x-api-key"] == "sk-ant-SECRET" and "Authorization" not in req.headers
    assert req.secret_headers == ("x-api-key",)
    assert [k for k, v in req.headers.items() if "sk-ant-SECRET" in v] == ["x-api-key"]
    assert b"sk-ant-SECRET" not in req.body


def test_bearer_style_and_newer_version_drop_sampling() -> None:
    req = build_request(model="m", messages=CONVO, sampling=Sampling(stop=("END",)), api_key="k-SECRET",
                        auth="bearer", anthropic_version="2026-10-21")
    assert req.headers["Authorization"] == "Bearer k-SECRET" and "x-api-key" not in req.headers
    assert req.secret_headers == ("Authorization",)
    assert [k for k, v in req.headers.items() if "k-SECRET" in v] == ["Authorization"]
    assert req.headers["anthropic-version"] == "2026-10-21"
    assert body(req) == {
        "model": "m",
        "max_tokens": 512,
        "messages": CONVO,
        "stop_sequences": ["END"],
        "stream": True,
    }


def test_include_sampling_override() -> None:
    on = build_request(model="m", messages=CONVO, sampling=Sampling(temperature=0.3), anthropic_version="2026-10-21",
                       include_sampling=True)
    assert body(on)["temperature"] == 0.3 and "top_p" not in body(on)  # 1.0 is the API default
    off = build_request(model="m", messages=CONVO, sampling=Sampling(), include_sampling=False)
    assert "temperature" not in body(off) and "top_p" not in body(off)
    assert "system" not in body(off)


def test_no_key_no_auth_header() -> None:
    req = build_request(model="m", messages=CONVO, sampling=Sampling())
    assert "x-api-key" not in req.headers and "Authorization" not in req.headers and req.secret_headers == ()
    with pytest.raises(ValueError):
        build_request(model="m", messages=CONVO, sampling=Sampling(), api_key="k", auth="basic")  # type: ignore[arg-type]


# --- transcripts -------------------------------------------------------------------------------


def test_text_stream_with_pings(harness) -> None:
    data = harness.read(P, "messages.txt")
    events, complete = harness.parse(AnthropicStreamParser, data)
    assert events == [
        ModelName("claude-sonnet-4-5"),  # the model the server says answered
        Usage(input_tokens=25),
        Content("Hello"),
        Content(", how can"),
        Content(" I help?"),
        Finish("end_turn"),
        Usage(input_tokens=25, output_tokens=15),
    ]
    assert complete
    s = harness.check(AnthropicStreamParser, data)
    assert s.text == "Hello, how can I help?" and s.chunks == 3
    harness.check_truncated(AnthropicStreamParser, data, b'data: {"type":"message_stop"}')


def test_thinking_crlf_with_cache_usage(harness) -> None:
    data = harness.read(P, "thinking_crlf.txt")
    assert b"\r\n\r\n" in data
    s = harness.check(AnthropicStreamParser, data)
    assert s.reasoning == "Let me solve this step by step:\n\n1. First break down 27 * 453"
    assert s.text == "27 * 453 = 12,231" and s.chunks == 3  # the signature_delta is no Content
    assert s.usage == Usage(
        input_tokens=40,
        output_tokens=104,
        server={"cache_read_input_tokens": 2048, "cache_creation_input_tokens": 0},
    )
    assert s.finishes == ["end_turn"] and s.complete


def test_tool_use_json_deltas_are_not_text(harness) -> None:
    """Issue 30: the arguments' deltas are token-bearing output (tool Content), never text; the
    empty first ``partial_json`` carries no token."""
    s = harness.check(AnthropicStreamParser, harness.read(P, "tool_use.txt"))
    assert s.text == "Checking the weather." and s.chunks == 3
    assert s.tool == '{"location": "San Francisco, CA"}'
    assert s.usage == Usage(input_tokens=472, output_tokens=89)
    assert s.finishes == ["tool_use"] and s.complete


def test_overloaded_error_midstream(harness) -> None:
    s = harness.check(AnthropicStreamParser, harness.read(P, "error_overloaded.txt"))
    assert s.text == "Hel"
    assert s.errors == [ServerError("Overloaded", kind="overloaded_error")]
    assert s.finishes == [] and not s.complete


def test_last_message_delta_usage_wins() -> None:
    p = AnthropicStreamParser()
    events = p.feed(
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":1}}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":3}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    usages = [e for e in events if isinstance(e, Usage)]
    assert usages[-1] == Usage(input_tokens=7, output_tokens=9)
    assert [e for e in events if isinstance(e, Finish)] == [Finish("max_tokens")]
    assert p.complete


def test_payload_type_rules_even_without_event_line() -> None:
    p = AnthropicStreamParser()
    events = p.feed(
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}\n\n'
        b'data: {"type":"error","error":{"type":"api_error","message":"Internal server error"}}\n\n'
    )
    assert events == [Content("a"), ServerError("Internal server error", kind="api_error")]


@pytest.mark.parametrize(
    "frame",
    [b"event: ping\ndata: {ping}\n\n", b'event: message_start\ndata: {"type":"message_start","message":[1]}\n\n',
     b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n', b"data: []\n\n"],
)
def test_malformed_payload_raises(frame: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        AnthropicStreamParser().feed(frame)
    assert frame.split(b"data: ")[1].strip()[:6].decode() in str(exc.value)
