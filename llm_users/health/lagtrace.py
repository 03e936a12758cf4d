"""Loop-lag trace with attribution: what held the gevent hub when a ready event had to wait.

The self-check's probe (:class:`~llm_users.health.selfcheck.SelfMonitor`) hands the hub a callback
every 20 ms and the callback reports how late it ran. This module keeps those figures beside
the events that can hold the hub, all stamped with ``perf_counter_ns`` in compact arrays (no
object per event):

- **probes**: each probe's due time and lag, split into the client's own part and the part
  other processes caused (``/proc/self/task/TID/schedstat``: a thread's CPU time and its run
  delay, the time it was ready but not running): since the previous probe, the loop thread's
  run delay, plus the probe thread's run delay beyond the loop thread's CPU time (the probe
  thread waited for the core while the loop did not hold it), is taken off the lag, up to all
  of it, and tallied apart as ``contention``; and of what is left, the part the loop's thread
  was **off the CPU** without waiting for it (asleep in a blocking call, waiting for the GIL,
  or its virtual CPU taken by the host: what the thread's own CPU clock did not count between
  the probe's send and its callback); the loop thread's run delay and CPU time are summed too
  (``sched``: whether the machine or the client held it up, :mod:`~llm_users.health.verdict`);
- **gc passes**: ``gc.callbacks`` start/stop and the generation collected;
- **spans**: named pieces of our own periodic or per-request work timing themselves
  (``with span("timeline")``): the statistics/timeline tick, the shipper, the self-check's CPU
  sampler, records-file writes;
- **greenlet runs** (``greenlets=True``, for the bench): any greenlet other than the hub that
  ran longer than ``greenlet_min_ns`` between two switches, named by its function (Locust's own
  greenlets: stats, heartbeat, spawner, users). It costs a Python call per greenlet switch, so
  it is off in ordinary runs.

:meth:`LagTrace.drain` attributes each late probe to the event that overlaps its wait most;
when none does, to :data:`OFF_CPU` if the loop's thread was off the CPU for most of the wait,
else ``unattributed`` (the loop ran code no event names: the users' own work) and keeps a
per-cause tally (count, sum and max of the lag), then drops the raw events it no longer needs,
so memory stays bounded in a run of any length. Every pass and span is counted in per-name
totals (count, sum, max); only those of at least ``event_min_ns`` (0.1 ms) are kept as events. With ``keep_raw`` everything is kept for
:meth:`LagTrace.to_dict` (the self-check writes it at test stop to the file named by
``LOCUST_LLM_LAG_TRACE``; ``LOCUST_LLM_LAG_TRACE_GREENLETS=1`` adds greenlet runs).

Nothing happens at import: :func:`install` makes a trace the process's current one (gc
callback, greenlet tracer), :func:`uninstall` removes it.
"""

from __future__ import annotations

import gc
import os
from array import array
from bisect import bisect_left, bisect_right
from time import perf_counter_ns, thread_time_ns
from typing import Any

from llm_users.health.schedstat import open_schedstat, read_schedstat

#: A probe at least this late is a stall worth attributing.
LATE_NS = 1_000_000
#: Shorter gc passes and spans are only counted in the totals: they cannot own a stall.
EVENT_MIN_NS = 100_000
#: The cause of a late probe no event covers while the loop's thread was mostly off the CPU.
OFF_CPU = "loop thread off-CPU (a blocking call, the GIL or the VM)"
#: Environment variable naming a file the self-check writes the raw trace to at test stop.
ENV_FILE = "LOCUST_LLM_LAG_TRACE"
#: Environment variable: "1" times greenlet runs too.
ENV_GREENLETS = "LOCUST_LLM_LAG_TRACE_GREENLETS"

_current: LagTrace | None = None


