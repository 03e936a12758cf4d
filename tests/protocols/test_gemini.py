"""Gemini streamGenerateContent?alt=sse: request shape, URL, and recorded streams."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ProtocolError
from llm_users.protocols.base import Content, Finish, ModelName, ServerError, Usage
from llm_users.protocols.gemini import GeminiStreamParser, build_request
from llm_users.protocols.sampling import Sampling

P = "gemini"
MESSAGES = [
    {"role": "system", "content": "Answer in one line."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Count the r's in strawberry."},
]


def body(req) -> dict:
    return orjson.loads(req.body)


def test_default_body_url_and_key() -> None:
    req = build_request(model="gemini-2.5-flash", messages=MESSAGES, sampling=Sampling(), api_key="AIza-SECRET")
    assert req.method == "POST"
    assert req.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert req.name == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert body(req) == {
        "contents": [
            {"role": "user", "parts": [{"text": "Hello"}]},
            {"role": "model", "parts": [{"text": "Hi."}]},
            {"role": "user", "parts": [{"text": "Count the r's in strawberry."}]},
        ],
        "systemInstruction": {"parts": [{"text": "Answer in one line."}]},
        "generationConfig": {"maxOutputTokens": 512, "temperature": 0.0, "topP": 1.0},
    }
    assert req.headers["x-goog-api-key"] == "AIza-SECRET"
    assert req.secret_headers == ("x-goog-api-key",)
    assert [k for k, v in req.headers.items() if "AIza-SECRET" in v] == ["x-goog-api-key"]
    assert "AIza-SECRET" not in req.path and b"AIza-SECRET" not in req.body


def test_api_version_seed_stop_and_model_prefix() -> None:
    s = Sampling(max_tokens=64, temperature=0.4, top_p=0.95, seed=5, stop=("\n",))
    req = build_request(model="models/gemini-2.5-pro", messages=MESSAGES[1:2], sampling=s, api_version="v1")
    assert req.path == "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert body(req) == {
        "contents": [{"role": "user", "parts": [{"text": "Hello"}]}],
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.4, "topP": 0.95, "seed": 5,
                             "stopSequences": ["\n"]},
    }
    assert req.secret_headers == () and "x-goog-api-key" not in req.headers


# --- transcripts -------------------------------------------------------------------------------


def test_stream_with_crlf_separators(harness) -> None:
    data = harness.read(P, "stream.txt")
    assert data.count(b"\r\n\r\n") == 4 and data.startswith(b"data: {")
    events, complete = harness.parse(GeminiStreamParser, data)
    assert events == [
        ModelName("gemini-2.5-flash"),  # the model the server says answered
        Content("The quick"),
        Content(" brown fox jumps"),
        Usage(input_tokens=8, output_tokens=5),
        Usage(input_tokens=8, output_tokens=5),
        Content(" over the lazy dog."),
        Usage(input_tokens=8, output_tokens=10),
        Finish("STOP"),
    ]
    assert complete
    s = harness.check(GeminiStreamParser, data)
    assert s.text == "The quick brown fox jumps over the lazy dog." and s.chunks == 3
    harness.check_truncated(GeminiStreamParser, data, b'data: {"candidates": [{"content": {"parts": [{"text": " over')


def test_thinking_parts_and_last_usage_with_candidates(harness) -> None:
    s = harness.check(GeminiStreamParser, harness.read(P, "thinking.txt"))
    assert s.reasoning == "**Counting letters**\n\nI need to count the rs in strawberry."
    assert s.text == "There are 3 r's in strawberry." and s.chunks == 4
    # The final frame's usage has no candidatesTokenCount: the last one that has it wins. Output is
    # candidates (9, the answer) plus thoughts (48), as the other dialects count reasoning in output.
    assert s.usage == Usage(input_tokens=12, output_tokens=9 + 48, reasoning_tokens=48)
    assert s.finishes == ["MAX_TOKENS"] and s.complete


def test_error_frame_midstream(harness) -> None:
    s = harness.check(GeminiStreamParser, harness.read(P, "error_unavailable.txt"))
    assert s.text == "Once upon"
    assert s.errors == [
        ServerError("The model is overloaded. Please try again later.", status=503, kind="UNAVAILABLE")
    ]
    assert s.finishes == [] and not s.complete


def test_prompt_blocked_completes() -> None:
    p = GeminiStreamParser()
    events = p.feed(b'data: {"promptFeedback": {"blockReason": "SAFETY"},"usageMetadata": {"promptTokenCount": 9}}'
                    b"\r\n\r\n")
    assert events == [Finish("SAFETY")] and p.complete


def test_cached_tokens_go_to_server_dict() -> None:
    p = GeminiStreamParser()
    events = p.feed(b'data: {"candidates": [{"content": {"parts": [{"text": "x"}],"role": "model"},'
                    b'"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 900,'
                    b'"candidatesTokenCount": 1,"cachedContentTokenCount": 512}}\r\n\r\n')
    assert events == [
        Content("x"),
        Usage(input_tokens=900, output_tokens=1, server={"cachedContentTokenCount": 512}),
        Finish("STOP"),
    ]


@pytest.mark.parametrize(
    "frame",
    [b"data: {\"candidates\": [\r\n\r\n", b'data: {"candidates": [1]}\r\n\r\n', b"data: 42\r\n\r\n",
     b'data: {"candidates": [{"content": {"parts": "text"}}]}\r\n\r\n'],
)
def test_malformed_payload_raises(frame: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        GeminiStreamParser().feed(frame)
    assert frame[6:10].strip().decode() in str(exc.value)


def test_thoughts_counted_without_thought_parts() -> None:
    """Gemini without includeThoughts (issue 53 item 4): usageMetadata.thoughtsTokenCount counts 48
    thinking tokens, no part is a thought; output is candidates + thoughts and TPOT counts the
    answer's 9 tokens."""
    from llm_users.client.request_state import RequestState
    from llm_users.metrics import RequestRecord

    def frame(text: str, candidates: int, finish: str = "") -> bytes:
        end = f',"finishReason":"{finish}"' if finish else ""
        return (b'data: {"candidates":[{"content":{"parts":[{"text":"%b"}],"role":"model"}%b,"index":0}],'
                b'"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":%d,"totalTokenCount":%d,'
                b'"thoughtsTokenCount":48},"modelVersion":"gemini-2.5-flash","responseId":"x"}\r\n\r\n'
                % (text.encode(), end.encode(), candidates, 12 + candidates + 48))
    rec = RequestRecord("r", "/v1beta/models/m:streamGenerateContent", "gemini", "m", t0_ns=0)
    st = RequestState(rec, GeminiStreamParser())
    for k, data in enumerate([frame("There are", 3), frame(" 3 r's in", 6), frame(" strawberry.", 9, "STOP")]):
        st.handle(st.parser.feed(data), 500 + 40 * k)
    st.handle(st.parser.close(), 580)
    st.finish(580)
    rec.e2e_ns = 580
    assert (rec.reasoning_chunks, rec.reasoning_tokens, rec.reasoning_tokens_source) == (0, 48, "usage")
    assert (rec.output_tokens, rec.answer_tokens, rec.ttft_ns) == (57, 9, 500)
    assert rec.tpot_basis == "answer" and rec.tpot_ns == pytest.approx(10.0)  # (580 - 500) / 8; not / 56
