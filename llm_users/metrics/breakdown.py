"""Where the latency goes: our TTFT and E2E split by the server's own timings (issue 32).

Per request that carries ``server_timings`` (:mod:`llm_users.protocols.server_side`)::

    TTFT = client and network + queue + prefill
    E2E  = client and network + queue + prefill + decode

The residual, **client and network**, is what the server did not account for: our client's
send and receive, the network both ways, the server's HTTP layer. It is measured, not
assumed: ``client_network_ttft_ns`` = TTFT - queue - prefill and ``client_network_e2e_ns`` =
E2E - queue - prefill - decode. A server that does not report its queue (llama.cpp) leaves the
queue inside the residual (``unknown`` says so). The residual cannot be negative: one below
-:data:`TOLERANCE_NS` means the server's clock or its report is off (it claims more time than
we saw pass), and the request is flagged and counted (``flagged``); its figures still count.

:class:`BreakdownTracker` observes every merged record (the ``observers`` stage, where the
run merges: local, or the master with every worker's records), so its percentiles are exact
across workers: the same HDR distributions as our own figures, fed from the union of records.
Successful measured requests only (not warm-up, cool-down, failures). summary.json:
``overall.breakdown`` (None when no request carried server timings); in a step run or sweep
(records with a ``stage``) also ``by_stage``: per stage or point, its requests, flagged count
and each part's p50 and p99, so a study can tell which part grew with the load.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from llm_users.metrics.distribution import Distribution
from llm_users.metrics.record import RequestRecord

#: A residual below minus this is implausible (flagged): 1 ms of ms-rounded server figures
#: (TGI and OpenAI headers are whole milliseconds) plus 1 ms of clock and stamping slack.
TOLERANCE_NS = 2_000_000

#: The parts, in the order reports show them (summary keys, in ms).
PARTS = ("client_network_ttft", "queue", "prefill", "decode", "client_network_e2e", "server_total")
_SERVER_PARTS = ("queue", "prefill", "decode", "server_total")


def split(rec: RequestRecord) -> dict[str, int] | None:
    """The parts of one request, in ns (only those known), or None when it has no server timings."""
    st = rec.server_timings
    if not st:
        return None
    out = {p: int(st[f"{p}_ns"]) for p in _SERVER_PARTS if st.get(f"{p}_ns") is not None}
    prefill = out.get("prefill")
    if prefill is not None:
        before = prefill + out.get("queue", 0)
        if rec.ttft_ns is not None:
            out["client_network_ttft"] = rec.ttft_ns - before
        if rec.e2e_ns is not None and "decode" in out:
            out["client_network_e2e"] = rec.e2e_ns - before - out["decode"]
    return out


def implausible(parts: dict[str, int]) -> bool:
    return any(parts.get(k, 0) < -TOLERANCE_NS for k in ("client_network_ttft", "client_network_e2e"))


class BreakdownTracker:
    """Exact distributions of every part over the merged records, the flagged count, the sources."""

    __slots__ = ("dists", "flagged", "sources", "requests", "without", "stages")

    def __init__(self) -> None:
        self.dists = {p: Distribution() for p in PARTS}
        self.flagged = 0
        self.sources: Counter[str] = Counter()
        self.requests = 0  # measured successes with server timings
        self.without = 0  # measured successes without
        self.stages: dict[int, tuple[dict[str, Distribution], list[int]]] = {}  # stage: (parts, [requests, flagged])

    def add(self, rec: RequestRecord) -> None:
        if not rec.ok or rec.warmup or rec.cooldown:
            return
        parts = split(rec)
        if parts is None:
            self.without += 1
            return
        self.requests += 1
        self.sources[str((rec.server_timings or {}).get("source"))] += 1
        bad = implausible(parts)
        for k, v in parts.items():
            self.dists[k].add(v)
        if bad:
            self.flagged += 1
        if rec.stage is not None:
            dists, counts = self.stages.setdefault(rec.stage, ({}, [0, 0]))
            counts[0] += 1
            counts[1] += bad
            for k, v in parts.items():
                d = dists.get(k)
                if d is None:
                    d = dists[k] = Distribution()
                d.add(v)

    def summary(self) -> dict[str, Any] | None:
        if not self.requests:
            return None
        out: dict[str, Any] = {
            "requests": self.requests,
            "without_server_timings": self.without,
            "source": self.sources.most_common(1)[0][0] if len(self.sources) == 1
            else ",".join(s for s, _ in self.sources.most_common()),
            "sources": dict(self.sources.most_common()),
            "flagged": self.flagged,
            "tolerance_ms": TOLERANCE_NS / 1e6,
            "unknown": [p for p in _SERVER_PARTS if not self.dists[p].count],
        }
        for p in PARTS:
            d = self.dists[p]
            out[p] = d.summary_ms() if d.count else None
        if self.stages:
            out["by_stage"] = [
                {"stage": i, "requests": counts[0], "flagged": counts[1],
                 **{p: {"p50": dists[p].percentile_ms(50.0), "p99": dists[p].percentile_ms(99.0)}
                    for p in PARTS if p in dists}}
                for i, (dists, counts) in sorted(self.stages.items())]
        return out


def console_line(b: dict[str, Any]) -> str:
    """One line: the median of each part of TTFT (and decode), the flagged count."""

    def med(part: str) -> str:
        s = b.get(part)
        return f"{s['p50']:.1f}" if s and s.get("p50") is not None else "?"

    queue = "queue ? (not reported: inside client and network)" if "queue" in b["unknown"] else f"queue {med('queue')}"
    line = (f"server timings ({b['source']}, {b['requests']} requests): TTFT p50 = client and network "
            f"{med('client_network_ttft')} + {queue} + prefill {med('prefill')} ms; decode p50 {med('decode')} ms")
    if b["flagged"]:
        line += (f"; WARNING: {b['flagged']} requests with client and network below -{b['tolerance_ms']:g} ms "
                 "(the server's clock or its report is off)")
    return line


def attach(environment: Any, run: Any) -> BreakdownTracker | None:
    """Where the run merges (local runner, master): watch every record, add
    ``overall.breakdown`` to the summary; afresh at each test start."""
    collector = getattr(run, "collector", None)
    if collector is None:
        return None
    holder = [BreakdownTracker()]
    collector.observers.append(lambda rec: holder[0].add(rec))
    run.summary_hooks.append(lambda summary: summary.setdefault("overall", {}).__setitem__(
        "breakdown", holder[0].summary()))

    def fresh(**_: Any) -> None:
        holder[0] = BreakdownTracker()

    environment.events.test_start.add_listener(fresh)
    return holder[0]