class LagTrace:
    """Probes, gc passes and spans of one process, and late probes tallied by cause."""

    def __init__(self, keep_raw: bool = False, greenlets: bool = False,
                 greenlet_min_ns: int = 500_000, late_ns: int = LATE_NS, event_min_ns: int = EVENT_MIN_NS) -> None:
        self.keep_raw = keep_raw
        self.greenlets = greenlets
        self.greenlet_min_ns = greenlet_min_ns
        self.late_ns = late_ns
        self.event_min_ns = event_min_ns
        self.probe_due = array("q")
        self.probe_lag = array("q")  # the client's own part of each probe's lag
        self.probe_wait = array("q")  # the part other processes caused (the main thread's run delay)
        self.probe_off = array("q")  # of the own part, how long the loop's thread was off the CPU
        self.contention = [0, 0, 0]  # probes >= late_ns of run delay: [count, sum_ns, max_ns]
        self._contention_taken = (0, 0)
        self.sched = [0, 0, 0, 0]  # the loop thread between probes: [intervals, run delay, CPU, wall] (ns)
        self._sched_taken, self._sched_at = (0, 0, 0, 0), 0
        self._sched_fd: int | None = None
        self._run_delay = -1
        self._cpu = -1
        self._probe_delay = -1
        self._taken = (0, 0)  # the latest stretch another process held the core
        self.gc_start = array("q")
        self.gc_end = array("q")  # events are appended as they end: each end array is sorted
        self.gc_gen = array("b")
        self.span_id = array("H")
        self.span_start = array("q")
        self.span_end = array("q")
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._longest_gc = 0  # the longest event kept of each kind: no event ending later than
        self._longest_span = 0  # an interval's end plus this can overlap it (cause() stops there)
        self._gc_t0 = 0
        self._drained = 0  # probes already attributed (index into the probe arrays)
        self._last_switch = 0
        self._hub: Any = None
        self.stalls: dict[str, list[int]] = {}  # cause -> [count, sum_ns, max_ns] of late probes
        self.gc_totals: dict[int, list[int]] = {}  # generation -> [passes, sum_ns, max_ns]
        self.span_totals: dict[str, list[int]] = {}  # span name -> [count, sum_ns, max_ns]
        self._gc_taken: dict[int, tuple[int, int]] = {}
        self._span_taken: dict[str, tuple[int, int]] = {}

    # recording --------------------------------------------------------------------------------
    def probe(self, due_ns: int, lag_ns: int, probe_delay_ns: int = -1, sent_ns: int = 0,
              sent_cpu_ns: int = -1) -> int:
        """A probe's callback ran ``lag_ns`` after it was due (called on the loop's thread;
        ``probe_delay_ns``: the probe thread's cumulative run delay when it sent it;
        ``sent_ns``/``sent_cpu_ns``: when it was sent and the loop thread's CPU clock then);
        returns the client's own part of the lag."""
        wait = 0
        if self._sched_fd is not None:
            cpu, rd = read_schedstat(self._sched_fd)
            now = due_ns + lag_ns
            if rd >= 0 and self._run_delay >= 0:
                s = self.sched  # how long the loop thread waited for a core against how long it ran
                s[:] = (s[0] + 1, s[1] + max(rd - self._run_delay, 0), s[2] + max(cpu - self._cpu, 0),
                        s[3] + now - self._sched_at)
                other = 0
                if probe_delay_ns >= 0 and self._probe_delay >= 0:
                    other = max(0, (probe_delay_ns - self._probe_delay) - (cpu - self._cpu))
                d = max(rd - self._run_delay, 0) + other
                if d > 0:  # the core was taken just before now: [now - d, now]
                    self._taken = (now - d, now)
                # probes sent late in a row after one such wait all waited in it
                ov = min(now, self._taken[1]) - max(due_ns, self._taken[0])
                wait = min(max(d, ov, 0), max(lag_ns, 0))
            self._cpu, self._run_delay, self._probe_delay, self._sched_at = cpu, rd, probe_delay_ns, now
        if wait >= self.late_ns:
            c = self.contention
            c[0] += 1
            c[1] += wait
            c[2] = max(c[2], wait)
        own = lag_ns - wait
        off = 0
        if sent_cpu_ns >= 0 and own >= self.late_ns:
            # wall time from send to callback the loop's thread neither ran nor waited for the core
            off = min(max((due_ns + lag_ns - sent_ns) - (thread_time_ns() - sent_cpu_ns) - wait, 0), own)
        self.probe_due.append(due_ns)
        self.probe_lag.append(own)
        self.probe_wait.append(wait)
        self.probe_off.append(off)
        return own

    def open_run_delay(self) -> None:
        """Follow the calling thread's run delay (the loop's thread; Linux only, else a no-op)."""
        self.close_run_delay()
        self._sched_fd = open_schedstat()
        self._run_delay = self._cpu = self._probe_delay = -1

    def close_run_delay(self) -> None:
        if self._sched_fd is not None:
            os.close(self._sched_fd)
            self._sched_fd = None

    def name_id(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i

    def add_span(self, name: str, start_ns: int, dur_ns: int) -> None:
        t = self.span_totals.get(name)
        if t is None:
            self.span_totals[name] = [1, dur_ns, dur_ns]
        else:
            t[0] += 1
            t[1] += dur_ns
            if dur_ns > t[2]:
                t[2] = dur_ns
        if dur_ns >= self.event_min_ns:
            if dur_ns > self._longest_span:
                self._longest_span = dur_ns
            self.span_id.append(self.name_id(name))
            self.span_start.append(start_ns)
            self.span_end.append(start_ns + dur_ns)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        now = perf_counter_ns()
        if phase == "start":
            self._gc_t0 = now
            return
        if not self._gc_t0:
            return
        gen = int(info.get("generation", 0))
        dur = now - self._gc_t0
        self._gc_t0 = 0
        if dur >= self.event_min_ns:
            if dur > self._longest_gc:
                self._longest_gc = dur
            self.gc_start.append(now - dur)
            self.gc_end.append(now)
            self.gc_gen.append(gen)
        t = self.gc_totals.get(gen)
        if t is None:
            self.gc_totals[gen] = [1, dur, dur]
        else:
            t[0] += 1
            t[1] += dur
            if dur > t[2]:
                t[2] = dur

    def _on_switch(self, event: str, args: Any) -> None:
        now = perf_counter_ns()
        last = self._last_switch
        self._last_switch = now
        if event not in ("switch", "throw") or not last:
            return
        info = getattr(args[1], "_formatinfo", None)
        if info is not None:  # gevent caches it; a finished greenlet can no longer name its function
            info()
        dur = now - last
        if dur < self.greenlet_min_ns:
            return
        origin = args[0]
        if origin is self._hub or getattr(origin, "parent", None) is None:  # waiting in libev, or main
            return
        self.add_span("greenlet:" + _greenlet_name(origin), last, dur)

    # attribution ------------------------------------------------------------------------------
    def drain(self, keep_ns: int = 5_000_000_000) -> dict[str, list[int]]:
        """Attribute the probes recorded since the last drain; returns the tally of those
        (cause -> [count, sum_ns, max_ns]) and adds it to :attr:`stalls`. Without ``keep_raw``,
        raw events older than ``keep_ns`` before the newest probe are dropped."""
        new: dict[str, list[int]] = {}
        due, lag = self.probe_due, self.probe_lag
        for i in range(self._drained, len(due)):
            if lag[i] < self.late_ns:
                continue
            cause = self.probe_cause(i)
            t = new.get(cause)
            if t is None:
                new[cause] = [1, lag[i], lag[i]]
            else:
                t[0] += 1
                t[1] += lag[i]
                t[2] = max(t[2], lag[i])
        self._drained = len(due)
        merge_tally(self.stalls, new)
        if not self.keep_raw and len(due):
            self._forget(due[-1] - keep_ns)
        return new

    def probe_cause(self, i: int) -> str:
        """What held the loop while probe ``i`` waited: :meth:`cause`, or :data:`OFF_CPU` when no
        event covers it and the loop's thread was off the CPU for at least half of the wait."""
        cause = self.cause(self.probe_due[i], self.probe_due[i] + self.probe_lag[i])
        if cause == "unattributed" and 2 * self.probe_off[i] >= self.probe_lag[i]:
            return OFF_CPU
        return cause

    def cause(self, start: int, end: int) -> str:
        """What held the loop over [start, end]: ``gc gen N``, a span's name, or
        ``unattributed``. Events nest (a gc pass inside the statistics' work inside a user's
        greenlet run), so among the events that cover at least half as much of the interval
        as the one covering most, the shortest (the innermost) is named."""
        cands: list[tuple[int, int, str]] = []  # (overlap, duration, name)
        # only events that end after ``start`` and start before ``end`` (so end before ``end``
        # plus the longest kept): a late probe looks at its neighbourhood, not at every event
        # after it (that made the once-a-second self-check 1-3 ms at 28k chunks/s, issue 14)
        starts, ends = self.gc_start, self.gc_end
        for k in range(bisect_right(ends, start), bisect_right(ends, end + self._longest_gc)):
            o = min(end, ends[k]) - max(start, starts[k])
            if o > 0:
                cands.append((o, ends[k] - starts[k], f"gc gen{self.gc_gen[k]}"))
        starts, ends = self.span_start, self.span_end
        for k in range(bisect_right(ends, start), bisect_right(ends, end + self._longest_span)):
            o = min(end, ends[k]) - max(start, starts[k])
            if o > 0:
                cands.append((o, ends[k] - starts[k], self.names[self.span_id[k]]))
        if not cands:
            return "unattributed"
        most = max(c[0] for c in cands)
        return min((c for c in cands if 2 * c[0] >= most), key=lambda c: c[1])[2]

    def _forget(self, before_ns: int) -> None:
        """Drop probes already drained, and gc passes and spans that ended before ``before_ns``."""
        del self.probe_due[:self._drained]
        del self.probe_lag[:self._drained]
        del self.probe_wait[:self._drained]
        del self.probe_off[:self._drained]
        self._drained = 0
        k = bisect_left(self.gc_end, before_ns)
        del self.gc_start[:k], self.gc_end[:k], self.gc_gen[:k]
        k = bisect_left(self.span_end, before_ns)
        del self.span_start[:k], self.span_end[:k], self.span_id[:k]

    def take(self) -> dict[str, dict[str, list[int]]]:
        """What was tallied since the last take (late probes by cause, gc passes by generation,
        spans by name), msgpack/JSON-safe; the run-wide tallies keep everything."""
        stalls = self.drain()
        gc_new = {f"gen{g}": [t[0] - self._gc_taken.get(g, (0, 0))[0], t[1] - self._gc_taken.get(g, (0, 0))[1], t[2]]
                  for g, t in self.gc_totals.items()}
        span_new = {n: [t[0] - self._span_taken.get(n, (0, 0))[0], t[1] - self._span_taken.get(n, (0, 0))[1], t[2]]
                    for n, t in self.span_totals.items()}
        self._gc_taken = {g: (t[0], t[1]) for g, t in self.gc_totals.items()}
        self._span_taken = {n: (t[0], t[1]) for n, t in self.span_totals.items()}
        c, (n0, s0) = self.contention, self._contention_taken
        self._contention_taken = (c[0], c[1])
        out = {"stalls": stalls, "gc": {k: v for k, v in gc_new.items() if v[0]},
               "spans": {k: v for k, v in span_new.items() if v[0]}}
        if c[0] > n0:
            out["contention"] = {"other processes": [c[0] - n0, c[1] - s0, c[2]]}
        s, t0 = self.sched, self._sched_taken
        self._sched_taken = (s[0], s[1], s[2], s[3])
        if s[0] > t0[0]:  # the loop thread's schedstat, as tallies (merge_tally adds them up)
            out["sched"] = {k: [s[0] - t0[0], s[i] - t0[i], 0] for i, k in ((1, "run delay"), (2, "cpu"), (3, "wall"))}
        return out

    # output -----------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Late probes by cause and gc passes by generation, in ms (JSON-ready)."""
        return {
            "late_ms": self.late_ns / 1e6,
            "stalls": tally_ms(self.stalls),
            "gc": {f"gen{g}": {"count": t[0], "total_ms": t[1] / 1e6, "max_ms": t[2] / 1e6}
                   for g, t in sorted(self.gc_totals.items())},
            "spans": tally_ms(self.span_totals),
            "contention": {"count": self.contention[0], "total_ms": self.contention[1] / 1e6,
                           "max_ms": self.contention[2] / 1e6},
        }

    def to_dict(self) -> dict[str, Any]:
        """Every raw event kept, plus the summary (for the bench's analysis)."""
        return {
            "probes": {"due_ns": self.probe_due.tolist(), "lag_ns": self.probe_lag.tolist(),
                       "wait_ns": self.probe_wait.tolist(), "off_ns": self.probe_off.tolist()},
            "gc": {"start_ns": self.gc_start.tolist(), "end_ns": self.gc_end.tolist(),
                   "generation": self.gc_gen.tolist()},
            "spans": {"names": list(self.names), "id": self.span_id.tolist(),
                      "start_ns": self.span_start.tolist(), "end_ns": self.span_end.tolist()},
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LagTrace:
        """A trace written by :meth:`to_dict`, for analysis (:meth:`cause`)."""
        t = cls(keep_raw=True, event_min_ns=0)
        t.probe_due.extend(d["probes"]["due_ns"])
        t.probe_lag.extend(d["probes"]["lag_ns"])
        t.probe_wait.extend(d["probes"].get("wait_ns") or [0] * len(d["probes"]["lag_ns"]))
        t.probe_off.extend(d["probes"].get("off_ns") or [0] * len(d["probes"]["lag_ns"]))
        t.gc_start.extend(d["gc"]["start_ns"])
        t.gc_end.extend(d["gc"]["end_ns"])
        t.gc_gen.extend(d["gc"]["generation"])
        for name in d["spans"]["names"]:
            t.name_id(name)
        t.span_id.extend(d["spans"]["id"])
        t.span_start.extend(d["spans"]["start_ns"])
        t.span_end.extend(d["spans"]["end_ns"])
        t._longest_gc = max((e - s for s, e in zip(t.gc_start, t.gc_end, strict=True)), default=0)
        t._longest_span = max((e - s for s, e in zip(t.span_start, t.span_end, strict=True)), default=0)
        return t


def _greenlet_name(g: Any) -> str:
    """A gevent Greenlet's function (``User.run``, ``StatsCSV.stats_writer``); its class else."""
    info = getattr(g, "_formatinfo", None)
    if info is not None:
        try:
            name = str(info())
            if name.startswith("<bound method "):  # "<bound method MergingRun._loop of <...>>"
                return name[len("<bound method "):].split(" of ", 1)[0]
            return name.split("(", 1)[0] or type(g).__name__
        except Exception:  # a greenlet that cannot describe itself
            pass
    return type(g).__name__


def merge_tally(into: dict[str, list[int]], other: dict[str, list[int]]) -> None:
    """Add a cause tally ([count, sum_ns, max_ns] per cause) into another."""
    for cause, (n, s, m) in other.items():
        t = into.get(cause)
        if t is None:
            into[cause] = [int(n), int(s), int(m)]
        else:
            t[0] += int(n)
            t[1] += int(s)
            t[2] = max(t[2], int(m))


def tally_ms(tally: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """A cause tally in ms, largest total first."""
    return {cause: {"count": t[0], "total_ms": t[1] / 1e6, "max_ms": t[2] / 1e6}
            for cause, t in sorted(tally.items(), key=lambda kv: -kv[1][1])}


# the process's current trace ------------------------------------------------------------------
def install(trace: LagTrace) -> None:
    """Make ``trace`` the current one: gc passes and (if asked) greenlet runs go into it."""
    global _current
    uninstall()
    _current = trace
    gc.callbacks.append(trace._on_gc)
    if trace.greenlets:
        import gevent
        import greenlet

        trace._hub = gevent.get_hub()
        trace._last_switch = perf_counter_ns()
        greenlet.settrace(trace._on_switch)


def uninstall() -> None:
    global _current
    t = _current
    if t is None:
        return
    _current = None
    if t._on_gc in gc.callbacks:
        gc.callbacks.remove(t._on_gc)
    if t.greenlets:
        import greenlet

        greenlet.settrace(None)


def current() -> LagTrace | None:
    return _current


class span:  # noqa: N801 - used as a context manager, like contextlib's
    """``with span("timeline"): ...`` records the block's duration in the current trace (a
    no-op when there is none)."""

    __slots__ = ("name", "t0")

    def __init__(self, name: str) -> None:
        self.name = name
        self.t0 = 0

    def __enter__(self) -> span:
        if _current is not None:
            self.t0 = perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        t = _current
        if t is not None and self.t0:
            now = perf_counter_ns()
            t.add_span(self.name, self.t0, now - self.t0)
