"""SDK mode's bounds on a response (issue 54), the same as raw mode's, applied on our httpx client.

The SDKs read the body from httpx, which inflates a compressed one without limit (a gzip bomb
grew one process by 2 GB and froze it for a minute). So SDK mode asks for ``Accept-Encoding:
identity`` (:mod:`.sdk`'s request hook), and its response hook hands each response to
:func:`bound` before a byte of the body is read:

- the head (status line and headers) past ``--llm-max-header-bytes`` fails at once (h11, under
  every SDK, refuses a head past 100 KiB by itself: :mod:`.failures` names that one too);
- a body compressed all the same (a server may ignore the request header) is inflated here, in
  pieces of at most 64 KiB, and httpx no longer sees its ``Content-Encoding``: what it inflates
  to is bounded by ``--llm-max-body-bytes``; gzip, deflate and br (with the brotli package) are
  inflated, any other encoding fails naming it;
- every response's bytes (inflated) pass a counter: a whole-body answer (embeddings, rerank) past
  ``--llm-max-body-bytes``, and in a stream the bytes since the last event end (a blank line:
  SSE) or line end (NDJSON) past ``--llm-max-event-bytes`` (an event or line that never ends,
  as raw mode's parsers count) fail as ``response_too_large``, raised into the SDK's read,
  whose exception chain carries it to the request's record
  (:func:`~llm_users.client.failures.from_sdk_exception`).

The wrapper is a subclass of the response's own httpx package's ``SyncByteStream`` (httpx and
httpx2 each check for theirs). Per piece of a stream: an ``rfind`` or two and integer compares.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import gevent

from llm_users.client.bodies import compression
from llm_users.errors import ProtocolError
from llm_users.protocols import limits

PIECE = 65536  # the most one inflate call returns
_NO_BOUND = 1 << 62
#: What ends what the event bound counts, per stream kind: SSE events (LF, CRLF or CR line ends)
#: and NDJSON lines; the first found from the end of a piece resets the count.
SSE_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
LINE_ENDS = (b"\n", b"\r")
_WHAT = {SSE_ENDS: "an SSE event of the body", LINE_ENDS: "a line of the body"}


class BoundedBody:
    """The response's byte stream behind the bounds (see the module docstring)."""

    def __init__(self, raw: Any, body_max: int, event_max: int, ends: tuple[bytes, ...],
                 inflater: Inflater | BrotliInflater | None, what: str) -> None:
        self._raw = raw
        self._body_max = body_max
        self._event_max = event_max  # with ``ends`` () none: a whole-body answer (compact JSON has no line end)
        self._ends = ends
        self._inflater = inflater
        self._what = what

    def __iter__(self) -> Iterator[bytes]:
        body_max, event_max, ends = self._body_max, self._event_max, self._ends
        total = since = 0
        for piece in self._pieces():
            n = len(piece)
            total += n
            if total > body_max:
                raise limits.body_too_large(body_max, self._what)
            if ends:
                since = _since_end(piece, ends, since)
                if since > event_max:
                    raise limits.event_too_large(_WHAT[ends], event_max)
            yield piece

    def _pieces(self) -> Iterator[bytes]:
        inflater = self._inflater
        if inflater is None:
            yield from self._raw
            return
        for data in self._raw:
            for piece in inflater.feed(data):
                yield piece
                gevent.sleep(0)  # inflating is CPU only: the other streams' reads between pieces
        tail = inflater.flush()
        if tail:
            yield tail

    def close(self) -> None:
        self._raw.close()


def _since_end(piece: bytes, ends: tuple[bytes, ...], since: int) -> int:
    """The bytes since the last of ``ends`` once ``piece`` is added to ``since`` such bytes."""
    for end in ends:
        at = piece.rfind(end)
        if at >= 0:
            return len(piece) - at - len(end)
    return since + len(piece)


class Inflater:
    """gzip or deflate (zlib), in pieces of at most :data:`PIECE` bytes."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_deflate = encoding == "deflate"  # zlib-wrapped as the RFC says; raw deflate if that fails
        self._d = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            yield from self._inflate(data)
        except zlib.error as e:
            if not self._raw_deflate:
                raise _not_inflating(self.encoding, e) from None
            self._raw_deflate = False  # the first bytes were no zlib header: raw deflate, from the start
            self._d = zlib.decompressobj(-zlib.MAX_WBITS)
            yield from self.feed(data)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        out = d.decompress(data, PIECE)
        self._raw_deflate = False
        while out:
            yield out
            out = d.decompress(d.unconsumed_tail, PIECE)

    def flush(self) -> bytes:
        return self._d.flush()


class BrotliInflater:
    """br, with the brotli package (the one httpx uses), in pieces of at most :data:`PIECE` bytes."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._b = module.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        process = self._b.process
        try:
            out = process(data, output_buffer_limit=PIECE // 2)  # its buffer may grow to about twice that
            while out:  # output held back by the limit comes with empty input, until none is left
                yield out
                out = process(b"", output_buffer_limit=PIECE // 2)
        except self._module.error as e:
            raise _not_inflating("br", e) from None

    def flush(self) -> bytes:
        return b""


def inflater_for(encoding: str) -> Inflater | BrotliInflater:
    """The bounded inflater of a Content-Encoding, or ProtocolError naming one SDK mode does not inflate."""
    if encoding in ("gzip", "x-gzip", "deflate"):
        return Inflater(encoding)
    if encoding == "br":
        try:
            return BrotliInflater(importlib.import_module("brotli"))
        except ImportError:
            pass
    raise ProtocolError(f"a {encoding}-compressed body (Content-Encoding: {encoding}) though the request asked "
                        "for identity; SDK mode inflates gzip, deflate and br (with the brotli package) only")


def _not_inflating(encoding: str, e: Exception) -> ProtocolError:
    return ProtocolError(f"the {encoding}-compressed body (Content-Encoding: {encoding}, though the request asked "
                         f"for identity) does not inflate: {e}")


def bound(response: Any, lim: limits.Limits, ends: tuple[bytes, ...] = ()) -> None:
    """Check ``response``'s head and put its body behind the bounds (httpx's response hook).
    ``ends``: a stream's (:data:`SSE_ENDS`, :data:`LINE_ENDS`: the event bound; the body bound
    only on what a compressed body inflates to); none: a whole-body answer (the body bound)."""
    head = sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
    if head > lim.header_bytes:
        raise limits.head_too_large(lim.header_bytes)
    encoding = compression(response.headers.get("content-encoding"))
    inflater: Inflater | BrotliInflater | None = None
    what = "a whole-body answer"
    if encoding is not None:
        inflater = inflater_for(encoding)
        del response.headers["content-encoding"]  # inflated here: httpx must not inflate it again
        what = f"what the {encoding}-compressed body inflates to"
    body_max = lim.body_bytes if inflater is not None or not ends else _NO_BOUND
    cls = _wrapper(type(response.stream))
    response.stream = cls(response.stream, body_max, lim.event_bytes, ends, inflater, what)


_WRAPPERS: dict[type, type] = {}


def _wrapper(stream_type: type) -> type:
    """:class:`BoundedBody` as a subclass of the ``SyncByteStream`` of the response's httpx package."""
    cls = _WRAPPERS.get(stream_type)
    if cls is None:
        bases: Iterable[type] = [c for c in stream_type.__mro__ if c.__name__ == "SyncByteStream"][:1]
        cls = _WRAPPERS[stream_type] = type("BoundedBody", (BoundedBody, *bases), {})
    return cls
