"""sim/routes_gemini.py: Gemini's generateContent and streamGenerateContent: ``data: `` frames
ending in CRLF CRLF, several tokens a chunk, cumulative usageMetadata and the finish reason on
the last; the prompt from systemInstruction and contents (camelCase or snake_case); an unknown
action a 404 and the checks in Google's error shape."""

from __future__ import annotations

import orjson

from llm_users.sim.routes_gemini import _prompt
from llm_users.sim.text import expected_tokens
from tests.sim.inproc import FAST, exchange, one

BODY = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
        "generationConfig": {"maxOutputTokens": 8}}


def test_a_stream_several_tokens_a_chunk_with_cumulative_usage() -> None:
    r = one("POST", "/v1beta/models/gem-x:streamGenerateContent?alt=sse", BODY, gemini_tokens_per_chunk=2)
    assert r.body.endswith(b"}\r\n\r\n") and b"data: [DONE]" not in r.body
    frames = [orjson.loads(f.removeprefix(b"data: ")) for f in r.body.split(b"\r\n\r\n") if f]
    words = expected_tokens(FAST["seed"], "hello there", 5)
    texts = [f["candidates"][0]["content"]["parts"][0]["text"] for f in frames]
    assert texts == ["".join(words[0:2]), "".join(words[2:4]), words[4]]
    assert [f["usageMetadata"]["candidatesTokenCount"] for f in frames] == [2, 4, 5]
    assert {f["usageMetadata"]["promptTokenCount"] for f in frames} == {2}
    assert [f["candidates"][0].get("finishReason") for f in frames] == [None, None, "STOP"]  # 5 of 8
    assert {f["modelVersion"] for f in frames} == {"gem-x"}


def test_the_whole_answer_and_the_length() -> None:
    full, capped = exchange(("POST", "/v1/models/gem-x:generateContent", BODY),
                            ("POST", "/v1beta/models/gem-x:generateContent",
                             {**BODY, "generation_config": {"max_output_tokens": 3}, "generationConfig": None}))
    out = full.json()
    assert out["candidates"][0]["content"]["parts"] == [{"text": "".join(expected_tokens(FAST["seed"], "hello there", 5))}]
    assert out["usageMetadata"] == {"promptTokenCount": 2, "candidatesTokenCount": 5, "totalTokenCount": 7}
    assert out["modelVersion"] == "gem-x" and full.headers["Content-Type"].startswith("application/json")
    assert capped.json()["candidates"][0]["finishReason"] == "MAX_TOKENS"  # snake_case read too
    assert capped.json()["usageMetadata"]["candidatesTokenCount"] == 3


def test_the_prompt_from_the_system_instruction_and_the_contents() -> None:
    assert _prompt({"systemInstruction": {"parts": [{"text": "be brief"}]},
                    "contents": [{"parts": [{"text": "hi"}]}, "plain"]}) == "be brief\nhi\nplain"
    assert _prompt({"system_instruction": "sys", "contents": {"parts": [{"text": "one"}]}}) == "sys\none"


def test_an_unknown_action_and_the_checks_in_googles_shape() -> None:
    unknown, empty, bad_max = exchange(
        ("POST", "/v1beta/models/gem-x:countTokens", {"contents": []}),
        ("POST", "/v1beta/models/gem-x:generateContent", {"contents": []}),
        ("POST", "/v1beta/models/gem-x:generateContent", {**BODY, "generationConfig": {"maxOutputTokens": 0}}))
    assert unknown.status == 404 and unknown.json()["error"] == {"code": 404, "message": "Method not found: gem-x:countTokens",
                                                                 "status": "NOT_FOUND"}
    assert empty.status == 400 and empty.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "contents is not specified" in empty.json()["error"]["message"]
    assert bad_max.status == 400 and bad_max.json()["error"]["message"] == "maxOutputTokens must be at least 1, got 0"
