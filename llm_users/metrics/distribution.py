"""Exact, mergeable latency distributions: HDR histograms in microseconds plus exact sums and extremes."""

from __future__ import annotations

import base64
import time
import weakref
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from itertools import chain
from typing import Any, NamedTuple

from hdrh.histogram import HdrHistogram

#: Percentiles every report gives, and the keys they are written under.
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}

_HIGHEST_US = 3_600_000_000  # one hour, in microseconds
_SIG_FIGS = 3


#: histogram (2048 sub-buckets); above, each doubling of the value doubles the bucket width.
_UNIT_BITS = 11

#: A distribution whose values fill at most this many buckets goes on the wire as its bucket
#: counts, not an encoded histogram: decoding one (zlib, a fresh 184 KB counts array, the add)
#: cost the master about 45 µs per distribution per worker payload, ten of them, for TTFT and
#: E2E distributions of a few dozen values (issue 34); an ITL distribution (hundreds to
#: thousands of buckets) still goes encoded, cheaper to merge than that many counts.
WIRE_BUCKETS_MAX = 256

#: On a master (:func:`fold_in_this_process`), a distribution folds its pending counts into its
#: packed arrays once they hold this many buckets, at most every FOLD_EVERY_S seconds: a master
#: keeps its distributions for the whole run, and each new bucket of a tail cost a dict entry and
#: two int objects (about 80-100 bytes) where the packed arrays take 16; the dicts grew for hours
#: toward the buckets in use (issue 33's soak: the masters' last +1 %/h). Where users stream
#: (a worker, a local run) nothing folds: a fold holds the loop about 0.7 µs a pending bucket.
FOLD_BUCKETS = 512
FOLD_EVERY_S = 5.0
_folding = False


def fold_in_this_process(on: bool = True) -> None:
    """Let this process's distributions fold (a master's: no stream waits on its loop)."""
    global _folding
    _folding = on


def bucket_floor_us(us: int) -> int:
    """The lowest value of the histogram bucket ``us`` falls in (the same counts slot)."""
    b = us.bit_length() - _UNIT_BITS
    return us >> b << b if b > 0 else us


def acyclic(h: HdrHistogram) -> HdrHistogram:
    """``h`` with its reference cycle broken. hdrh's histogram and its encoder refer to each
    other, so a dropped histogram (and its 188 KB counts array) was freed only by a full gc
    pass, which a frozen, steady heap (gctune.py) makes rare: a worker dropped a dozen of
    them at every ship interval and its memory grew by megabytes a minute (issue 10). The
    encoder is only ever used through its histogram, so a weak proxy back to it suffices."""
    h.encoder.histogram = weakref.proxy(h)
    return h


def _add_into(counts: dict[int, int], pairs: Iterable[tuple[int, int]]) -> None:
    """Add ``(floor_us, n)`` pairs into a dict of bucket counts."""
    get = counts.get
    for us, n in pairs:
        counts[us] = get(us, 0) + n


def new_histogram() -> HdrHistogram:
    return acyclic(HdrHistogram(1, _HIGHEST_US, _SIG_FIGS))


class BucketCounts(NamedTuple):
    """Values bucketed as :class:`Distribution` keeps them, with their exact count, sum and range."""

    counts: dict[int, int]
    count: int
    sum_ns: int
    min_ns: int
    max_ns: int


def bucket_counts(values: list[int]) -> BucketCounts:
    """Bucket a non-empty list of integer ns values (one loop, no HDR call per value)."""
    counts: dict[int, int] = {}
    get = counts.get
    unit = _UNIT_BITS
    for ns in values:
        us = (ns + 500) // 1000
        b = us.bit_length() - unit
        if b > 0:
            us = us >> b << b
        counts[us] = get(us, 0) + 1
    lo, hi = min(values), max(values)
    if hi // 1000 > _HIGHEST_US or lo < 0:  # rare: clamp the odd value
        for us in [u for u in counts if u > _HIGHEST_US or u < 0]:
            n = counts.pop(us)
            c = min(max(us, 0), _HIGHEST_US)
            counts[c] = counts.get(c, 0) + n
    return BucketCounts(counts, len(values), sum(values), lo, hi)


