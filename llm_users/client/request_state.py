"""One request's life, the same for raw and SDK mode: stamps, events, end rules, failure.

Raw mode feeds it the parser's events for each ``recv``; SDK mode feeds the same parser the
SDK's chunks (as the wire's JSON objects) and hands it the resulting events. So the end rule
(``empty_response``, ``stream_truncated``), the categories of in-stream errors and how token
counts are settled are written once, here. Pure bookkeeping: no I/O; the caller stamps time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from llm_users.errors import (
    EmptyResponse,
    LLMRequestError,
    ServerOverloaded,
    ServerStreamError,
    StreamTruncated,
    WrongResultCount,
)
from llm_users.metrics import RequestRecord
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

perf_counter_ns = time.perf_counter_ns

DEFAULT_OVERLOAD = frozenset({429, 503, 529})


class RequestState:
    """Fills ``record`` as a request goes: :meth:`start`, :meth:`response`, :meth:`handle`
    (any number of times), then :meth:`finish` at the end of the body. ``parser`` is the
    route's parser: its ``frames`` and ``complete`` decide the end rule."""

    __slots__ = ("record", "parser", "overload", "last_ns", "status")

    def __init__(self, record: RequestRecord, parser: StreamParser,
                 overload_statuses: frozenset[int] = DEFAULT_OVERLOAD) -> None:
        self.record = record
        self.parser = parser
        self.overload = overload_statuses
        self.last_ns = 0
        self.status = 0  # the HTTP status once the response head arrived

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

    def response(self, status: int, now: int) -> None:
        """The response head arrived: the status the server sent, and TTFB unless the first byte
        already stamped it (SDK mode stamps both here)."""
        self.status = status
        rec = self.record
        if rec.ttfb_ns is None:
            rec.ttfb_ns = now - rec.t0_ns
        rec.http_status = status

    def handle(self, events: Iterable[Event], now: int) -> None:
        rec = self.record
        for ev in events:
            cls = ev.__class__
            if cls is Content:
                rec.token_chunk(now, self.last_ns, 0 if ev.reasoning else len(ev.text))  # type: ignore[union-attr]
                self.last_ns = now
                if rec.reply is not None and not ev.reasoning:  # type: ignore[union-attr]
                    rec.reply.append(ev.text)  # type: ignore[union-attr]  # a session's next turn needs it
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

    def server_error(self, ev: ServerError) -> ServerStreamError:
        """An error payload inside a 200 stream: ``server_overloaded`` when its kind says
        overloaded or its code is one of the backend's overload statuses, else ``server_error``."""
        kind = (ev.kind or "").lower()
        cls = ServerOverloaded if "overload" in kind or ev.status in self.overload else ServerStreamError
        return cls(ev.message, code=ev.status if ev.status is not None else ev.kind)

    def finish(self, now: int) -> None:
        """The body ended cleanly: judge the end signal, settle token counts."""
        rec = self.record
        rec.e2e_ns = now - rec.t0_ns
        if not self.parser.frames:
            raise EmptyResponse(f"HTTP {self.status or 200} and headers, then the body ended without any event")
        if not self.parser.complete:
            raise StreamTruncated("stream ended without the protocol's terminator")
        rec.settle_tokens()


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


def _cut(rec: RequestRecord, now: int) -> None:
    if rec.t0_ns and rec.e2e_ns is None:
        rec.e2e_ns = now - rec.t0_ns
    if rec.output_tokens is not None:
        rec.partial_output_tokens = rec.output_tokens
        rec.output_tokens = None
        rec.tokens_source = "none"
