"""The trace formats ``--llm-trace`` reads, one small pure parser each, in :data:`FORMATS`.

- ``jsonl`` (today's shape, lenient): one JSON object a line, ``timestamp`` (ms; ``offset_ms``
  also read), ``input_length``/``output_length`` (``input_tokens``/``output_tokens`` also
  read), optional ``hash_ids``;
- ``mooncake`` (Mooncake's ``mooncake_trace.jsonl``): ``{"timestamp": ms, "input_length",
  "output_length", "hash_ids": [...]}``, each hash id one block of 512 prompt tokens, equal ids
  equal block text;
- ``burstgpt`` (BurstGPT's ``BurstGPT_1.csv``): columns ``Timestamp`` (s), ``Model``,
  ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``; rows with 0 response
  tokens (the trace's failed requests) are skipped and counted;
- ``azure`` (``AzureLLMInferenceTrace_conv.csv`` / ``_code.csv``): ``TIMESTAMP`` (a date-time
  string such as ``2023-11-16 18:15:46.6805900`` or ``2024-05-10 00:00:00.009930+00:00``),
  ``ContextTokens``, ``GeneratedTokens``.

Every parser returns the rows' raw times in seconds (any origin); :func:`parse` rebases them
to the first request (t = 0), keeps a window ``[start, end)`` of that time and shifts it to
start at 0. ``auto`` picks the format from the extension and the CSV header. Nothing here
imports gevent or Locust.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

BLOCK_TOKENS = 512  # Mooncake's block: one hash id = 512 prompt tokens


@dataclass(frozen=True, slots=True)
class TraceRow:
    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


class TraceFormatError(ValueError):
    """A bad line: ``line`` (1-based, 0 for the file as a whole) and what is wrong."""

    def __init__(self, line: int, msg: str) -> None:
        super().__init__(msg)
        self.line = line


@dataclass(frozen=True, slots=True)
class Parsed:
    rows: list[TraceRow]
    skipped: int = 0  # rows the format says are not requests to replay (BurstGPT's failures)


def _count(v: Any, name: str) -> int:
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise ValueError(f"{name} must be a number, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != v:
        raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    return int(v)


def _first(d: dict[str, Any], *names: str) -> tuple[str, Any] | None:
    for n in names:
        if n in d:
            return n, d[n]
    return None


def _json_rows(text: str, ts_names: tuple[str, ...], in_names: tuple[str, ...],
               out_names: tuple[str, ...]) -> Parsed:
    rows: list[TraceRow] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            ts = _first(d, *ts_names)
            if ts is None or isinstance(ts[1], bool) or not isinstance(ts[1], int | float) or ts[1] < 0:
                raise ValueError(f"timestamp must be milliseconds >= 0, got {ts[1] if ts else None!r}")
            inp, out = _first(d, *in_names), _first(d, *out_names)
            if inp is None or out is None:
                raise ValueError(f"needs {in_names[0]} and {out_names[0]} >= 1")
            n_in, n_out = _count(inp[1], inp[0]), _count(out[1], out[0])
            if n_out < 1:
                raise ValueError(f"needs {in_names[0]} and {out_names[0]} >= 1")
            ids = d.get("hash_ids") or []
            if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise ValueError("hash_ids must be a list of integers")
        except (ValueError, orjson.JSONDecodeError) as e:
            raise TraceFormatError(no, str(e)) from None
        rows.append(TraceRow(ts[1] / 1000.0, max(n_in, 1), n_out, tuple(ids)))
    return Parsed(rows)


def parse_jsonl(text: str) -> Parsed:
    return _json_rows(text, ("timestamp", "offset_ms"), ("input_length", "input_tokens"),
                      ("output_length", "output_tokens"))


def parse_mooncake(text: str) -> Parsed:
    return _json_rows(text, ("timestamp",), ("input_length",), ("output_length",))


def _csv(text: str, need: tuple[str, ...]) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [n for n in need if n not in header]
    if missing:
        raise TraceFormatError(1, f"the CSV header lacks {', '.join(missing)} (it has {', '.join(header) or 'nothing'})")
    reader.fieldnames = header
    return header, [(reader.line_num, row) for row in reader if any((v or "").strip() for v in row.values())]


def _seconds(v: str | None) -> float:
    try:
        t = float((v or "").strip())
    except ValueError:
        t = -1.0
    if not t >= 0:
        raise ValueError(f"Timestamp must be a number of seconds >= 0, got {v!r}")
    return t


def parse_burstgpt(text: str) -> Parsed:
    _, lines = _csv(text, ("Timestamp", "Request tokens", "Response tokens"))
    rows: list[TraceRow] = []
    skipped = 0
    for no, d in lines:
        try:
            t = _seconds(d["Timestamp"])
            n_in, n_out = _count(d["Request tokens"], "Request tokens"), _count(d["Response tokens"], "Response tokens")
        except (ValueError, TypeError) as e:
            raise TraceFormatError(no, str(e)) from None
        if n_out < 1:
            skipped += 1  # BurstGPT marks a failed request with 0 response tokens
            continue
        rows.append(TraceRow(t, max(n_in, 1), n_out))
    return Parsed(rows, skipped)


_AZURE_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?$")


def azure_time(s: str) -> float:
    """Unix seconds of an Azure trace TIMESTAMP (up to 7 fractional digits, optional zone; none = UTC)."""
    m = _AZURE_TIME.match(s.strip())
    if m is None:
        raise ValueError(f"TIMESTAMP must look like 2023-11-16 18:15:46.6805900, got {s!r}")
    day, clock, frac, zone = m.groups()
    z = "+00:00" if zone in (None, "Z") else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    return datetime.fromisoformat(f"{day}T{clock}{z}").timestamp() + (float("0." + frac) if frac else 0.0)


def parse_azure(text: str) -> Parsed:
    _, lines = _csv(text, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    rows: list[TraceRow] = []
    for no, d in lines:
        try:
            t = azure_time(d["TIMESTAMP"] or "")
            n_in, n_out = _count(d["ContextTokens"], "ContextTokens"), _count(d["GeneratedTokens"], "GeneratedTokens")
            if n_out < 1:
                raise ValueError("GeneratedTokens must be >= 1")
        except (ValueError, TypeError) as e:
            raise TraceFormatError(no, str(e)) from None
        rows.append(TraceRow(t, max(n_in, 1), n_out))
    return Parsed(rows)


#: the formats ``--llm-trace-format`` names, in the order ``auto`` tries them
FORMATS: dict[str, Callable[[str], Parsed]] = {
    "jsonl": parse_jsonl, "mooncake": parse_mooncake, "burstgpt": parse_burstgpt, "azure": parse_azure,
}


def detect(path: str, text: str) -> str:
    """The format of a file: a CSV by its header (BurstGPT's ``Request tokens``, Azure's
    ``ContextTokens``), anything else the JSONL shape."""
    head = text.lstrip("\ufeff").split("\n", 1)[0]
    if path.lower().endswith(".csv") or not head.lstrip().startswith("{"):
        if "Request tokens" in head:
            return "burstgpt"
        if "ContextTokens" in head:
            return "azure"
        if path.lower().endswith(".csv"):
            raise TraceFormatError(1, "a CSV trace needs BurstGPT's or Azure's header (give --llm-trace-format)")
    return "jsonl"


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` seconds of trace time (either side may be empty) -> (start, end)."""
    if text is None or not str(text).strip():
        return None
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start = float(parts[0]) if parts[0].strip() else 0.0
        end = float(parts[1]) if parts[1].strip() else float("inf")
    except ValueError:
        raise ValueError(f"--llm-trace-window must be START:END in seconds (e.g. 60:180), got {text!r}") from None
    if not 0 <= start < end:
        raise ValueError(f"--llm-trace-window needs 0 <= START < END, got {text!r}")
    return start, end


def parse(path: str, text: str, fmt: str = "auto", window: tuple[float, float] | None = None) -> tuple[str, Parsed]:
    """(the format used, the rows sorted by time, rebased to the first request and cut to ``window``)."""
    name = detect(path, text) if fmt == "auto" else fmt
    parsed = FORMATS[name](text.lstrip("\ufeff"))
    rows = sorted(parsed.rows, key=lambda r: r.offset_s)
    if rows:
        t0 = rows[0].offset_s
        start, end = window or (0.0, float("inf"))
        rows = [TraceRow(r.offset_s - t0 - start, r.input_tokens, r.output_tokens, r.hash_ids)
                for r in rows if start <= r.offset_s - t0 < end]
    return name, Parsed(rows, parsed.skipped)
