"""The server's own view of a request: its timings and its own request id, per source.

A route's :class:`ServerSide` (``Route.server_side``, in the backend descriptor) says which
response headers to keep, where the server's own request id is, and how to read the server's
timings. Every server's source is here, and nowhere else:

- ``vllm``: the usage chunk's ``metrics`` (vLLM started with ``--enable-per-request-metrics``):
  ``queue_time_ms`` (queue), ``time_to_first_token_ms`` (scheduled -> first token: prefill),
  ``generation_time_ms`` (first -> last token: decode);
- ``llama.cpp``: the final chunk's ``timings``: ``prompt_ms`` (prefill), ``predicted_ms``
  (decode); no queue;
- ``ollama``: the last line, integer ns: ``prompt_eval_duration`` (prefill), ``eval_duration``
  (decode), ``total_duration`` (total); queue = total - prefill - decode (scheduling, model
  load and waiting, before the prompt is evaluated);
- ``tgi``: headers ``x-queue-time``, ``x-total-time`` (ms): queue and total (TGI sends them on
  non-streaming answers only: its streams carry none);
- ``openai``: header ``openai-processing-ms``: a total only.

A ``ServerSide.timings`` reader returns the record's ``server_timings`` (built by :func:`make`):
``queue_ns``, ``prefill_ns``, ``decode_ns``, ``server_total_ns`` (integer ns, None where the
source says nothing) and ``source``; None when no source answered. ``server_total_ns`` is the
server's own total where it gives one, else the sum of the three parts when all are known.

The server's own id (``server_request_id``, to join our records with its logs and traces): the
first of ``id_headers`` it sent (OpenAI ``x-request-id``, Anthropic ``request-id``), unless it
only echoes our ``X-Request-Id`` back; else the stream's own id (OpenAI-style ``id``, Anthropic's
message id, Gemini's ``responseId``), which the parser keeps as its ``response_id``.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Headers = Mapping[bytes, bytes]  # lower-case names, as the raw client keeps them
Reader = Callable[[dict[str, Any] | None, Headers], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class ServerSide:
    """What a route's server says about a request beside the stream itself."""

    headers: tuple[str, ...] = ()  # response headers the timings reader needs (lower case)
    id_headers: tuple[str, ...] = ()  # the server's own request id, the first one found
    timings: Reader | None = None

    @property
    def wanted(self) -> tuple[str, ...]:
        """Every header name it reads (what SDK mode copies from the response)."""
        return self.headers + self.id_headers

    def request_id(self, headers: Headers, ours: str) -> str | None:
        for name in self.id_headers:
            v = headers.get(name.encode())
            if v:
                s = v.decode("latin-1")
                if s != ours:
                    return s
        return None


def make(queue_ns: float | None, prefill_ns: float | None, decode_ns: float | None, total_ns: float | None,
         source: str) -> dict[str, Any] | None:
    """The ``server_timings`` dict (integer ns), or None when every part is unknown."""
    parts = [queue_ns, prefill_ns, decode_ns]
    if total_ns is None and None not in parts:
        total_ns = sum(parts)  # type: ignore[arg-type]
    if total_ns is None and all(p is None for p in parts):
        return None

    def i(v: float | None) -> int | None:
        return None if v is None else int(round(v))

    return {"queue_ns": i(queue_ns), "prefill_ns": i(prefill_ns), "decode_ns": i(decode_ns),
            "server_total_ns": i(total_ns), "source": source}


def _ms(v: Any) -> float | None:
    """A millisecond figure as ns (None when absent or not a number)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        return None
    return v * 1e6


def _header_ms(headers: Headers, name: str) -> float | None:
    v = headers.get(name.encode())
    if v is None:
        return None
    try:
        return _ms(float(v))
    except ValueError:
        return None


def openai_timings(server: dict[str, Any] | None, headers: Headers) -> dict[str, Any] | None:
    """OpenAI-compatible servers: vLLM's ``metrics`` (the parser keeps its fields as the record's
    ``server``), llama.cpp's ``timings`` (``server["timings"]``), else OpenAI's
    ``openai-processing-ms`` header."""
    if server:
        if server.get("queue_time_ms") is not None or server.get("time_to_first_token_ms") is not None:
            return make(_ms(server.get("queue_time_ms")), _ms(server.get("time_to_first_token_ms")),
                        _ms(server.get("generation_time_ms")), None, "vllm")
        t = server.get("timings")
        if isinstance(t, dict) and t.get("prompt_ms") is not None:
            return make(None, _ms(t.get("prompt_ms")), _ms(t.get("predicted_ms")), None, "llama.cpp")
    total = _header_ms(headers, "openai-processing-ms")
    return make(None, None, None, total, "openai") if total is not None else None


def ollama_timings(server: dict[str, Any] | None, headers: Headers) -> dict[str, Any] | None:
    """Ollama's last line (integer ns, zero-valued fields left out by the server)."""
    if not server or not server.get("total_duration"):
        return None
    total = int(server["total_duration"])
    prefill = int(server.get("prompt_eval_duration") or 0)
    decode = int(server.get("eval_duration") or 0)
    return make(max(0, total - prefill - decode), prefill, decode, total, "ollama")


def tgi_timings(server: dict[str, Any] | None, headers: Headers) -> dict[str, Any] | None:
    """TGI's timing headers (milliseconds), where it sends them."""
    queue = _header_ms(headers, "x-queue-time")
    total = _header_ms(headers, "x-total-time")
    if queue is None and total is None:
        return None
    return make(queue, None, None, total, "tgi")


OPENAI = ServerSide(headers=("openai-processing-ms",), id_headers=("x-request-id",), timings=openai_timings)
OLLAMA = ServerSide(timings=ollama_timings)
TGI = ServerSide(headers=("x-queue-time", "x-total-time"), timings=tgi_timings)
ANTHROPIC = ServerSide(id_headers=("request-id",))
