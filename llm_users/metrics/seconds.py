"""Per-second values kept for a whole run, at 8 bytes a second.

A run keeps a few figures for every second it lasts (the timeline's closed rows, the user
count, the scraped server and GPU columns, the self-check's phase marks), for the report's
charts at the end. Kept as dicts keyed by second, each second cost 100-400 bytes of dict
entries, int keys and float objects, and a master grew by that for as long as it ran (about
1 KB a second: 4 MB an hour, bench/soak.py, issue 33). :class:`SecondSeries` keeps one float
per second in one ``array('d')`` from the first second set (NaN: nothing set), and
:class:`SecondColumns` a named set of them (the ``extra`` columns of the timeline).

A second far from the others (more than :data:`MAX_SPAN` away, a clock jump) goes to a small
dict instead of stretching the array over the gap.

Even 8 bytes a second per column grows a master by 0.6 MB an hour (21 columns with the
server's metrics scraped; 1 %/h of its RSS, the soak's bound). So a series keeps in memory
only its last :data:`CHUNK` to ``2 * CHUNK`` seconds (the ones late records still change) and
writes older chunks to a :class:`Spill`: one unnamed temporary file per process (deleted by the
kernel when the process ends), read back (``os.pread``) for the report at the end. A spill that
cannot be written (disk full) leaves the chunk in memory: a value is never lost.
"""

from __future__ import annotations

import math
import os
import tempfile
from array import array
from collections.abc import Iterator

NAN = float("nan")
#: Seconds one array may span (30 days); beyond it a second is kept in the overflow dict.
MAX_SPAN = 30 * 86400
#: Seconds per spilled chunk (4.8 kB of a column); a series keeps 1-2 chunks in memory.
CHUNK = 600


class Spill:
    """Chunks of series on disk: an unnamed temporary file, opened on the first write."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self._pid = os.getpid()  # a forked child (``--processes``) shares the fd: it writes nothing
        self._fd: int | None = None
        self._end = 0
        self.failed: OSError | None = None  # the write that failed; later chunks stay in memory

    def write(self, data: bytes) -> int | None:
        """Append ``data``; its offset, or None when it could not be written (kept by the caller)."""
        if self.failed is not None or os.getpid() != self._pid:
            return None
        try:
            if self._fd is None:
                with tempfile.TemporaryFile(prefix="locust-llm-seconds-", dir=self.directory) as f:
                    self._fd = os.dup(f.fileno())
            if os.pwrite(self._fd, data, self._end) != len(data):
                raise OSError("short write")
        except OSError as e:
            self.failed = e
            return None
        at, self._end = self._end, self._end + len(data)
        return at

    def read(self, at: int, size: int) -> bytes:
        return os.pread(self._fd, size, at)  # type: ignore[arg-type]

    def rewrite(self, at: int, data: bytes) -> None:
        os.pwrite(self._fd, data, at)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_shared: Spill | None = None


def shared_spill() -> Spill:
    """The process's own :class:`Spill` (made on first use)."""
    global _shared
    if _shared is None or _shared._pid != os.getpid():
        _shared = Spill()
    return _shared


