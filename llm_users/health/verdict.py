"""The self-check's one verdict: a level and one sentence, from named thresholds (issue 28).

:func:`verdict` reads every node's :class:`~llm_users.health.selfcheck.NodeHealth` (its lag and
CPU inside the measured window: start-up and the stop are kept apart) and the run's overall
statistics, and gives ``level`` (one of :data:`LEVELS`) and ``message``, the one sentence the
console and the report print. The levels, first that applies wins:

- ``failed``: half or more of the measured requests failed (:func:`failure_verdict`); the
  latencies describe failures, so nothing is said about the client.
- ``unmeasured``: no request, no first token (no TTFT to compare the client's delay with), or
  no probe of the client's loop inside the measured window: no verdict.
- ``saturated``: a node's loop lag p99 is above :data:`LAG_SHARE` of the TTFT p50, its CPU stays
  above :data:`CPU_LIMIT`, or its pauses can add as much as the whole TTFT p99
  (:data:`STALL_SATURATED_SHARE`): the latencies are upper bounds. The lag and the pauses count
  only when they are the client's own: not on a busy machine (:func:`machine_busy`).
- ``caution``: the machine is busy: other processes held a node's core (:data:`CONTENTION_SHARE`
  of its probes, for :data:`LAG_SHARE` of the TTFT p50 on average), or raised its lag: its loop
  thread waited for a core :data:`BUSY_WAIT_SHARE` as long as it ran and had idle time; or its
  pauses can add :data:`STALL_CAUTION_SHARE` of the TTFT p99 or more, but less than all of it.
- ``healthy``: none of that, with the figure that says so.

Thresholds and their reasons: docs/decisions/self-check.md.
"""

from __future__ import annotations

from typing import Any

from llm_users.health.lagtrace import OFF_CPU
from llm_users.health.selfcheck import BURST_LAG_NS, BURST_SHARE, CPU_LIMIT, STALL_MS, NodeHealth
from llm_users.metrics import Distribution

LEVELS = ("healthy", "caution", "saturated", "failed", "unmeasured")
LAG_SHARE = 0.05  # loop lag p99 above 5% of TTFT p50: every latency may be off by more than 5%
CPU_SUSTAINED_SHARE = 0.5  # "stays above" CPU_LIMIT: more than half of the sampled seconds
# The client's pauses against the TTFT tail (stall_reason): the bound is what a pause at the
# loop's p99 adds to the reads queued behind it. A fifth of the p99 or more is worth a caution
# (a p99 moves by 10-20% run to run at a few hundred samples: less is lost in that noise); the
# whole p99 or more means the tail may be the client's own: saturated.
STALL_CAUTION_SHARE = 0.2
STALL_SATURATED_SHARE = 1.0
CONTENTION_SHARE = 0.01  # other processes held the core for >= STALL_MS in 1% of the probes
# The machine is busy for a node when other processes held its core in CONTENTION_SHARE of the
# probes and its loop thread waited for a core (schedstat's run delay) at least BUSY_WAIT_SHARE
# as long as it ran (4 users beside two busy loops: 0.54-3.2 times in 7 runs; a client on a quiet
# machine waited <= 0.1% of the window, a small fraction of its CPU). Its lag is then the
# machine's, not its own work, when the thread also had nothing to do (ran + waited) for more
# than 1 - OWN_WORK_SHARE of the wall time (those 4 users had work 4-16% of it); with work nearly
# all the time the client used all the core it got and its backlog is its own too: saturated,
# the busy machine named beside it (300 users at a 1 ms chunk gap beside other jobs: ran 1.9 s
# and waited 7.5-8.6 s of 9-10.5 s). bench/selfcheck_causes.py runs both. A loop thread that ran
# under LIGHT_SHARE of the wall time is busy the same without that wait: its lag then comes
# from a thread of the process that held the GIL while it waited for a core, which the loop
# thread's own run delay does not show (4 users beside two busy loops, quiet otherwise: ran 70 ms
# and waited 15 ms in 3 s, its late probes off the CPU).
BUSY_WAIT_SHARE = 0.25
LIGHT_SHARE = 0.1
OWN_WORK_SHARE = 0.9
BUSY = "the machine is busy"
MOST_FAILED_SHARE = 0.5  # "most requests failed" from this share of the measured requests on
# The lag figure the verdict compares is the p99, but never a value fewer than LAG_MIN_LATE probes
# reached: in a short window (101 probes in 2 s) the p99 is the second-latest probe, and
# one or two blips are not the client's rhythm. Then the LAG_MIN_LATE-th latest probe is used.
LAG_MIN_LATE = 3


