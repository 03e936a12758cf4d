"""One request's record: every stamp, gap and count measured for it, in integer nanoseconds."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

#: Latency metrics kept as histograms, in the order reports show them.
LATENCY_METRICS = ("ttft", "ttfb", "itl", "tpot", "e2e")
#: Reasoning-aware first-token metrics (kept apart from LATENCY_METRICS so summary.csv's columns stay as
#: they were): TTFO, the first *answer* chunk (reasoning excluded), and TTST, the second chunk of any kind.
FIRST_TOKEN_METRICS = ("ttfo", "ttst")


@dataclass(slots=True)
class RequestRecord:
    """Everything measured for one request. Durations are integer nanoseconds."""

    request_id: str
    name: str
    backend: str
    model: str
    start_time: float = 0.0  # wall clock (Unix s) at t0: for timelines only, never for durations
    t0_ns: int = 0  # perf_counter_ns just before the request's first byte is written
    connect_ns: int | None = None  # TCP/TLS connect time when this request opened a connection
    ttfb_ns: int | None = None
    ttft_ns: int | None = None
    ttfo_ns: int | None = None  # time to first output (answer) chunk: reasoning excluded; == ttft without reasoning
    ttst_ns: int | None = None  # time to second token-bearing chunk, reasoning or answer
    e2e_ns: int | None = None
    itl_ns: list[int] | array[int] = field(default_factory=list)  # an array("q") when merged from a worker
    chunks: int = 0  # token-bearing chunks received
    output_chars: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    reasoning_chunks: int = 0  # token-bearing chunks that were reasoning (thinking) text
    reasoning_tokens_source: str = "none"  # "usage" (server count) | "estimated" (reasoning chunks) | "none"
    tokens_source: str = "none"  # "usage" (server count) | "estimated" (chunk count) | "none"
    tokens_reason: str | None = None  # why estimated: "no_usage" | "usage_implausible" (see check_usage)
    input_tokens_source: str = "none"  # "usage" | "estimated" (the server said 0 for a prompt) | "none"
    finish_reason: str | None = None
    status: str = "ok"  # "ok" | "error" | "interrupted" (in flight when the run stopped) | "cancelled" (--llm-cancel-after)
    error_category: str | None = None
    error_message: str | None = None
    http_status: int | None = None  # the status line the server sent (200 for in-stream failures)
    error_code: int | str | None = None  # an in-stream error payload's own code/kind
    partial_output_tokens: int | None = None  # a failed request's last running count before it failed
    reconnected: bool = False  # a stale idle keep-alive connection was replaced before sending
    server_model: str | None = None  # the model the server says answered
    sampling_issues: list[str] | None = None  # what the server did not honour (see sampling_issues())
    response_bytes: int = 0
    request_bytes: int = 0  # the request body as sent (0: not known, as in SDK mode)
    server: dict[str, Any] | None = None  # server-side figures (Ollama durations, vLLM metrics)
    # the server's own timings (protocols/server_side.py): queue_ns, prefill_ns, decode_ns,
    # server_total_ns (None where it says nothing) and source; None when the server gives none
    server_timings: dict[str, Any] | None = None
    server_request_id: str | None = None  # the server's own id for this request (join key with its logs)
    worker: str | None = None
    user: int | None = None
    warmup: bool = False  # excluded from statistics: warm-up (kept in requests.jsonl)
    cooldown: bool = False  # excluded from statistics: cool-down
    client: str = "raw"
    backoff_s: float = 0.0  # how long the user waited after this request (backoff.py), 0 = none
    retry_after_s: float | None = None  # a 429/503's Retry-After, in seconds: the wait the server asked for
    # the workload (llm_users/workload): what was asked for, beside what the server counted
    target_input_tokens: int | None = None  # synthetic prompts: the prompt-token target
    target_output_tokens: int | None = None  # the max output tokens sent
    session_id: str | None = None
    turn: int | None = None  # 1-based turn index within a session
    prefix_id: int | None = None  # which shared prefix the prompt started with
    reply: list[str] | None = None  # output text pieces, kept only when a session needs the reply; not written
    scheduled_ns: int | None = None  # open loop: perf_counter_ns the request was due (t0 - this = lag)
    inflight_wait_ns: int | None = None  # open loop: part of the lag spent waiting for the in-flight cap
    stage: int | None = None  # stage or sweep point the request started in (set where stats merge)
    tool_call: bool = False  # the answer contained a tool call (--llm-tools; protocols/tools.py)
    structured_valid: bool | None = None  # --llm-response-format: the answer parsed (and validated); None: not asked
    # embeddings and rerank (llm_users/protocols/embed.py): one JSON answer for a batch, no TTFT/ITL
    kind: str = "chat"  # "chat" (a token stream) | "embed" | "rerank"
    inputs: int | None = None  # texts (embed) or documents (rerank) sent in the request
    vector_dim: int | None = None  # the size of the vectors the answer carried (embed)
    image_count: int = 0  # images sent in the prompt (workload/images.py)
    image_bytes: int = 0  # bytes sent for them: their base64 text (4/3 of the image files' size)
    # a merged record's tokens and ITL gaps by arrival second (metrics/by_arrival.py), computed by
    # the worker that measured it and shipped in its payload (the master's merge: issue 34); not written
    pieces: list[Any] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def reasoning_hidden(self) -> bool:
        """The server counted reasoning it did not stream in full: none of it (OpenAI o-series,
        Gemini without ``includeThoughts``) or only a summary (Claude's summarised thinking, the
        Responses API's reasoning summaries, Gemini's thought summaries). The wire does not say
        which a thinking stream is, so the counts decide: more reasoning tokens than twice what the
        reasoning chunks carry at the answer's tokens per chunk is a summary."""
        counted = self.reasoning_tokens
        if not counted or self.reasoning_tokens_source != "usage":  # estimated: one a streamed chunk
            return False
        shown = self.reasoning_chunks
        if not shown:
            return True
        answer_chunks = self.chunks - shown
        per_chunk = max((self.answer_tokens or 0) / answer_chunks, 1.0) if answer_chunks else 1.0
        return counted > 2 * shown * per_chunk

    @property
    def tpot_basis(self) -> str | None:
        """Which tokens TPOT divides by: ``"all"`` (every output token after the first: nothing
        reasoned, or the reasoning streamed in full) or ``"answer"`` (the answer's tokens after its
        first: the reasoning was hidden or summarised); None without a TPOT (docs/metrics.md)."""
        return self.tpot_with_basis()[1]

    @property
    def tpot_ns(self) -> float | None:
        """The decode time per token after the first streamed one, as :attr:`tpot_basis` says:
        ``"all"``: (E2E - TTFT) / (output_tokens - 1); ``"answer"``: (E2E - TTFO) /
        (answer_tokens - 1), hidden reasoning out of the count (with none streamed TTFO = TTFT)."""
        return self.tpot_with_basis()[0]

    def tpot_with_basis(self) -> tuple[float | None, str | None]:
        e2e = self.e2e_ns
        if e2e is None or self.ttft_ns is None:
            return None, None
        if self.reasoning_hidden:
            answer = self.answer_tokens
            if self.ttfo_ns is None or not answer or answer < 2:
                return None, None
            return (e2e - self.ttfo_ns) / (answer - 1), "answer"
        if not self.output_tokens or self.output_tokens < 2:
            return None, None
        return (e2e - self.ttft_ns) / (self.output_tokens - 1), "all"

    @property
    def answer_tokens(self) -> int | None:
        """Output tokens that were the answer: output minus reasoning (both counted as
        ``tokens_source`` and ``reasoning_tokens_source`` say)."""
        if self.output_tokens is None:
            return None
        return max(self.output_tokens - (self.reasoning_tokens or 0), 0)

    def token_chunk(self, now_ns: int, prev_ns: int, chars: int, reasoning: bool = False) -> None:
        """A token-bearing chunk arrived at ``now_ns``; ``prev_ns`` is when the previous one did.
        The first sets TTFT, the second TTST, every later one adds an ITL gap; the first that is
        not ``reasoning`` sets TTFO. ``chars``: output text length (0 for reasoning text)."""
        chunks = self.chunks
        if not chunks:
            self.ttft_ns = now_ns - self.t0_ns
        else:
            self.itl_ns.append(now_ns - prev_ns)
            if chunks == 1:
                self.ttst_ns = now_ns - self.t0_ns
        if reasoning:
            self.reasoning_chunks += 1
        elif self.ttfo_ns is None:
            self.ttfo_ns = now_ns - self.t0_ns
        self.chunks = chunks + 1
        self.output_chars += chars

    def usage(self, input_tokens: int | None, output_tokens: int | None,
              reasoning_tokens: int | None = None, server: dict[str, Any] | None = None) -> None:
        """Token counts the server reported; later reports replace earlier ones field by field."""
        if input_tokens is not None:
            self.input_tokens = input_tokens
            self.input_tokens_source = "usage"
        if output_tokens is not None:
            self.output_tokens = output_tokens
            self.tokens_source = "usage"
        if reasoning_tokens is not None:
            self.reasoning_tokens = reasoning_tokens
            self.reasoning_tokens_source = "usage"
        if server:
            self.server = server

    def settle_tokens(self) -> None:
        """At the end of a stream: without the server's count, estimate output tokens from chunks."""
        if self.output_tokens is None and self.chunks:
            self.output_tokens = self.chunks
            self.tokens_source = "estimated"
            self.tokens_reason = "no_usage"
        if self.reasoning_chunks and not self.reasoning_tokens:  # no count, or 0 for streamed reasoning
            self.reasoning_tokens = self.reasoning_chunks  # one token a reasoning chunk: a lower bound
            self.reasoning_tokens_source = "estimated"

    @property
    def end_time(self) -> float:
        return self.start_time + (self.e2e_ns or 0) / 1e9

    def to_dict(self, plain_gaps: bool = True) -> dict[str, Any]:
        """A plain dict, JSON-safe (lists shared, not copied: ``dataclasses.asdict`` deep-copies
        every ITL list, which showed up in the client's profile). ``plain_gaps`` False: a merged
        record's ``array("q")`` of gaps stays one (the records file serialises it in C)."""
        d = dict(zip(_RECORD_ORDER, _RECORD_VALUES(self), strict=True))  # in C
        if plain_gaps and type(self.itl_ns) is not list:  # a merged record's array("q")
            d["itl_ns"] = self.itl_ns.tolist() if type(self.itl_ns) is array else list(self.itl_ns)
        d["tpot_ns"], d["tpot_basis"] = self.tpot_with_basis()
        d["answer_tokens"] = self.answer_tokens
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        """From :meth:`to_dict`'s dict, or a worker payload's (its ITL gaps packed: :func:`pack_gaps`)."""
        kw = d.copy()
        kw.pop("tpot_ns", None)  # derived
        kw.pop("tpot_basis", None)
        kw.pop("answer_tokens", None)
        if type(kw.get("itl_ns")) is bytes:
            kw["itl_ns"] = unpack_gaps(kw["itl_ns"])
        try:  # a dict from to_dict (a worker's payload): its keys are the fields
            return cls(**kw)
        except TypeError:  # a key that is no field (a record from another version)
            return cls(**{k: v for k, v in kw.items() if k in _RECORD_FIELDS})


_BIG_ENDIAN = sys.byteorder == "big"


def pack_gaps(gaps: Sequence[int]) -> bytes:
    """ITL gaps as little-endian int64 bytes: their form in a worker's payload. The master's
    msgpack decode then copies one ``bin`` instead of building 512 integers (issue 34: the
    merge's rate)."""
    a = array("q", gaps)
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def unpack_gaps(data: bytes) -> array[int]:
    """:func:`pack_gaps`' bytes as an ``array("q")`` (a copy at C speed)."""
    if len(data) % 8:
        raise ValueError(f"packed ITL gaps of {len(data)} bytes: not a whole number of int64 values")
    a = array("q")
    a.frombytes(data)
    if _BIG_ENDIAN:
        a.byteswap()
    return a


_RECORD_ORDER = tuple(f for f in RequestRecord.__dataclass_fields__ if f not in ("reply", "pieces"))
_RECORD_FIELDS = set(_RECORD_ORDER)
_RECORD_VALUES = attrgetter(*_RECORD_ORDER)

