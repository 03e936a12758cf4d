"""Outages: the windows of a run in which the server could not be reached (issue 33).

A server killed and restarted mid-run shows in the records as a burst of failures at the
connection level: the requests in flight end as ``connection_reset``, the ones sent while it is
down as ``connect_error`` (users back off, ``client/backoff.py``), and the run recovers when it is
back. :class:`OutageTracker` keeps three numbers per ended request (when it ended, how, and when
it was sent or, for a request cut mid-answer, cut: :func:`since`) and :func:`find_outages` turns
them into windows, at the stop, from every record of the run (the
merged records on a master: exact across workers, whatever order they arrived in).

An outage is a maximal run of failed requests, ordered by when each ended (``start_time`` +
E2E), with no success ending in between, that holds at least one connection-level failure
(:data:`CONNECTION_CATEGORIES`: the server could not be reached or dropped the connection; other
failures inside it count in it, such as llama.cpp's 503s while a restarted server loads its
model) and has at least :data:`MIN_FAILURES` failures, or at least 2 spread over
:data:`MIN_SPAN_S` s or more. A lone reset (a fault injected into one stream) is no outage, nor
is a run of 5xx answers from a server that is up. Each window: ``start`` and ``end`` (Unix s: the first and last failure's
end), ``failures``, ``cause`` (the top category), ``categories`` (count per category),
``recovered_at`` (the end of the first success after it; None when none came),
``recovery_s`` (``recovered_at`` - ``start``: how long requests failed until one succeeded again),
and the span the console line prints (issue 54 item 6: failures are stamped at their end, so
``end`` - ``start`` said "3.5 s" of a server down 5 s): ``down_from``, the first failed request's
start (a request cut mid-answer: its end, as the server answered it until then), and ``down_s``,
from there to the start of the first success after it (its request was sent, after connecting,
to a server that was back), or to the last failure's end when none came.
Interrupted requests (cut by the stop) are left out.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

from llm_users.metrics.record import RequestRecord

CONNECTION_CATEGORIES = frozenset({"connect_error", "connect_timeout", "connection_error", "connection_reset",
                                   "tls_error"})
MIN_FAILURES = 3
MIN_SPAN_S = 1.0
#: Events kept before the settled ones are compacted (:meth:`OutageTracker.compact`).
COMPACT_AT = 16384
#: Events that ended this long before the newest one are settled: no record still to come
#: ends among them (a master hears from workers every 2 s; a lost worker's records come at its
#: re-admission, or never).
SETTLED_S = 300.0
_OK = 0


class OutageTracker:
    """A consumer of every record (the ``observers`` stage): per ended request, its end time, a
    small code (0 = success, else its category's index) and :func:`since`; 18 bytes a request,
    compacted past :data:`COMPACT_AT` so a long run keeps about one event per failure
    (:meth:`compact`)."""

    __slots__ = ("_ends", "_codes", "_since", "_names", "_index", "_compact_at")

    def __init__(self) -> None:
        self._ends = array("d")
        self._codes = array("H")
        self._since = array("d")
        self._names: list[str] = ["ok"]
        self._index: dict[str, int] = {"ok": _OK}
        self._compact_at = COMPACT_AT

    def add(self, rec: RequestRecord) -> None:
        if rec.status in ("interrupted", "cancelled"):  # neither a success nor a failure
            return
        end = rec.start_time + (rec.e2e_ns or 0) / 1e9
        if rec.ok:
            code = _OK
        else:
            cat = rec.error_category or "error"
            code = self._index.get(cat, -1)
            if code < 0:
                code = self._index[cat] = len(self._names)
                self._names.append(cat)
        self._ends.append(end)
        self._codes.append(code)
        self._since.append(since(rec, end))
        if len(self._ends) >= self._compact_at:
            self.compact()

    def compact(self) -> None:
        """Settled events (ended :data:`SETTLED_S` before the newest) in time order, with each
        streak of successes down to its first and last: the windows :func:`find_outages` finds
        are the same (a streak's first success closes the failures before it and is their
        recovery; the rest of the streak closes nothing). Without it a master kept 10 bytes a
        request for the whole run (34 MB an hour at 950 records/s)."""
        ends, codes = self._ends, self._codes
        horizon = max(ends) - SETTLED_S
        old = sorted((i for i in range(len(ends)) if ends[i] < horizon), key=ends.__getitem__)
        keep = [i for k, i in enumerate(old) if codes[i] != _OK or k == 0 or k == len(old) - 1
                or codes[old[k - 1]] != _OK or codes[old[k + 1]] != _OK]
        keep += [i for i in range(len(ends)) if ends[i] >= horizon]
        self._ends = array("d", (ends[i] for i in keep))
        self._codes = array("H", (codes[i] for i in keep))
        self._since = array("d", (self._since[i] for i in keep))
        self._compact_at = max(COMPACT_AT, 2 * len(keep))  # mostly unsettled or failures: not again at once

    def events(self) -> list[tuple[float, str | None, float]]:
        """(end, failure category or None for a success, :func:`since`), in the order kept."""
        names = self._names
        return [(e, None if c == _OK else names[c], at)
                for e, c, at in zip(self._ends, self._codes, self._since, strict=True)]

    def outages(self) -> list[dict[str, Any]]:
        return find_outages(self.events())


def since(rec: RequestRecord, end: float) -> float:
    """From when a request shows the server down (a failure) or back (a success): when it was
    sent (``start_time``), but for a failure the server had answered (a stream cut mid-answer by
    the kill): its end, as the server was up until then."""
    if not rec.ok and rec.ttfb_ns is not None:
        return end
    return rec.start_time


Event = tuple[float, str | None] | tuple[float, str | None, float]


def find_outages(events: list[Event]) -> list[dict[str, Any]]:
    """The outage windows among ``events`` ((end time, category or None for a success[, since]),
    any order; ``since`` defaults to the end), in time order; see the module docstring for the rule."""
    out: list[dict[str, Any]] = []
    run: list[tuple[float, str, float]] = []

    def close(recovered: tuple[float, float] | None) -> None:
        if not run:
            return
        cats = Counter(c for _, c, _ in run)
        cause = cats.most_common(1)[0][0]
        start, end = run[0][0], run[-1][0]
        big = len(run) >= MIN_FAILURES or (len(run) >= 2 and end - start >= MIN_SPAN_S)
        if big and any(c in CONNECTION_CATEGORIES for c in cats):
            down_from = min(at for _, _, at in run)
            down_to = end if recovered is None else max(recovered[1], end)
            out.append({"start": round(start, 3), "end": round(end, 3), "failures": len(run), "cause": cause,
                        "categories": dict(cats.most_common()),
                        "recovered_at": None if recovered is None else round(recovered[0], 3),
                        "recovery_s": None if recovered is None else round(recovered[0] - start, 3),
                        "down_from": round(down_from, 3), "down_s": round(down_to - down_from, 3)})
        run.clear()

    for event in sorted(events, key=lambda e: e[0]):
        end, cat, *rest = event
        at = rest[0] if rest else end
        if cat is None:
            close((end, at))
        else:
            run.append((end, cat, at))
    close(None)
    return out


def console_line(o: dict[str, Any], t0: float | None) -> str:
    """One line per outage: when (seconds since the test started), how long (``down_s``: from
    the first failed request's start to the first success's; a summary from before it: from
    the first failure's end to the last's), what failed, recovery."""
    down_from = o.get("down_from", o["start"])
    down_s = o["down_s"] if o.get("down_s") is not None else o["end"] - o["start"]
    at = f"at {down_from - t0:.1f} s" if t0 else "at start"
    cats = ", ".join(f"{n} {c}" for c, n in o["categories"].items())
    rec = (f"recovered {o['recovery_s']:.1f} s after the first failure" if o["recovery_s"] is not None
           else "not recovered before the stop")
    return f"outage {at} for {down_s:.1f} s: {o['failures']} failures ({cats}); {rec}"


def attach(environment: Any, run: Any) -> OutageTracker | None:
    """Where the run merges (local runner, master): watch every record, add ``outages`` to the
    summary; afresh at each test start (a web-UI test again)."""
    collector = getattr(run, "collector", None)
    if collector is None:
        return None
    holder = [OutageTracker()]
    collector.observers.append(lambda rec: holder[0].add(rec))
    run.summary_hooks.append(lambda summary: summary.__setitem__("outages", holder[0].outages()))

    def fresh(**_: Any) -> None:
        holder[0] = OutageTracker()

    environment.events.test_start.add_listener(fresh)
    return holder[0]