def lag_figure(lag: Distribution) -> float | None:
    """The loop lag p99, or with fewer than 100 * LAG_MIN_LATE probes the LAG_MIN_LATE-th
    latest one (the value at least LAG_MIN_LATE probes reached). None without probes."""
    n = lag.count
    if not n:
        return None
    return lag.percentile_ms(max(min(99.0, 100.0 * (n - LAG_MIN_LATE + 1) / n), 0.0))


def _lag(s: dict[str, Any]) -> float | None:
    """The node's lag figure for the verdict (set by :func:`_node`; a bare summary: its p99)."""
    return s.get("lag_figure_ms", s["loop_lag_ms"]["p99"])


def _lag_label(s: dict[str, Any]) -> str:
    n = s["loop_lag_ms"]["count"] or 0
    return "loop lag p99" if n >= 100 * (LAG_MIN_LATE - 1) or "lag_figure_ms" not in s else \
        f"loop lag (the {LAG_MIN_LATE}rd latest of {n} probes)"


def stall_bound(s: dict[str, Any]) -> float | None:
    """What the client's pauses can add to a read: a pause of p ms at the loop's p99 delays the
    reads queued behind it by about p / (1 - CPU share) (the backlog drains at the idle share of
    the core). None when the pauses are below STALL_MS."""
    pause = _lag(s)
    if pause is None or pause < STALL_MS:
        return None
    return pause / (1.0 - min(s.get("cpu_share_p50") or 0.0, 0.9))


def stall_reason(s: dict[str, Any], ttft_p99_ms: float | None) -> str | None:
    """The client's own pauses, when they can add STALL_CAUTION_SHARE of the TTFT p99 or more:
    the figure and the main cause. None when they are small against it."""
    bound = stall_bound(s)
    if bound is None or not ttft_p99_ms or bound < STALL_CAUTION_SHARE * ttft_p99_ms:
        return None
    stalls = s.get("stalls") or {}
    why = ""
    if stalls:
        cause, t = next(iter(stalls.items()))  # the largest total first
        total = sum(v["count"] for v in stalls.values())
        why = f" (mostly {cause}: {t['count']} of {total} pauses >= {STALL_MS:g} ms, up to {t['max_ms']:.0f} ms)"
    return (f"client pauses up to {_lag(s):.1f} ms at p99{why} can add up to {bound:.0f} ms "
            f"to the TTFT tail (p99 {ttft_p99_ms:.1f} ms)")


def contention_detail(s: dict[str, Any], ttft_p50_ms: float | None = None) -> str | None:
    """How much other processes held the client's core (a shared or oversubscribed machine),
    when it matters: at least CONTENTION_SHARE of the probes waited >= STALL_MS for the core
    and those waits were on average LAG_SHARE of the TTFT p50 or more (the tolerance of the
    client's own lag; a few 1 ms waits against a 100 ms TTFT move nothing). None otherwise."""
    c, probes = s.get("contention"), s["loop_lag_ms"]["count"] or 0
    if not c or not probes or c["count"] < CONTENTION_SHARE * probes:
        return None
    mean = c["total_ms"] / c["count"]
    if ttft_p50_ms and mean < LAG_SHARE * ttft_p50_ms:
        return None
    return (f"{c['count']} of {probes} probes waited >= {STALL_MS:g} ms for it, {mean:.1f} ms on average, "
            f"up to {c['max_ms']:.0f} ms")


