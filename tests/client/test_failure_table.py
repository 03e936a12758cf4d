"""failure_table.py: one row in Locust's failure table per category and normalized message."""

from __future__ import annotations

from llm_users.client.failure_table import for_locust, normalize
from llm_users.errors import LLMRequestError


def test_payloads_ids_and_long_numbers_are_taken_out() -> None:
    a = normalize("""data payload is not JSON: b'{"id": "chatcmpl-3f9c0a1b2c", "x": 1'""")
    b = normalize("""data payload is not JSON: b'{"id": "chatcmpl-77aa00ff11", "y": 22'""")
    assert a == b == "data payload is not JSON: '…'"
    assert normalize("request 3f9c0a1b-2c3d-4e5f-8a9b-0c1d2e3f4a5b failed") == "request <id> failed"
    assert normalize("HTTP 401: bad key for 9a8b7c6d5e4f") == "HTTP 401: bad key for <id>"  # status kept
    assert normalize("read 123456 bytes") == "read <n> bytes"
    assert len(normalize("x" * 1000)) == 160


def test_locust_sees_category_and_normalized_message_as_the_repr() -> None:
    f1 = for_locust(LLMRequestError("payload b'abc' at 12345", category="malformed_stream"))
    f2 = for_locust(LLMRequestError("payload b'xyz' at 67890", category="malformed_stream"))
    assert repr(f1) == repr(f2) == str(f1) == "malformed_stream: payload '…' at <n>"
