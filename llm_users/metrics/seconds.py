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
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

NAN = float("nan")
#: Seconds one array may span (30 days); beyond it a second is kept in the overflow dict.
MAX_SPAN = 30 * 86400


class SecondSeries:
    """One float per whole second; ``get`` answers None for a second never set."""

    __slots__ = ("base", "values", "_far")

    def __init__(self) -> None:
        self.base: int | None = None
        self.values = array("d")
        self._far: dict[int, float] = {}

    def _slot(self, t: int) -> int | None:
        """The index of second ``t`` in ``values``, the array grown to hold it; None: far away."""
        base = self.base
        if base is None:
            self.base = t
            self.values.append(NAN)
            return 0
        i = t - base
        n = len(self.values)
        if 0 <= i < n:
            return i
        if i >= n:
            if i >= MAX_SPAN:
                return None
            self.values.extend([NAN] * (i + 1 - n))
            return i
        if n - i > MAX_SPAN:
            return None
        self.values[0:0] = array("d", [NAN] * -i)  # an earlier second (a late record): rare
        self.base = t
        return 0

    def set(self, t: int, value: float) -> None:
        i = self._slot(t)
        if i is None:
            self._far[t] = value
        else:
            self.values[i] = value

    def add(self, t: int, n: float) -> None:
        """Add ``n`` to second ``t`` (a second never set counts as 0)."""
        i = self._slot(t)
        if i is None:
            self._far[t] = self._far.get(t, 0.0) + n
        else:
            v = self.values[i]
            self.values[i] = n if v != v else v + n

    def get(self, t: int) -> float | None:
        base = self.base
        if base is not None:
            i = t - base
            if 0 <= i < len(self.values):
                v = self.values[i]
                return None if v != v else v
        return self._far.get(t)

    def __contains__(self, t: int) -> bool:
        return self.get(t) is not None

    def span(self) -> tuple[int, int] | None:
        """The first and last second set, or None when none is."""
        ts = [t for t, _ in self.items()]
        return (min(ts), max(ts)) if ts else None

    def items(self) -> Iterator[tuple[int, float]]:
        """(second, value) for every second set, in order."""
        far = sorted(self._far.items())
        base = self.base
        if base is not None:
            yield from (kv for kv in far if kv[0] < base)
            for i, v in enumerate(self.values):
                if not math.isnan(v):
                    yield base + i, v
            yield from (kv for kv in far if kv[0] >= base)
        else:
            yield from far


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
