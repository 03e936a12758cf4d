"""Worker -> master shipping of statistics and records, and the merge on the master.

Workers buffer their records and a statistics delta (HDR histograms in wire form) and send
them as the Locust custom message ``llm_data`` every :data:`SHIP_INTERVAL` seconds and once
more, marked final, when they stop.

Stopping: Locust's headless master fires ``test_stop`` and only then tells workers to quit,
waiting half a second for their last stats, so whatever the workers finish after that is lost
(Locust's own table loses it too). So when the master starts stopping (``test_stopping``) it
first sends ``llm_stop``: each worker stops its users (honouring ``--stop-timeout``) and ships
its final payload; the master waits for every live worker's final payload, then lets Locust
carry on. A worker that dies loses at most its last interval; :class:`Collector` notes which
worker, when, how much data may be missing, and how many requests it had in flight at its last
payload (each payload says; they have no record); a worker Locust knew whose data never came
counts as lost too. The master then exits 1 unless ``--llm-allow-worker-loss`` (run.py).

Delivery of the final payload: ZeroMQ queues a message and sends it from its own thread, so a
worker that exits right after sending (Ctrl-C to the process group makes every worker quit on
its own) can take its final payload with it. The master answers each final payload with
``llm_ack``; a quitting worker waits for that answer, sending the payload again every
:data:`ACK_RESEND_S` (the master counts a payload once), up to :data:`ACK_WAIT_S`.

The master answers every payload with ``llm_ack`` (its ``seq``): a worker keeps each payload's
records until then (:meth:`Shipper.confirm`), so a worker whose master dies knows which records
the master never confirmed and writes them to its own file
(:mod:`~llm_users.health.master_watch`).

In a payload the records are one msgpack ``bin`` of rows (:mod:`~llm_users.metrics.record_wire`:
``records``, with ``record_fields`` naming the columns and ``record_count``): each row a record's
fields, its ITL gaps packed as int64 bytes and its tokens and gaps by arrival second computed by
the worker, so the master's merge builds no integer per gap, no dict per record and splits no
record into seconds (issue 34). A payload also says the run-wide settings the worker applied
(``applied``: its warm-up, :mod:`~llm_users.load.warmup`), so the master states them as they ran.

Local runs use the same :class:`Collector` without messages: records go straight in. Both
sides pass each record through a :class:`~llm_users.pipeline.RecordPipeline` (its stages and
their order are documented there).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_users.client.backoff import RETRY_AFTER_MAX_S
from llm_users.health.idle import IdleQueue
from llm_users.health.lagtrace import span
from llm_users.health.selfcheck import NodeHealth
from llm_users.metrics import Distribution, RequestRecord, StatsByName, record_wire
from llm_users.outputs.records_file import RecordWriter
from llm_users.outputs.timeline import Timeline
from llm_users.pipeline import RecordPipeline

MESSAGE = "llm_data"
STOP_MESSAGE = "llm_stop"
ACK_MESSAGE = "llm_ack"
SHIP_INTERVAL = 2.0
ACK_RESEND_S = 1.0
ACK_WAIT_S = 5.0
FINAL_WAIT_S = 15.0  # a stopping master waits --stop-timeout and this for the workers' final payloads


class Shipper:
    """Worker side: collects records and a statistics delta until the next payload."""

    def __init__(self, worker_id: str, slos: dict[str, float] | None = None) -> None:
        self.worker_id = worker_id
        self.slos = slos or {}
        self._stats = StatsByName(self.slos)
        self._records: list[RequestRecord] = []  # packed at the payload, off the streams' path
        self._pending: IdleQueue[RequestRecord] = IdleQueue(self._add_stats)  # idle.py: off the streams' path
        self.seq = 0
        self.unacked: dict[int, list[RequestRecord]] = {}  # seq -> records shipped, not yet confirmed
        self.confirmed = 0  # records the master confirmed
        self.applied: dict[str, Any] = {}  # the run-wide settings this worker applies (load/warmup.py), in each payload
        self.pipeline = RecordPipeline()
        self.pipeline.add("statistics", self._pending.put)
        self.pipeline.add("ship", self._ship)

    def add(self, rec: RequestRecord) -> None:
        rec.worker = self.worker_id
        self.pipeline.keep(rec)

    def _ship(self, rec: RequestRecord) -> None:
        self._records.append(rec)

    def use_slos(self, slos: dict[str, float]) -> bool:
        """The master's SLOs for this test (the web form's), from the next payload on."""
        self._pending.flush()
        self.slos = slos
        if not self._stats.by_name:  # else the delta in hand goes as it was counted
            self._stats = StatsByName(slos)
        return True

    def _add_stats(self, rec: RequestRecord) -> None:
        with span("stats"):
            self._stats.add(rec)

    def payload(self, health: dict[str, Any] | None = None, final: bool = False) -> dict[str, Any]:
        """Everything since the last payload (msgpack-safe); the buffers start afresh."""
        self._pending.flush()
        self.seq += 1
        records = self._records
        p = {
            "worker": self.worker_id,
            "seq": self.seq,
            "sent_at": time.time(),
            "final": final,
            "stats": self._stats.to_wire(),
            "records": record_wire.pack(records),
            "record_fields": record_wire.FIELDS,
            "record_count": len(records),
            "health": health,
            "applied": dict(self.applied),
        }
        self._stats = StatsByName(self.slos)
        self.unacked[self.seq] = records
        self._records = []
        return p

    def confirm(self, seq: int) -> None:
        """The master has the payload ``seq`` (its ``llm_ack``)."""
        self.confirmed += len(self.unacked.pop(seq, ()))

    def unconfirmed_records(self) -> list[dict[str, Any]]:
        """Every record the master has not confirmed: shipped and unanswered, then unshipped."""
        self._pending.flush()
        return [r.to_dict() for seq in sorted(self.unacked) for r in self.unacked[seq]] + [r.to_dict() for r in self._records]


class Seqs:
    """The sequence numbers seen from one worker (1, 2, 3, ...), in constant memory while they
    come in order: all up to ``upto``, and the few seen above it."""

    __slots__ = ("upto", "above")

    def __init__(self) -> None:
        self.upto = 0
        self.above: set[int] = set()

    def add(self, seq: int) -> bool:
        """True when ``seq`` is new."""
        if seq <= self.upto or seq in self.above:
            return False
        self.above.add(seq)
        while self.upto + 1 in self.above:
            self.upto += 1
            self.above.discard(self.upto)
        return True


@dataclass
class RetryAfterCounts:
    """The answers that asked for a wait (429/503 ``Retry-After``), how long they asked, and
    how many a user honoured (waited after: closed loop; open loop keeps its schedule)."""

    answers: int = 0
    asked_max_s: float = 0.0
    honoured: int = 0
    waited_s: float = 0.0

    def add(self, rec: RequestRecord) -> None:
        self.answers += 1
        self.asked_max_s = max(self.asked_max_s, rec.retry_after_s or 0.0)
        if rec.backoff_s:
            self.honoured += 1
            self.waited_s += rec.backoff_s

    def summary(self) -> dict[str, Any]:
        return {"answers": self.answers, "asked_max_s": round(self.asked_max_s, 3), "honoured": self.honoured,
                "waited_s": round(self.waited_s, 3)}


@dataclass
class WorkerState:
    worker: str
    first_report: float
    last_report: float
    payloads: int = 0
    records: int = 0
    final: bool = False
    lost_at: float | None = None
    in_flight: int = 0  # requests in flight at its last payload: no record of them if it is lost
    applied: dict[str, Any] | None = None  # the run-wide settings it applied, as its last payload said


class Collector:
    """The merged view (master or local runner): statistics, timeline, node health, records."""

    def __init__(self, slos: dict[str, float] | None = None, writer: RecordWriter | None = None) -> None:
        self._stats = StatsByName(slos)
        self._pending: IdleQueue[RequestRecord] = IdleQueue(self._add_stats)  # idle.py: off the streams' path
        self.timeline = Timeline()
        self.health: dict[str, NodeHealth] = {}
        self.writer = writer
        self.workers: dict[str, WorkerState] = {}
        self._seqs: dict[str, Seqs] = {}  # per worker, the payloads merged: a payload counts once
        self.records = 0
        self.duplicates = 0
        self.duplicate_payloads = 0
        self.stop_asked: float | None = None  # when the master asked the workers for their final data
        self.backoff_waits = 0  # requests after which a user backed off (backoff.py), and for how long
        self.backoff_s = 0.0
        self.retry_after = RetryAfterCounts()  # 429/503 answers that asked for a wait, and what was done
        self.labels: dict[str, tuple[str, str]] = {}  # request name -> (backend, model), first seen
        self.live: Any = None  # the web UI's LiveView (llm_users/webui/live.py), fed beside the run's stats
        self.merge_lags = Distribution()  # per payload merged: the worker's sent_at to merged (ns); bounded by
        # its buckets (an array of 8 bytes a payload grew 0.7 MB an hour with 50 workers)
        self.merge_cpu_s = 0.0  # this thread's CPU in receive (the rpc's msgpack decode not included)
        self.merged_records = 0
        self.pipeline = RecordPipeline()
        self.pipeline.add("statistics", self._pending.put)
        self.pipeline.add("counts", self._count)
        self.pipeline.add("timeline", self.timeline.add)
        self.pipeline.add("live", self._live)
        if writer is not None:
            self.pipeline.add("records_file", writer.write)

    def use_slos(self, slos: dict[str, float]) -> bool:
        """Measure against these SLOs (the web form's, before the run's first test); refused
        (False) once a record is counted: the run's statistics hold one set."""
        self._pending.flush()
        if self.records or self._stats.total.requests:
            return False
        self._stats = StatsByName(slos)
        return True

    @property
    def observers(self) -> list[Callable[[RequestRecord], None]]:
        """The pipeline's ``observers`` stage (workload summary, cost, load profiles): append to it."""
        return self.pipeline.stage("observers")

    @property
    def stats(self) -> StatsByName:
        """The merged statistics, every kept record in (the ones waiting are added first)."""
        self._pending.flush()
        return self._stats

    def flush(self) -> None:
        """Add the records still waiting for a quiet loop (the web UI's live view reads this)."""
        self._pending.flush()

    # local path -------------------------------------------------------------------------------
    def add_record(self, rec: RequestRecord) -> None:
        """Keep a record now (records file, timeline, observers); its statistics, the costly
        part, when the loop is idle (:class:`~llm_users.health.idle.IdleQueue`), exact for any reader."""
        self.pipeline.keep(rec)

    def _add_stats(self, rec: RequestRecord) -> None:
        with span("stats"):
            self._stats.add(rec)
            if self.live is not None:
                self.live.stats.add(rec)

    def add_health(self, wire: dict[str, Any]) -> None:
        node = wire["node"]
        h = self.health.get(node)
        if h is None:
            h = self.health[node] = NodeHealth(node)
        total = self._stats.total  # the measured window as known now (selfcheck.NodeHealth.settle)
        h.merge_wire(wire, (total.first_start, total.last_end))

    # distributed path -------------------------------------------------------------------------
    def receive(self, payload: dict[str, Any], now: float | None = None) -> None:
        cpu, duplicates = time.thread_time(), self.duplicate_payloads
        self._receive(payload, time.time() if now is None else now)
        self.merge_cpu_s += time.thread_time() - cpu
        sent = payload.get("sent_at")
        if sent is not None and self.duplicate_payloads == duplicates:  # merged (not a payload delivered twice)
            self.merge_lags.add((time.time() - sent) * 1e9)

    def merge_state(self) -> dict[str, Any]:
        """summary.json's ``workers.merge``: how far behind the workers the master's merge ran
        (per payload: sent by the worker -> merged here, seconds; one host's clock or NTP's
        skew between hosts) and its CPU per record (``receive`` on this thread)."""
        lags = self.merge_lags
        got = lags.percentiles_ms([50.0, 99.0])

        def s(ms: float | None) -> float | None:
            return None if ms is None else round(ms / 1e3, 4)

        return {"payloads": lags.count, "records": self.merged_records, "lag_p50_s": s(got[50.0]),
                "lag_p99_s": s(got[99.0]), "lag_max_s": s(lags.max_ns / 1e6 if lags.max_ns is not None else None),
                "cpu_s": round(self.merge_cpu_s, 4),
                "cpu_us_per_record": round(self.merge_cpu_s / self.merged_records * 1e6, 2)
                if self.merged_records else None}

    def add_merge_state(self, summary: dict[str, Any]) -> None:
        """A summary hook (the master's): ``workers.merge``, :meth:`merge_state`."""
        summary.setdefault("workers", {})["merge"] = self.merge_state()

    def _receive(self, payload: dict[str, Any], now: float) -> None:
        wid = payload["worker"]
        seqs = self._seqs.get(wid)
        if seqs is None:
            seqs = self._seqs[wid] = Seqs()
        if not seqs.add(int(payload["seq"])):  # delivered twice: its records are already in
            self.duplicates += payload["record_count"]
            self.duplicate_payloads += 1
            return
        ws = self.workers.get(wid)
        if ws is None:
            ws = self.workers[wid] = WorkerState(wid, now, now)
        ws.last_report = now
        ws.lost_at = None  # it came back (Locust re-admits it): a later loss is dated anew
        ws.payloads += 1
        ws.final = ws.final or bool(payload.get("final"))
        ws.in_flight = int(payload.get("in_flight") or 0)
        ws.applied = payload.get("applied") or ws.applied
        self._stats.merge_wire(payload["stats"])
        if self.live is not None:
            self.live.merge_wire(payload["stats"])
        records = record_wire.unpack(payload["records"], payload["record_fields"])
        self.merged_records += len(records)
        ws.records += len(records)
        with self.writer.batch() if self.writer is not None else contextlib.nullcontext():  # one write a payload
            self.pipeline.keep_all(records, after="statistics")  # merged above, in wire form
        if payload.get("health"):
            self.add_health(payload["health"])

    def expect(self, worker: str, now: float | None = None) -> None:
        """A worker Locust knows: if none of its data ever arrives, it is reported lost."""
        if worker not in self.workers:
            now = time.time() if now is None else now
            self.workers[worker] = WorkerState(worker, now, now)

    def stopping(self, workers: list[str], now: float) -> None:
        """The master asked these workers for their final data at ``now``: a worker that never
        sends it is lost with its window ending here (data after the ask is not expected; its
        own heartbeat may be missed only later, ``locust_costs.WORKER_SILENCE_S``)."""
        if self.stop_asked is None:
            self.stop_asked = now
        for w in workers:
            self.expect(w, now)

    def reported(self) -> list[str]:
        """Workers whose data arrived (at least one payload)."""
        return sorted(w for w, ws in self.workers.items() if ws.payloads)

    def pending(self, live_workers: list[str]) -> list[str]:
        """Live workers whose final payload has not arrived yet."""
        return [w for w in live_workers if not (w in self.workers and self.workers[w].final)]

    def mark_lost(self, worker: str, now: float | None = None) -> None:
        ws = self.workers.get(worker)
        if ws is not None and not ws.final and ws.lost_at is None:
            ws.lost_at = time.time() if now is None else now

    def lost_workers(self, stop_time: float | None = None) -> list[dict[str, Any]]:
        """Workers that never sent their final payload, with the window whose data may be missing."""
        out = []
        for ws in self.workers.values():
            if ws.final:
                continue
            ends = [t for t in (ws.lost_at, self.stop_asked) if t is not None]  # the earlier: no data expected after
            end = min(ends) if ends else stop_time or time.time()
            out.append({
                "worker": ws.worker,
                "last_report": ws.last_report,
                "lost_at": ws.lost_at,
                "records_received": ws.records,
                # started and not finished at its last payload: requests that have no record
                "in_flight_at_last_report": ws.in_flight,
                "window_at_risk_s": round(max(0.0, end - ws.last_report), 3),
                "window_at_risk": [ws.last_report, end],
            })
        return out

    def workers_summary(self, stop_time: float | None, loss_allowed: bool) -> dict[str, Any]:
        """summary.json's ``workers``: who reported, who was lost and what it took with it."""
        lost = self.lost_workers(stop_time)
        return {"reported": self.reported(), "lost": lost,
                # at least: what each had in flight at its last payload (what it finished after is unknown)
                "unrecorded_requests_at_least": sum(w["in_flight_at_last_report"] for w in lost),
                "loss_allowed": loss_allowed, "duplicate_records_dropped": self.duplicates}

    def backoff_summary(self, enabled: bool) -> dict[str, Any]:
        """summary.json's ``backoff``: the users' waits, and the answers that asked for one."""
        return {"enabled": enabled, "waits": self.backoff_waits, "wait_s": round(self.backoff_s, 3),
                "retry_after": {**self.retry_after.summary(), "cap_s": RETRY_AFTER_MAX_S}}

    def _count(self, rec: RequestRecord) -> None:
        if rec.name not in self.labels:
            self.labels[rec.name] = (rec.backend, rec.model)
        self.records += 1
        if rec.backoff_s:
            self.backoff_waits += 1
            self.backoff_s += rec.backoff_s
        if rec.retry_after_s is not None:
            self.retry_after.add(rec)

    def _live(self, rec: RequestRecord) -> None:
        if self.live is not None:
            self.live.count(rec)
