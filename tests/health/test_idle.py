"""IdleQueue: items wait for a quiet loop, ready sockets go first, nothing is lost or reordered."""

from __future__ import annotations

import time

import gevent
import gevent.socket

from llm_users.distributed import Collector, Shipper
from llm_users.health.idle import RECHECK_S, IdleQueue, serve_ready_io
from llm_users.metrics import RequestRecord


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_a_ready_socket_is_served_before_the_next_item() -> None:
    """What it is for: bytes that arrive while records are processed are read (and stamped)
    after at most the item in hand, not after the whole burst. Run synchronously, as the
    records' statistics were, the reader would come after all ten."""
    order: list[str] = []
    a, b = gevent.socket.socketpair()

    def reader() -> None:
        a.recv(1)
        order.append("read")

    def process(i: int) -> None:
        order.append(f"p{i}")
        busy(1)
        if i == 0:
            b.send(b"x")  # bytes arrive while the burst is being processed

    q: IdleQueue[int] = IdleQueue(process)
    g = gevent.spawn(reader)
    gevent.sleep(0)  # the reader waits on its socket
    for i in range(10):
        q.put(i)
    g.join(2)
    gevent.sleep(0.05)
    assert order.index("read") == 1, order
    assert [x for x in order if x != "read"] == [f"p{i}" for i in range(10)]


def test_serve_ready_io_lets_a_ready_socket_in_between_pieces_of_work() -> None:
    """Ten 1 ms pieces of work with ``serve_ready_io`` between them: bytes that arrive during
    the first piece are read before the second. (``gevent.sleep(0)`` in its place let the
    reader in only after all ten: its continuations run before the loop polls.)"""
    order: list[str] = []
    a, b = gevent.socket.socketpair()

    def reader() -> None:
        a.recv(1)
        order.append("read")

    def worker() -> None:
        for i in range(10):
            if i == 0:
                b.send(b"x")
            busy(1)
            order.append(f"w{i}")
            serve_ready_io()

    gevent.joinall([gevent.spawn(reader), gevent.spawn(worker)], timeout=5)
    assert order.index("read") == 1, order
    assert [x for x in order if x != "read"] == [f"w{i}" for i in range(10)]


def test_serve_ready_io_does_not_wait_for_the_next_event_on_a_quiet_loop() -> None:
    """It polls without blocking: with nothing ready and the next timer 2 s away, it returns
    at once (a check watcher, which waits for the next poll, would wait for that timer): after
    100 calls the timer has not fired."""
    fired: list[bool] = []
    later = gevent.spawn_later(2.0, fired.append, True)
    try:
        for _ in range(100):
            serve_ready_io()
        assert fired == [], "a call waited for the timer 2 s away"
    finally:
        later.kill()


def test_a_saturated_loop_still_serves_a_ready_socket_between_items() -> None:
    """When the loop never idles, items go on the backlog and age limits, and a socket found
    ready while one is processed is read before the next."""
    order: list[str] = []
    a, b = gevent.socket.socketpair()
    stop = False

    def spin() -> None:  # ready work on every turn: the loop never idles
        while not stop:
            busy(0.05)
            gevent.sleep(0)

    def reader() -> None:
        a.recv(1)
        order.append("read")

    def process(i: int) -> None:
        order.append(f"p{i}")
        if i == 0:
            b.send(b"x")
        busy(1)

    q: IdleQueue[int] = IdleQueue(process, max_backlog=6, max_age_s=0.05)
    g, r = gevent.spawn(spin), gevent.spawn(reader)
    try:
        gevent.sleep(0.01)  # the reader waits on its socket, the spinner spins
        for i in range(6):
            q.put(i)  # a backlog of 6: urgent from the start
        r.join(2)
        t = time.perf_counter()
        while len(order) < 7 and time.perf_counter() - t < 2:
            gevent.sleep(0.001)
    finally:
        stop = True
        g.join(1)
    assert order.index("read") == 1, order
    assert [x for x in order if x != "read"] == [f"p{i}" for i in range(6)]


