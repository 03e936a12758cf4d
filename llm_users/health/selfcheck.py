"""The load generator watches itself: gevent hub loop lag and the process's CPU share.

When the generator is saturated, every latency it measures includes its own delay: the
numbers become upper bounds. :class:`SelfMonitor` samples continuously on each node and hands
its samples on in pieces stamped with their time span (``t0``, ``t1``) and whether the test
was stopping; :class:`NodeHealth` merges, on the master or the local runner, only the pieces
inside the measured window (start-up, the warm-up and the stop are kept apart, issue 28). The
verdict (:mod:`llm_users.health.verdict`) compares the lag with the measured TTFT, flags
sustained CPU > 90%, and names the cause when the lag comes in 1-second bursts: users started
in phase (issue 15). The probes feed a :class:`~llm_users.health.lagtrace.LagTrace`, which
attributes late ones to gc passes and our own periodic work (issue 14).
"""

from __future__ import annotations

import os
import time
from array import array
from typing import Any, NamedTuple

import gevent
import msgpack
from gevent import monkey

from llm_users.health import lagtrace, schedstat
from llm_users.metrics import Distribution
from llm_users.metrics.seconds import SecondSeries

CPU_LIMIT = 0.90  # a CPU-second above this share of one core is busy (the verdict: health/verdict.py)
# Lag in 1-second bursts (users started in phase, issue 15): where in the wall-clock second the
# lag samples above BURST_LAG_NS fall, in PHASE_BINS bins; bursts when the busiest
# BURST_WINDOW_BINS adjacent bins hold BURST_SHARE of them (an even spread would hold 15%) and
# they come from at least BURST_MIN_SECONDS different seconds (one long block, at start-up say,
# also fills one place of one second).
BURST_LAG_NS = 2_000_000
PHASE_BINS = 20
BURST_WINDOW_BINS = 3
BURST_SHARE = 0.6
BURST_MIN_SAMPLES = 20
STALL_MS = 1.0  # loop lag p99 from which the client's own pauses are named in the verdict
BURST_MIN_SECONDS = 3
# Probes delivered before the measured window is known wait on the node (a run with no measured
# request yet, or an idle stage: its pieces are inside once a later request ends after them);
# past this many delivered pieces, the oldest count as outside the window. A waiting piece is
# held msgpack-packed (:func:`hold`): about 450 bytes in one block where the decoded piece took
# 3.9 kB in some 300 small objects; a master's RSS stepped up by 1-2 MB at each idle stage of the
# soak (600 pieces of each worker waiting) and the freed small objects left it fragmented.
MAX_PENDING = 600


