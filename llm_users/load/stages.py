"""Stages: a run as a sequence of load levels, each with its own steady-state statistics.

``--llm-stages 50:60s,100:60s`` (load:duration, ...) and ``--llm-steps 50:2000:50:60s``
(start:stop:step:duration) become a Locust ``LoadTestShape`` (so the web UI shows them). The
load is users in closed loop and requests/s in open loop (``--llm-arrival`` given).

Where the records merge (master or local runner), a :class:`StageBook` puts each record in the
stage its request *started* in and keeps per-stage :class:`~.metrics.Stats`, exact across
workers. The steady-state rule: the first ``settle`` seconds of each stage are excluded (default
20% of the stage, at most 30 s; ``--llm-settle``), as are warm-up and cool-down requests; each
stage's ``excluded`` counts them, so over all stages ``requests + excluded`` is every request
Locust counted. Per-stage rates divide by the measured part of the stage (its duration less the
settle window), not by the span of the requests.

The window's end is the same rule for every stage, the last one included (issue 29): a stage's
measured requests are those that started in its window, and each is counted when it comes back,
even after the next stage began. The last stage has no next stage to finish its requests in, so
the :class:`StageShape` keeps its load on for a *tail* after the plan (``hold``, the same tail as
a sweep point's: the shipping delay plus 1.5x the slowest E2E seen in the stage, at most
:data:`TAIL_MAX_S`); requests started in the tail are excluded (``excluded_tail``) and the
stage's window ends at its planned end.
"""

from __future__ import annotations

import bisect
import csv
import io
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgpack
from locust import LoadTestShape

from llm_users.load.plans import (  # noqa: F401 - the plans' home is plans.py (light); these names stay here
    SETTLE_MAX_S,
    SETTLE_SHARE,
    StagePlan,
    parse_stages,
    parse_steps,
    settle_for,
)
from llm_users.load.schedule_stats import SCHEDULE_METRICS, schedule_values
from llm_users.metrics import Distribution, Stats

TAIL_MAX_S = 60.0  # the longest a stage's (or sweep point's) tail keeps the load on


@dataclass(slots=True)
class StageRecord:
    index: int
    kind: str  # "users" | "rate"
    load: float
    start: float  # wall clock (Unix s), as request records' start_time
    settle_s: float
    measure_end: float | None = None  # sweep points: records starting later are excluded (tail)
    end: float | None = None
    stats: Stats | None = field(default_factory=Stats)  # None while frozen: read figures()
    excluded_settle: int = 0
    excluded_tail: int = 0
    note: str | None = None
    sched: dict[str, Any] = field(default_factory=dict)
    e2e_max_ns: int = 0  # the slowest request of the stage (settle window too): how long a tail waits
    returned: int = 0  # records of the stage come back so far (a tail waits for the first one)
    timings: dict[str, Any] = field(default_factory=dict)  # the server's own per-request timings
    frozen: bytes | None = None  # a finished stage's figures as one block (:meth:`freeze`)

    def freeze(self) -> None:
        """Keep a finished stage's figures (its statistics, schedule and server-timing
        distributions, for the report) as one compressed block of their exact wire forms, and
        drop the objects: a few kB a stage where its packed distributions, token counts and
        counters took 20-100 kB in hundreds of heap blocks for the whole run (issue 33's soak:
        a master grew with every stage it finished). :meth:`figures` reads them back."""
        if self.stats is None:
            return
        wire = {"slos": self.stats.slos, "stats": self.stats.to_wire(),
                "sched": {m: d.to_wire() for m, d in self.sched.items()},
                "timings": {m: d.to_wire() for m, d in self.timings.items()}}
        self.frozen = zlib.compress(msgpack.packb(wire, use_bin_type=True), 6)
        self.stats, self.sched, self.timings = None, {}, {}

    def figures(self) -> tuple[Stats, dict[str, Any], dict[str, Any]]:
        """Its statistics, schedule and server-timing distributions: the live ones, or for a
        frozen stage a copy read back from its block (exactly the same counts), not kept."""
        if self.stats is not None:
            return self.stats, self.sched, self.timings
        assert self.frozen is not None
        wire = msgpack.unpackb(zlib.decompress(self.frozen), raw=False, strict_map_key=False)
        stats = Stats(wire["slos"])
        stats.merge_wire(wire["stats"])
        return stats, _dists_from_wire(wire["sched"]), _dists_from_wire(wire["timings"])

    def live(self) -> tuple[Stats, dict[str, Any], dict[str, Any]]:
        """Its figures to add to: a frozen stage's read back and kept live again (a late record)."""
        if self.stats is None:
            self.stats, self.sched, self.timings = self.figures()
            self.frozen = None
        return self.stats, self.sched, self.timings

    @property
    def measured_start(self) -> float:
        return self.start + self.settle_s

    def measured_s(self, now: float | None = None) -> float:
        end = self.measure_end if self.measure_end is not None else self.end if self.end is not None else now
        return max((end or self.measured_start) - self.measured_start, 0.0)


