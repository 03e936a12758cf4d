"""Open-loop load: requests start at scheduled times, whether or not earlier ones have answered.

``--llm-rate R`` (requests/s for the whole run) turns it on. The master (or the local runner)
owns the rate: :class:`RateController` splits it, and the ``--llm-max-inflight`` cap, across
the live workers and sends each its share as the custom message ``llm_rate``; it sends again
whenever a worker joins or leaves, or the rate changes (a stage, a sweep point, the web UI).
Each load-generating process runs one :class:`Scheduler`: it draws the gaps of its share
(:mod:`.arrivals`, seeded by ``(seed, worker index)``) and at each due time starts one
request in its own greenlet, on a keep-alive connection taken from a pool (a new one is opened
only when every pooled one is busy), through the User class's own ``send``. Locust's users
do not send in open loop: they idle, and ``-u`` does not matter.

A request that finds ``--llm-max-inflight`` requests running waits, in FIFO order, for one to
end; that wait is measured (``inflight_wait_ns``). Every record carries ``scheduled_ns``, so
``t0_ns - scheduled_ns`` is the schedule lag: the cap wait (the server is slower than the
schedule) plus the client's own lateness (the load generator fell behind).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import gevent
from gevent.event import Event
from gevent.pool import Group
from gevent.queue import Queue

from llm_users.load.arrivals import ArrivalLaw, parse_arrival
from llm_users.load.plans import parse_cap, parse_rate  # noqa: F401 - parsed in plans.py (light)
from llm_users.settings import is_llm_user

log = logging.getLogger(__name__)

RATE_MESSAGE = "llm_rate"
RATE_REQUEST = "llm_rate_request"  # worker -> master: "my test started and I have no share"
MAX_ORIGIN_SKEW_S = 5.0
REPLAY_LEAD_S = 0.5  # trace replay: the schedule starts this long after the share, the first prompts built
REPLAY_AHEAD = 256  # trace replay: rows whose prompts are built ahead of their due times


def draw_item(user: Any) -> Any:
    """The next request of an open-loop arrival, from the User's own request source
    (:mod:`.workload`): datasets and synthetic prompts as in closed loop. A session's think
    time is ignored (the schedule decides when) and its next turn does not wait for the reply."""
    return user.lane.next()


def split(total: float | int | None, n: int, index: int, whole: bool = False) -> Any:
    """Worker ``index``'s share of ``total`` over ``n`` workers (whole numbers spread evenly)."""
    if total is None:
        return None
    if not whole:
        return total / n
    base, extra = divmod(int(total), n)
    return base + (1 if index < extra else 0)


class _Waiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = Event()
        self.granted = False


