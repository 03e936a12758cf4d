"""The failure tree: every way a request can go wrong, one class per stable category.

A category is a short snake_case word that names the failure class, so Locust's failure
table and our reports group failures without exploding on per-request details. The message
keeps the server's own words where there are any. Raw and SDK mode raise the same classes:
:mod:`llm_users.client.failures` maps socket, httpx and SDK exceptions onto this tree, in one place.

    LLMRequestError
    ├── TransportError              connection_error
    │   ├── ConnectError            connect_error (TLSError: tls_error)
    │   ├── ConnectionResetError_   connection_reset
    │   └── TimeoutError_           timeout
    │       ├── ConnectTimeout      connect_timeout
    │       ├── FirstByteTimeout    first_byte_timeout
    │       ├── ReadTimeout         read_timeout
    │       └── TotalTimeout        total_timeout
    ├── HTTPStatusError             http_<status>
    ├── ProtocolError               malformed_stream
    │   ├── StreamTruncated         stream_truncated
    │   ├── EmptyResponse           empty_response
    │   ├── WrongResultCount        wrong_result_count (embeddings/rerank)
    │   ├── ResponseTooLarge        response_too_large (a line, event, body or head over its bound)
    │   └── RunawayStream           runaway_stream (far more chunks than the tokens asked)
    ├── ServerStreamError           server_error (payload code in ``code``)
    │   └── ServerOverloaded        server_overloaded
    ├── SDKError                    sdk_error (an SDK exception nothing else explains)
    └── Cancelled                   cancelled: NOT a failure; the client abandoned the request on
                                    purpose (--llm-cancel-after), recorded as status ``cancelled``
"""

from __future__ import annotations

import time


class LLMRequestError(Exception):
    """Base of every failure of one LLM request. ``str()`` is ``"category: message"``."""

    category = "error"

    def __init__(self, message: str, *, status: int | None = None, category: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        if category is not None:
            self.category = category

    def __str__(self) -> str:
        return f"{self.category}: {self.message}"


class TransportError(LLMRequestError):
    """The connection failed: refused, reset, closed early, or TLS trouble."""

    category = "connection_error"


class ConnectError(TransportError):
    category = "connect_error"


class ConnectionResetError_(TransportError):
    category = "connection_reset"


class TLSError(ConnectError):
    category = "tls_error"


class TimeoutError_(TransportError):
    """A time limit passed: connect, first byte, gap between chunks, or whole request."""

    category = "timeout"


class ConnectTimeout(TimeoutError_):
    category = "connect_timeout"


class FirstByteTimeout(TimeoutError_):
    """The request went out; no response byte arrived within the first-byte limit."""

    category = "first_byte_timeout"


class ReadTimeout(TimeoutError_):
    """Bytes were flowing, then none for longer than the read limit."""

    category = "read_timeout"


class TotalTimeout(TimeoutError_):
    category = "total_timeout"


class HTTPStatusError(LLMRequestError):
    """The server answered with a non-2xx status. Category ``http_<status>``."""

    def __init__(self, message: str, *, status: int, retry_after: str | None = None):
        super().__init__(message, status=status, category=f"http_{status}")
        self.retry_after = retry_after


class ProtocolError(LLMRequestError):
    """The stream broke the protocol: unparsable payload (``malformed_stream``) or an end
    without a terminator (``stream_truncated``)."""

    category = "malformed_stream"


class StreamTruncated(ProtocolError):
    """Events arrived, then the body ended without the protocol's end signal."""

    category = "stream_truncated"


class EmptyResponse(ProtocolError):
    """Status and headers, then the body ended without a single event."""

    category = "empty_response"


class WrongResultCount(ProtocolError):
    """An embeddings or rerank answer with another number of vectors or scores than inputs sent."""

    category = "wrong_result_count"


class ResponseTooLarge(ProtocolError):
    """A piece of the response grew past its bound (:mod:`llm_users.protocols.limits`): an SSE
    event or NDJSON line without its end, a whole-body answer, the response head, or what a
    compressed body inflates to. Cut while reading, so memory stays flat; the message names the
    bound and the option that raises it."""

    category = "response_too_large"


class RunawayStream(ProtocolError):
    """A stream ran far past the output asked (token chunks past the runaway bound: a generous
    multiple of the max tokens); cut there. Below the bound an over-long answer is a success
    the sampling check flags."""

    category = "runaway_stream"


class ServerStreamError(LLMRequestError):
    """The server reported an error inside a stream that began with HTTP 200. ``status``
    stays None (the HTTP status is the one the server sent); the payload's own code, if it
    has one, is ``code``."""

    category = "server_error"

    def __init__(self, message: str, *, code: int | str | None = None, category: str | None = None):
        super().__init__(message, category=category)
        self.code = code


class ServerOverloaded(ServerStreamError):
    category = "server_overloaded"


class SDKError(LLMRequestError):
    """An SDK raised something no other category explains (the message names it)."""

    category = "sdk_error"


class Cancelled(LLMRequestError):
    """The client abandoned the request on purpose (``--llm-cancel-after``, :mod:`llm_users.client.cancel`).
    Raised through the same paths as a failure so the connection is closed, never reused; the
    user records it with status ``cancelled`` (``mark_cancelled``), not as a failure. ``at_ns``:
    the instant the client gave up (``perf_counter_ns``), stamped before it closes the
    connection, so the server can never see the close before the request's recorded end."""

    category = "cancelled"
    at_ns: int | None = None

    def stamp(self) -> Cancelled:
        """Take :attr:`at_ns` now unless taken already (the first handler that sees it, before it
        closes anything)."""
        if self.at_ns is None:
            self.at_ns = time.perf_counter_ns()
        return self


class ConfigError(Exception):
    """A setting is wrong or missing; raised at start, before any request is sent."""