def _dists_from_wire(wires: dict[str, Any]) -> dict[str, Distribution]:
    """Distributions read back from their wire forms (a frozen stage's)."""
    out = {}
    for m, w in wires.items():
        out[m] = d = Distribution()
        d.merge_wire(w)
    return out


class StageBook:
    """Per-stage statistics from merged records. ``begin`` opens a stage at a wall-clock time."""

    def __init__(self, slos: dict[str, float] | None = None) -> None:
        self.slos = slos or {}
        self.stages: list[StageRecord] = []
        self._starts: list[float] = []
        self.e2e_max_ns = 0  # the slowest request of any stage
        self.on_begin: list[Any] = []  # called with each new stage (the prefix-cache reset: cache_reset.py)

    def begin(self, kind: str, load: float, now: float, settle_s: float, measure_s: float | None = None) -> StageRecord:
        if self.stages and self.stages[-1].end is None:
            self.stages[-1].end = now
        st = StageRecord(len(self.stages), kind, load, now, settle_s,
                         measure_end=None if measure_s is None else now + settle_s + measure_s,
                         stats=Stats(self.slos), sched={m: Distribution() for m in SCHEDULE_METRICS})
        if len(self.stages) >= 2:  # the one before the previous: its late records are in (a late one thaws it)
            self.stages[-2].freeze()
        self.stages.append(st)
        self._starts.append(now)
        for hook in self.on_begin:
            hook(st)
        return st

    def finish(self, now: float) -> None:
        if self.stages and self.stages[-1].end is None:
            self.stages[-1].end = now

    def add(self, rec: Any) -> None:
        if not self.stages:
            return
        i = max(bisect.bisect_right(self._starts, rec.start_time) - 1, 0)
        st = self.stages[i]
        rec.stage = i
        st.returned += 1
        if rec.ok and rec.e2e_ns:
            st.e2e_max_ns = max(st.e2e_max_ns, rec.e2e_ns)
            self.e2e_max_ns = max(self.e2e_max_ns, rec.e2e_ns)
        if rec.start_time < st.measured_start:
            st.excluded_settle += 1
            return
        if st.measure_end is not None and rec.start_time >= st.measure_end:
            st.excluded_tail += 1
            return
        stats, sched, timings = st.live()
        stats.add(rec)
        if getattr(rec, "server_timings", None) and not (rec.warmup or rec.cooldown):
            add_timings(timings, rec, Distribution)
        if not (rec.warmup or rec.cooldown):
            v = schedule_values(rec)
            if v:
                for k, ns in v.items():
                    sched[k].add(ns)

    def summary(self, now: float | None = None) -> list[dict[str, Any]]:
        return [stage_summary(st, now) for st in self.stages]


def pooled_summary(group: list[StageRecord], now: float | None = None) -> dict[str, Any]:
    """The summary of a point measured as several stages (``--llm-repeat``): their measured
    requests together (exact percentiles), rates over the sum of their measured seconds."""
    first = group[0]
    figures = [st.figures() for st in group]  # a frozen stage's block read back once
    pool = StageRecord(first.index, first.kind, first.load, first.start, first.settle_s, end=group[-1].end,
                       stats=Stats(figures[0][0].slos), sched={m: Distribution() for m in figures[0][1]})
    assert pool.stats is not None
    for st, (stats, sched, timings) in zip(group, figures, strict=True):
        pool.stats.merge(stats)
        for m, d in sched.items():
            pool.sched[m].merge(d)
        for m, d in timings.items():
            pool.timings.setdefault(m, Distribution()).merge(d)
        pool.excluded_settle += st.excluded_settle
        pool.excluded_tail += st.excluded_tail
        pool.note = pool.note or st.note
    return stage_summary(pool, now, measured=sum(st.measured_s(now) for st in group))


def tail_s(st: StageRecord, ship_delay_s: float, floor_ns: int = 0) -> float:
    """How long the load stays on after a stage's window so that its measured requests come
    back: the shipping delay plus 1.5x the slowest E2E seen in the stage (or ``floor_ns``, the
    slowest of any stage, when larger; at least 0.5 s), at most :data:`TAIL_MAX_S`; the most
    while none of the stage's requests has come back yet (how long they take is not known)."""
    if st.returned == 0:
        return TAIL_MAX_S
    return min(ship_delay_s + max(1.5 * max(st.e2e_max_ns, floor_ns) / 1e9, 0.5), TAIL_MAX_S)


