"""SDK and httpx exceptions -> the :mod:`llm_users.errors` tree, in one place.

The raw client raises the tree itself (it knows which phase a socket error happened in). SDK
mode gets whatever the SDK raises; :func:`from_sdk_exception` turns it into the category raw
mode gives the same fault, using the request's state (did the response head arrive? with which
status?) and the route's parser (an in-stream error payload goes through the protocol's own
rules, so its category is written once):

- a JSON decode error anywhere in the cause chain: ``malformed_stream``;
- a TLS error (``ssl.SSLError``) while connecting (a certificate not trusted, a handshake
  refused): ``tls_error``, as raw mode;
- httpx transport errors in the chain: ``connect_timeout``/``connect_error``; a read timeout
  before the response head is ``first_byte_timeout``, after it ``read_timeout``; a closed or
  reset connection is ``connection_reset``; h11's refusal of a response head past its own 100 KiB
  ("Receive buffer too long") is ``response_too_large``, as raw mode's head bound;
- an SDK error carrying an error payload after a 2xx head: the payload through the parser
  (``server_error``/``server_overloaded``, its code in ``error_code``, http_status stays 2xx);
- an SDK status error after a non-2xx head: ``http_<status>``;
- anything else: ``sdk_error`` naming the exception.

Duck-typed: no SDK is imported here.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from llm_users.client.request_state import RequestState
from llm_users.errors import (
    ConnectError,
    ConnectionResetError_,
    ConnectTimeout,
    EmptyResponse,
    FirstByteTimeout,
    HTTPStatusError,
    LLMRequestError,
    ProtocolError,
    ReadTimeout,
    ResponseTooLarge,
    SDKError,
    ServerStreamError,
    TLSError,
)
from llm_users.protocols.base import error_message

_RESET = ("RemoteProtocolError", "ReadError", "WriteError", "CloseError", "ConnectionResetError",
          "BrokenPipeError", "IncompleteRead")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _is_httpx(e: BaseException) -> bool:
    return type(e).__module__.split(".")[0] in ("httpx", "httpcore", "httpx2", "httpcore2")


def from_sdk_exception(exc: BaseException, state: RequestState) -> LLMRequestError:
    """The category raw mode would give the fault behind ``exc`` (see the module docstring)."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, LLMRequestError):
            return e
        if isinstance(e, json.JSONDecodeError):
            if not e.doc.strip() and not state.parser.frames:  # an empty whole-body answer (embeddings): as raw mode
                return EmptyResponse("HTTP 200 and headers, then the body ended without any event")
            return ProtocolError(f"payload is not JSON: {e.doc[:120]!r}")
    tls = next((e for e in chain if isinstance(e, ssl.SSLError)), None)
    if tls is not None and any(type(e).__name__ == "ConnectError" and _is_httpx(e) for e in chain):
        return TLSError(f"TLS handshake failed: {_msg(tls)}")  # a TLS error later is a read's: below
    for e in chain:
        name = type(e).__name__
        if _is_httpx(e) or isinstance(e, OSError):
            what = f"{name}: {_msg(e)}"
            if name == "RemoteProtocolError" and "Receive buffer too long" in what:
                return ResponseTooLarge("a response head over 100 KiB, the bound of h11 (the SDKs' HTTP parser; "
                                        "--llm-max-header-bytes applies below it)")
            if name in ("ConnectTimeout", "PoolTimeout"):
                return ConnectTimeout(what)
            if name == "ConnectError" or isinstance(e, ConnectionRefusedError):
                return ConnectError(what)
            if "Timeout" in name or isinstance(e, TimeoutError):
                return ReadTimeout(what) if state.responded else FirstByteTimeout(what)
            if name in _RESET or isinstance(e, ConnectionError):
                return ConnectionResetError_(what)
    if state.responded and 200 <= state.status < 300:
        payload = _error_payload(exc)
        if payload is not None:
            obj, name = payload
            try:
                state.handle(state.parser.payload(obj, name), 0)
            except LLMRequestError as e:
                return e
        return ServerStreamError(f"{type(exc).__name__}: {_msg(exc)}")
    status = state.status if state.responded else _status(exc)
    if status is not None and status >= 300:
        return HTTPStatusError(f"HTTP {status}: {_msg(exc)}", status=status, retry_after=_retry_after(exc))
    return SDKError(f"{type(exc).__name__}: {_msg(exc)}")


def _error_payload(exc: BaseException) -> tuple[dict[str, Any], bytes | None] | None:
    """The in-stream error payload an SDK exception carries, in the wire's shape."""
    body = getattr(exc, "body", None)  # openai (the "error" member), anthropic (the whole event)
    if body is None:
        body = getattr(exc, "details", None)  # google-genai (the whole payload)
    if body is None and hasattr(exc, "error"):  # ollama's ResponseError: the message
        body = {"error": exc.error}
    if isinstance(body, str):
        return {"error": body}, None
    if not isinstance(body, dict):
        return None
    if body.get("type") == "error":
        return body, b"error"
    if "error" not in body:
        body = {"error": body}
    return body, None


def _retry_after(exc: BaseException) -> str | None:
    """The answer's ``Retry-After`` from the SDK exception's response (openai, anthropic,
    google-genai keep the httpx response; ollama's error has none)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
    except (AttributeError, TypeError):
        return None
    return str(value) if value else None


def _status(exc: BaseException) -> int | None:
    for attr in ("status_code", "code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    return None


def _msg(e: BaseException) -> str:
    m = getattr(e, "message", None)
    if not isinstance(m, str) or not m:
        body = getattr(e, "body", None)
        m = error_message(body) if body else (str(e) or type(e).__name__)
    return m.splitlines()[0][:300] if m else type(e).__name__
