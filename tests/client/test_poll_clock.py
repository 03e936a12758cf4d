"""A read's stamp is the time the loop's poll found its bytes, not the time its greenlet ran:
real connections over socket pairs, woken by one poll, the first to run holding the loop."""

from __future__ import annotations

import socket
import time

import gevent
import gevent.libuv.loop
import pytest

from llm_users.client.connection import Connection
from llm_users.client.poll_clock import PollClock, for_this_thread

HOLD_MS = 60  # what each reader's work after its read holds the loop for


def _pair() -> tuple[socket.socket, Connection]:
    a, b = socket.socketpair()
    b.setblocking(False)
    return a, Connection(b, tls=False)


def _reader(conn: Connection, out: dict[str, int]) -> None:
    n = conn.recv_into(bytearray(64), None)
    out.update(n=n, stamp=conn.stamp, ran=time.perf_counter_ns())
    t = time.perf_counter_ns()
    while time.perf_counter_ns() - t < HOLD_MS * 1_000_000:  # a chunk's parsing and a record, at length
        pass


def test_streams_woken_by_one_poll_get_that_polls_time() -> None:
    """Two streams' bytes arrive together; whichever greenlet runs second waits HOLD_MS behind
    the first, yet both reads carry the poll's time: no earlier than the send, well before the
    second greenlet ran."""
    (a1, c1), (a2, c2) = _pair(), _pair()
    out1: dict[str, int] = {}
    out2: dict[str, int] = {}
    readers = [gevent.spawn(_reader, c1, out1), gevent.spawn(_reader, c2, out2)]
    gevent.sleep(0.05)  # both waiting on their sockets
    sent = time.perf_counter_ns()
    a1.send(b"x")
    a2.send(b"y")
    gevent.joinall(readers, timeout=10, raise_error=True)
    for out in (out1, out2):
        assert out["n"] == 1
        assert sent <= out["stamp"] <= out["ran"]
    first, second = sorted((out1, out2), key=lambda o: o["ran"])
    assert second["ran"] - sent >= HOLD_MS * 1_000_000  # it did wait behind the first's work
    assert first["stamp"] == second["stamp"]  # one poll found both
    assert second["stamp"] - sent < 20_000_000, (second["stamp"] - sent) / 1e6  # ms: not the wait behind the first
    for s in (a1, a2, c1, c2):
        s.close()


def test_a_read_of_bytes_that_arrived_meanwhile_is_stamped_after_they_were_sent() -> None:
    """Bytes sent while the reader's greenlet was busy, before it waited: the poll that wakes it
    comes after the send, so the stamp does too (never an older poll's time)."""
    a, c = _pair()
    for_this_thread()  # the clock ticking before the bytes go
    gevent.sleep(0.01)
    sent = time.perf_counter_ns()
    a.send(b"z")
    time.sleep(0.02)  # the loop does not run: no poll between the send and the read
    n = c.recv_into(bytearray(8), None)
    assert n == 1
    assert sent < c.stamp <= time.perf_counter_ns()
    a.close()
    c.close()


def test_the_clock_ticks_once_a_turn_of_libevs_loop() -> None:
    clock = for_this_thread()
    assert clock.running and clock is for_this_thread()
    before = clock.ns
    gevent.sleep(0.002)
    assert clock.ns > before
    assert clock.stamp(before) == clock.ns  # a read that waited through the latest poll
    latest = clock.ns
    assert clock.stamp(latest) > latest  # no poll since it began: the time it returned


@pytest.mark.parametrize("loop", [None, "libuv"])
def test_without_libevs_check_order_reads_are_stamped_when_they_return(loop) -> None:
    """libuv runs I/O callbacks inside its poll, before check handles: no clock there (or with no
    loop at all), and every stamp is the time the read returned."""
    clock = PollClock(gevent.libuv.loop.loop() if loop else None)
    assert not clock.running and clock.ns == 0
    t = time.perf_counter_ns()
    assert t <= clock.stamp(clock.ns) <= time.perf_counter_ns()
