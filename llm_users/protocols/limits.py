"""The bounds on what one response may make the client hold or read (issue 54).

A server that never ends a line, a body or its head, or streams far past the output asked, used
to grow the client without limit (an endless SSE line: 2.7 GB in 20 s with 2 users) or run until
the 600 s request limit. Each bound is checked while the bytes are read, so a cut leaves memory
flat, and each cut is one failure of its own category (:mod:`llm_users.errors`):

- ``response_too_large``: an SSE event or NDJSON line still waiting for its end past
  ``--llm-max-event-bytes``; a whole-body answer (embeddings, rerank, ``GET /v1/models``), or
  what a compressed body inflates to in SDK mode, past ``--llm-max-body-bytes``; the response
  head (status line and headers) past ``--llm-max-header-bytes``;
- ``runaway_stream``: more token chunks than ``--llm-max-chunks``, by default the larger of
  4096 and 8 x the max tokens asked. Below it an over-long answer stays a success that the
  sampling check flags.

The defaults are far above what real servers send (the reasoning is beside each). The bounds are
process-wide: :func:`configure` sets them once at start from the run's options (the run does,
``llm_users/run.py``); parsers read :data:`CURRENT` when they are made. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError, ResponseTooLarge, RunawayStream

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: An SSE event or NDJSON line while it waits for its end. The largest real ones carry a whole
#: answer at once: OpenAI's Responses API repeats the output text in ``response.output_text.done``
#: and ``response.completed`` (a 128k-token answer is 0.5-1.2 MB, ``\\u``-escaped CJK included),
#: Ollama sends a tool call's arguments whole; the simulator's ``big_frame`` fault is 4 MiB.
DEFAULT_EVENT_BYTES = 8 * MiB
#: A whole-body answer. The worst real case is a large embeddings batch: 2048 inputs (OpenAI's
#: most per request) x 4096-dimension vectors x about 22 bytes a float in vLLM's compact JSON
#: (``-0.006929283495992422,``) is 185 MB; OpenAI's indented form, about 31 bytes a float at 3072
#: dimensions, 195 MB. Rerank answers and model lists are kilobytes.
DEFAULT_BODY_BYTES = 256 * MiB
#: The response head: the 64 KiB common servers and proxies accept at most (nginx reads 4-8 KiB
#: a line, Node 16 KiB; the SDKs' h11 refuses past 100 KiB on its own).
DEFAULT_HEADER_BYTES = 64 * KiB
#: Runaway: past max(CHUNK_FLOOR, CHUNKS_PER_TOKEN x max tokens asked) token chunks. A chunk
#: carries at least one token on every server here, so a stream that obeys its max tokens stays
#: 8 times under the bound; the floor keeps short asks (8 tokens) from being cut at 64.
CHUNK_FLOOR = 4096
CHUNKS_PER_TOKEN = 8
_LEAST_BYTES = KiB

_UNITS = {"": 1, "b": 1, "k": KiB, "kib": KiB, "kb": 1000, "m": MiB, "mib": MiB, "mb": 1000**2,
          "g": GiB, "gib": GiB, "gb": 1000**3}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds in bytes and chunks; ``chunks`` None: the runaway rule (:meth:`max_chunks`)."""

    event_bytes: int = DEFAULT_EVENT_BYTES
    body_bytes: int = DEFAULT_BODY_BYTES
    header_bytes: int = DEFAULT_HEADER_BYTES
    chunks: int | None = None

    def max_chunks(self, max_tokens: int | None) -> int:
        """The most token chunks a stream that asked ``max_tokens`` may carry."""
        if self.chunks is not None:
            return self.chunks
        return max(CHUNK_FLOOR, CHUNKS_PER_TOKEN * (max_tokens or 0))


#: The process's bounds (read it as ``limits.CURRENT``: :func:`configure` replaces it).
CURRENT = Limits()


def configure(limits: Limits) -> None:
    """Make ``limits`` the process's bounds (at start, before any request)."""
    global CURRENT
    CURRENT = limits