class SecondSeries:
    """One float per whole second; ``get`` answers None for a second never set. Seconds older
    than the last ``CHUNK`` to ``2 * CHUNK`` go to ``spill`` (default: :func:`shared_spill`)."""

    __slots__ = ("base", "values", "_far", "_chunks", "_spill", "_read")

    def __init__(self, spill: Spill | None = None) -> None:
        self.base: int | None = None  # the first second of the first chunk
        self.values = array("d")  # the seconds after the spilled chunks
        self._far: dict[int, float] = {}
        self._chunks: list[int | array] = []  # per spilled chunk: its offset in the spill, or
        self._spill = spill  # the array itself when it could not be written
        self._read: tuple[int, array] | None = None  # the spilled chunk read last: (index, values)

    def _spilled(self) -> int:
        return len(self._chunks) * CHUNK

    def _slot(self, t: int) -> int | None:
        """The index of second ``t`` past the spilled chunks, ``values`` grown to hold it; None:
        far away. Negative: in a spilled chunk."""
        base = self.base
        if base is None:
            self.base = t
            self.values.append(NAN)
            return 0
        i = t - base - self._spilled()
        n = len(self.values)
        if 0 <= i < n:
            return i
        if i >= n:
            if t - base >= MAX_SPAN:
                return None
            self.values.extend([NAN] * (i + 1 - n))
            while len(self.values) >= 2 * CHUNK:
                self._spill_chunk()
                i -= CHUNK
            return i
        if t >= base:
            return i  # a spilled second
        if self._chunks or n - i > MAX_SPAN:
            return None  # before the first chunk written: kept apart, rare
        self.values[0:0] = array("d", [NAN] * -i)  # an earlier second (a late record): rare
        self.base = t
        return 0

    def _spill_chunk(self) -> None:
        chunk = self.values[:CHUNK]
        if self._spill is None:
            self._spill = shared_spill()
        at = self._spill.write(chunk.tobytes())
        self._chunks.append(chunk if at is None else at)
        del self.values[:CHUNK]

    def _chunk(self, k: int) -> array:
        """Spilled chunk ``k``'s values (the last one read is kept: a report reads in order)."""
        c = self._chunks[k]
        if isinstance(c, array):
            return c
        if self._read is not None and self._read[0] == k:
            return self._read[1]
        out = array("d")
        out.frombytes(self._spill.read(c, CHUNK * 8))  # type: ignore[union-attr]
        self._read = (k, out)
        return out

    def _spilled_value(self, i: int) -> float:
        k, j = divmod(i + self._spilled(), CHUNK)
        return self._chunk(k)[j]

    def _set_spilled(self, i: int, value: float) -> None:
        k, j = divmod(i + self._spilled(), CHUNK)
        c = self._chunks[k]
        if isinstance(c, array):
            c[j] = value
            return
        self._spill.rewrite(c + j * 8, array("d", [value]).tobytes())  # type: ignore[union-attr]
        if self._read is not None and self._read[0] == k:
            self._read[1][j] = value

    def set(self, t: int, value: float) -> None:
        i = self._slot(t)
        if i is None:
            self._far[t] = value
        elif i < 0:
            self._set_spilled(i, value)
        else:
            self.values[i] = value

    def add(self, t: int, n: float) -> None:
        """Add ``n`` to second ``t`` (a second never set counts as 0)."""
        i = self._slot(t)
        if i is None:
            self._far[t] = self._far.get(t, 0.0) + n
            return
        v = self._spilled_value(i) if i < 0 else self.values[i]
        v = n if v != v else v + n
        if i < 0:
            self._set_spilled(i, v)
        else:
            self.values[i] = v

    def get(self, t: int) -> float | None:
        base = self.base
        if base is not None:
            i = t - base - self._spilled()
            if 0 <= i < len(self.values):
                v = self.values[i]
                return None if v != v else v
            if i < 0 and t >= base:
                v = self._spilled_value(i)
                return None if v != v else v
        return self._far.get(t)

    def __contains__(self, t: int) -> bool:
        return self.get(t) is not None

    def span(self) -> tuple[int, int] | None:
        """The first and last second set, or None when none is."""
        first = last = None
        for t, _ in self.items():
            if first is None:
                first = t
            last = t
        return None if first is None else (first, last)  # type: ignore[return-value]

    def items(self) -> Iterator[tuple[int, float]]:
        """(second, value) for every second set, in order (spilled chunks read back)."""
        far = sorted(self._far.items())
        base = self.base
        if base is None:
            yield from far
            return
        yield from (kv for kv in far if kv[0] < base)
        for k in range(len(self._chunks)):
            t0 = base + k * CHUNK
            yield from ((t0 + j, v) for j, v in enumerate(self._chunk(k)) if not math.isnan(v))
        t0 = base + self._spilled()
        yield from ((t0 + i, v) for i, v in enumerate(self.values) if not math.isnan(v))
        yield from (kv for kv in far if kv[0] >= base)


def joint_span(series: list[SecondSeries]) -> range:
    """Every second from the first to the last set in any of ``series`` (empty: none is)."""
    spans = [sp for sp in (x.span() for x in series) if sp]
    if not spans:
        return range(0)
    return range(min(lo for lo, _ in spans), max(hi for _, hi in spans) + 1)


class SecondColumns:
    """Named :class:`SecondSeries`: ``get(t)`` is the dict of the columns set at second ``t``
    (as a dict of dicts keyed by second answered before), None when none is."""

    __slots__ = ("columns", "last")

    def __init__(self) -> None:
        self.columns: dict[str, SecondSeries] = {}
        self.last: int | None = None  # the latest second set

    def update(self, t: int, values: dict[str, float | None]) -> None:
        """Set second ``t`` of each column in ``values``; a None is no value (left unset)."""
        cols = self.columns
        for k, v in values.items():
            if v is None:
                continue
            s = cols.get(k)
            if s is None:
                s = cols[k] = SecondSeries()
            s.set(t, float(v))
        if values and (self.last is None or t > self.last):
            self.last = t

    def get(self, t: int, default: dict[str, float] | None = None) -> dict[str, float] | None:
        row = {}
        for k, s in self.columns.items():
            v = s.get(t)
            if v is not None:
                row[k] = v
        return row or default

    def __bool__(self) -> bool:
        return self.last is not None

    def keys(self) -> Iterator[int]:
        """Every second with a value in some column."""
        seen: set[int] = set()
        for s in self.columns.values():
            seen.update(t for t, _ in s.items())
        return iter(sorted(seen))

    def recent_columns(self, seconds: int) -> set[str]:
        """The columns with a value in the last ``seconds`` seconds up to the latest one set."""
        if self.last is None:
            return set()
        lo = self.last - seconds + 1
        return {k for k, s in self.columns.items() if any(s.get(t) is not None for t in range(lo, self.last + 1))}
