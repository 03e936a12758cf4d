"""protocols/base.py: what every protocol shares: a request's secret headers kept out of what
prints, the JSON POST and Bearer helpers, and the human message pulled out of an error payload."""

from __future__ import annotations

import orjson

from llm_users.protocols.base import HTTPRequest, bearer, error_message, json_post


def test_json_post_marks_only_the_key_header_secret() -> None:
    req = json_post("/v1/x", {"a": 1}, accept="text/event-stream", auth=bearer("sk-1"),
                    headers={"anthropic-version": "2023-06-01"}, extra_headers={"X-Trace": "t"})
    assert (req.method, req.path, req.name, orjson.loads(req.body)) == ("POST", "/v1/x", "/v1/x", {"a": 1})
    assert req.headers == {"Content-Type": "application/json", "Accept": "text/event-stream",
                           "anthropic-version": "2023-06-01", "Authorization": "Bearer sk-1", "X-Trace": "t"}
    assert req.secret_headers == ("Authorization",)
    assert req.redacted_headers()["Authorization"] == "***" and "sk-1" not in repr(req.redacted_headers())
    assert req.redacted_headers()["X-Trace"] == "t"
    named = json_post("/v1beta/models/m:x?alt=sse", {}, accept="*/*", name="/v1beta/models:x")
    assert named.name == "/v1beta/models:x" and named.secret_headers == () and "Authorization" not in named.headers


def test_the_callers_headers_go_over_the_protocols_own() -> None:
    req = json_post("/p", {}, accept="application/json", headers={"Accept": "text/plain"},
                    extra_headers={"Accept": "application/x-ndjson"})
    assert req.headers["Accept"] == "application/x-ndjson"


def test_redaction_ignores_the_headers_case() -> None:
    req = HTTPRequest("POST", "/p", {"X-Api-Key": "k", "x-other": "v"}, b"", "/p", secret_headers=("x-api-key",))
    assert req.redacted_headers() == {"X-Api-Key": "***", "x-other": "v"}


def test_bearer_needs_a_key() -> None:
    assert bearer("k") == ("Authorization", "Bearer k") and bearer(None) is None and bearer("") is None


def test_error_message_reads_the_shapes_servers_use() -> None:
    assert error_message("plain") == "plain"
    assert error_message({"error": {"message": "bad model", "code": 400}}) == "bad model"  # OpenAI, vLLM
    assert error_message({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}) == "Overloaded"
    assert error_message({"detail": "Not Found"}) == "Not Found"  # FastAPI
    assert error_message({"error": "model not found"}) == "model not found"  # Ollama, TGI
    assert error_message({"code": 5}) == "{'code': 5}" and error_message(None) == "None"