def add_arguments(opt: Any) -> None:
    """The options, through the configuration's ``opt`` helper (``options.add_arguments``)."""
    opt("--llm-max-event-bytes", "largest SSE event or NDJSON line waiting for its end, e.g. 8MiB (default 8MiB); "
        "past it the request fails as response_too_large")
    opt("--llm-max-body-bytes", "largest whole-body answer (embeddings, rerank), and what a compressed body may "
        "inflate to in SDK mode, e.g. 512MiB (default 256MiB); past it: response_too_large")
    opt("--llm-max-header-bytes", "largest response head (status line and headers), e.g. 128KiB (default 64KiB); "
        "past it: response_too_large")
    opt("--llm-max-chunks", "most token chunks one answer may stream (default: the larger of 4096 and 8 x the "
        "max tokens asked); past it the request fails as runaway_stream")


def parse_limits(options: Mapping[str, Any] | None) -> Limits:
    """The bounds the options give (a run's option snapshot; None: the defaults). Raises
    :class:`ConfigError` naming the option."""
    if not options:
        return Limits()
    chunks = options.get("llm_max_chunks")
    return Limits(
        event_bytes=_size(options.get("llm_max_event_bytes"), "--llm-max-event-bytes", DEFAULT_EVENT_BYTES),
        body_bytes=_size(options.get("llm_max_body_bytes"), "--llm-max-body-bytes", DEFAULT_BODY_BYTES),
        header_bytes=_size(options.get("llm_max_header_bytes"), "--llm-max-header-bytes", DEFAULT_HEADER_BYTES),
        chunks=None if chunks is None or str(chunks).strip() == "" else whole_count(chunks, "--llm-max-chunks", "chunks"),
    )


def parse_size(text: Any, option: str) -> int:
    """``8MiB``, ``300KB``, ``65536`` -> bytes (K/KiB, M/MiB, G/GiB binary; KB, MB, GB decimal)."""
    m = _SIZE.match(str(text))
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None or int(float(m.group(1)) * unit) < _LEAST_BYTES:
        raise ConfigError(f"{option} must be a size of at least 1KiB, in bytes or with a unit (8MiB, 300KB, "
                          f"65536), got {text!r}")
    return int(float(m.group(1)) * unit)


def _size(value: Any, option: str, default: int) -> int:
    return default if value is None or str(value).strip() == "" else parse_size(value, option)


def whole_count(value: Any, option: str, what: str) -> int:
    """A count option: a whole number of ``what``, at least 1; ConfigError naming ``option``."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{option} must be a whole number of {what}, at least 1, got {value!r}")
    return n


def size_text(n: int) -> str:
    """``8388608`` -> ``8 MiB``; a size that is no whole unit in bytes."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


# the failures, each naming its bound and the option that raises it ---------------------------------
def event_too_large(what: str, limit: int) -> ResponseTooLarge:
    """``what`` (an SSE event, an NDJSON line) waited for its end past the event bound."""
    return ResponseTooLarge(f"{what} over {size_text(limit)} without its end (--llm-max-event-bytes; raise it "
                            "if the server's events are this large)")


def body_too_large(limit: int, what: str = "a whole-body answer") -> ResponseTooLarge:
    return ResponseTooLarge(f"{what} over {size_text(limit)} (--llm-max-body-bytes; raise it if the server's "
                            "answers are this large)")


def head_too_large(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"a response head (status line and headers) over {size_text(limit)} "
                            "(--llm-max-header-bytes)")


def runaway(chunks: int, max_tokens: int | None, bound: int, fixed: bool) -> RunawayStream:
    rule = "--llm-max-chunks" if fixed else (f"the larger of {CHUNK_FLOOR} and {CHUNKS_PER_TOKEN} x the max "
                                             "tokens; --llm-max-chunks sets it")
    asked = f"max tokens {max_tokens}" if max_tokens else "no max tokens known"
    return RunawayStream(f"{chunks} token chunks with {asked}: past the runaway bound of {bound} ({rule})")