def test_one_worker_serves_every_burst_and_close_ends_it() -> None:
    seen: list[int] = []
    q: IdleQueue[int] = IdleQueue(seen.append)
    q.put(0)
    gevent.sleep(0.02)
    worker = q._worker
    assert seen == [0] and worker is not None and not worker.dead
    q.put(1)  # into an empty queue: the parked worker wakes
    gevent.sleep(0.02)
    assert seen == [0, 1] and q._worker is worker
    q.close()
    gevent.sleep(0)
    assert worker.dead and q._worker is None
    q.put(2)  # a new worker
    gevent.sleep(0.02)
    assert seen == [0, 1, 2]


def test_items_wait_for_an_idle_loop_and_flush_takes_them_now() -> None:
    seen: list[int] = []
    q: IdleQueue[int] = IdleQueue(seen.append)
    for i in range(3):
        q.put(i)
    assert seen == [] and len(q) == 3  # nothing in the putting greenlet
    q.flush()
    assert seen == [0, 1, 2] and len(q) == 0
    for i in range(3, 6):
        q.put(i)
    gevent.sleep(0.01)  # an idle loop takes them
    assert seen == [0, 1, 2, 3, 4, 5]


def test_a_loop_that_never_idles_still_gets_them_done(monkeypatch) -> None:
    """A saturated client (ready work every turn): items go once the backlog or the oldest
    item's wait reaches its limit, still in order. The lone item goes at the first look after
    its max_age_s, whatever the machine's speed: each look waits RECHECK_S at least, so it goes
    within max_age_s / RECHECK_S (10) looks of its put, 20 allowed (a queue that ignored its own
    0.05 s for the default 0.5 s would take 100)."""
    seen: list[int] = []
    stop = False
    looks = [0]
    wait_quiet = IdleQueue._wait_quiet

    def counted() -> str | None:
        looks[0] += 1
        return wait_quiet()

    monkeypatch.setattr(IdleQueue, "_wait_quiet", staticmethod(counted))

    def spin() -> None:  # always ready: the loop is never idle while it runs
        while not stop:
            busy(0.05)
            gevent.sleep(0)

    q: IdleQueue[int] = IdleQueue(seen.append, max_backlog=4, max_age_s=0.05)
    g = gevent.spawn(spin)
    try:
        q.put(0)
        gevent.sleep(0.02)
        assert seen == [], "an item waits while the loop is busy"
        for i in range(1, 4):
            q.put(i)  # the backlog reaches 4: they go
        t = time.perf_counter()
        while len(seen) < 4 and time.perf_counter() - t < 1:
            gevent.sleep(0.001)
        assert seen == [0, 1, 2, 3]
        looks[0] = 0
        q.put(4)  # alone: goes when it has waited max_age_s
        t = time.perf_counter()
        while len(seen) < 5 and time.perf_counter() - t < 10:
            gevent.sleep(0.001)
        waited = time.perf_counter() - t
        assert seen == [0, 1, 2, 3, 4] and not g.dead  # gone while the loop was still busy: by its age
        assert waited >= 0.03, waited  # it waited its max_age_s
        assert looks[0] <= 2 * 0.05 / RECHECK_S, looks  # ... and went at the first look after it
    finally:
        stop = True
        g.join(1)


def _record(i: int) -> RequestRecord:
    return RequestRecord(f"r{i}", "/x", "vllm", "m", start_time=float(i), ttft_ns=1_000_000 * (i + 1),
                         e2e_ns=50_000_000, itl_ns=[2_000_000, 3_000_000], output_tokens=3, tokens_source="usage")


def test_collector_and_shipper_readers_see_every_record() -> None:
    """Readers of the statistics (a summary, a payload to the master) never miss a record
    still waiting for the loop."""
    c = Collector()
    for i in range(5):
        c.add_record(_record(i))
    assert c.records == 5  # kept at once (records file, timeline, observers)
    assert c.stats.summary()["overall"]["requests"] == 5
    s = Shipper("w1")
    for i in range(4):
        s.add(_record(i))
    p = s.payload()
    assert p["record_count"] == 4
    merged = Collector()
    merged.receive(p, now=2000.0)
    assert merged.stats.summary()["overall"]["requests"] == 4
