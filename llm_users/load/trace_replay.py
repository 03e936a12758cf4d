"""Trace replay: ``--llm-trace FILE`` sends the requests of a recorded trace on its own schedule.

The file is JSONL, one request a line, in the shape of the Mooncake traces::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}

``timestamp`` is the request's offset from the start in milliseconds (``offset_ms`` also
read), ``input_length``/``output_length`` its token counts (``input_tokens``/``output_tokens``
also read), ``hash_ids`` optional prefix-block ids: requests sharing a block id share that
block's text, so a server's prefix cache sees the trace's sharing. A block is
:data:`BLOCK_TOKENS` tokens (Mooncake's 512); prompt tokens are approximated by words.
``--llm-trace-speedup F`` divides every offset by F. Workers take every n-th row (worker i:
rows i, i+n, ...). Each row is one open-loop request with ``scheduled_ns``, so the schedule lag
is reported as for ``--llm-rate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from llm_users.errors import ConfigError
from llm_users.workload.source import WorkItem

BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRow:
    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def _int(d: dict[str, Any], *names: str) -> int | None:
    for n in names:
        if n in d:
            v = d[n]
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError(f"{n} must be a number >= 0, got {v!r}")
            return int(v)
    return None


def load_trace(path: str) -> list[TraceRow]:
    """Read and check a trace; a bad line is a one-line ConfigError naming it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--llm-trace: no such file {path}")
    rows: list[TraceRow] = []
    for no, line in enumerate(p.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            ts = d.get("timestamp", d.get("offset_ms"))
            if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
                raise ValueError(f"timestamp must be milliseconds >= 0, got {ts!r}")
            inp = _int(d, "input_length", "input_tokens")
            out = _int(d, "output_length", "output_tokens")
            if inp is None or out is None or out < 1:
                raise ValueError("needs input_length and output_length >= 1")
            ids = d.get("hash_ids") or []
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ValueError("hash_ids must be a list of integers")
        except (ValueError, orjson.JSONDecodeError) as e:
            raise ConfigError(f"--llm-trace {path}, line {no}: {e}") from None
        rows.append(TraceRow(ts / 1000.0, max(inp, 1), out, tuple(ids)))
    if not rows:
        raise ConfigError(f"--llm-trace {path}: no requests in the file")
    rows.sort(key=lambda r: r.offset_s)
    return rows


def prompt_text(row: TraceRow, index: int) -> str:
    """``input_tokens`` words: one block of shared words per hash id, the rest unique to the row."""
    words: list[str] = []
    for h in row.hash_ids:
        if len(words) >= row.input_tokens:
            break
        words += [f"b{h}w{k}" for k in range(min(BLOCK_TOKENS, row.input_tokens - len(words)))]
    words += [f"r{index}w{k}" for k in range(row.input_tokens - len(words))]
    return " ".join(words)


class TraceSource:
    """The rows a worker sends, as workload items (messages, max output tokens)."""

    def __init__(self, rows: list[TraceRow], speedup: float = 1.0) -> None:
        self._rows = rows
        self.speedup = speedup

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self, index: int, n: int) -> Iterator[tuple[float, WorkItem]]:
        """(offset s after the speed-up, the request) of worker ``index`` of ``n``."""
        for i in range(index, len(self._rows), max(n, 1)):
            r = self._rows[i]
            item = WorkItem(messages=[{"role": "user", "content": prompt_text(r, i)}], max_tokens=r.output_tokens,
                            target_input_tokens=r.input_tokens, prefix_id=r.hash_ids[0] if r.hash_ids else None)
            yield r.offset_s / self.speedup, item
