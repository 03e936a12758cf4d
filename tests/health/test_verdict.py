"""verdict.py: one level and one sentence for every path (issue 28), on the pure function.

The nodes are fed as the run feeds them: stamped pieces (``t0``, ``t1``, ``stopping``) that the
node keeps until it knows whether they fall inside the measured window.
"""

from __future__ import annotations

from typing import Any

import pytest

from llm_users.health import selfcheck
from llm_users.health.selfcheck import NodeHealth
from llm_users.health.verdict import LEVELS, first_answer_ms, verdict
from llm_users.metrics import Distribution
from llm_users.outputs.console import summary_table
from llm_users.outputs.html_headline import verdict as verdict_html
from tests.metrics.records import stats

START, END = 100.0, 130.0  # the measured window of every case


def piece(t0: float, lag_ms: float, *, cpu: float = 0.3, contention: int = 0, stopping: bool = False,
          probes: int = 50, wait_ms: float = 4.0, ran_ms: float | None = None, waited_ms: float = 0.0,
          stalls: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """One second of a node's samples, as SelfMonitor.to_wire(encode=False) hands it on:
    ``contention`` probes waited ``wait_ms`` each for the core; the loop thread ran ``ran_ms``
    (default: the CPU share) and waited ``waited_ms`` for a core (schedstat) in its 1,000 ms."""
    d = Distribution()
    for _ in range(probes):
        d.add(lag_ms * 1e6)
    trace: dict[str, Any] = {"contention": {"other processes": [contention, int(contention * wait_ms * 1e6),
                                                                 9_000_000]}} if contention else {}
    ran = cpu * 1000 if ran_ms is None else ran_ms
    trace["sched"] = {"run delay": [probes, int(waited_ms * 1e6), 0], "cpu": [probes, int(ran * 1e6), 0],
                      "wall": [probes, 1_000_000_000, 0]}
    if stalls:
        trace["stalls"] = stalls
    return {"node": "n", "lag": d, "cpu": [(t0 + 0.5, cpu)], "phase": [0] * selfcheck.PHASE_BINS,
            "phase_seconds": [], "trace": trace, "t0": t0, "t1": t0 + 1.0, "stopping": stopping}


def node(name: str, measured: dict[str, Any], startup: dict[str, Any] | None = None,
         stop: dict[str, Any] | None = None) -> NodeHealth:
    """A node with 30 pieces inside the window, 5 of start-up before it and 2 of the stop."""
    h = NodeHealth(name)
    window = (None, None)  # as the collector knows it early on: nothing measured yet
    for t in range(95, 100):
        h.merge_wire(piece(float(t), **(startup or measured)), window)
    window = (START, END)
    for t in range(100, 130):
        h.merge_wire(piece(float(t), **measured), window)
    for t in range(129, 131):
        h.merge_wire(piece(float(t), **(stop or measured), stopping=True), window)
    return h


def short_window(lags: dict[float, int]) -> NodeHealth:
    """A node with 2 s of probes inside the window (a short run's worker): {lag ms: probes}."""
    h = NodeHealth("local")
    for lag_ms, n in lags.items():
        h.merge_wire(piece(START, lag_ms, probes=n), (START, END))
    return h


OK = {"requests": 600, "failures": 0, "failures_by_category": {}}
CALM = {"lag_ms": 0.2}
OFF_CPU = "loop thread off-CPU (a blocking call, the GIL or the VM)"
# Issue 53, the figures of bench/selfcheck_causes.py's two runs, per second of the window.
# 4 users beside two busy loops: the client at 2.5% of a core, its loop thread ran 25 ms and
# waited 45 ms for a core; 17 of 50 probes waited 8.7 ms for it; what is left of its lag (8.7 ms
# at p99, over 5% of a 50 ms TTFT) is put to no work of its own (off-CPU, unattributed).
BUSY_MACHINE = {"lag_ms": 8.7, "cpu": 0.025, "contention": 17, "wait_ms": 8.7, "ran_ms": 25.0, "waited_ms": 45.0,
                "stalls": {OFF_CPU: [5, 15_000_000, 5_000_000], "unattributed": [2, 12_000_000, 9_000_000]}}
# 300 users at a 1 ms chunk gap on a quiet machine: its loop ran 950 ms a second, waited 30 ms
BUSY_CLIENT = {"lag_ms": 30.0, "cpu": 0.97, "contention": 1, "ran_ms": 950.0, "waited_ms": 30.0}
# the same on a busy machine: it got 19% of a core and had work all the time (ran 190, waited 810)
BUSY_CLIENT_BUSY_MACHINE = {"lag_ms": 745.0, "cpu": 0.19, "contention": 40, "wait_ms": 45.7, "ran_ms": 190.0,
                            "waited_ms": 810.0}
# the busy machine's figures, but the late probes are the client's own gc passes
GC_ON_BUSY_MACHINE = dict(BUSY_MACHINE, stalls={"gc gen2": [10, 80_000_000, 9_000_000], OFF_CPU: [2, 3_000_000, 2_000_000]})

# (case, nodes, overall, ttft p50, ttft p99, level, the message starts with)
CASES = [
    ("all failed", [node("local", CALM)], {"requests": 40, "failures": 40, "failures_by_category": {"http_404": 40}},
     None, None, "failed", "all requests failed (40 of 40; top category http_404: 40)"),
    ("most failed, client busy", [node("local", {"lag_ms": 30.0})],
     {"requests": 40, "failures": 30, "failures_by_category": {"http_500": 30}}, 50.0, 60.0,
     "failed", "most requests failed (30 of 40; top category http_500: 30)"),
    ("nothing measured", [node("local", CALM)], {"requests": 0, "failures": 0}, None, None,
     "unmeasured", "no verdict: nothing measured (no request in the measured window)"),
    ("no first token", [node("local", CALM)], {"requests": 10, "failures": 0}, None, None,
     "unmeasured", "no verdict: nothing measured (no request returned a first token)"),
    ("no probe inside the window", [NodeHealth("local")], OK, 50.0, 80.0,
     "unmeasured", "no verdict: the client's own delay was not sampled"),
    ("client saturated", [node("local", {"lag_ms": 6.0})], OK, 50.0, 80.0,
     "saturated", "client saturated on local: loop lag p99 6.00 ms > 5% of TTFT p50 50.0 ms"),
    ("CPU saturated", [node("local", {"lag_ms": 0.2, "cpu": 0.97})], OK, 50.0, 80.0,
     "saturated", "client saturated on local: CPU above 90% for 30 of 30 s"),
    ("other processes on the core", [node("local", {"lag_ms": 0.2, "contention": 5})], OK, 50.0, 80.0,
     "caution", "caution: the machine is busy: other processes held the client's core on local (150 of 1500 probes "
     "waited >= 1 ms for it, 4.0 ms on average, up to 9 ms): stamps taken then are late by as much"),
    ("issue 53: a busy machine raised the lag of a client at 2.5% of a core", [node("local", BUSY_MACHINE)], OK,
     50.0, 80.0, "caution", "caution: the machine is busy: other processes held the client's core on local (510 of "
     "1500 probes waited >= 1 ms for it, 8.7 ms on average, up to 9 ms; its loop ran 750 ms and waited 1350 ms for a "
     "core in 30 s, so loop lag p99 8.70 ms > 5% of TTFT p50 50.0 ms is the machine's, not the client's own work): "
     "stamps taken then are late by as much (give the load generator its own cores)"),
    ("issue 53: a client overloaded by its own work", [node("local", BUSY_CLIENT)], OK, 50.0, 80.0,
     "saturated", "client saturated on local: loop lag p99 30.00 ms > 5% of TTFT p50 50.0 ms (+2 more in the details); "
     "its own delay is in the measurements: treat latencies as upper bounds"),
    ("issue 53: a client overloaded by its own work on a busy machine", [node("local", BUSY_CLIENT_BUSY_MACHINE)], OK,
     68.7, 415.5, "saturated", "client saturated on local: loop lag p99 745.00 ms > 5% of TTFT p50 68.7 ms (+1 more "
     "in the details); the machine is busy too on local (its loop ran 5700 ms and waited 24300 ms for a core in 30 s); "
     "its own delay is in the measurements"),
    ("issue 53: a lag of its own on a machine barely busy (it waited 5 ms for a core, ran 250 ms)",
     [node("local", dict(BUSY_MACHINE, waited_ms=5.0, ran_ms=250.0))], OK, 50.0, 80.0,
     "saturated", "client saturated on local: loop lag p99 8.70 ms > 5% of TTFT p50 50.0 ms; its own delay"),
    ("issue 53: a light client (ran 25 ms a second) on a busy machine, its own waits short: the GIL's holder waited",
     [node("local", dict(BUSY_MACHINE, waited_ms=5.0))], OK, 50.0, 80.0,
     "caution", "caution: the machine is busy: other processes held the client's core on local (510 of "),
    ("issue 53: its own gc passes on a busy machine", [node("local", GC_ON_BUSY_MACHINE)], OK, 50.0, 80.0,
     "saturated", "client saturated on local: loop lag p99 8.70 ms > 5% of TTFT p50 50.0 ms; the machine is busy too "
     "on local (its loop ran 750 ms and waited 1350 ms for a core in 30 s)"),
    ("other processes, waits small against TTFT", [node("local", {"lag_ms": 0.2, "contention": 5})], OK,
     200.0, 260.0, "healthy", "client healthy: loop lag p99 0.20 ms, under 5% of TTFT p50 200.0 ms"),
    ("pauses a fifth of the tail", [node("local", {"lag_ms": 1.9, "cpu": 0.8})], OK, 40.0, 45.0,
     "caution", "caution: local: client pauses up to 1.9 ms at p99 can add up to"),
    ("pauses small against the tail (issue 28's 3 ms of 50 ms)", [node("local", {"lag_ms": 1.5, "cpu": 0.5})],
     OK, 40.0, 50.0, "healthy", "client healthy: loop lag p99 1.50 ms, under 5% of TTFT p50 40.0 ms"),
    ("distributed start-up", [node(f"worker-{i}", CALM, startup={"lag_ms": 3000.0}, stop={"lag_ms": 900.0})
                              for i in (1, 2)], OK, 50.0, 80.0,
     "healthy", "client healthy: loop lag p99 0.20 ms"),
    ("distributed, two workers on a shared machine",
     [node(f"worker-{i}", {"lag_ms": 0.2, "contention": 5}, startup={"lag_ms": 3000.0}) for i in (1, 2)], OK,
     50.0, 80.0, "caution", "caution: the machine is busy: other processes held the client's core on worker-1 (150 of "
     "1500 probes waited >= 1 ms for it, 4.0 ms on average, up to 9 ms), worker-2 (150 of 1500"),
    ("issue 53: distributed, a busy machine raised both workers' lag",
     [node(f"worker-{i}", BUSY_MACHINE) for i in (1, 2)], OK, 50.0, 80.0, "caution",
     "caution: the machine is busy: other processes held the client's core on worker-1 (510 of 1500 probes waited "
     ">= 1 ms for it, 8.7 ms on average, up to 9 ms; its loop ran 750 ms and waited 1350 ms for a core in 30 s, so "
     "loop lag p99 8.70 ms > 5% of TTFT p50 50.0 ms is the machine's, not the client's own work), worker-2 (510 of"),
    ("distributed, one worker busy", [node("worker-1", CALM), node("worker-2", {"lag_ms": 8.0, "contention": 5})],
     OK, 50.0, 80.0, "saturated", "client saturated on worker-2: loop lag p99 8.00 ms"),
    ("two blips in a short window", [short_window({0.2: 99, 19.0: 2})], OK, 40.0, 60.0,
     "healthy", "client healthy: loop lag (the 3rd latest of 101 probes) 0.20 ms"),
    ("three late probes in a short window", [short_window({0.2: 98, 6.0: 3})], OK, 40.0, 60.0,
     "saturated", "client saturated on local: loop lag (the 3rd latest of 101 probes) 6.00 ms > 5% of TTFT p50"),
    ("healthy", [node("local", CALM)], OK, 50.0, 80.0, "healthy", "client healthy: loop lag p99 0.20 ms"),
]

WORDS = {"healthy": "healthy", "caution": "caution", "saturated": "saturated", "failed": "failed",
         "unmeasured": "no verdict"}


@pytest.mark.parametrize("case,nodes,overall,p50,p99,level,start", CASES, ids=[c[0] for c in CASES])
def test_one_verdict_per_path(case: str, nodes: list[NodeHealth], overall: dict[str, Any], p50: float | None,
                              p99: float | None, level: str, start: str) -> None:
    v = verdict(nodes, p50, p99, overall=overall, window=(START, END))
    assert v["level"] == level and v["level"] in LEVELS, (case, v["message"])
    msg = v["message"]
    assert msg.startswith(start), msg
    assert "\n" not in msg  # one line
    # one sentence never says two levels: only its own level's word
    assert [w for lv, w in WORDS.items() if w in msg] == [WORDS[level]], msg
    assert v["saturated"] is (level == "saturated")
    assert bool(v.get("failing")) is (level == "failed")
    # the console prints that sentence once and nothing else about the client
    table = summary_table(_summary(v))
    assert [line for line in table.splitlines() if "self-check" in line or "client" in line] == [f"self-check: {msg}"]


def test_startup_and_stop_stay_out_of_the_figures() -> None:
    w = verdict([node("worker-1", CALM, startup={"lag_ms": 3000.0}, stop={"lag_ms": 900.0})], 50.0, 80.0,
                overall=OK, window=(START, END))["nodes"][0]
    assert w["loop_lag_ms"]["count"] == 30 * 50 and w["loop_lag_ms"]["p99"] == pytest.approx(0.2, rel=0.05)
    assert w["cpu_seconds_sampled"] == 30
    out = w["outside_window"]["loop_lag_ms"]
    assert out["count"] == 7 * 50 and out["max"] == pytest.approx(3000.0, rel=0.01)


def test_pieces_settle_as_the_window_becomes_known() -> None:
    h = NodeHealth("n")
    h.merge_wire(piece(99.0, 1.0), (None, None))
    h.merge_wire(piece(100.0, 1.0), (None, None))
    assert len(h.pending) == 2 and h.lag.count == 0  # the window is not known yet
    h.merge_wire(piece(101.0, 1.0), (100.0, 101.5))  # 100-101 is inside; 101-102 may still be
    assert h.lag.count == 50 and len(h.pending) == 2
    h.merge_wire(piece(102.0, 1.0), (100.0, 104.0))
    assert h.lag.count == 150 and [p.span["t0"] for p in h.pending] == [99.0]  # start-up waits (the start may move)
    h.close_window(100.0, 104.0)
    assert h.lag.count == 150 and h.outside.lag.count == 50 and not h.pending


def test_pending_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(selfcheck, "MAX_PENDING", 3)
    h = NodeHealth("n")
    for t in range(5):
        h.merge_wire(piece(float(t), 1.0, probes=1), (None, None))
    assert len(h.pending) == 3 and h.outside.lag.count == 2


def test_a_waiting_piece_off_the_wire_is_held_packed_and_comes_back_the_same() -> None:
    """An idle stage's pieces wait until a later request ends after them: each held as one
    msgpack block (about 450 bytes where the decoded piece took some 3.9 kB), read back equal."""
    import msgpack

    local = piece(100.0, 1.0)
    local["lag"] = local["lag"].to_wire()
    w = msgpack.unpackb(msgpack.packb(local), raw=False, strict_map_key=False)  # as a master gets it
    h = NodeHealth("n")
    h.merge_wire(w, (None, None))
    (held,) = h.pending
    assert isinstance(held.piece, bytes) and len(held.piece) < 1000 and held.span == {"t0": 100.0, "t1": 101.0,
                                                                                        "stopping": False}
    assert selfcheck.unhold(held) == w
    h.close_window(99.0, 102.0)
    direct = NodeHealth("n")
    direct.merge_wire(w)
    assert h.summary() == direct.summary() and h.lag.count == 50


def test_report_colours_the_sentence_by_level() -> None:
    for level, cls in (("healthy", "lv-ok"), ("caution", "lv-warn"), ("saturated", "lv-bad"), ("failed", "lv-bad"),
                       ("unmeasured", "lv-none")):
        html = verdict_html({"self_check": {"level": level, "message": "m <x>"}})
        assert html.startswith(f"<p class='verdict {cls}'") and "m &lt;x&gt;" in html


def _summary(check: dict[str, Any]) -> dict[str, Any]:
    """The smallest summary the console table prints."""
    stats = {"requests": 0, "successes": 0, "failures": 0, "output_tokens": 0, "input_tokens": 0}
    return {"overall": stats, "by_name": {}, "window": {"measured_s": 0}, "self_check": check}


def test_no_node_or_no_overall_is_no_verdict_not_healthy() -> None:
    assert verdict([], 50.0, 80.0, overall=OK, window=(START, END))["level"] == "unmeasured"
    assert verdict([], 50.0, 80.0)["level"] == "unmeasured"
    assert verdict([node("local", CALM)], None, None, window=(START, END))["level"] == "unmeasured"


def test_self_check_says_e2e_when_it_judged_against_e2e() -> None:
    from llm_users.health.verdict import verdict
    from tests.health.test_verdict import node

    ov = stats().summary()["overall"]
    out = verdict([node("local", {"lag_ms": 6.0})], *first_answer_ms(ov), overall=ov)
    assert out["level"] == "saturated" and "> 5% of E2E p50" in out["message"] and "TTFT" not in out["message"]
    assert "E2E p50" in out["nodes"][0]["reasons"][0]
