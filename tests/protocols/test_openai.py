"""OpenAI-compatible protocol: request dialects and recorded chat/completions transcripts."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ProtocolError
from llm_users.protocols.base import Content, Finish, ModelName, ServerError, Usage
from llm_users.protocols.openai import OpenAIStreamParser, build_request
from llm_users.protocols.sampling import Sampling

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
P = "openai"


def body(req) -> dict:
    return orjson.loads(req.body)


def test_openai_chat_body_defaults() -> None:
    req = build_request(model="gpt-4o", messages=MESSAGES, sampling=Sampling())
    assert (req.method, req.path, req.name) == ("POST", "/v1/chat/completions", "/v1/chat/completions")
    assert body(req) == {
        "model": "gpt-4o",
        "messages": MESSAGES,
        "max_completion_tokens": 512,
        "temperature": 0.0,
        "top_p": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert req.headers["Content-Type"] == "application/json"
    assert "Authorization" not in req.headers and req.secret_headers == ()


def test_vllm_chat_body_defaults() -> None:
    req = build_request(model="m", messages=MESSAGES, sampling=Sampling(), dialect="vllm")
    assert body(req) == {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 512,
        "temperature": 0.0,
        "top_p": 1.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_compat_chat_body_defaults() -> None:
    req = build_request(model="m", messages=MESSAGES, sampling=Sampling(), dialect="compat")
    assert body(req) == {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 512,
        "temperature": 0.0,
        "top_p": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_completions_use_max_tokens_and_a_prompt() -> None:
    s = Sampling(max_tokens=64, seed=7, stop=("\n\n",), min_tokens=64)
    req = build_request(model="m", messages=[{"role": "user", "content": "Paris is"}], sampling=s,
                        endpoint="completions", dialect="vllm")
    assert req.path == "/v1/completions"
    assert body(req) == {
        "model": "m",
        "prompt": "Paris is",
        "max_tokens": 64,
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": 7,
        "stop": ["\n\n"],
        "ignore_eos": True,
        "min_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = build_request(model="m", messages=MESSAGES, sampling=Sampling(), endpoint="completions")
    assert body(req)["max_tokens"] == 512 and "max_completion_tokens" not in body(req)


def test_api_key_only_in_secret_headers() -> None:
    req = build_request(model="m", messages=MESSAGES, sampling=Sampling(), api_key="sk-SECRET")
    assert req.headers["Authorization"] == "Bearer sk-SECRET"
    assert req.secret_headers == ("Authorization",)
    assert [k for k, v in req.headers.items() if "sk-SECRET" in v] == ["Authorization"]
    assert b"sk-SECRET" not in req.body
    assert "sk-SECRET" not in repr(req.redacted_headers())


def test_unknown_endpoint() -> None:
    with pytest.raises(ValueError):
        build_request(model="m", messages=MESSAGES, sampling=Sampling(), endpoint="embeddings")  # type: ignore[arg-type]


# --- transcripts -------------------------------------------------------------------------------


def test_openai_chat_transcript(harness) -> None:
    data = harness.read(P, "chat_openai.txt")
    s = harness.check(OpenAIStreamParser, data)
    assert s.text == "Hello there!" and s.chunks == 3 and s.reasoning == ""
    # OpenAI's usage.prompt_tokens_details.cached_tokens (prefix cache) is kept in server
    assert s.usage == Usage(input_tokens=9, output_tokens=3, reasoning_tokens=0, server={"cached_tokens": 0})
    assert s.finishes == ["stop"] and s.errors == [] and s.complete
    harness.check_truncated(OpenAIStreamParser, data, b'data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"'
                            b',"object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06",'
                            b'"service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,'
                            b'"delta":{},')


def test_openai_chat_exact_events(harness) -> None:
    events, complete = harness.parse(OpenAIStreamParser, harness.read(P, "chat_openai.txt"))
    assert events == [
        ModelName("gpt-4o-2024-08-06"),  # the model the server says answered
        Content("Hello"),
        Content(" there"),
        Content("!"),
        Finish("stop"),
        Usage(input_tokens=9, output_tokens=3, reasoning_tokens=0, server={"cached_tokens": 0}),
    ]
    assert complete


def test_vllm_crlf_no_space_multitoken_keepalive(harness) -> None:
    data = harness.read(P, "chat_vllm_crlf.txt")
    assert b"\r\n" in data and b"data:{" in data and b": ping" in data
    s = harness.check(OpenAIStreamParser, data)
    assert s.text == "The capital of France is Paris." and s.chunks == 3
    assert s.usage == Usage(input_tokens=14, output_tokens=6)
    assert s.finishes == ["length"] and s.complete


def test_reasoning_content(harness) -> None:
    s = harness.check(OpenAIStreamParser, harness.read(P, "chat_reasoning.txt"))
    assert s.reasoning == "Two plus two is four." and s.text == "4" and s.chunks == 3
    assert s.usage == Usage(input_tokens=11, output_tokens=9, reasoning_tokens=8)
    assert s.finishes == ["stop"] and s.complete


def test_legacy_completions(harness) -> None:
    s = harness.check(OpenAIStreamParser, harness.read(P, "completions_vllm.txt"))
    assert s.text == " Paris, of course" and s.chunks == 4
    assert s.usage == Usage(input_tokens=6, output_tokens=4)
    assert s.finishes == ["length"] and s.complete


def test_vllm_midstream_error(harness) -> None:
    p = OpenAIStreamParser
    s = harness.check(p, harness.read(P, "error_vllm.txt"))
    assert s.text == "Once"
    assert s.errors == [ServerError("The engine is dead: EngineCore encountered an issue.", status=500,
                                    kind="InternalServerError")]
    assert s.finishes == [] and s.complete  # [DONE] follows the error payload


def test_tgi_messages_midstream_error(harness) -> None:
    s = harness.check(OpenAIStreamParser, harness.read(P, "error_tgi_messages.txt"))
    assert s.text == "Hi"
    assert len(s.errors) == 1 and s.errors[0].status == 422
    assert s.errors[0].message.startswith("Input validation error: `inputs` tokens")
    assert not s.complete


def test_truncated_without_finish_or_done(harness) -> None:
    data = harness.read(P, "chat_vllm_crlf.txt")
    cut = data.index(b'data:{"id":"chatcmpl-8f1c0a0b2d9e4c0f","object":"chat.completion.chunk",'
                     b'"created":1767225600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,'
                     b'"delta":{"content":" Paris."}')
    harness.check_truncated(OpenAIStreamParser, data, data[cut:cut + 40])


@pytest.mark.parametrize(
    "payload",
    [b"data: {not json}\n\n", b'data: {"choices":[{"delta":{"content":"x"}\n\n', b"data: [1,2]\n\n",
     b'data: {"choices":["oops"]}\n\n', b'data: {"choices":[{"index":0,"delta":{}}],"usage":[1]}\n\n'],
)
def test_malformed_payload_raises(payload: bytes) -> None:
    p = OpenAIStreamParser()
    with pytest.raises(ProtocolError) as exc:
        p.feed(payload)
    assert exc.value.category == "malformed_stream"
    assert payload.split(b"\n")[0][6:16].decode() in str(exc.value)


def test_malformed_message_is_truncated() -> None:
    with pytest.raises(ProtocolError) as exc:
        OpenAIStreamParser().feed(b"data: {" + b"x" * 5000 + b"\n\n")
    assert len(str(exc.value)) < 300


def test_hidden_reasoning_count_without_reasoning_deltas() -> None:
    """OpenAI o-series chat completions (issue 53 item 4): usage counts 30 reasoning tokens, no
    delta carries any; the record keeps the count and TPOT counts the answer's 4 tokens."""
    from llm_users.client.request_state import RequestState
    from llm_users.metrics import RequestRecord

    head = b'data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[{"index":0,"delta":'
    frames = [head + b'{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}\n\n']
    frames += [head + b'{"content":"w%d"},"finish_reason":null}],"usage":null}\n\n' % k for k in range(4)]
    frames.append(head + b'{},"finish_reason":"stop"}],"usage":null}\n\n')
    frames.append(b'data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[],"usage":'
                  b'{"prompt_tokens":9,"completion_tokens":34,"total_tokens":43,"completion_tokens_details":'
                  b'{"reasoning_tokens":30,"audio_tokens":0}}}\n\ndata: [DONE]\n\n')
    rec = RequestRecord("r", "/v1/chat/completions", "openai", "o4-mini", t0_ns=0)
    st = RequestState(rec, OpenAIStreamParser())
    for k, frame in enumerate(frames):
        st.handle(st.parser.feed(frame), 300 + 10 * k)  # the reasoning's 30 tokens went before the first byte
    st.finish(400)
    rec.e2e_ns = 400
    assert (rec.reasoning_chunks, rec.reasoning_tokens, rec.reasoning_tokens_source) == (0, 30, "usage")
    assert (rec.chunks, rec.output_tokens, rec.answer_tokens, rec.ttft_ns) == (4, 34, 4, 310)
    assert rec.tpot_basis == "answer" and rec.tpot_ns == pytest.approx(30.0)  # (400 - 310) / 3; not / 33