CONTENTION_ADVICE = "stamps taken then are late by as much (give the load generator its own cores)"


def contention_warning(s: dict[str, Any], ttft_p50_ms: float | None = None) -> list[str]:
    """Other processes held the client's core: its stamps waited, though not for the client's
    own work. A caution, not a saturation reason (:func:`contention_detail`)."""
    detail = contention_detail(s, ttft_p50_ms)
    return [f"{BUSY}: other processes held this client's core: {detail}; {CONTENTION_ADVICE}"] if detail else []


def machine_busy(s: dict[str, Any]) -> dict[str, Any] | None:
    """Other processes held the node's core in at least CONTENTION_SHARE of its probes and its
    loop thread waited for a core (run delay) at least BUSY_WAIT_SHARE as long as it ran, or ran
    under LIGHT_SHARE of the wall time (a GIL holder's wait): the loop thread's figures and ``own_work``, true when its lag is its own all the same: it had
    work (ran or waited) OWN_WORK_SHARE of the wall time or more (its backlog is its own too), or
    most of its late probes are put to its own named work (gc passes, our periodic work) rather
    than to unnamed code or the thread off the CPU, which a busy machine also makes. None
    otherwise."""
    c, probes, t = s.get("contention"), s["loop_lag_ms"]["count"] or 0, s.get("loop_thread")
    if not c or not t or not probes or c["count"] < CONTENTION_SHARE * probes:
        return None
    waited, ran, wall = t["waited_for_core_ms"], t["ran_ms"], t.get("wall_ms") or 0.0
    if waited <= 0 or (waited < BUSY_WAIT_SHARE * ran and not (wall and ran < LIGHT_SHARE * wall)):
        return None
    share = (waited + ran) / wall if wall else None
    stalls = s.get("stalls") or {}
    named = sum(v["count"] for k, v in stalls.items() if k not in ("unattributed", OFF_CPU))
    return {"waited_for_core_ms": waited, "ran_ms": ran, "wall_ms": wall, "had_work_share": share,
            "own_work": share is None or share >= OWN_WORK_SHARE
                        or 2 * named > sum(v["count"] for v in stalls.values())}


def _held(b: dict[str, Any]) -> str:
    return (f"its loop ran {b['ran_ms']:.0f} ms and waited {b['waited_for_core_ms']:.0f} ms for a core"
            + (f" in {b['wall_ms'] / 1000:.0f} s" if b["wall_ms"] else ""))


def _raw_detail(s: dict[str, Any]) -> str:
    c, probes = s["contention"], s["loop_lag_ms"]["count"]
    return (f"{c['count']} of {probes} probes waited >= {STALL_MS:g} ms for it, {c['total_ms'] / c['count']:.1f} ms "
            f"on average, up to {c['max_ms']:.0f} ms")


def busy_clause(s: dict[str, Any]) -> str:
    """What a busy machine did to a node whose lag it raised (:func:`machine_busy`)."""
    b = s["machine_busy"]
    return (f"{s.get('contention_detail') or _raw_detail(s)}; {_held(b)}, so {' and '.join(b['lag'])} "
            "is the machine's, not the client's own work")


def failure_verdict(overall: dict[str, Any]) -> dict[str, Any] | None:
    """When all or most requests failed, say so and why (the top failure category): the latencies
    then describe failures, not the server. None when most requests succeeded."""
    requests, failures = overall.get("requests") or 0, overall.get("failures") or 0
    by_cat = overall.get("failures_by_category") or {}
    if not requests or failures < MOST_FAILED_SHARE * requests:
        return None
    top, n = max(by_cat.items(), key=lambda kv: kv[1]) if by_cat else ("unknown", failures)
    how = "all" if failures == requests else "most"
    message = (f"{how} requests failed ({failures} of {requests}; top category {top}: {n}): "
               f"the figures describe failures, not the server's speed")
    return {"share": failures / requests, "top": top, "message": message}


