"""TGI native /generate_stream: greedy request encoding and recorded transcripts."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ProtocolError
from llm_users.protocols.base import Content, Finish, ServerError, Usage
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.tgi import TGIStreamParser, build_request

P = "tgi"
MESSAGES = [{"role": "user", "content": "Say hello"}]


def body(req) -> dict:
    return orjson.loads(req.body)


def test_default_sampling_is_greedy_without_temperature_or_top_p() -> None:
    req = build_request(model="tgi", messages=MESSAGES, sampling=Sampling())
    assert (req.method, req.path, req.name) == ("POST", "/generate_stream", "/generate_stream")
    assert body(req) == {
        "inputs": "Say hello",
        "parameters": {"max_new_tokens": 512, "do_sample": False, "details": True, "return_full_text": False},
    }
    assert b"ignore_eos" not in req.body and b"temperature" not in req.body and b"top_p" not in req.body
    assert req.secret_headers == () and "Authorization" not in req.headers


def test_root_path_streams_explicitly() -> None:
    req = build_request(model="tgi", messages=MESSAGES, sampling=Sampling(max_tokens=8), path="/")
    assert req.path == "/"
    assert body(req) == {
        "inputs": "Say hello",
        "parameters": {"max_new_tokens": 8, "do_sample": False, "details": True, "return_full_text": False},
        "stream": True,
    }


def test_user_sampling_turns_do_sample_on() -> None:
    s = Sampling(temperature=0.7, top_p=0.9, seed=3, stop=("</s>", "\n"))
    assert body(build_request(model="x", messages=MESSAGES, sampling=s))["parameters"] == {
        "max_new_tokens": 512,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "details": True,
        "return_full_text": False,
        "seed": 3,
        "stop": ["</s>", "\n"],
    }
    # temperature alone: top_p 1 stays out (TGI rejects top_p == 1); and vice versa.
    params = body(build_request(model="x", messages=MESSAGES, sampling=Sampling(temperature=0.5)))["parameters"]
    assert params["do_sample"] is True and params["temperature"] == 0.5 and "top_p" not in params
    params = body(build_request(model="x", messages=MESSAGES, sampling=Sampling(top_p=0.8)))["parameters"]
    assert params["do_sample"] is True and params["top_p"] == 0.8 and "temperature" not in params


def test_chat_messages_are_flattened() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert body(build_request(model="x", messages=msgs, sampling=Sampling()))["inputs"] == (
        "system: Be brief.\n\nuser: Hi"
    )


def test_api_key_only_in_secret_headers() -> None:
    req = build_request(model="x", messages=MESSAGES, sampling=Sampling(), api_key="hf_SECRET")
    assert req.headers["Authorization"] == "Bearer hf_SECRET"
    assert req.secret_headers == ("Authorization",)
    assert [k for k, v in req.headers.items() if "hf_SECRET" in v] == ["Authorization"]
    assert b"hf_SECRET" not in req.body


def test_bad_path() -> None:
    with pytest.raises(ValueError):
        build_request(model="x", messages=MESSAGES, sampling=Sampling(), path="/generate")  # type: ignore[arg-type]


# --- transcripts -------------------------------------------------------------------------------


def test_eos_special_token_is_not_text(harness) -> None:
    data = harness.read(P, "generate_stream.txt")
    assert b"data:{" in data and b"data: " not in data
    events, complete = harness.parse(TGIStreamParser, data)
    assert events == [
        Content("Hello"),
        Content(" world"),
        Content("!"),
        Usage(input_tokens=7, output_tokens=4),
        Finish("eos_token"),
    ]
    assert complete
    s = harness.check(TGIStreamParser, data)
    assert s.text == "Hello world!" and s.chunks == 3
    harness.check_truncated(TGIStreamParser, data, b'data:{"index":4')


def test_length_with_keepalive_and_empty_token(harness) -> None:
    data = harness.read(P, "generate_stream_length.txt")
    s = harness.check(TGIStreamParser, data)
    assert s.text == "The\n sky is blue" and s.chunks == 4  # the empty-text token is no Content
    assert s.usage == Usage(input_tokens=12, output_tokens=5)
    assert s.finishes == ["length"] and s.errors == [] and s.complete
    harness.check_truncated(TGIStreamParser, data, b'data:{"index":5')


def test_generation_error_midstream(harness) -> None:
    s = harness.check(TGIStreamParser, harness.read(P, "error_generation.txt"))
    assert s.text == "The sky"
    assert s.errors == [
        ServerError(
            "Request failed during generation: Server error: CUDA out of memory. Tried to allocate 2.00 GiB",
            kind="generation",
        )
    ]
    assert s.usage is None and s.finishes == [] and not s.complete


def test_overloaded_error_on_200(harness) -> None:
    s = harness.check(TGIStreamParser, harness.read(P, "error_overloaded.txt"))
    assert s.errors == [ServerError("Model is overloaded", kind="overloaded")]
    assert s.chunks == 0 and not s.complete


def test_final_frame_without_details_completes() -> None:
    p = TGIStreamParser()
    frame = b'data:{"index":1,"token":{"id":5,"text":"ok","logprob":0.0,"special":false},"generated_text":"ok","details":null}\n\n'
    assert p.feed(frame) == [Content("ok")]
    assert p.complete


@pytest.mark.parametrize(
    "payload",
    [b"data:{\"index\":1,\"token\":\n\n", b"data:not json\n\n", b'data:"str"\n\n', b'data:{"token":"x"}\n\n'],
)
def test_malformed_payload_raises(payload: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        TGIStreamParser().feed(payload)
    assert payload.split(b"\n")[0][5:12].decode() in str(exc.value)