class SelfMonitor:
    """Samples loop lag every ``interval`` s and CPU share every second.

    Lag is how long a callback handed to the hub waits before the loop runs it: the delay a
    ready event (a chunk that just arrived) waits for the loop to get to it. A plain OS thread
    (not a greenlet) hands in the callbacks, so a loop blocked by busy code is caught in the
    act; timing a ``gevent.sleep`` instead would add libev/epoll's millisecond timer rounding
    and miss any block that falls inside the sleep. Probes are due on a fixed schedule and
    lag is counted from the due time, so a pause that also holds the GIL (a gc pass) is seen:
    the thread cannot hand its callback in until the pause ends.
    """

    #: 50 probes a second. Each costs about 0.1-0.2 ms of CPU on this project's VMs (a thread
    #: wake-up, two /proc reads, a wake of the loop): at 10 ms it was 5-10 % of a calm client's
    #: CPU (issue 14). A pause of at least one interval is always caught; a shorter one with
    #: the chance its length / interval, so the lag distribution stays unbiased.
    INTERVAL_S = 0.02

    def __init__(self, node: str, interval: float = INTERVAL_S) -> None:
        self.node = node
        self.interval = interval
        self.lag = Distribution()
        self.phase = [0] * PHASE_BINS  # lag samples above BURST_LAG_NS by their place in the second
        self.phase_seconds: set[tuple[int, int]] = set()  # (unix second, bin) of those samples
        self.cpu: list[tuple[float, float]] = []  # (unix second, share of one core)
        self.trace_file = os.environ.get(lagtrace.ENV_FILE) or None
        # LOCUST_LLM_LAG_TRACE=FILE keeps every event for the file; ..._GREENLETS=1 also times
        # greenlet runs (a Python call per switch: the bench's mode, not an ordinary run's)
        self.trace = lagtrace.LagTrace(keep_raw=bool(self.trace_file),
                                       greenlets=os.environ.get(lagtrace.ENV_GREENLETS) == "1")
        self._greenlet: Any = None
        self._running = False
        self._stopping = False  # the test is stopping: pieces from here on are outside the window
        self._since = time.time()  # start of the piece the next to_wire hands on

    def mark_stopping(self) -> None:
        """The test began to stop (Locust's ``test_stopping``): the piece in hand and the ones
        after it carry ``stopping`` and stay out of the verdict's figures."""
        self._stopping = True

    def start(self) -> None:
        if self._running:
            return
        self._running = True
        self._stopping = False
        self._since = time.time()
        lagtrace.install(self.trace)
        self.trace.open_run_delay()
        try:  # the loop thread's CPU clock, readable from the probe thread (not on every OS)
            loop_thread = monkey.get_original("_thread", "get_ident")()
            self._loop_clock: int | None = time.pthread_getcpuclockid(loop_thread)
        except (AttributeError, OSError):
            self._loop_clock = None
        loop = gevent.get_hub().loop
        start_thread = monkey.get_original("_thread", "start_new_thread")
        start_thread(self._probe, (loop,))
        self._greenlet = gevent.spawn(self._cpu_loop)

    def stop(self) -> None:
        self._running = False
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        self.trace.close_run_delay()
        if lagtrace.current() is self.trace:
            lagtrace.uninstall()
            if self.trace_file:
                import orjson

                from llm_users.outputs.atomic import write_atomic

                write_atomic(self.trace_file, orjson.dumps(self.trace.to_dict()))

    def _probe(self, loop: Any) -> None:
        """Runs in its own OS thread: a callback through the loop every interval, due on a
        fixed schedule (a probe the thread could not send in time is sent late, up to 100)."""
        sleep = monkey.get_original("time", "sleep")
        pc = time.perf_counter_ns
        step = int(self.interval * 1e9)
        due = pc() + step
        sched = schedstat.open_schedstat()  # this thread's run delay: other processes' share of the lag
        while self._running:
            wait = due - pc()
            if wait > 0:
                sleep(wait / 1e9)
            try:
                clock = self._loop_clock
                loop.run_callback_threadsafe(self._record, due, schedstat.read_schedstat(sched)[1], pc(),
                                             time.clock_gettime_ns(clock) if clock is not None else -1)
            except Exception:  # the loop is gone (process exiting)
                return
            due = max(due + step, pc() - 100 * step)

    def _record(self, due: int, probe_delay: int = -1, sent: int = 0, sent_cpu: int = -1) -> None:
        if self._running:
            # the client's own lag: the trace takes off what other processes held the core
            lag = self.trace.probe(due, time.perf_counter_ns() - due, probe_delay, sent, sent_cpu)
            self.lag.add(lag)
            if lag > BURST_LAG_NS:
                now = time.time()
                b = int(now % 1.0 * PHASE_BINS) % PHASE_BINS
                self.phase[b] += 1
                self.phase_seconds.add((int(now), b))

    def _cpu_loop(self) -> None:
        cpu0, wall0 = time.process_time(), time.monotonic()
        while True:
            gevent.sleep(1.0)
            with lagtrace.span("selfcheck"):
                wall = time.monotonic()
                cpu = time.process_time()
                self.cpu.append((time.time(), (cpu - cpu0) / (wall - wall0)))
                cpu0, wall0 = cpu, wall

    def to_wire(self, encode: bool = True) -> dict[str, Any]:
        """Delta since the last call (the lag histogram and CPU samples are then reset).
        ``encode=False`` keeps the lag as a :class:`Distribution` for a merge in this process
        (the local run, once a second): encoding and decoding the histogram cost about 0.5 ms
        with the hub blocked, the run's longest periodic task (issue 14)."""
        now = time.time()
        w = {"node": self.node, "lag": self.lag.to_wire() if encode else self.lag, "cpu": self.cpu,
             "phase": self.phase, "trace": self.trace.take(), "phase_seconds": sorted(self.phase_seconds),
             "t0": self._since, "t1": now, "stopping": self._stopping}
        self._since = now
        self.lag = Distribution()
        self.phase = [0] * PHASE_BINS
        self.phase_seconds = set()
        self.cpu = []
        return w


