"""What every protocol route hands to the shared request lifecycle.

- :class:`Job`: one parsed request, protocol-neutral: the prompt, how many tokens to produce,
  how the answer ends, the chunking, and the timestamps the lifecycle fills in.
- :class:`Renderer`: the protocol's bytes for that job. ``chunk(i, j, last)`` returns the
  frame(s) for tokens ``i..j-1``; when ``last`` it also carries the closing frames and the
  terminator, so the final token and the end of the stream leave in one write. Renderers
  prebuild byte templates in ``__init__`` so a chunk costs a few concatenations. Usage counts
  come from :meth:`Job.reported` (what the answer says; ``--usage-zero`` may zero some), never
  straight from ``input_tokens``/``n`` (the truth, which the trace records).
- :class:`Dialect`: the protocol's HTTP error answers (its own body shape and statuses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.text import vocabulary_bytes


@dataclass(slots=True)
class Job:
    protocol: str
    route: str
    model: str
    prompt: str
    input_tokens: int
    max_tokens: int
    messages: int = 0  # chat messages the prompt was joined from (0: a plain prompt)
    cached_tokens: int | None = None  # with --prefix-cache-block: leading prompt tokens found cached
    images: int = 0  # images in the request (sim/images.py)
    image_tokens: int = 0  # the prompt tokens they cost (in input_tokens)
    n: int = 0
    reasoning: int = 0  # of the n tokens, reported as reasoning in usage
    thinking: int = 0  # of the n tokens, the first ones streamed as reasoning text (set by the renderer)
    shown: str = "full"  # --reasoning-stream: how much of the reasoning streams (show_reasoning: as the dialect can)
    hidden: int = 0  # of the thinking tokens, the first ones decoded on the clock but never written
    finish: str = "length"  # "length" (max tokens reached) or "stop" (end of sequence)
    zero_input: bool = False  # --usage-zero input|both: usage reports 0 prompt tokens
    zero_output: bool = False  # --usage-zero output|both: usage reports 0 output (and reasoning) tokens
    stream: bool = True
    k: int = 1  # tokens per chunk
    indices: list[int] = field(default_factory=list)
    words: list[bytes] = field(default_factory=list)
    request_id: str | None = None
    seq: int = 0
    arrival_ns: int = 0
    admitted_ns: int = 0
    first_ns: int = 0
    cold_ms: float = 0.0
    escaped: bool = False  # words are JSON-string escaped (a JSON answer, sim/tools.py): text() unescapes

    def plan(self, output_tokens: int | None, indices: list[int]) -> None:
        """Fix the answer length: ``min(--output-tokens, max tokens)``; shorter than the max
        means the model "stopped" on its own."""
        n = self.max_tokens if output_tokens is None else min(output_tokens, self.max_tokens)
        self.n = n
        self.finish = "length" if n >= self.max_tokens else "stop"
        self.indices = indices
        vocab = vocabulary_bytes()
        self.words = [vocab[i] for i in indices]

    def reported(self) -> tuple[int, int, int]:
        """Input, output and reasoning tokens as the answer's usage reports them."""
        if self.zero_output:
            return (0 if self.zero_input else self.input_tokens), 0, 0
        return (0 if self.zero_input else self.input_tokens), self.n, self.reasoning

    def show_reasoning(self, thinking: int, swap: dict[str, str] | None = None) -> None:
        """The renderer's call: the first ``thinking`` tokens are reasoning; of them the first
        ``hidden`` are decoded (one ITL each) but not written, as ``--reasoning-stream`` says
        (``shown``) where the dialect has that form, else as ``swap`` maps it to one it has:
        ``full`` hides none, ``hidden`` all of them (the answer's first token still streams),
        ``summary`` streams only the last quarter (at least one) as the dialect's summary. Only
        counted reasoning (``--reasoning-tokens``) is ever hidden."""
        self.thinking = thinking
        mode = self.shown = (swap or {}).get(self.shown, self.shown)
        r = min(self.reasoning, thinking)
        if not r or mode == "full":
            self.hidden = 0
        elif mode == "hidden":
            self.hidden = min(r, self.n - 1)
        else:
            self.hidden = r - max(1, r // 4)

    @property
    def n_chunks(self) -> int:
        """Chunks of ``k`` tokens; no chunk mixes hidden, streamed reasoning and answer (the streamer
        cuts at ``hidden`` and ``thinking``)."""
        h, t, k = self.hidden, self.thinking, self.k
        return -(-h // k) + -(-(t - h) // k) + -(-(self.n - t) // k)

    def text(self, i: int = 0, j: int | None = None) -> bytes:
        joined = b"".join(self.words[i:j])
        return orjson.loads(b'"%b"' % joined).encode() if self.escaped else joined


class Renderer:
    """Base: subclasses override what their protocol needs."""

    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, job: Job) -> None:
        self.job = job

    def headers(self) -> dict[str, str]:
        return {}

    def head(self) -> bytes:
        """Frames written right after the response head (before any token)."""
        return b""

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        raise NotImplementedError

    def error_frame(self) -> bytes:
        """The protocol's in-stream error payload (plus its terminator, if it has one)."""
        raise NotImplementedError

    def malformed(self) -> bytes:
        """A line that is not valid JSON where a JSON payload belongs."""
        return b'data: {"malformed": \n\n'

    def body(self) -> bytes:
        """The whole non-streaming answer."""
        raise NotImplementedError


class Dialect:
    """HTTP error answers in one protocol's shape. Subclasses set ``name`` and ``error_body``."""

    name = "base"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps({"error": message})

    def error(
        self, status: int, message: str, kind: str | None = None, *, stream: bool = False, retry_after: int = 1
    ) -> web.Response:
        headers = {"Retry-After": str(retry_after)} if status == 429 else None
        return web.Response(
            status=status,
            body=self.error_body(status, message, kind),
            content_type="application/json",
            headers=headers,
        )

    def fault(self, status: int, *, stream: bool = False, retry_after: int = 1) -> web.Response:
        messages = {429: "Too many requests", 500: "Internal server error", 503: "Service unavailable"}
        return self.error(status, messages.get(status, "error"), stream=stream, retry_after=retry_after)

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(503, "Server overloaded", stream=stream)

    def unauthorized(self) -> web.Response:
        return self.error(401, "Invalid API key")


async def read_json(request: web.Request, dialect: Dialect) -> dict[str, Any] | web.Response:
    """The request body as a JSON object, or the protocol's 400 answer."""
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as e:
        return dialect.error(400, f"request body is not valid JSON: {e}")
    if not isinstance(body, dict):
        return dialect.error(400, "request body must be a JSON object")
    return body


def int_param(value: Any, name: str) -> int | None:
    """An optional positive integer request parameter; raises ValueError with a message."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return int(value)
