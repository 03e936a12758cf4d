"""A record's output tokens and inter-token gaps, by the wall-clock second they arrived.

Every per-second series (timeseries.csv through ``outputs/timeline.py``, the report's chart that
reads those rows, the web UI's live points through ``webui/live.py``) counts a request's tokens
and ITL samples in the second its *chunks arrived*, not the second the request ended: counted at
the end, a steady load drew a zigzag of multiples of the answer length (issue 28). One
implementation, shared by both.

Chunk ``k`` arrived at ``start_time + (ttft_ns + sum(itl_ns[:k])) / 1e9``. The record knows only
the total of output tokens (the server's usage count, or the chunk count), so the tokens are
apportioned over the chunks in integers: chunks ``0..k`` carry ``(k + 1) * T // n`` of them
together (``T`` tokens, ``n`` chunks). A chunk's tokens were produced over the gap before it, so
chunk ``k``'s share is spread evenly over ``(arrival[k-1], arrival[k]]`` and a gap across a
second boundary splits them (the first chunk's lands at its arrival). The cumulative count is
floored at each boundary, so the seconds' counts are integers whose sum is exactly ``T``.

ITL sample ``i`` (the gap that ends with chunk ``i + 1``) counts in the second that chunk arrived.

Cost: one ``itertools.accumulate`` over the gaps (C speed) and one bisection per second boundary
the request spans; no per-token or per-chunk Python objects.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from llm_users.metrics.record import RequestRecord, pack_gaps, unpack_gaps

#: One second's share of a record: (Unix second, output tokens, ITL slice start, ITL slice end);
#: ``itl_ns[lo:hi]`` are the gaps that ended in that second.
Piece = tuple[int, int, int, int]


def by_second(start_time: float, ttft_ns: int | None, itl_ns: Sequence[int], tokens: int | None,
              end_time: float | None = None) -> list[Piece]:
    """The record's tokens and ITL gaps per arrival second, oldest first (seconds with neither
    are left out). Without a first token (``ttft_ns`` None) the tokens count at ``end_time``."""
    total = tokens or 0
    if ttft_ns is None:
        if not total:
            return []
        return [(int(start_time if end_time is None else end_time), total, 0, 0)]
    arrivals = list(accumulate(itl_ns, initial=ttft_ns))  # ns after start_time
    n = len(arrivals)
    last = arrivals[-1]
    sec = int(start_time + ttft_ns / 1e9)
    boundary = (sec + 1 - start_time) * 1e9  # the next second's start, ns after start_time
    if ttft_ns >= boundary:  # float rounding at an exact boundary
        sec += 1
        boundary += 1e9
    out: list[Piece] = []
    done = 0  # tokens counted in earlier seconds
    chunk_lo = 0  # the first chunk of the current second
    while boundary <= last:
        k = bisect_left(arrivals, boundary, chunk_lo)  # the first chunk at or after the boundary
        before, at = arrivals[k - 1], arrivals[k]
        cum_before = k * total // n  # tokens of chunks 0..k-1
        share = (k + 1) * total // n - cum_before  # chunk k's tokens, produced over (before, at]
        upto = cum_before + int(share * (boundary - before) / (at - before))
        lo, hi = chunk_lo - 1 if chunk_lo else 0, k - 1 if k else 0  # max(x, 1) - 1, without the calls
        if upto > done or hi > lo:
            out.append((sec, upto - done, lo, hi))
        done, chunk_lo = upto, k
        sec += 1
        boundary += 1e9
    lo = max(chunk_lo, 1) - 1
    out.append((sec, total - done, lo, n - 1))
    return out


def record_by_second(rec: RequestRecord) -> Iterable[Piece]:
    """:func:`by_second` of a finished record (its output tokens, chunks and end); a merged
    record's come computed by the worker that measured it (``rec.pieces``, packed:
    :func:`pack_pieces`; metrics/record_wire.py)."""
    p = rec.pieces
    if p is not None:
        return unpack_pieces(p) if type(p) is bytes else p
    return by_second(rec.start_time, rec.ttft_ns, rec.itl_ns, rec.output_tokens, rec.end_time)


def pack_pieces(pieces: Iterable[Piece]) -> bytes:
    """Pieces as int64 bytes, four values each: one msgpack ``bin`` in a worker's payload
    instead of a list of lists (the master's decode: ~3 µs a 10 s record less, and nothing for
    the cyclic collector to walk)."""
    return pack_gaps([x for piece in pieces for x in piece])


def unpack_pieces(data: bytes) -> Iterator[Piece]:
    """:func:`pack_pieces`' bytes as pieces again (an iterator: each reader unpacks its own)."""
    values = unpack_gaps(data)
    if len(values) % 4:
        raise ValueError(f"packed pieces of {len(values)} values: not a whole number of (second, tokens, lo, hi)")
    it = iter(values)
    return zip(it, it, it, it, strict=True)