class NodeHealth:
    """Merged self-check data of one node, on the master (or the local runner): the figures
    inside the measured window here, those outside it (start-up, stop) in ``outside``."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.lag = Distribution()
        self.phase = [0] * PHASE_BINS
        # per second of the run, 8 bytes each (metrics/seconds.py): the bins with a burst as bits
        self.phase_seconds = SecondSeries()
        self.cpu = array("d")  # share of one core, a sample a second
        self.trace: dict[str, dict[str, list[int]]] = {"stalls": {}, "gc": {}, "spans": {}, "contention": {},
                                                        "sched": {}}
        self.live = Distribution()  # every piece's lag as it arrives, start-up too: the live views (Prometheus)
        self.pending: list[Held] = []  # pieces not yet known to be inside the window (hold)
        self._outside: NodeHealth | None = None

    @property
    def outside(self) -> NodeHealth:
        """The pieces outside the measured window (start-up, warm-up, stop)."""
        if self._outside is None:
            self._outside = NodeHealth(self.node)
        return self._outside

    def merge_wire(self, w: dict[str, Any], window: tuple[float | None, float | None] | None = None) -> None:
        """Add a piece from :meth:`SelfMonitor.to_wire`. With ``window`` (the measured start and
        end as known now, either None when not yet) a stamped piece waits until it is known
        to be inside (:meth:`settle`); without, it counts at once."""
        self._add_live(w["lag"])
        if window is None or "t0" not in w:
            self._add(w)
            return
        self.pending.append(hold(w))
        self.settle(*window)
        while len(self.pending) > MAX_PENDING:
            self.outside._add(unhold(self.pending.pop(0)))

    def _add_live(self, lag: Any) -> None:
        if isinstance(lag, Distribution):
            self.live.merge(lag)
        else:
            self.live.merge_wire(lag)

    @staticmethod
    def inside(w: dict[str, Any], start: float | None, end: float | None) -> bool:
        """A piece is inside the measured window when it began at or after its start, before
        its end, and not while the test was stopping."""
        return (start is not None and end is not None and not w.get("stopping")
                and w["t0"] >= start and w["t0"] < end)

    def settle(self, start: float | None, end: float | None) -> None:
        """Count the pending pieces that are inside the window as known now: the start only moves
        earlier and the end later as records arrive, so a piece inside now stays inside."""
        if start is None or end is None:
            return
        keep = []
        for h in self.pending:
            if self.inside(h.span, start, end) and h.span["t1"] <= end:
                self._add(unhold(h))
            else:
                keep.append(h)
        self.pending = keep

    def close_window(self, start: float | None, end: float | None) -> None:
        """The run's final window: every pending piece counts, inside or ``outside``."""
        for h in self.pending:
            (self if self.inside(h.span, start, end) else self.outside)._add(unhold(h))
        self.pending = []

    def _add(self, w: dict[str, Any]) -> None:
        lag = w["lag"]
        if isinstance(lag, Distribution):  # SelfMonitor.to_wire(encode=False), same process
            self.lag.merge(lag)
        else:
            self.lag.merge_wire(lag)
        self.cpu.extend(float(c) for _, c in w["cpu"])
        for i, n in enumerate(w.get("phase") or []):
            self.phase[i % PHASE_BINS] += int(n)
        for key, tally in (w.get("trace") or {}).items():
            lagtrace.merge_tally(self.trace.setdefault(key, {}), tally)
        seconds = self.phase_seconds
        for t, b in w.get("phase_seconds") or []:
            seconds.set(int(t), float(int(seconds.get(int(t)) or 0) | 1 << int(b)))

    def burst_share(self) -> float | None:
        """Share of the high-lag samples in the busiest BURST_WINDOW_BINS of the second (None
        with too few to tell)."""
        total = sum(self.phase)
        if total < BURST_MIN_SAMPLES:
            return None
        start = max(range(PHASE_BINS),
                    key=lambda i: sum(self.phase[(i + k) % PHASE_BINS] for k in range(BURST_WINDOW_BINS)))
        window = {(start + k) % PHASE_BINS for k in range(BURST_WINDOW_BINS)}
        mask = sum(1 << b for b in window)
        if sum(1 for _, bits in self.phase_seconds.items() if int(bits) & mask) < BURST_MIN_SECONDS:
            return None  # one block, not a rhythm
        return sum(self.phase[b] for b in window) / total

    def summary(self) -> dict[str, Any]:
        shares = sorted(self.cpu)
        busy = sum(1 for c in shares if c > CPU_LIMIT)
        return {
            "node": self.node,
            "loop_lag_ms": {k: self.lag.summary_ms()[k] for k in ("p50", "p99", "p99.9", "max", "count")},
            # late probes (>= 1 ms) by what held the loop; gc passes and our periodic work
            "stalls": lagtrace.tally_ms(self.trace["stalls"]),
            "gc": lagtrace.tally_ms(self.trace["gc"]),
            "tasks": lagtrace.tally_ms(self.trace["spans"]),
            # probes delayed >= 1 ms because other processes held the core (not in loop_lag_ms)
            "contention": lagtrace.tally_ms(self.trace["contention"]).get("other processes"),
            # the loop thread's schedstat: how long it ran and waited for a core (run delay) in all
            "loop_thread": self._loop_thread(),
            "cpu_share_p50": shares[len(shares) // 2] if shares else None,
            "cpu_share_max": shares[-1] if shares else None,
            "cpu_busy_seconds": busy,
            "cpu_seconds_sampled": len(shares),
            "lag_bursts": {"samples_over_2ms": sum(self.phase), "share_in_150ms_of_each_second": self.burst_share()},
            # start-up, warm-up and stop: kept out of the figures above and of the verdict
            "outside_window": self._outside_summary(),
        }

    def _loop_thread(self) -> dict[str, float] | None:
        s = self.trace.get("sched") or {}
        if "cpu" not in s or "run delay" not in s:
            return None  # no schedstat (not Linux), or no probe pair yet
        return {"ran_ms": s["cpu"][1] / 1e6, "waited_for_core_ms": s["run delay"][1] / 1e6,
                "wall_ms": (s.get("wall") or [0, 0])[1] / 1e6}

    def _outside_summary(self) -> dict[str, Any]:
        o = self._outside
        lag = o.lag.summary_ms() if o is not None else {"p99": None, "max": None, "count": 0}
        return {"loop_lag_ms": {k: lag[k] for k in ("p99", "max", "count")}}


class Held(NamedTuple):
    """A piece waiting on :class:`NodeHealth`: its span (``t0``, ``t1``, ``stopping``) and the
    piece itself, msgpack-packed when it came over the wire (:func:`hold`)."""

    span: dict[str, Any]
    piece: bytes | dict[str, Any]


def hold(w: dict[str, Any]) -> Held:
    """``w`` in little memory while it waits: packed (a piece off the wire), or with its lag
    :class:`Distribution` packed (a local run's piece, which is never encoded)."""
    span = {"t0": w["t0"], "t1": w["t1"], "stopping": w.get("stopping", False)}
    lag = w["lag"]
    if isinstance(lag, Distribution):
        lag.pack()
        return Held(span, w)
    return Held(span, msgpack.packb(w, use_bin_type=True))


def unhold(h: Held) -> dict[str, Any]:
    p = h.piece
    return p if isinstance(p, dict) else msgpack.unpackb(p, raw=False, strict_map_key=False)
