"""sim/routes_tokenize.py: the tokenizer endpoints real servers expose, counting as the simulator
counts a prompt (a word a token, chat messages adding --template-tokens each): vLLM's, llama.cpp's
and TGI's shapes of /tokenize told apart by the body, llama-cpp-python's /extras/tokenize,
vLLM's /version; each call counted, the checks in vLLM's error shape."""

from __future__ import annotations

from llm_users.sim.routes_tokenize import MAX_MODEL_LEN, VLLM_VERSION, _ids, _spans
from tests.sim.inproc import exchange, one


def test_each_servers_shape_counts_the_words() -> None:
    vllm, chat, llama, tgi, extras, stats = exchange(
        ("POST", "/tokenize", {"model": "m", "prompt": "one two three"}),
        ("POST", "/tokenize", {"messages": [{"role": "system", "content": "be brief"},
                                            {"role": "user", "content": "hello there friend"}]}),
        ("POST", "/tokenize", {"content": "one two three"}),
        ("POST", "/tokenize", {"inputs": "one  two"}),
        ("POST", "/extras/tokenize", {"input": "one two three", "model": "m"}),
        ("GET", "/_sim/stats", None),
        template_tokens=4)
    ids = _ids("one two three")
    assert vllm.json() == {"count": 3, "max_model_len": MAX_MODEL_LEN, "tokens": ids}
    assert chat.json()["count"] == 5 + 2 * 4 and len(chat.json()["tokens"]) == 13  # the template tokens padded in
    assert llama.json() == {"tokens": ids} and extras.json() == {"tokens": ids}
    assert tgi.json() == [{"id": _ids("one")[0], "text": "one", "start": 0, "stop": 3},
                          {"id": _ids("two")[0], "text": "two", "start": 5, "stop": 8}]
    assert stats.json()["tokenize_calls"] == 5


def test_ids_are_stable_and_an_empty_text_is_one_token() -> None:
    assert _ids("same words") == _ids("same words") and all(0 <= i < 32000 for i in _ids("a b c"))
    assert _ids("") == [0] and _spans("") == [{"id": 0, "text": "", "start": 0, "stop": 0}]


def test_the_checks_and_the_version() -> None:
    none, not_object, not_json, extras, unauthorized = exchange(
        ("POST", "/tokenize", {"text": "x"}, {"x-api-key": "k"}),
        ("POST", "/tokenize", [1], {"x-api-key": "k"}),
        ("POST", "/tokenize", b"{", {"x-api-key": "k"}),
        ("POST", "/extras/tokenize", {"content": "x"}),
        ("POST", "/tokenize", {"prompt": "x"}),
        require_api_key="k")
    assert none.status == 400 and none.json()["error"]["message"].startswith("tokenize needs 'prompt' or 'messages'")
    assert not_object.json()["error"]["message"] == "request body must be a JSON object"
    assert not_json.status == 400 and extras.status == 400 and extras.json()["error"]["message"] == "input is required"
    assert unauthorized.status == 401
    assert one("GET", "/version").json() == {"version": VLLM_VERSION}
