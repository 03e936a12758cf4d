"""The load generator watches itself: gevent hub loop lag and the process's CPU share.

When the generator is saturated, every latency it measures includes its own delay: the
numbers become upper bounds. :class:`SelfMonitor` samples continuously on each node; the
verdict compares its lag p99 with the measured TTFT p50 (and flags sustained CPU > 90%), and
names the cause when the lag comes in 1-second bursts: users started in phase (issue 15). The
probes feed a :class:`~llm_users.health.lagtrace.LagTrace`, which attributes late ones to gc passes
and our own periodic work; when the client's own pauses could make up the TTFT tail the
verdict says so with the figure (:func:`stall_reason`, issue 14).
"""

from __future__ import annotations

import os
import time
from typing import Any

import gevent
from gevent import monkey

from llm_users.health import lagtrace, schedstat
from llm_users.metrics import Distribution

LAG_SHARE = 0.05  # lag p99 above 5% of TTFT p50 means the numbers are upper bounds
CPU_LIMIT = 0.90
CPU_SUSTAINED_SHARE = 0.5  # "stays above": more than half of the sampled seconds
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

    def start(self) -> None:
        if self._running:
            return
        self._running = True
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

                with open(self.trace_file, "wb") as f:
                    f.write(orjson.dumps(self.trace.to_dict()))

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
        w = {"node": self.node, "lag": self.lag.to_wire() if encode else self.lag, "cpu": self.cpu,
             "phase": self.phase, "trace": self.trace.take(), "phase_seconds": sorted(self.phase_seconds)}
        self.lag = Distribution()
        self.phase = [0] * PHASE_BINS
        self.phase_seconds = set()
        self.cpu = []
        return w