class Distribution:
    """One latency metric: an HDR histogram in microseconds plus exact count/sum/min/max in ns.

    Adding is on the hot path (every ITL gap), and ``HdrHistogram.record_value`` costs about
    5 µs in Python, so values are first counted in a dict (a fraction of a microsecond) and
    recorded into the histogram in bulk whenever it is read. The dict is keyed by the lowest
    microsecond value of the histogram bucket a value falls in (:func:`bucket_floor_us`), not
    by the microsecond itself: the histogram counts exactly the same, and the dict holds at
    most one key per bucket in use (a few thousand), however long a run goes without reading
    it. Keyed per microsecond it grew with every new value of a long run's tails (issue 10).

    The histogram itself (184 KB of counts) is made only when it is first read or merged into:
    a fresh one costs 0.1-0.2 ms of page faults with the hub blocked, and the self-check made one
    every second for its lag window (a 0.44 ms first-token stamp at 60 streams, issue 14).

    A distribution that is done changing (a self-check piece's lag window) is
    :meth:`pack`-ed: its buckets into two sorted arrays, 16 bytes a bucket, where the dict took
    about 100 and a histogram 184 KB; added to again, the new counts wait in the dict beside
    them, and reading counts both (exactly the same counts). (A finished stage's figures are
    kept smaller still, as one compressed block of their wire forms: ``StageRecord.freeze``.)
    On a master, a distribution folds its dict into the arrays at :data:`FOLD_BUCKETS` buckets:
    its run-long distributions never grow past 16 bytes a bucket in use plus that.
    """

    __slots__ = ("_hist", "_pending", "_keys", "_counts", "_folded_at", "count", "sum_ns", "min_ns", "max_ns")

    def __init__(self) -> None:
        self._hist: HdrHistogram | None = None
        self._pending: dict[int, int] = {}
        self._keys: array | None = None  # packed: bucket floors (µs), ascending
        self._counts: array | None = None  # packed: each one's count
        self._folded_at = -FOLD_EVERY_S  # time.monotonic() of the last fold of merged counts
        self.count = 0
        self.sum_ns = 0.0
        self.min_ns: float | None = None
        self.max_ns: float | None = None

    def pack(self) -> None:
        """Keep the counts in two arrays (16 bytes a bucket); the histogram, if one was made,
        is dropped into them (its buckets are the dict's: :func:`bucket_floor_us`)."""
        h = self._hist
        if h is not None:
            if h.total_count:
                counts = self._pending
                it = h.get_recorded_iterator()
                for item in it:
                    us = bucket_floor_us(item.value_iterated_to)
                    counts[us] = counts.get(us, 0) + item.count_at_value_iterated_to
                it.current_iteration_value = None  # it and its value refer to each other: the
                # histogram (184 KB) is freed now, not at the collector's next pass
            self._hist = None
        self._fold()

    @property
    def packed_buckets(self) -> int:
        """How many buckets the packed arrays hold."""
        return len(self._keys) if self._keys is not None else 0

    def _fold_when_due(self) -> None:
        """Fold at :data:`FOLD_BUCKETS` pending buckets, at most once every
        :data:`FOLD_EVERY_S`: a fold costs about 0.7 µs a pending bucket, and a master merging
        thousands of records a second would fold every few hundred (5 % of its merge,
        bench/merge.py); once in a while, the hot buckets gather many counts each in between
        and the rare ones, which are what grows, still go to the arrays."""
        if _folding and len(self._pending) >= FOLD_BUCKETS:
            now = time.monotonic()
            if now - self._folded_at >= FOLD_EVERY_S:
                self._folded_at = now
                self._fold()

    def _fold(self) -> None:
        """Move the pending counts into the packed arrays. A few against many go in one by one
        (a binary search each, an insert for a new bucket: a memmove); otherwise both are
        merged and sorted once."""
        p = self._pending
        if not p:
            return
        self._pending = {}
        keys, counts = self._keys, self._counts
        if keys is None or counts is None or len(p) * 8 > len(keys):
            if keys is not None and counts is not None:
                _add_into(p, zip(keys, counts, strict=True))
            ordered = sorted(p)
            self._keys, self._counts = array("q", ordered), array("q", map(p.__getitem__, ordered))
            return
        size = len(keys)
        for us, n in p.items():
            i = bisect_left(keys, us)
            if i < size and keys[i] == us:
                counts[i] += n
            else:
                keys.insert(i, us)
                counts.insert(i, n)
                size += 1

    def _all_counts(self) -> dict[int, int]:
        """Every count not in the histogram, packed and pending, as one dict (a new one when
        some are packed: the pending dict itself otherwise)."""
        if self._keys is None or self._counts is None:
            return self._pending
        out = dict(zip(self._keys, self._counts, strict=True))
        _add_into(out, self._pending.items())
        return out

    @property
    def hist(self) -> HdrHistogram:
        """The histogram with every value added so far."""
        h = self._histogram()
        if self._keys is not None and self._counts is not None:
            for us, n in zip(self._keys, self._counts, strict=True):
                h.record_value(us, n)
            self._keys = self._counts = None
        if self._pending:
            for us, n in self._pending.items():
                h.record_value(us, n)
            self._pending = {}
        return h

    def _histogram(self) -> HdrHistogram:
        """The histogram as it is (pending counts not recorded), made on first use."""
        h = self._hist
        if h is None:
            h = self._hist = new_histogram()
        return h

    def add(self, ns: float) -> None:
        us = bucket_floor_us(min(max(int(ns + 500) // 1000, 0), _HIGHEST_US))
        p = self._pending
        p[us] = p.get(us, 0) + 1
        if _folding and len(p) >= FOLD_BUCKETS:
            self._fold_when_due()
        self.count += 1
        self.sum_ns += ns
        if self.min_ns is None or ns < self.min_ns:
            self.min_ns = ns
        if self.max_ns is None or ns > self.max_ns:
            self.max_ns = ns

    def add_many(self, values: list[int]) -> None:
        """Add a list of integer ns values (a request's ITL gaps) at C speed where possible."""
        if values:
            self.add_counts(bucket_counts(values))

    def add_counts(self, b: BucketCounts) -> None:
        """Add values already bucketed by :func:`bucket_counts` (a request's ITL gaps go into
        the overall and the per-name distribution: bucketed once, issue 14)."""
        self._add_pending(b.counts.items())
        self._merge_exact(b.count, b.sum_ns, b.min_ns, b.max_ns)

    def _add_pending(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Add ``(floor_us, n)`` pairs to the pending counts, then fold if one is due."""
        _add_into(self._pending, pairs)
        if _folding:
            self._fold_when_due()

    def percentile_ms(self, p: float) -> float | None:
        """The histogram's value at ``p`` (its bucket's highest equivalent value), kept
        within the exact min and max so a bucket's width never shows past the real extremes."""
        return self.percentiles_ms([p])[p]

    def percentiles_ms(self, ps: list[float]) -> dict[float, float | None]:
        """:meth:`percentile_ms` of each of ``ps`` in one pass over the histogram (HDR's own
        ``get_percentile_to_value_dict``, the same values): a pass is a Python loop over up to
        ~45,000 counts, and a report's CDF asks for 1,004 percentiles of each distribution
        (4-5 s of CPU at every run's end when it asked them one at a time)."""
        if not self.count:
            return dict.fromkeys(ps)
        lo, hi = self.min_ns or 0, self.max_ns or 0
        got = self.hist.get_percentile_to_value_dict(ps)
        return {p: min(max(got.get(p, 0) * 1000, lo), hi) / 1e6 for p in ps}  # 0: as get_value_at_percentile

    def summary_ms(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"count": self.count}
        got = self.percentiles_ms(list(PERCENTILES.values()))
        for key, p in PERCENTILES.items():
            out[key] = got[p]
        if self.count:
            out["mean"] = self.sum_ns / self.count / 1e6
            out["min"] = (self.min_ns or 0) / 1e6
            out["max"] = (self.max_ns or 0) / 1e6
        else:
            out["mean"] = out["min"] = out["max"] = None
        return out

    def merge(self, other: Distribution) -> None:
        """Add ``other`` in: its not-yet-recorded values as counts (a dict merge, no HDR call
        per value), whatever it had recorded histogram to histogram."""
        if other._hist is not None and other._hist.total_count:
            self._histogram().add(other._hist)
        pending = other._pending.items()
        if other._keys is not None and other._counts is not None:  # its packed counts, then its pending
            self._add_pending(chain(zip(other._keys, other._counts, strict=True), pending))
        else:
            self._add_pending(pending)
        self._merge_exact(other.count, other.sum_ns, other.min_ns, other.max_ns)

    def _merge_exact(self, count: int, sum_ns: float, mn: float | None, mx: float | None) -> None:
        self.count += count
        self.sum_ns += sum_ns
        if mn is not None and (self.min_ns is None or mn < self.min_ns):
            self.min_ns = mn
        if mx is not None and (self.max_ns is None or mx > self.max_ns):
            self.max_ns = mx

    def to_wire(self) -> dict[str, Any]:
        """A msgpack/JSON-safe form that :meth:`merge_wire` restores exactly: values in at most
        :data:`WIRE_BUCKETS_MAX` buckets, none recorded in the histogram yet (a worker's
        payload: TTFT, E2E of a few dozen requests), go as their bucket counts, a flat
        ``[floor_us, n, ...]`` list; otherwise the encoded histogram."""
        if self._hist is None and len(self._pending) + self.packed_buckets <= 2 * WIRE_BUCKETS_MAX:
            counts = self._all_counts()
            if len(counts) <= WIRE_BUCKETS_MAX:
                return {"hist": None, "buckets": [x for kv in counts.items() for x in kv], "count": self.count,
                        "sum_ns": self.sum_ns, "min_ns": self.min_ns, "max_ns": self.max_ns}
        return {
            "hist": base64.b64encode(self.hist.encode()).decode() if self.count else None,
            "count": self.count,
            "sum_ns": self.sum_ns,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
        }

    def merge_wire(self, wire: dict[str, Any]) -> None:
        if not wire["count"]:
            return
        buckets = wire.get("buckets")
        if buckets is not None:  # counts keyed by bucket floor, as _pending keeps them
            it = iter(buckets)
            self._add_pending(zip(it, it, strict=True))
        else:
            h = self.hist
            h.add(acyclic(HdrHistogram.decode(base64.b64decode(wire["hist"]), h.b64_wrap)))  # decode_and_add, acyclic
        self._merge_exact(wire["count"], wire["sum_ns"], wire["min_ns"], wire["max_ns"])
