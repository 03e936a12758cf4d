"""The failure tree: every way a request can go wrong, each with a stable category.

A category is a short snake_case word that names the failure class, so Locust's failure
table and our reports group failures without exploding on per-request details. The message
keeps the server's own words where there are any.
"""

from __future__ import annotations


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


class TimeoutError_(TransportError):
    """A time limit passed: connect, first byte, gap between chunks, or whole request."""

    category = "timeout"


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
    category = "stream_truncated"


class ServerStreamError(LLMRequestError):
    """The server reported an error inside a stream that began with HTTP 200."""

    category = "server_error"


class ConfigError(Exception):
    """A setting is wrong or missing; raised at start, before any request is sent."""
