"""sim/routes_tgi.py: TGI's routes as TGI answers them: ``data:{...}`` frames with no space, one a
token and indexed from 1, the last with ``generated_text`` (and ``details`` when asked), ``</s>``
ending an answer that stopped on its own; TGI's validation, as an event on 200 when streaming;
the non-streaming shapes and ``/info``."""

from __future__ import annotations

import orjson
import pytest

from llm_users.sim.routes_tgi import _validate
from llm_users.sim.text import expected_tokens
from tests.sim import simhttp
from tests.sim.inproc import FAST, one


def test_tgi_non_streaming_shapes(sim):
    body = {"inputs": "hello", "parameters": {"max_new_tokens": 3, "details": True}}
    r = simhttp.request(sim.url, "/generate", body)
    out = r.json()
    assert r.status == 200 and out["details"]["generated_tokens"] == 3 and len(out["details"]["tokens"]) == 3
    assert out["generated_text"] == "".join(t["text"] for t in out["details"]["tokens"])
    assert r.headers["x-generated-tokens"] == "3" and int(r.headers["x-total-time"]) >= 100
    assert {"x-queue-time", "x-inference-time", "x-time-per-token", "x-prompt-tokens"} <= set(r.headers)
    r = simhttp.request(sim.url, "/", body)  # the compat route answers a list, like the Inference API
    assert isinstance(r.json(), list) and r.json()[0]["generated_text"] == out["generated_text"]


def _frames(body: bytes) -> list[dict]:
    assert b"data: " not in body and not body.endswith(b"[DONE]\n\n")  # no space after the colon, no sentinel
    return [orjson.loads(line[5:]) for line in body.split(b"\n\n") if line]


def test_an_answer_that_stops_ends_on_the_special_eos_token() -> None:
    """--output-tokens 5 under a max of 8: the model stopped; </s> is the 5th token, not text."""
    r = one("POST", "/generate_stream", {"inputs": "hello there",
                                         "parameters": {"max_new_tokens": 8, "details": True, "seed": 9}})
    frames = _frames(r.body)
    words = expected_tokens(FAST["seed"], "hello there", 4)
    assert r.status == 200 and [f["index"] for f in frames] == [1, 2, 3, 4, 5]
    assert [f["token"]["text"] for f in frames[:4]] == words and not any(f["token"]["special"] for f in frames[:4])
    assert frames[-1]["token"] == {"id": 2, "text": "</s>", "logprob": -0.01, "special": True}
    assert frames[-1]["generated_text"] == "".join(words)
    assert frames[-1]["details"] == {"finish_reason": "eos_token", "generated_tokens": 5, "input_length": 2, "seed": 9}
    assert all(f["generated_text"] is None and f["details"] is None for f in frames[:-1])


def test_an_answer_cut_at_its_length_has_no_eos_and_details_only_when_asked() -> None:
    frames = _frames(one("POST", "/generate_stream", {"inputs": "hello there",
                                                      "parameters": {"max_new_tokens": 3}}).body)
    words = expected_tokens(FAST["seed"], "hello there", 3)
    assert [f["token"]["text"] for f in frames] == words and frames[-1]["generated_text"] == "".join(words)
    assert frames[-1]["details"] is None


@pytest.mark.parametrize(("params", "says"), [
    ({"temperature": 0}, "`temperature` must be strictly positive"),
    ({"top_p": 1.0}, "`top_p` must be > 0.0 and < 1.0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be at least 1"),
])
def test_validation_is_422_or_an_event_on_200_when_streaming(params: dict, says: str) -> None:
    plain = one("POST", "/generate", {"inputs": "x", "parameters": params})
    assert plain.status == 422 and plain.json()["error_type"] == "validation" and says in plain.json()["error"]
    streamed = one("POST", "/generate_stream", {"inputs": "x", "parameters": params})
    assert streamed.status == 200 and streamed.headers["Content-Type"].startswith("text/event-stream")
    event = orjson.loads(streamed.body.removeprefix(b"data:"))
    assert event["error_type"] == "validation" and says in event["error"]
    assert one("POST", "/generate", {"inputs": 5}).status == 422  # inputs must be a string


def test_validate_reads_the_parameters_with_tgis_defaults() -> None:
    assert _validate({}) == (512, False, None)
    assert _validate({"max_new_tokens": 7, "details": True, "seed": 4, "temperature": 0.5, "top_p": 0.9}) == (7, True, 4)
    assert _validate({"seed": "4"})[2] is None  # only an integer seed is echoed


def test_info_names_the_model_and_its_capacity() -> None:
    info = one("GET", "/info", max_batch=8, max_queue=4, model="tgi-sim").json()
    assert info["model_id"] == "tgi-sim" and info["max_concurrent_requests"] == 12
    assert one("GET", "/info", max_batch=8).json()["max_concurrent_requests"] == 8
