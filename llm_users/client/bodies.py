"""Whole bodies in raw mode, beside the streams: the body of a small JSON call (``GET /v1/models``,
``POST /tokenize``) kept within ``--llm-max-body-bytes``, an error status's message from its
body, and the refusal of a body compressed though the request asked for identity (raw mode does
not inflate; it names the encoding instead of failing on the bytes). No I/O: the stream client
(:mod:`.stream`) reads, these judge."""

from __future__ import annotations

from typing import Any

import orjson

from llm_users.errors import HTTPStatusError, ProtocolError
from llm_users.protocols import limits
from llm_users.protocols.base import error_message
from llm_users.protocols.server_side import Headers


class BodyCollector:
    """A "protocol" that keeps the whole body: for small non-streaming calls (GET /v1/models),
    cut as ``response_too_large`` past the body bound."""

    complete = True
    frames = 1

    def __init__(self) -> None:
        self.body = bytearray()
        self.max_bytes = limits.CURRENT.body_bytes

    def payload(self, obj: dict[str, Any], name: bytes | None = None) -> list:
        return []

    def feed(self, data: bytes) -> list:
        self.body += data
        if len(self.body) > self.max_bytes:
            self.body = bytearray()  # held no longer (a failure's traceback keeps this a while)
            raise limits.body_too_large(self.max_bytes)
        return []

    def close(self) -> list:
        return []


def status_error(status: int, body: bytes, headers: Headers) -> HTTPStatusError:
    """``http_<status>`` with the server's message from its error body (JSON, else its text)."""
    encoding = compression(headers.get(b"content-encoding"))
    try:
        message = (f"a {encoding}-compressed body, not inflated" if encoding
                   else error_message(orjson.loads(body)) if body else "")
    except orjson.JSONDecodeError:
        message = body[:200].decode("utf-8", "replace").strip()
    retry = headers.get(b"retry-after")
    msg = f"HTTP {status}" + (f": {message}" if message else "")
    return HTTPStatusError(msg, status=status, retry_after=retry.decode("latin-1") if retry else None)


def compression(value: bytes | str | None) -> str | None:
    """A Content-Encoding that compresses (anything but identity), lower-case; else None."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    name = value.strip().lower() if value else ""
    return name if name not in ("", "identity") else None


def refuse_encoding(status: int, value: bytes) -> None:
    """A 2xx body compressed though the request asked for identity fails at once, naming the
    encoding (``malformed_stream``)."""
    encoding = compression(value)
    if encoding:
        raise ProtocolError(f"HTTP {status} with a {encoding}-compressed body (Content-Encoding: {encoding}) though "
                            "the request asked for identity; raw mode does not inflate (--llm-client sdk does, "
                            "within --llm-max-body-bytes)")
