"""Ground truth: what the simulator did for every request that carried ``X-Request-Id``.

One :class:`Record` per such request. Times are ``time.perf_counter_ns()`` values
(CLOCK_MONOTONIC on Linux, so comparable with a client's own stamps in another process):
``arrival_ns`` when the handler saw the request, ``admitted_ns`` when it got a batch slot,
``headers_ns`` just before the response head was written, and per token-bearing chunk the
stamp taken immediately before its bytes were handed to the socket plus the number of tokens
in it (``chunks: [[t_ns, tokens], ...]``). A non-streaming answer has one chunk: the body.

Finished records are kept in memory (the newest ``trace_limit``) and, with ``--trace-file``,
appended to a JSONL file, one line per finished request.

The per-chunk stamps live in compact arrays (``array('q')``: no object per chunk kept) and a
record becomes a dict only when it is asked for (``GET /_sim/trace``) or written to the trace
file, so tracing costs the simulator little at high chunk rates. ``GET /_sim/trace?compact=1``
gives ``times_ns`` and ``tokens`` lists in place of the ``chunks`` pairs (what the benchmark
reads).
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import IO, Any

import orjson


class Record:
    __slots__ = (
        "request_id", "route", "protocol", "model", "stream", "seq", "arrival_ns", "admitted_ns",
        "headers_ns", "times", "tokens", "end_ns", "input_tokens", "output_tokens", "planned_tokens",
        "finish_reason", "status", "completed", "outcome", "fault", "cold_start", "ttft_target_ns",
        "prompt", "messages", "images", "image_tokens",
    )

    def __init__(self, request_id: str, route: str, protocol: str, arrival_ns: int, seq: int) -> None:
        self.request_id = request_id
        self.route = route
        self.protocol = protocol
        self.model = ""
        self.stream = True
        self.seq = seq
        self.arrival_ns = arrival_ns
        self.admitted_ns: int | None = None
        self.headers_ns: int | None = None
        self.times = array("q")
        self.tokens = array("l")
        self.end_ns: int | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.planned_tokens = 0
        self.finish_reason: str | None = None
        self.status = 200
        self.completed = False
        self.outcome = "active"
        self.fault: str | None = None
        self.cold_start = False
        self.ttft_target_ns: int | None = None
        self.prompt: str | None = None  # with --trace-prompts: the prompt text as the sim joined it
        self.messages: int | None = None  # with --trace-prompts: how many chat messages it came from
        self.images = 0  # images in the request
        self.image_tokens = 0  # the prompt tokens they cost (in input_tokens)

    def to_dict(self, compact: bool = False) -> dict[str, Any]:
        extra = {} if self.prompt is None else {"prompt": self.prompt, "messages": self.messages}
        if compact:
            extra["times_ns"] = self.times.tolist()
            extra["tokens"] = self.tokens.tolist()
        return extra | {
            "request_id": self.request_id,
            "route": self.route,
            "protocol": self.protocol,
            "model": self.model,
            "stream": self.stream,
            "seq": self.seq,
            "arrival_ns": self.arrival_ns,
            "admitted_ns": self.admitted_ns,
            "headers_ns": self.headers_ns,
            "ttft_target_ns": self.ttft_target_ns,
            **({} if compact else {"chunks": [[t, k] for t, k in zip(self.times, self.tokens, strict=True)]}),
            "end_ns": self.end_ns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "planned_tokens": self.planned_tokens,
            "finish_reason": self.finish_reason,
            "status": self.status,
            "completed": self.completed,
            "outcome": self.outcome,
            "fault": self.fault,
            "cold_start": self.cold_start,
            "images": self.images,
            "image_tokens": self.image_tokens,
        }


class TraceStore:
    def __init__(self, limit: int = 100_000, path: str | None = None) -> None:
        self.limit = limit
        self._done: deque[Record] = deque(maxlen=limit)
        self._by_id: dict[str, Record] = {}
        self._active: dict[str, Record] = {}
        self._path = path
        self._file: IO[bytes] | None = None

    def open(self) -> None:
        if self._path and self._file is None:
            self._file = open(self._path, "ab")  # noqa: SIM115 - closed in close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def start(self, rec: Record) -> None:
        self._active[rec.request_id] = rec

    def finish(self, rec: Record) -> None:
        if self._active.get(rec.request_id) is rec:
            del self._active[rec.request_id]
        if self.limit:
            if len(self._done) == self._done.maxlen:
                old = self._done[0]
                if self._by_id.get(old.request_id) is old:
                    del self._by_id[old.request_id]
            self._done.append(rec)
            self._by_id[rec.request_id] = rec
        if self._file is not None:
            self._file.write(orjson.dumps(rec.to_dict()) + b"\n")
            self._file.flush()

    def all(self, compact: bool = False) -> list[dict[str, Any]]:
        return [r.to_dict(compact) for r in self._done]

    def get(self, request_id: str, compact: bool = False) -> dict[str, Any] | None:
        rec = self._by_id.get(request_id) or self._active.get(request_id)
        return rec.to_dict(compact) if rec is not None else None

    def clear(self) -> None:
        self._done.clear()
        self._by_id.clear()