def stage_summary(st: StageRecord, now: float | None = None, measured: float | None = None) -> dict[str, Any]:
    """One stage's summary block; ``measured``: its measured seconds when not its own window (pooled)."""
    measured = st.measured_s(now) if measured is None else measured
    stats, sched, timings = st.figures()
    s = stats.summary(duration_s=measured)
    out: dict[str, Any] = {"index": st.index, st.kind: st.load, "start": st.start, "end": st.end,
                           "settle_s": st.settle_s, "measured_s": measured}
    excluded = st.excluded_settle + st.excluded_tail + s["excluded_warmup"] + s["excluded_cooldown"]
    out.update({"requests": s["requests"], "excluded": excluded, "excluded_settle": st.excluded_settle,
                "excluded_tail": st.excluded_tail, "excluded_warmup": s["excluded_warmup"],
                "excluded_cooldown": s["excluded_cooldown"]})
    for k in ("successes", "failures", "failures_by_category", "ttft", "ttfo", "ttst", "ttfb", "itl", "tpot", "e2e",
              "input_tokens", "output_tokens", "output_tokens_per_s", "requests_per_s", "slo",
              "inputs", "inputs_per_s", "input_tokens_per_s", "request_kinds"):
        if k in s:
            out[k] = s[k]
    for m, d in sched.items():
        if d.count:
            out[m] = d.summary_ms()
    if timings:
        out["server_timings"] = {m: d.summary_ms() for m, d in sorted(timings.items())}
    if st.note:
        out["note"] = st.note
    return out


TIMING_PARTS = ("queue", "prefill", "decode", "server_total")


def add_timings(into: dict[str, Any], rec: Any, dist: Any) -> None:
    """The server's own timings of one record (``server_timings``: queue, prefill, decode,
    server total in ns) into a point's distributions, and the residual ``client_network`` =
    our TTFT less the server's queue and prefill (the knee's explanation reads them)."""
    t = rec.server_timings
    for part in TIMING_PARTS:
        v = t.get(part + "_ns")
        if isinstance(v, int | float) and v >= 0:
            into.setdefault(part, dist()).add(int(v))
    q, p = t.get("queue_ns"), t.get("prefill_ns")
    if rec.ttft_ns is not None and isinstance(q, int | float) and isinstance(p, int | float):
        residual = rec.ttft_ns - q - p
        if residual >= 0:
            into.setdefault("client_network", dist()).add(int(residual))


STAGE_CSV = ["index", "kind", "load", "settle_s", "measured_s", "requests", "excluded", "failures",
             "requests_per_s", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
             "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_from_schedule_p99_ms",
             "schedule_lag_p99_ms", "slo_share_meeting_all", "goodput_rps"]


def stages_csv(stages: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(STAGE_CSV)
    for s in stages:
        kind = "rate" if "rate" in s else "users"
        slo = s.get("slo") or {}
        row = [s["index"], kind, s[kind], s["settle_s"], s["measured_s"], s["requests"], s["excluded"],
               s.get("failures"), s.get("requests_per_s"), s.get("output_tokens_per_s")]
        for m in ("ttft", "tpot", "itl", "e2e"):
            row += [(s.get(m) or {}).get("p50"), (s.get(m) or {}).get("p99")]
        row += [(s.get("e2e_from_schedule") or {}).get("p99"), (s.get("schedule_lag") or {}).get("p99"),
                slo.get("share_meeting_all"), slo.get("goodput_rps")]
        w.writerow(["" if v is None else f"{v:.6g}" if isinstance(v, float) else v for v in row])
    return out.getvalue()


class StageShape(LoadTestShape):
    """Runs the planned stages in order; tells ``on_stage`` when each begins."""

    abstract = False

    def __init__(self, plan: list[StagePlan], kind: str, on_stage: Any, idle_users: int = 0,
                 hold: Any = None) -> None:
        super().__init__()
        self.plan = plan
        self.kind = kind
        self.on_stage = on_stage
        self.idle_users = idle_users
        self.hold = hold  # after the plan: keep the last stage's load while hold() (its tail)
        self.done = False
        self.current = -1
        self._ends = []
        t = 0.0
        for p in plan:
            t += p.duration_s
            self._ends.append(t)

    def reset_time(self) -> None:
        """Locust resets the shape's clock when the test starts, just after the first tick has
        begun stage 0: keep that stage; a later reset (a new test from the web UI) starts over."""
        super().reset_time()
        self.done = False
        if self.current > 0:
            self.current = -1

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        i = bisect.bisect_right(self._ends, t)
        if i >= len(self.plan):
            if self.current == len(self.plan) - 1 and self.hold is not None and self.hold():
                i = self.current  # the last stage's tail: same load until its requests came back
            else:
                self.done = True
                return None
        if i != self.current:
            self.current = i
            self.on_stage(i, self.plan[i])
        if self.kind == "rate":
            return self.idle_users, 1.0
        users = int(round(self.plan[i].load))
        return users, float(max(users, 1))