def _node(n: NodeHealth, ttft_p50_ms: float | None, ttft_p99_ms: float | None,
          spawn_spread: bool, think_jitter: bool) -> dict[str, Any]:
    """One node's summary with its saturation ``reasons`` and its cautions (``warnings``)."""
    s = n.summary()
    if n.lag.count:
        s["lag_figure_ms"] = lag_figure(n.lag)
    reasons, cautions = [], contention_warning(s, ttft_p50_ms)
    s["contention_detail"] = contention_detail(s, ttft_p50_ms)
    lag99, lag, cpu, stall = _lag(s), None, None, stall_reason(s, ttft_p99_ms)
    if lag99 is not None and ttft_p50_ms and lag99 > LAG_SHARE * ttft_p50_ms:
        lag = f"{_lag_label(s)} {lag99:.2f} ms > {LAG_SHARE:.0%} of TTFT p50 {ttft_p50_ms:.1f} ms"
    if s["cpu_seconds_sampled"] and s["cpu_busy_seconds"] > CPU_SUSTAINED_SHARE * s["cpu_seconds_sampled"]:
        cpu = f"CPU above {CPU_LIMIT:.0%} for {s['cpu_busy_seconds']} of {s['cpu_seconds_sampled']} s"
    if stall and not (ttft_p99_ms and (stall_bound(s) or 0.0) >= STALL_SATURATED_SHARE * ttft_p99_ms):
        cautions.append(stall)  # pauses under the whole tail: a caution
        stall = None
    own = [r for r in (lag, stall) if r]  # the loop's lag and pauses: saturation reasons when its own
    busy = machine_busy(s)
    # the machine's lag, not its own: a client that had idle time, its CPU not above the limit
    mine = not own or not busy or busy["own_work"] or bool(cpu)
    s["machine_busy"] = dict(busy, lag=[] if mine else own) if busy else None
    if not mine:
        cautions = [f"{BUSY}: other processes held this client's core: {busy_clause(s)}; {CONTENTION_ADVICE}"] + [
            w for w in cautions if not w.startswith(BUSY)]
    else:
        reasons = [r for r in (lag, cpu, stall) if r]
    share = n.burst_share()
    if reasons and share is not None and share >= BURST_SHARE:
        advice = ("; start them with --llm-spawn-spread on" if not spawn_spread else  # only what would change it
                  "" if think_jitter else "; --llm-think-jitter 200ms keeps them out of step")
        reasons.append(f"users in phase: lag comes in 1-second bursts ({share:.0%} of the lag above "
                       f"{BURST_LAG_NS / 1e6:.0f} ms falls in the same 150 ms of each second){advice}")
    s["saturated"] = bool(reasons)
    s["reasons"] = reasons
    s["warnings"] = cautions
    return s


def _unmeasured(overall: dict[str, Any] | None, ttft_p50_ms: float | None, nodes: list[dict[str, Any]]) -> str | None:
    """Why there is no verdict, or None (``overall`` None: the requests are not known)."""
    if overall is not None and not overall.get("requests"):
        return "no verdict: nothing measured (no request in the measured window)"
    if not ttft_p50_ms:
        return "no verdict: nothing measured (no request returned a first token)"
    if not any(s["loop_lag_ms"]["count"] for s in nodes):
        return "no verdict: the client's own delay was not sampled inside the measured window (a run too short)"
    return None


