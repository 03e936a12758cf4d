"""One request's life, the same for raw and SDK mode: stamps, events, end rules, failure.

Raw mode feeds it the parser's events for each ``recv``; SDK mode feeds the same parser the
SDK's chunks (as the wire's JSON objects) and hands it the resulting events. So the end rule
(``empty_response``, ``stream_truncated``), the runaway bound (``runaway_stream``: token chunks
far past the max tokens asked, :mod:`~llm_users.protocols.limits`), the categories of in-stream
errors and how token counts are settled are written once, here. Pure bookkeeping: no I/O; the
caller stamps time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from llm_users.errors import (
    Cancelled,
    EmptyResponse,
    LLMRequestError,
    ServerOverloaded,
    ServerStreamError,
    StreamTruncated,
    WrongResultCount,
)
from llm_users.metrics import RequestRecord
from llm_users.protocols import limits
from llm_users.protocols.base import (
    Content,
    Event,
    Finish,
    ModelName,
    Results,
    ServerError,
    StreamParser,
    Usage,
)
from llm_users.protocols.server_side import Headers, ServerSide

perf_counter_ns = time.perf_counter_ns

DEFAULT_OVERLOAD = frozenset({429, 503, 529})
_NO_HEADERS: Headers = {}


class RequestState:
    """Fills ``record`` as a request goes: :meth:`start`, :meth:`response`, :meth:`handle`
    (any number of times), then :meth:`finish` at the end of the body. ``parser`` is the
    route's parser: its ``frames`` and ``complete`` decide the end rule; ``side`` the route's
    :class:`~llm_users.protocols.server_side.ServerSide` (the server's own timings and id).
    The runaway bound comes from the record's ``target_output_tokens`` (the max tokens sent)."""

    __slots__ = ("record", "parser", "overload", "last_ns", "status", "cancel_chunks", "side", "headers",
                 "max_chunks", "cut_at")

    def __init__(self, record: RequestRecord, parser: StreamParser,
                 overload_statuses: frozenset[int] = DEFAULT_OVERLOAD, cancel_chunks: int = 0,
                 side: ServerSide | None = None) -> None:
        self.record = record
        self.parser = parser
        self.overload = overload_statuses
        self.last_ns = 0
        self.status = 0  # the HTTP status once the response head arrived
        self.cancel_chunks = cancel_chunks  # --llm-cancel-after N tokens: raise Cancelled at the Nth chunk
        self.side = side
        self.headers: Headers = _NO_HEADERS  # the response's (lower-case bytes names), read at the end
        self.max_chunks = limits.CURRENT.max_chunks(record.target_output_tokens)
        # the chunk count that cuts the stream: the cancel's, or one past the runaway bound (one compare a chunk)
        self.cut_at = cancel_chunks if 0 < cancel_chunks <= self.max_chunks else self.max_chunks + 1

    def start(self) -> int:
        """t0: just before the request's first byte is written."""
        rec = self.record
        rec.start_time = time.time()
        rec.t0_ns = now = perf_counter_ns()
        return now

    def first_byte(self) -> int:
        """Raw mode: the first response byte arrived (TTFB is stamped here, before the head is
        parsed). Returns the stamp."""
        now = perf_counter_ns()
        self.record.ttfb_ns = now - self.record.t0_ns
        return now

    @property
    def responded(self) -> bool:
        return self.status != 0

    def response(self, status: int, now: int, headers: Headers | None = None) -> None:
        """The response head arrived: the status the server sent, and TTFB unless the first byte
        already stamped it (SDK mode stamps both here); the server's own request id from its
        headers (a failure keeps it too)."""
        self.status = status
        rec = self.record
        if rec.ttfb_ns is None:
            rec.ttfb_ns = now - rec.t0_ns
        rec.http_status = status
        side = self.side
        if headers is not None and side is not None:
            self.headers = headers
            if side.id_headers:
                rec.server_request_id = side.request_id(headers, rec.request_id)

    def handle(self, events: Iterable[Event], now: int) -> None:
        rec = self.record
        for ev in events:
            cls = ev.__class__
            if cls is Content:
                reasoning = ev.reasoning  # type: ignore[union-attr]
                rec.token_chunk(now, self.last_ns, 0 if reasoning else len(ev.text), reasoning)  # type: ignore[union-attr]
                self.last_ns = now
                if ev.tool:  # type: ignore[union-attr]
                    rec.tool_call = True
                if rec.reply is not None and not reasoning:
                    rec.reply.append(ev.text)  # type: ignore[union-attr]  # a session's next turn, a JSON check
                if rec.chunks == self.cut_at:
                    raise self._cut()
            elif cls is Usage:
                rec.usage(ev.input_tokens, ev.output_tokens, ev.reasoning_tokens, ev.server)  # type: ignore[union-attr]
            elif cls is Finish:
                rec.finish_reason = ev.reason  # type: ignore[union-attr]
            elif cls is ServerError:
                raise self.server_error(ev)  # type: ignore[arg-type]
            elif cls is ModelName and rec.server_model is None:
                rec.server_model = ev.name  # type: ignore[union-attr]
            elif cls is Results:  # embeddings, rerank: one vector or score per input sent
                if rec.inputs is not None and ev.count != rec.inputs:  # type: ignore[union-attr]
                    raise WrongResultCount(f"{ev.count} results for {rec.inputs} inputs")  # type: ignore[union-attr]
                rec.vector_dim = ev.dim  # type: ignore[union-attr]

    def _cut(self) -> LLMRequestError:
        """``--llm-cancel-after N tokens`` reached, or the runaway bound passed."""
        n = self.record.chunks
        if n == self.cancel_chunks:
            return Cancelled(f"the client cancelled the request after {n} token chunks").stamp()
        return limits.runaway(n, self.record.target_output_tokens, self.max_chunks, limits.CURRENT.chunks is not None)

    def server_error(self, ev: ServerError) -> ServerStreamError:
        """An error payload inside a 200 stream: ``server_overloaded`` when its kind says
        overloaded or its code is one of the backend's overload statuses, else ``server_error``."""
        self._take_id()
        kind = (ev.kind or "").lower()
        cls = ServerOverloaded if "overload" in kind or ev.status in self.overload else ServerStreamError
        return cls(ev.message, code=ev.status if ev.status is not None else ev.kind)

    def _take_id(self) -> None:
        """The stream's own id (the parser's ``response_id``) where the headers gave none."""
        rec = self.record
        if rec.server_request_id is None:
            rec.server_request_id = getattr(self.parser, "response_id", None)

    def finish(self, now: int) -> None:
        """The body ended cleanly: judge the end signal, settle token counts."""
        rec = self.record
        rec.e2e_ns = now - rec.t0_ns
        self._take_id()
        if not self.parser.frames:
            raise EmptyResponse(f"HTTP {self.status or 200} and headers, then the body ended without any event")
        if not self.parser.complete:
            raise StreamTruncated("stream ended without the protocol's terminator")
        rec.settle_tokens()
        side = self.side
        if side is not None and side.timings is not None:
            rec.server_timings = side.timings(rec.server, self.headers)


def mark_failed(rec: RequestRecord, exc: LLMRequestError, now: int) -> None:
    """Record a failure: its category and message, when it became visible (e2e_ns), and the
    payload's code apart from the HTTP status. A failed request has no final token count: a
    running count seen before the failure moves to ``partial_output_tokens``."""
    rec.status = "error"
    rec.error_category = exc.category
    rec.error_message = exc.message
    if rec.http_status is None and exc.status is not None:
        rec.http_status = exc.status
    code = getattr(exc, "code", None)
    if code is not None:
        rec.error_code = code
    _cut(rec, now)


def mark_interrupted(rec: RequestRecord, now: int) -> None:
    """The run stopped while this request was in flight: kept, as ``interrupted``, with its
    TTFB/TTFT/ITL so far, out of the success and failure statistics."""
    rec.status = "interrupted"
    rec.error_category = "interrupted"
    rec.error_message = "the run stopped while the request was in flight"
    _cut(rec, now)


def mark_cancelled(rec: RequestRecord, exc: LLMRequestError, now: int) -> None:
    """The client abandoned the request on purpose (``--llm-cancel-after``): kept, as
    ``cancelled``, with what was measured until then (TTFB, TTFT, ITL, chunks), out of the
    success and failure statistics; e2e is the time from t0 to the cancel."""
    rec.status = "cancelled"
    rec.error_category = "cancelled"
    rec.error_message = exc.message
    _cut(rec, now)


def _cut(rec: RequestRecord, now: int) -> None:
    if rec.t0_ns and rec.e2e_ns is None:
        rec.e2e_ns = now - rec.t0_ns
    if rec.output_tokens is not None:
        rec.partial_output_tokens = rec.output_tokens
        rec.output_tokens = None
        rec.tokens_source = "none"
