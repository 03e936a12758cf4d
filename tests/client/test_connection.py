"""client/connection.py: one raw non-blocking connection (a socket pair here, the far end a gevent
socket): a whole send however the kernel splits it, one read per wait (0 at EOF), a fresh read
Timeout thrown when nothing comes, an idle connection told dropped (closed or unasked bytes) or
alive, and the read deadline that re-arms from the last read's stamp and fires past it."""

from __future__ import annotations

import socket
from time import perf_counter_ns
from types import SimpleNamespace

import gevent
import gevent.socket
import pytest
from gevent import Timeout

from llm_users.client.connection import Connection, ReadDeadline


@pytest.fixture
def pair():
    """Our end (a raw non-blocking socket in a Connection) and the server's (a gevent socket)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    conn = Connection(ours, tls=False)
    server = gevent.socket.socket(fileno=theirs.detach())
    yield conn, server
    conn.close()
    server.close()


def test_send_all_sends_every_byte_past_a_full_buffer(pair) -> None:
    conn, server = pair
    data = bytes(range(256)) * 16384  # 4 MiB: far past the socket buffers, so sends block and resume
    got = bytearray()

    def read() -> None:
        while len(got) < len(data):
            got.extend(server.recv(65536))

    reader = gevent.spawn(read)
    conn.send_all(data)
    reader.join()
    assert bytes(got) == data


def test_recv_into_reads_what_came_and_zero_at_eof(pair) -> None:
    conn, server = pair
    buf = bytearray(64)
    server.sendall(b"HTTP/1.1 200 OK\r\n")
    n = conn.recv_into(buf, None)
    assert bytes(buf[:n]) == b"HTTP/1.1 200 OK\r\n"
    server.close()
    assert conn.recv_into(buf, Timeout(5)) == 0


def test_a_read_that_waits_past_its_timeout_raises_that_timeout(pair) -> None:
    conn, _ = pair
    limit = Timeout(0.02)
    with pytest.raises(Timeout) as e:
        conn.recv_into(bytearray(8), limit)
    assert e.value is limit


def test_an_idle_connection_is_dropped_when_closed_or_sent_unasked_bytes(pair) -> None:
    conn, server = pair
    assert not conn.is_dropped()  # nothing to read: alive
    conn.wait_readable(0.01)  # nothing came: returns after its time
    server.sendall(b"x")
    conn.wait_readable(5)
    assert conn.is_dropped()  # bytes nobody asked for


def test_a_connection_the_server_closed_is_dropped(pair) -> None:
    conn, server = pair
    server.close()
    conn.wait_readable(5)
    assert conn.is_dropped()
    conn.close()
    conn.close()  # twice: no error


def test_the_read_deadline_rearms_from_the_last_read_and_fires_past_it() -> None:
    exc = Timeout(0.0)  # never started itself: only thrown
    ex = SimpleNamespace(now=perf_counter_ns())
    deadline = ReadDeadline(0.02, exc)
    deadline.start(ex)
    first = deadline.timer
    ex.now = perf_counter_ns() + 10**12  # a read stamped far past the limit's end: the fire must re-arm
    gevent.sleep(0.1)  # the 20 ms timer is due first (libev: in deadline order), however late both are
    assert deadline.timer is not None and deadline.timer is not first  # re-armed, nothing thrown
    deadline.stop()
    assert deadline.timer is None and deadline.ex is None
    stopped = ReadDeadline(0.02, exc)
    stopped.start(SimpleNamespace(now=perf_counter_ns()))
    stopped.stop()  # before its limit, with no wait between: decided, not timed
    gevent.sleep(0.1)  # stopped: nothing is thrown after its limit

    quick = ReadDeadline(0.02, exc)
    quick.start(SimpleNamespace(now=perf_counter_ns()))
    with pytest.raises(Timeout) as e:
        gevent.sleep(30)  # no read: thrown into this greenlet
    assert e.value is exc and quick.timer is None
    quick.stop()