def decide(nodes: list[dict[str, Any]], overall: dict[str, Any] | None, ttft_p50_ms: float | None) -> tuple[str, str]:
    """The level and the one sentence, from the judged nodes (:func:`_node`) and the overall
    statistics (None: not known, as in the unit tests of the nodes alone)."""
    failing = failure_verdict(overall) if overall is not None else None
    if failing is not None:
        return "failed", failing["message"]
    gap = _unmeasured(overall, ttft_p50_ms, nodes)
    if gap is not None:
        return "unmeasured", gap
    flagged = [s for s in nodes if s["reasons"]]
    if flagged:
        more = sum(len(s["reasons"]) for s in flagged) - 1
        too = [f"{s['node']} ({_held(s['machine_busy'])})" for s in flagged if s.get("machine_busy")]
        return "saturated", ("client saturated on " + ", ".join(s["node"] for s in flagged) + ": "
                             + flagged[0]["reasons"][0] + (f" (+{more} more in the details)" if more else "")
                             + (f"; {BUSY} too on {', '.join(too)}" if too else "")
                             + "; its own delay is in the measurements: treat latencies as upper bounds")
    held = [f"{s['node']} ({busy_clause(s) if (s.get('machine_busy') or {}).get('lag') else s['contention_detail']})"
            for s in nodes if (s.get("machine_busy") or {}).get("lag") or s.get("contention_detail")]
    cautions = [f"{BUSY}: other processes held the client's core on {', '.join(held)}: {CONTENTION_ADVICE}"] if held \
        else []
    cautions += [f"{s['node']}: {w}" for s in nodes for w in s["warnings"] if not w.startswith(BUSY)]
    if cautions:
        return "caution", "caution: " + "; ".join(cautions)
    top = max(nodes, key=lambda s: _lag(s) or 0.0)
    return "healthy", (f"client healthy: {_lag_label(top)} {_lag(top) or 0.0:.2f} ms, under {LAG_SHARE:.0%} of TTFT p50 "
                       f"{ttft_p50_ms:.1f} ms; CPU and pauses within limits")


def first_answer_ms(overall: dict[str, Any]) -> tuple[float | None, float | None]:
    """TTFT p50 and p99, what the client's own delay is judged against; a run of embeddings or
    rerank requests (one whole answer each, no TTFT) is judged against its E2E instead."""
    ttft, e2e = overall.get("ttft") or {}, overall.get("e2e") or {}
    if ttft.get("p50") is None and overall.get("request_kinds"):
        return e2e.get("p50"), e2e.get("p99")
    return ttft.get("p50"), ttft.get("p99")


def _as_e2e(text: str) -> str:
    return text.replace("TTFT p50", "E2E p50").replace("TTFT p99", "E2E p99").replace("TTFT tail", "E2E tail")


def verdict(nodes: list[NodeHealth], ttft_p50_ms: float | None, ttft_p99_ms: float | None = None, *,
            overall: dict[str, Any] | None = None, window: tuple[float | None, float | None] | None = None,
            spawn_spread: bool = True, think_jitter: bool = False) -> dict[str, Any]:
    """The self-check section of summary.json: ``level``, the one ``message``, and per node its
    figures, ``reasons`` (saturation) and ``warnings`` (cautions). ``window`` (measured start,
    end) settles the probes still waiting for it (:meth:`NodeHealth.close_window`);
    ``spawn_spread`` and ``think_jitter`` (the run's settings) decide which option the advice
    for users in phase names: only one that is not already on."""
    if window is not None:
        for n in nodes:
            n.close_window(*window)
    judged = [_node(n, ttft_p50_ms, ttft_p99_ms, spawn_spread, think_jitter) for n in nodes]
    level, message = decide(judged, overall, ttft_p50_ms)
    if overall is not None and overall.get("request_kinds") and (overall.get("ttft") or {}).get("p50") is None:
        message = _as_e2e(message)  # judged against E2E (first_answer_ms): say so
        for node in judged:
            node["reasons"] = [_as_e2e(r) for r in node["reasons"]]
            node["warnings"] = [_as_e2e(w) for w in node["warnings"]]
            if node["machine_busy"]:
                node["machine_busy"]["lag"] = [_as_e2e(x) for x in node["machine_busy"]["lag"]]
    out: dict[str, Any] = {"level": level, "saturated": level == "saturated", "nodes": judged, "message": message,
                           "lag_share_limit": LAG_SHARE, "cpu_limit": CPU_LIMIT}
    failing = failure_verdict(overall) if overall is not None else None
    if failing is not None:
        out.update(failing=True, failure_share=failing["share"], top_failure=failing["top"])
    return out
