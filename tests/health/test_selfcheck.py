"""selfcheck.py: the verdict and the monitor's samples."""

from __future__ import annotations

from array import array

import gevent

from llm_users.health.selfcheck import NodeHealth, SelfMonitor
from llm_users.health.verdict import verdict
from llm_users.metrics.seconds import SecondSeries


def marks(pairs: set[tuple[int, int]]) -> SecondSeries:
    """NodeHealth.phase_seconds from (second, bin) pairs: each second's bins as bits."""
    s = SecondSeries()
    for t, b in pairs:
        s.set(t, float(int(s.get(t) or 0) | 1 << b))
    return s


def pairs(s: SecondSeries) -> set[tuple[int, int]]:
    return {(t, b) for t, bits in s.items() for b in range(20) if int(bits) >> b & 1}


def health(node: str, lag_ms: float, cpu: list[float]) -> NodeHealth:
    h = NodeHealth(node)
    for _ in range(200):
        h.lag.add(lag_ms * 1e6)
    h.cpu = array("d", cpu)
    return h


def test_verdict_flags_lag_against_ttft() -> None:
    calm = health("w1", 0.05, [0.2] * 10)
    busy = health("w2", 12.0, [0.5] * 10)
    v = verdict([calm, busy], ttft_p50_ms=100.0)
    assert v["saturated"] and "w2" in v["message"] and "w1" not in v["message"]
    assert v["nodes"][1]["reasons"][0].startswith("loop lag p99")
    assert not verdict([calm], ttft_p50_ms=100.0)["saturated"]


def test_verdict_flags_sustained_cpu() -> None:
    v = verdict([health("w", 0.01, [0.95] * 8 + [0.5] * 2)], ttft_p50_ms=100.0)
    assert v["saturated"] and "CPU above 90%" in v["nodes"][0]["reasons"][0]
    assert not verdict([health("w", 0.01, [0.95] * 2 + [0.5] * 8)], ttft_p50_ms=100.0)["saturated"]


def test_monitor_samples_and_sees_a_blocked_loop() -> None:
    import time

    m = SelfMonitor("local", interval=0.005)
    m.start()
    gevent.sleep(0.2)

    def hog() -> None:
        # 50 ms of this thread's CPU: busy, it blocks the whole loop, as a saturated client does
        # (CPU time, not wall time: time other processes take meanwhile counts as contention)
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    gevent.spawn(hog).join()
    gevent.sleep(0.05)
    m.stop()
    w = m.to_wire()
    h = NodeHealth("local")
    h.merge_wire(w)
    s = h.summary()
    assert s["loop_lag_ms"]["count"] >= 10
    assert s["loop_lag_ms"]["max"] >= 30  # the 50 ms block was seen


def test_default_schedule_probes_50_times_a_second_and_catches_a_block_of_one_interval() -> None:
    """The default monitor (what every run uses) sends 50 probes a second, and a block as long
    as one interval always holds up a probe: one is due inside it, fixed schedule."""
    import time

    m = SelfMonitor("local")
    assert m.interval == SelfMonitor.INTERVAL_S == 0.02
    t0 = time.perf_counter()
    m.start()
    gevent.sleep(1.0)
    n_quiet, quiet_s = len(m.trace.probe_due), time.perf_counter() - t0

    def hog(s: float) -> None:
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    for _ in range(3):  # three blocks of 1.5 intervals: a probe is due in the first 20 ms of each
        gevent.spawn(hog, 0.03).join()
        gevent.sleep(0.05)
    m.stop()
    due, lags = list(m.trace.probe_due), list(m.trace.probe_lag)
    assert abs(n_quiet - quiet_s / 0.02) <= 4, (n_quiet, quiet_s)  # one per 20 ms (10 ms: twice as many)
    steps = [b - a for a, b in zip(due, due[1:], strict=False)]
    assert all(s % 20_000_000 == 0 for s in steps), steps  # due on the fixed 20 ms grid
    late = sorted(lags)[-3:]
    assert all(lag >= 9_000_000 for lag in late), late  # so it waits >= 10 ms of the 30 (quiet: < 1 ms)


def test_lag_in_one_second_bursts_is_named() -> None:
    """Users in phase: the lag over 2 ms falls at the same place in every second."""
    bursty = health("w", 12.0, [0.5] * 10)
    bursty.phase = [0] * 20
    bursty.phase[7], bursty.phase[8] = 40, 25  # 350-450 ms into each second
    bursty.phase[15] = 5
    bursty.phase_seconds = marks({(t, b) for t in range(100, 110) for b in (7, 8)} | {(104, 15)})
    v = verdict([bursty], ttft_p50_ms=50.0)
    reasons = v["nodes"][0]["reasons"]
    assert v["saturated"] and any(r.startswith("users in phase") for r in reasons)
    assert not any("--llm-spawn-spread" in r for r in reasons)  # already on (the default): not named
    assert any(r.endswith("; --llm-think-jitter 200ms keeps them out of step") for r in reasons)
    jitter = verdict([bursty], ttft_p50_ms=50.0, think_jitter=True)["nodes"][0]["reasons"]
    assert any(r.startswith("users in phase") and r.endswith("each second)") for r in jitter)  # both on: no option
    off = verdict([bursty], ttft_p50_ms=50.0, spawn_spread=False)["nodes"][0]["reasons"]
    assert any(r.startswith("users in phase") and r.endswith("start them with --llm-spawn-spread on") for r in off)
    assert v["nodes"][0]["lag_bursts"]["share_in_150ms_of_each_second"] == 65 / 70

    spread = health("w", 12.0, [0.5] * 10)
    spread.phase = [4] * 20  # the same amount of lag, all over the second
    spread.phase_seconds = marks({(t, b) for t in range(100, 110) for b in range(20)})
    reasons = verdict([spread], ttft_p50_ms=50.0)["nodes"][0]["reasons"]
    assert reasons and not any(r.startswith("users in phase") for r in reasons)

    block = health("w", 12.0, [0.5] * 10)  # one 300 ms block at start-up: one place, one second
    block.phase = [0] * 20
    block.phase[3] = 30
    block.phase_seconds = marks({(100, 3)})
    reasons = verdict([block], ttft_p50_ms=50.0)["nodes"][0]["reasons"]
    assert reasons and not any(r.startswith("users in phase") for r in reasons)


def test_phase_counts_travel_and_merge() -> None:
    m = SelfMonitor("w")
    m.phase[3] = 2
    m.phase_seconds = {(100, 3)}
    h = NodeHealth("w")
    h.merge_wire(m.to_wire())
    h.merge_wire({"lag": m.to_wire()["lag"], "cpu": [], "phase": [1] * 20, "phase_seconds": [[101, 3], [102, 4]]})
    assert h.phase[3] == 3 and sum(h.phase) == 22 and m.phase == [0] * 20 and not m.phase_seconds
    assert pairs(h.phase_seconds) == {(100, 3), (101, 3), (102, 4)}
