"""sim/routes_ollama.py: Ollama's native routes: NDJSON, one object a line and no sentinel,
streaming unless told not to, every /api/chat line with message.role, the last line done with its
reason and integer-nanosecond timings (zeros left out); options.num_predict the length (512
without one); /api/generate's system and context; the checks and /api/tags, /api/version."""

from __future__ import annotations

import orjson

from llm_users.sim.routes_ollama import VERSION, _max_tokens
from llm_users.sim.text import expected_tokens
from tests.sim.inproc import FAST, exchange, one

CHAT = {"model": "llama3", "messages": [{"role": "user", "content": "hello there"}], "options": {"num_predict": 8}}


def _lines(body: bytes) -> list[dict]:
    assert body.endswith(b"\n") and b"\n\n" not in body
    return [orjson.loads(x) for x in body.split(b"\n")[:-1]]


def test_a_chat_stream_one_object_a_line_the_last_done_with_timings() -> None:
    r = one("POST", "/api/chat", CHAT)
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = _lines(r.body)
    words = expected_tokens(FAST["seed"], "hello there", 5)
    assert [x["message"]["content"] for x in lines[:-1]] == words
    assert all(x["message"]["role"] == "assistant" and x["model"] == "llama3" for x in lines)
    assert [x["done"] for x in lines] == [False] * 5 + [True]
    last = lines[-1]
    assert last["done_reason"] == "stop" and last["message"]["content"] == ""  # 5 of 8: its own end
    assert (last["prompt_eval_count"], last["eval_count"]) == (2, 5)
    assert all(isinstance(last[k], int) for k in ("total_duration", "eval_duration", "prompt_eval_duration"))
    assert "load_duration" not in last  # zero: left out, as Ollama does


def test_generate_not_streamed_has_the_system_prompt_and_the_context() -> None:
    body = {"model": "llama3", "system": "be brief", "prompt": "hello there", "stream": False,
            "options": {"num_predict": 3}}
    out = one("POST", "/api/generate", body).json()
    words = expected_tokens(FAST["seed"], "be brief\nhello there", 3)
    assert out["response"] == "".join(words) and out["done"] and out["done_reason"] == "length"
    assert out["prompt_eval_count"] == 4 and out["eval_count"] == 3 and len(out["context"]) == 3


def test_the_length_from_num_predict() -> None:
    assert _max_tokens({}) == 512 and _max_tokens({"options": {"num_predict": -1}}) == 512  # -1: no limit
    assert _max_tokens({"options": {"num_predict": 7}}) == 7 and _max_tokens({"options": {"num_predict": True}}) == 512
    assert _max_tokens({"options": "x"}) == 512


def test_the_checks_and_the_small_routes() -> None:
    no_model, no_messages, no_prompt, tags, version = exchange(
        ("POST", "/api/chat", {"messages": []}),
        ("POST", "/api/chat", {"model": "m"}),
        ("POST", "/api/generate", {"model": "m"}),
        ("GET", "/api/tags", None),
        ("GET", "/api/version", None),
        model="llama3")
    assert (no_model.status, no_model.json()) == (400, {"error": "model is required"})
    assert (no_messages.status, no_messages.json()) == (400, {"error": "messages is required"})
    assert (no_prompt.status, no_prompt.json()) == (400, {"error": "prompt is required"})
    assert [m["name"] for m in tags.json()["models"]] == ["llama3:latest"]  # the tag Ollama adds
    assert version.json() == {"version": VERSION}
    assert one("GET", "/api/tags", model="qwen:7b").json()["models"][0]["name"] == "qwen:7b"
