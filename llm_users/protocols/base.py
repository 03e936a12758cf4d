"""The events every protocol parser yields, and the contract parsers keep.

A parser is an incremental decoder in the style of httpx's ``_decoders``: it takes the body
bytes in whatever pieces the network delivers (``feed``), returns the events completed by that
piece, and is told when the body ends (``close``). It never does I/O and never sees time: the
caller stamps each piece with ``time.perf_counter_ns()`` as it arrives.

Events are small slotted objects (treat them as read-only):

- :class:`Content`: output text (``reasoning=False``) or reasoning/thinking text; ``tool=True``:
  a tool call's arguments (JSON text, a delta or whole). Only non-empty text is reported: a
  ``Content`` marks a token-bearing chunk, the unit TTFT and ITL count.
- :class:`Usage`: token counts the server reported (and server-side timings where the protocol
  has them). Later ``Usage`` events replace earlier ones field by field.
- :class:`Finish`: the finish/stop reason.
- :class:`ServerError`: an error payload inside a stream (these arrive on HTTP 200).
- :class:`ModelName`: the model the server says answered (once per stream).
- :class:`Results`: an embeddings or rerank answer's vector or score count (and vector size).

``parser.response_id`` (where a parser has it) is the server's own id for the answer, once the
stream gave it (the join key with its logs, see :mod:`~llm_users.protocols.server_side`).
``parser.complete`` is true once the protocol's terminator was seen ([DONE], a finish reason,
the final frame, ``done: true``...) and ``parser.frames`` counts the payloads decoded. ``close()``
returns the events of whatever complete frame was left; the caller
(:class:`~llm_users.client.request_state.RequestState`) then reports ``empty_response`` when no frame
came at all and ``stream_truncated`` when ``complete`` is false. ``payload(obj, name)`` takes
one already-decoded payload (what an SDK yields, dumped back to the wire's JSON shape) through
the same rules, so SDK mode shares every end rule and category with raw mode. Payloads that do not parse raise :class:`~llm_users.errors.ProtocolError`
(``malformed_stream``) with the offending bytes (truncated) in the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson


@dataclass(slots=True)  # not frozen: one per chunk, and a frozen __init__ costs 0.2 us more
class Content:
    text: str
    reasoning: bool = False
    tool: bool = False  # a tool-call (function arguments) delta


@dataclass(slots=True, frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    server: dict[str, Any] | None = field(default=None)


@dataclass(slots=True, frozen=True)
class Finish:
    reason: str


@dataclass(slots=True, frozen=True)
class ServerError:
    message: str
    status: int | None = None
    kind: str | None = None


@dataclass(slots=True, frozen=True)
class ModelName:
    name: str


@dataclass(slots=True, frozen=True)
class Results:
    count: int
    dim: int | None = None


Event = Content | Usage | Finish | ServerError | ModelName | Results


class StreamParser(Protocol):
    """What the stream client needs from a protocol parser."""

    complete: bool
    frames: int

    def feed(self, data: bytes) -> list[Event]: ...

    def close(self) -> list[Event]: ...

    def payload(self, obj: dict[str, Any], name: bytes | None = None) -> list[Event]: ...


@dataclass(slots=True)
class HTTPRequest:
    """A request ready to send: method, path (with query), headers, body bytes.

    ``name`` is what Locust's stats table shows (the endpoint, e.g. ``/v1/chat/completions``).
    Header values that hold secrets are listed in ``secret_headers`` so nothing prints them.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    name: str
    secret_headers: tuple[str, ...] = ()

    def redacted_headers(self) -> dict[str, str]:
        secret = {h.lower() for h in self.secret_headers}
        return {k: ("***" if k.lower() in secret else v) for k, v in self.headers.items()}


def bearer(api_key: str | None) -> tuple[str, str] | None:
    """The ``Authorization: Bearer`` header for a key, or None without one."""
    return ("Authorization", f"Bearer {api_key}") if api_key else None


def json_post(
    path: str,
    body: dict[str, Any],
    *,
    accept: str,
    auth: tuple[str, str] | None = None,
    headers: dict[str, str] | None = None,
    extra_headers: dict[str, str] | None = None,
    name: str | None = None,
) -> HTTPRequest:
    """A JSON POST: ``auth`` is the one (header, value) that carries the key and is marked
    secret; ``headers`` are the protocol's own, ``extra_headers`` the caller's."""
    h = {"Content-Type": "application/json", "Accept": accept}
    if headers:
        h.update(headers)
    secret: tuple[str, ...] = ()
    if auth is not None:
        h[auth[0]] = auth[1]
        secret = (auth[0],)
    if extra_headers:
        h.update(extra_headers)
    return HTTPRequest("POST", path, h, orjson.dumps(body), name=name or path, secret_headers=secret)


def error_message(payload: Any) -> str:
    """Pull a human message out of the error shapes servers use (str, {message}, {error})."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict):
        for key in ("message", "error", "detail"):
            if key in payload:
                return error_message(payload[key])
    return str(payload)
