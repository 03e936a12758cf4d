"""One client connection: a raw non-blocking socket (or a TLS one) with a reusable read watcher,
and the per-response read deadline that costs nothing per read.

The streaming client (:mod:`llm_users.client.stream`) owns one per user; every method here is a
single wait or syscall on the hot path (docs/decisions/client.md, decision 1).
"""

from __future__ import annotations

import errno
import socket as _stdsocket  # constants only: the class may be gevent's after monkey-patching
import time
from typing import Any

import gevent
import gevent.select
from gevent import Timeout

from llm_users.health.idle import first_of

perf_counter_ns = time.perf_counter_ns


class Connection:
    """One TCP (or TLS) connection with a reusable read watcher and read timers."""

    __slots__ = ("sock", "tls", "_hub", "_watcher", "requests", "idle_since", "after_chunked")

    def __init__(self, sock: Any, tls: bool) -> None:
        self.sock = sock
        self.tls = tls
        self.requests = 0
        self.idle_since = 0  # perf_counter_ns the last response on it ended
        self.after_chunked = False  # whether that response was chunked (a stream)
        self._hub = gevent.get_hub()
        self._watcher = None if tls else self._hub.loop.io(sock.fileno(), 1)

    def send_all(self, data: bytes) -> None:
        if self.tls:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                self._hub.wait(self._hub.loop.io(self.sock.fileno(), 2))
                continue
            view = view[sent:]

    def recv_into(self, buf: bytearray, timeout: Timeout | None) -> int:
        """Wait until readable (or ``timeout`` fires), then read once. 0 means EOF.

        ``timeout`` must be a fresh (never started) Timeout or None (a :class:`ReadDeadline`
        watches the connection instead): gevent's Timeout, started again after ``cancel()``,
        resumes its remaining time rather than starting over."""
        if self.tls:
            self.sock.settimeout(timeout.seconds if timeout is not None else None)
            try:
                return self.sock.recv_into(buf)
            except TimeoutError:
                raise timeout from None
        while True:
            if timeout is not None:
                timeout.start()
            try:
                self._hub.wait(self._watcher)
            finally:
                if timeout is not None:
                    timeout.cancel()
            try:
                return self.sock.recv_into(buf)
            except BlockingIOError:
                continue  # spurious wake-up

    def is_dropped(self) -> bool:
        """An idle connection that cannot carry a request: the server closed it (EOF or reset)
        or sent bytes nobody asked for. A zero-timeout check, before anything is sent."""
        if self.tls:
            readable, _, _ = gevent.select.select([self.sock], [], [], 0)
            return bool(readable)
        try:
            self.sock.recv(1, _stdsocket.MSG_PEEK)
        except BlockingIOError:
            return False  # nothing to read: alive
        except OSError as e:
            return e.errno != errno.EINTR
        return True  # b"" (EOF) or unexpected bytes

    def wait_readable(self, seconds: float) -> None:
        """Up to ``seconds`` for the server to close (or send): before a first reuse. A read
        watcher and a timer, the first to fire wins (``select`` built more per call, and 400
        streams' first reuses at once left 0.8 KB a stream in RSS)."""
        if self.tls:
            gevent.select.select([self.sock], [], [], seconds)
            return
        loop = self._hub.loop
        first_of((loop.io(self.sock.fileno(), 1), "readable"), (loop.timer(seconds), None))

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        try:
            self.sock.close()
        except OSError:
            pass


class ReadDeadline:
    """The longest gap between reads, for nothing per read: one libev timer per response,
    armed for the whole limit. Reads only stamp their time (the exchange's ``now``, taken anyway);
    when the timer fires it re-arms for what is left since the last read, or throws ``exc``
    (the client's read Timeout, never started itself) into the reading greenlet."""

    __slots__ = ("limit_ns", "exc", "timer", "ex", "greenlet")

    def __init__(self, seconds: float, exc: BaseException) -> None:
        self.limit_ns = int(seconds * 1e9)
        self.exc = exc
        self.timer: Any = None
        self.ex: Any = None
        self.greenlet: Any = None

    def start(self, ex: Any) -> None:
        self.ex = ex
        self.greenlet = gevent.getcurrent()
        self._arm(self.limit_ns)

    def _arm(self, ns: int) -> None:
        self.timer = gevent.get_hub().loop.timer(max(ns, 0) / 1e9)
        self.timer.start(self._fire)

    def _fire(self) -> None:
        left = self.limit_ns - (perf_counter_ns() - self.ex.now)
        if left > 0:
            self._arm(left)
        else:
            self.timer = None
            self.greenlet.throw(self.exc)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer.close()
            self.timer = None
        self.ex = self.greenlet = None
