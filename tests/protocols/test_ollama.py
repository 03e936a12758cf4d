"""Ollama native API: /api/chat and /api/generate requests, NDJSON transcripts."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ProtocolError
from llm_users.protocols.base import Content, Finish, ModelName, ServerError, Usage
from llm_users.protocols.ollama import OllamaStreamParser, build_request
from llm_users.protocols.sampling import Sampling

P = "ollama"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}]

CHAT_SERVER = {
    "total_duration": 5191566416,
    "load_duration": 2154458,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 383809000,
    "eval_count": 4,
    "eval_duration": 4799921000,
}


def body(req) -> dict:
    return orjson.loads(req.body)


def test_chat_body_defaults() -> None:
    req = build_request(model="llama3.2", messages=MESSAGES, sampling=Sampling())
    assert (req.method, req.path, req.name) == ("POST", "/api/chat", "/api/chat")
    assert body(req) == {
        "model": "llama3.2",
        "messages": MESSAGES,
        "options": {"num_predict": 512, "temperature": 0.0, "top_p": 1.0},
        "stream": True,
    }
    assert b"ignore_eos" not in req.body
    assert req.secret_headers == () and "Authorization" not in req.headers


def test_generate_body_with_seed_and_stop() -> None:
    s = Sampling(max_tokens=32, seed=11, stop=("\n",))
    req = build_request(model="llama3.2", messages=MESSAGES, sampling=s, endpoint="generate")
    assert req.path == "/api/generate"
    assert body(req) == {
        "model": "llama3.2",
        "prompt": "Why is the sky blue?",
        "system": "Be brief.",
        "options": {"num_predict": 32, "temperature": 0.0, "top_p": 1.0, "seed": 11, "stop": ["\n"]},
        "stream": True,
    }


def test_api_key_only_in_secret_headers() -> None:
    req = build_request(model="m", messages=MESSAGES, sampling=Sampling(), api_key="ol-SECRET")
    assert req.secret_headers == ("Authorization",)
    assert [k for k, v in req.headers.items() if "ol-SECRET" in v] == ["Authorization"]
    assert b"ol-SECRET" not in req.body


def test_unknown_endpoint() -> None:
    with pytest.raises(ValueError):
        build_request(model="m", messages=MESSAGES, sampling=Sampling(), endpoint="embed")  # type: ignore[arg-type]


# --- transcripts -------------------------------------------------------------------------------


def test_chat_transcript(harness) -> None:
    data = harness.read(P, "chat.ndjson")
    events, complete = harness.parse(OllamaStreamParser, data)
    assert events == [
        ModelName("llama3.2"),  # the model the server says answered
        Content("The"),
        Content(" sky"),
        Content(" is blue"),
        Usage(input_tokens=26, output_tokens=4, server=CHAT_SERVER),
        Finish("stop"),
    ]
    assert complete
    harness.check(OllamaStreamParser, data)
    harness.check_truncated(OllamaStreamParser, data, b'{"model":"llama3.2","created_at":"2026-01-10T12:00:00.400000Z"')
    # Any prefix that stops inside the last line is truncation too: the line needs its "}".
    last = data.rindex(b"{\"model\"")
    for i in range(last, len(data) - 1):
        p = OllamaStreamParser()
        p.feed(data[:i])
        p.close()
        assert not p.complete, i


def test_crlf_and_blank_lines(harness) -> None:
    data = harness.read(P, "chat_crlf_blank.ndjson")
    assert b"\r\n\r\n" in data
    s = harness.check(OllamaStreamParser, data)
    assert s.text == "The sky is blue" and s.chunks == 3
    assert s.usage == Usage(input_tokens=26, output_tokens=4, server=CHAT_SERVER)
    assert s.finishes == ["stop"] and s.complete


def test_generate_missing_fields_are_zero(harness) -> None:
    s = harness.check(OllamaStreamParser, harness.read(P, "generate.ndjson"))
    assert s.text == "Why not?" and s.chunks == 3
    assert s.usage == Usage(
        input_tokens=18,
        output_tokens=3,
        server={
            "total_duration": 912345678,
            "load_duration": 0,
            "prompt_eval_count": 18,
            "prompt_eval_duration": 45000000,
            "eval_count": 3,
            "eval_duration": 850000000,
        },
    )
    assert all(type(v) is int for v in s.usage.server.values())
    assert s.finishes == ["length"] and s.complete


def test_thinking_is_reasoning(harness) -> None:
    s = harness.check(OllamaStreamParser, harness.read(P, "chat_thinking.ndjson"))
    assert s.reasoning == "Okay, the user wants a greeting." and s.text == "Hi there!" and s.chunks == 4
    assert s.usage is not None and (s.usage.input_tokens, s.usage.output_tokens) == (12, 11)
    assert s.finishes == ["stop"] and s.complete


def test_error_line_midstream(harness) -> None:
    s = harness.check(OllamaStreamParser, harness.read(P, "error.ndjson"))
    assert s.text == "The sky"
    assert s.errors == [ServerError("an error was encountered while running the model: unexpected EOF")]
    assert s.usage is None and not s.complete


def test_last_line_without_newline_counts_at_close(harness) -> None:
    data = harness.read(P, "chat.ndjson").rstrip(b"\n")
    p = OllamaStreamParser()
    events = p.feed(data)
    assert not p.complete and Finish("stop") not in events
    assert p.close()[-1] == Finish("stop") and p.complete


def test_cut_final_line_is_truncation_not_malformed(harness) -> None:
    data = harness.read(P, "chat.ndjson")
    p = OllamaStreamParser()
    p.feed(data[:-20])
    assert p.close() == [] and not p.complete


@pytest.mark.parametrize("line", [b"{oops}\n", b'{"message":\n{"done":true}\n', b"[1]\n", b'{"message":"x"}\n'])
def test_malformed_line_raises(line: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        OllamaStreamParser().feed(line)
    assert line.split(b"\n")[0][:6].decode() in str(exc.value)


def test_a_line_that_never_ends_is_cut_at_the_bound() -> None:
    """Issue 54: the NDJSON line buffer had no cap (an endless line grew the client without limit)."""
    from llm_users.errors import ResponseTooLarge

    p = OllamaStreamParser(max_bytes=32 * 1024)
    p.feed(b'{"model":"m","message":{"role":"assistant","content":"')
    fed = 0
    with pytest.raises(ResponseTooLarge, match=r"an NDJSON line over 32 KiB without its end \(--llm-max-event-bytes"):
        for _ in range(100):
            p.feed(b"x" * 8192)
            fed += 1
    assert fed == 3 and not p._buf  # cut in the piece that passed the bound, what it held let go


def test_lines_up_to_the_bound_are_parsed_in_any_pieces() -> None:
    line = orjson.dumps({"model": "m", "message": {"role": "assistant", "content": "w" * 30000}, "done": False})
    data = line + b"\n" + orjson.dumps({"done": True, "done_reason": "stop", "eval_count": 1}) + b"\n"
    for size in (1000, 8192, len(data)):
        p = OllamaStreamParser(max_bytes=len(line) + 10)
        events = [e for i in range(0, len(data), size) for e in p.feed(data[i:i + size])]
        assert Content("w" * 30000) in events and p.complete, size