class Scheduler:
    """One process's arrivals: its share of the rate, its pool of connections, its cap."""

    def __init__(self, environment: Any, user_classes: Callable[[], list[type]] | None = None) -> None:
        """``user_classes``: the LLM User classes to send through, asked at the first arrival (the
        run gives them; this module does not import the users). None: every LLM User class."""
        self.environment = environment
        self.user_classes = user_classes or (
            lambda: [c for c in environment.user_classes or [] if is_llm_user(c)])
        self.rate = 0.0
        self.cap: int | None = None
        self.law: ArrivalLaw = ArrivalLaw("poisson")
        self.seed: int = 0
        self.index = 0
        self.inflight = 0
        self._waiters: deque[_Waiter] = deque()
        self._wake = Event()
        self._loop: Any = None
        self._requests = Group()
        self._pools: dict[type, list[Any]] = {}
        self._templates: list[Any] = []
        self._weights: list[float] = []
        self._rng = random.Random(0)
        self._pick = random.Random(0)
        self._epoch = 0
        self.n = 1
        self.started = False
        self.source: Any = None  # a trace (trace_replay.TraceSource) instead of drawn gaps
        self._share: dict[str, Any] | None = None

    # share ------------------------------------------------------------------------------------
    @property
    def has_share(self) -> bool:
        return self._share is not None

    def set_share(self, data: dict[str, Any]) -> None:
        """Apply the master's (or the local controller's) share: rate, cap, law, seed, index."""
        if data == self._share:
            return  # the master sends shares again every few seconds (a lost one is replaced)
        self._share = dict(data)
        law = parse_arrival(data.get("arrival"))
        first = not self.started and self._epoch == 0
        if first or data["seed"] != self.seed or data["index"] != self.index or law != self.law:
            self._rng = random.Random(f"{data['seed']}/{data['index']}")
            self._pick = random.Random(f"{data['seed']}/{data['index']}/pick")
        self.seed, self.index, self.law = data["seed"], data["index"], law
        if data.get("host") and not self.environment.host:  # a worker that joined mid-run got no spawn
            self.environment.host = data["host"]
        self.n = int(data.get("n", 1))
        self.rate = float(data["rate"])
        self.cap = data.get("cap")
        self._epoch += 1
        self._wake.set()
        self._grant()

    # lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._loop is not None:
            return
        self.started = True
        self._loop = gevent.spawn(self._run)

    def stop_scheduling(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        for w in list(self._waiters):  # arrivals still waiting for the cap are never sent
            w.event.set()
        self._waiters.clear()

    def drain(self, timeout: float) -> None:
        """Let running requests finish (up to ``timeout`` s), then stop the rest."""
        self.stop_scheduling()
        if timeout > 0:
            self._requests.join(timeout=timeout)
        self._requests.kill(block=True, timeout=5)
        for pool in self._pools.values():
            for c in pool:
                c.close()
        self._pools.clear()
        self.started = False
        self._share = None  # the next test's first share starts afresh

    # the loop ---------------------------------------------------------------------------------
    def _templates_ready(self) -> None:
        if self._templates:
            return
        for cls in self.user_classes():
            if self.environment.host:
                cls.host = self.environment.host  # as Locust's runner does before it spawns users
            user = cls(self.environment)
            if hasattr(user, "on_start"):
                user.on_start()
            self._templates.append(user)
            self._weights.append(float(getattr(cls, "weight", 1) or 1))

    def _run(self) -> None:
        self._templates_ready()
        if not self._templates:
            log.error("locust-llm: open loop needs an LLM User class in the locustfile")
            return
        if self.source is not None:
            self._replay()
            return
        while True:
            if self.rate <= 0:
                self._wake.clear()
                self._wake.wait()
                continue
            epoch = self._epoch
            self._wake.clear()
            gap = self.law.gap_s(self.rate, self._rng)
            if self.law.kind == "constant":  # worker i of n starts i/n of a gap later: evenly interleaved
                gap *= (self.index + 1) / self.n
            due = self._origin_ns() + int(gap * 1e9)
            while epoch == self._epoch:
                now = perf_counter_ns()
                if due > now:
                    self._wake.wait((due - now) / 1e9)
                    if epoch != self._epoch:
                        break  # new share: restart the schedule from now at the new rate
                    if perf_counter_ns() < due:
                        continue
                self._requests.spawn(self._fire, due)
                due += int(self.law.gap_s(self.rate, self._rng) * 1e9)

    def _replay(self) -> None:
        """Trace replay: this worker's share of the trace's rows, each at its own offset. The
        schedule starts REPLAY_LEAD_S after the share's origin (on every worker alike); a
        builder greenlet makes the prompts ahead of their due times (up to REPLAY_AHEAD
        rows), starting in that lead, so rows due at once (a BurstGPT second) are sent back to
        back instead of each waiting for the next one's prompt to be fitted."""
        if hasattr(self.source, "prepare_for"):
            self.source.prepare_for(self._templates[0])  # prompts of the rows' exact input lengths
        while self.rate <= 0:  # wait for the first share (it says which rows are ours)
            self._wake.clear()
            self._wake.wait()
        origin = self._origin_ns() + int(REPLAY_LEAD_S * 1e9)
        ahead: Queue = Queue(maxsize=REPLAY_AHEAD)
        builder = gevent.spawn(self._build_ahead, ahead)
        try:
            while (got := ahead.get()) is not None:
                offset_s, item = got
                due = origin + int(offset_s * 1e9)
                now = perf_counter_ns()
                if due > now:
                    gevent.sleep((due - now) / 1e9)
                self._requests.spawn(self._fire, due, item)
        finally:
            builder.kill(block=False)

    def _build_ahead(self, ahead: Queue) -> None:
        try:
            for row in self.source.rows(self.index, self.n):
                ahead.put(row)
        except Exception:  # a row that cannot be built ends the replay with a line, not a hang
            log.exception("locust-llm: trace replay stopped: a request could not be built")
        ahead.put(None)

    def _origin_ns(self) -> int:
        """Where this share's schedule starts, on this process's perf_counter: the master's
        wall-clock origin (every worker's schedule starts together; one that starts late
        sends what is overdue at once, and that lateness is its measured lag), or now when
        there is none or it is more than MAX_ORIGIN_SKEW_S away (clocks that disagree)."""
        now_ns = perf_counter_ns()
        origin = (self._share or {}).get("origin")
        if origin is None:
            return now_ns
        ago = time.time() - float(origin)
        if abs(ago) > MAX_ORIGIN_SKEW_S:
            return now_ns
        return now_ns - int(ago * 1e9)

    def _fire(self, scheduled_ns: int, item: Any = None) -> None:
        user = self._templates[0] if len(self._templates) == 1 else \
            self._pick.choices(self._templates, self._weights)[0]
        if item is None:
            item = draw_item(user)
        waited = self._acquire()
        if waited is None:
            return  # stopped while waiting
        pool = self._pools.setdefault(type(user), [])
        client = pool.pop() if pool else self._new_client(user)
        try:
            rec = user.send(item.messages, item, stream_client=client, scheduled_ns=scheduled_ns,
                            inflight_wait_ns=waited)
            user.lane.reply(item, "".join(rec.reply) if rec.ok and rec.reply is not None else None)
        finally:
            pool.append(client)
            self._release()

    def _new_client(self, user: Any) -> Any:
        """One more connection like the user's own (its client class, base URL, timeouts, TLS)."""
        s = user.settings
        return type(user.stream_client)(user.client_base_url(user.host), timeouts=s.timeouts,
                                        verify_tls=s.verify_tls)

    # the in-flight cap ------------------------------------------------------------------------
    def _acquire(self) -> int | None:
        """0 when a slot is free; else wait for one (FIFO) and return the wait, or None when
        the run stopped first."""
        if self.cap is None or (self.inflight < self.cap and not self._waiters):
            self.inflight += 1
            return 0
        t = perf_counter_ns()
        w = _Waiter()
        self._waiters.append(w)
        w.event.wait()
        return perf_counter_ns() - t if w.granted else None

    def _release(self) -> None:
        self.inflight -= 1
        self._grant()

    def _grant(self) -> None:
        while self._waiters and (self.cap is None or self.inflight < self.cap):
            w = self._waiters.popleft()
            w.granted = True
            self.inflight += 1
            w.event.set()


class RateController:
    """Master / local side: the run's total rate and cap, split over the live workers."""

    def __init__(self, environment: Any, local: bool, rate: float | None, cap: int | None, arrival: str | None,
                 seed: int | None, user_classes: Callable[[], list[type]] | None = None) -> None:
        """``local``: a single-process run (the scheduler runs here, not on workers, sending
        through ``user_classes``)."""
        self.environment = environment
        self.rate = rate or 0.0
        self.cap = cap
        self.arrival = str(parse_arrival(arrival))
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        self.scheduler: Scheduler | None = Scheduler(environment, user_classes) if local else None
        self._sent: dict[str, dict[str, Any]] = {}
        self._live: list[str] = []
        self.origin = time.time()  # wall clock where the current schedule starts
        self.extra: dict[str, Any] = {}  # sent with every share (trace replay: the file and speed-up)

    def set_rate(self, rate: float) -> None:
        self.rate = rate
        self.origin = time.time()
        self.publish()

    def reset_workers(self) -> None:
        """A new test: the workers live now are its starting set (no join/leave yet)."""
        self._live = []

    def share(self, index: int, n: int) -> dict[str, Any]:
        return {"rate": split(self.rate, n, index), "cap": split(self.cap, n, index, whole=True),
                "arrival": self.arrival, "seed": self.seed, "index": index, "n": n, "origin": self.origin,
                "host": self.environment.host, **self.extra}

    def publish(self, force: bool = False) -> None:
        """Send each live worker its share if it changed, or to all with ``force`` (local: apply
        it). The master forces every few seconds: a share that reached a worker before its
        handler was registered (a worker that just connected) is replaced; workers ignore a
        share equal to the one they run."""
        if force:
            self._sent.clear()
        if self.scheduler is not None:
            self.scheduler.set_share(self.share(0, 1))
            return
        runner = self.environment.runner
        live = sorted((c.id for c in runner.clients.all if c.state != "missing"), key=runner.get_worker_index)
        if live != self._live:  # a worker joined or left: every share changes, from now
            if self._live:
                self.origin = time.time()
            self._live = live
        for i, wid in enumerate(live):
            data = self.share(i, len(live))
            if self._sent.get(wid) != data:
                runner.send_message(RATE_MESSAGE, data, client_id=wid)
                self._sent[wid] = data
        for wid in set(self._sent) - set(live):
            del self._sent[wid]

    def summary(self) -> dict[str, Any]:
        return {"rate": self.rate, "arrival": self.arrival, "seed": self.seed, "max_inflight": self.cap}