class NodeHealth:
    """Merged self-check data of one node, on the master (or the local runner)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.lag = Distribution()
        self.phase = [0] * PHASE_BINS
        self.phase_seconds: set[tuple[int, int]] = set()
        self.cpu: list[tuple[float, float]] = []
        self.trace: dict[str, dict[str, list[int]]] = {"stalls": {}, "gc": {}, "spans": {}, "contention": {}}

    def merge_wire(self, w: dict[str, Any]) -> None:
        lag = w["lag"]
        if isinstance(lag, Distribution):  # SelfMonitor.to_wire(encode=False), same process
            self.lag.merge(lag)
        else:
            self.lag.merge_wire(lag)
        self.cpu.extend((float(t), float(c)) for t, c in w["cpu"])
        for i, n in enumerate(w.get("phase") or []):
            self.phase[i % PHASE_BINS] += int(n)
        for key, tally in (w.get("trace") or {}).items():
            lagtrace.merge_tally(self.trace.setdefault(key, {}), tally)
        self.phase_seconds.update((int(t), int(b)) for t, b in w.get("phase_seconds") or [])

    def burst_share(self) -> float | None:
        """Share of the high-lag samples in the busiest BURST_WINDOW_BINS of the second (None
        with too few to tell)."""
        total = sum(self.phase)
        if total < BURST_MIN_SAMPLES:
            return None
        start = max(range(PHASE_BINS),
                    key=lambda i: sum(self.phase[(i + k) % PHASE_BINS] for k in range(BURST_WINDOW_BINS)))
        window = {(start + k) % PHASE_BINS for k in range(BURST_WINDOW_BINS)}
        if len({t for t, b in self.phase_seconds if b in window}) < BURST_MIN_SECONDS:
            return None  # one block, not a rhythm
        return sum(self.phase[b] for b in window) / total

    def summary(self) -> dict[str, Any]:
        shares = sorted(c for _, c in self.cpu)
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
            "cpu_share_p50": shares[len(shares) // 2] if shares else None,
            "cpu_share_max": shares[-1] if shares else None,
            "cpu_busy_seconds": busy,
            "cpu_seconds_sampled": len(shares),
            "lag_bursts": {"samples_over_2ms": sum(self.phase), "share_in_150ms_of_each_second": self.burst_share()},
        }


def stall_reason(s: dict[str, Any], ttft_p99_ms: float | None) -> str | None:
    """The client's own pauses, when they could make up the TTFT tail: a pause of p ms at the
    loop's p99 delays the reads queued behind it by about p / (1 - CPU share) (the backlog
    drains at the idle share of the core), so a TTFT p99 within 1/LAG_SHARE of that bound may
    be mostly ours. Names the figure and the main cause; None when the pauses are small."""
    pause = s["loop_lag_ms"]["p99"]
    if pause is None or pause < STALL_MS or not ttft_p99_ms:
        return None
    load = min(s["cpu_share_p50"] or 0.0, 0.9)
    bound = pause / (1.0 - load)
    if bound < LAG_SHARE * ttft_p99_ms:
        return None
    stalls = s.get("stalls") or {}
    why = ""
    if stalls:
        cause, t = next(iter(stalls.items()))  # the largest total first
        total = sum(v["count"] for v in stalls.values())
        why = f" (mostly {cause}: {t['count']} of {total} pauses >= {STALL_MS:g} ms, up to {t['max_ms']:.0f} ms)"
    return (f"client pauses up to {pause:.1f} ms at p99{why}: TTFT p99 not trustworthy below "
            f"{bound:.0f} ms (measured {ttft_p99_ms:.1f} ms)")


def contention_warning(s: dict[str, Any]) -> list[str]:
    """Other processes held the client's core: its stamps waited, though not for the client's
    own work (a shared or oversubscribed machine). A warning, not a saturation reason."""
    c, probes = s.get("contention"), s["loop_lag_ms"]["count"] or 0
    if not c or not probes or c["count"] < 0.01 * probes:
        return []
    return [f"other processes held this client's core: {c['count']} of {probes} probes waited "
            f">= {STALL_MS:g} ms for it, up to {c['max_ms']:.0f} ms; stamps taken then are late by as much "
            "(give the load generator its own cores)"]


def verdict(nodes: list[NodeHealth], ttft_p50_ms: float | None,
            ttft_p99_ms: float | None = None) -> dict[str, Any]:
    """Decide whether each node's own delay could distort the figures."""
    flagged = []
    out_nodes = []
    for n in nodes:
        s = n.summary()
        reasons = []
        lag99 = s["loop_lag_ms"]["p99"]
        if lag99 is not None and ttft_p50_ms and lag99 > LAG_SHARE * ttft_p50_ms:
            reasons.append(f"loop lag p99 {lag99:.2f} ms > {LAG_SHARE:.0%} of TTFT p50 {ttft_p50_ms:.1f} ms")
        if s["cpu_seconds_sampled"] and s["cpu_busy_seconds"] > CPU_SUSTAINED_SHARE * s["cpu_seconds_sampled"]:
            reasons.append(f"CPU above {CPU_LIMIT:.0%} for {s['cpu_busy_seconds']} of "
                           f"{s['cpu_seconds_sampled']} s")
        stall = stall_reason(s, ttft_p99_ms)
        if stall:
            reasons.append(stall)
        share = n.burst_share()
        if reasons and share is not None and share >= BURST_SHARE:
            reasons.append(f"users in phase: lag comes in 1-second bursts ({share:.0%} of the lag above "
                           f"{BURST_LAG_NS / 1e6:.0f} ms falls in the same 150 ms of each second); start them "
                           "with --llm-spawn-spread on or a lower -r")
        s["saturated"] = bool(reasons)
        s["reasons"] = reasons
        s["warnings"] = contention_warning(s)
        out_nodes.append(s)
        if reasons:
            flagged.append(n.node)
    if flagged:
        message = ("client saturated on " + ", ".join(flagged) +
                   ": its own delay is in the measurements; treat latencies as upper bounds")
    else:
        message = "client healthy: its own delay stayed small against the measured TTFT"
    return {"saturated": bool(flagged), "nodes": out_nodes, "message": message,
            "lag_share_limit": LAG_SHARE, "cpu_limit": CPU_LIMIT}


MOST_FAILED_SHARE = 0.5  # "most requests failed" from this share of the measured requests on


def failure_verdict(overall: dict[str, Any]) -> dict[str, Any] | None:
    """When all or most requests failed, say so and why (the top failure category): the latencies
    then describe failures, not the server. None when most requests succeeded."""
    requests, failures = overall.get("requests") or 0, overall.get("failures") or 0
    by_cat = overall.get("failures_by_category") or {}
    if not requests or failures < MOST_FAILED_SHARE * requests or not by_cat:
        return None
    top, n = max(by_cat.items(), key=lambda kv: kv[1])
    how = "all" if failures == requests else "most"
    message = (f"{how} requests failed ({failures} of {requests}; top category {top}: {n}): "
               f"the figures describe failures, not the server's speed")
    return {"share": failures / requests, "top": top, "message": message}
