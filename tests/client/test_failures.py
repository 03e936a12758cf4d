"""client/failures.py: an SDK's or httpx's exception becomes the category raw mode gives the same
fault (from_sdk_exception), judged by the request's state: did the response head arrive, with
which status; an in-stream error payload goes through the route's parser."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest

from llm_users.client.failures import from_sdk_exception
from llm_users.client.request_state import RequestState
from llm_users.errors import ConnectError
from llm_users.metrics import RequestRecord
from llm_users.protocols.openai import OpenAIStreamParser


def _state(status: int = 0) -> RequestState:
    state = RequestState(RequestRecord("id", "n", "openai", "m"), OpenAIStreamParser())
    if status:
        state.response(status, 0)
    return state


def _wrapped(inner: BaseException) -> RuntimeError:
    """``inner`` as an SDK raises it: wrapped in its own exception, the httpx one as the cause."""
    try:
        try:
            raise inner
        except BaseException as e:
            raise RuntimeError("Connection error.") from e
    except RuntimeError as outer:
        return outer


def test_h11s_own_head_bound_is_response_too_large() -> None:
    """Under every SDK, h11 refuses a head past 100 KiB itself; raw mode's category, not connection_reset."""
    import httpx

    from llm_users.client.failures import from_sdk_exception
    from llm_users.client.request_state import RequestState
    from llm_users.metrics import RequestRecord
    from llm_users.protocols.openai import OpenAIStreamParser

    state = RequestState(RequestRecord("id", "n", "openai", "m"), OpenAIStreamParser())
    try:
        try:
            raise httpx.RemoteProtocolError("Receive buffer too long")
        except httpx.RemoteProtocolError as inner:
            raise RuntimeError("Connection error.") from inner  # an SDK's wrapper
    except RuntimeError as e:
        got = from_sdk_exception(e, state)
    assert got.category == "response_too_large" and "100 KiB" in got.message


@pytest.mark.parametrize(("inner", "status", "category"), [
    (httpx.ConnectTimeout("slow"), 0, "connect_timeout"),
    (httpx.PoolTimeout("pool"), 0, "connect_timeout"),
    (httpx.ConnectError("refused"), 0, "connect_error"),
    (ConnectionRefusedError(111, "refused"), 0, "connect_error"),
    (httpx.ReadTimeout("quiet"), 0, "first_byte_timeout"),  # no head yet
    (httpx.ReadTimeout("quiet"), 200, "read_timeout"),  # the head came, then silence
    (httpx.RemoteProtocolError("peer closed connection"), 200, "connection_reset"),
    (httpx.ReadError("reset"), 0, "connection_reset"),
    (BrokenPipeError(32, "pipe"), 0, "connection_reset"),
])
def test_transport_errors_in_the_cause_chain_are_raw_modes_categories(inner, status: int, category: str) -> None:
    assert from_sdk_exception(_wrapped(inner), _state(status)).category == category


def test_a_tls_error_while_connecting_is_tls_error() -> None:
    try:
        try:
            raise ssl.SSLCertVerificationError("certificate verify failed: self-signed certificate")
        except ssl.SSLError as e:
            raise httpx.ConnectError("[SSL] handshake") from e
    except httpx.ConnectError as e:
        got = from_sdk_exception(_wrapped(e), _state())
    assert got.category == "tls_error" and got.message.startswith("TLS handshake failed: ")


def test_json_and_our_own_errors_in_the_chain() -> None:
    bad = json.JSONDecodeError("Expecting value", "<html>oops</html>", 0)
    got = from_sdk_exception(_wrapped(bad), _state(200))
    assert got.category == "malformed_stream" and "'<html>oops</html>'" in got.message
    empty = from_sdk_exception(_wrapped(json.JSONDecodeError("Expecting value", "  ", 0)), _state(200))
    assert empty.category == "empty_response"  # a whole-body answer with no body: as raw mode
    ours = ConnectError("refused")
    assert from_sdk_exception(_wrapped(ours), _state()) is ours


class _StatusError(Exception):
    """What the SDKs' status errors carry: a status code, a body, the httpx response."""

    def __init__(self, message: str, status_code: int, body: object = None, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.response = httpx.Response(status_code, headers=headers or {})


def test_a_status_error_before_the_head_is_http_status_with_retry_after() -> None:
    got = from_sdk_exception(_StatusError("Error code: 429", 429, headers={"retry-after": "3"}), _state())
    assert got.category == "http_429" and got.status == 429 and got.retry_after == "3"
    assert from_sdk_exception(_StatusError("no", 503), _state(503)).category == "http_503"


def test_an_error_payload_after_a_2xx_head_goes_through_the_parser() -> None:
    payload = {"message": "the engine died", "type": "InternalServerError", "code": 500}
    got = from_sdk_exception(_StatusError("stream error", 200, body=payload), _state(200))
    assert got.category == "server_error" and "the engine died" in got.message
    overloaded = {"message": "busy", "type": "overloaded", "code": 503}
    assert from_sdk_exception(_StatusError("x", 200, body=overloaded), _state(200)).category == "server_overloaded"
    no_payload = from_sdk_exception(ValueError("odd"), _state(200))
    assert no_payload.category == "server_error" and no_payload.message == "ValueError: odd"


def test_anything_else_is_sdk_error_naming_the_exception() -> None:
    got = from_sdk_exception(KeyError("choices"), _state())
    assert got.category == "sdk_error" and got.message == "KeyError: 'choices'"
