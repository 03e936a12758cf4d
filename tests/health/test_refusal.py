"""health/refusal.py: the one line for Locust's own start errors, and the forked workers a refusal
stops (a real fork of this process)."""

from __future__ import annotations

import errno
import os
import signal
import time

from locust.exception import RPCError

from llm_users.health.refusal import forked_workers, start_error_line, stop_forked_workers, web_port_line


def test_the_lines_for_ports_in_use() -> None:
    line = start_error_line(RPCError("Socket bind failure: Address already in use (addr='tcp://127.0.0.1:5557')"))
    assert line is not None and "tcp://127.0.0.1:5557" in line and "--master-bind-port" in line
    assert "in use" in (start_error_line(OSError(errno.EADDRINUSE, "Address already in use")) or "")
    assert start_error_line(ValueError("something else")) is None  # everything else: Python's own traceback
    assert start_error_line(RPCError("another failure")) is None
    busy = web_port_line(OSError(errno.EADDRINUSE, "Address already in use"), "", 8089)
    assert "*:8089" in busy and "--web-port" in busy and "--headless" in busy
    assert "Permission denied" in web_port_line(OSError(errno.EACCES, "Permission denied"), "127.0.0.1", 80)


def exited(pid: int) -> bool:
    """Exited: a zombie until reaped (whoever waits for it, Locust's exit clean-up, reaps it), or
    reaped already (gevent's child watcher, once gevent has patched this process, reaps at once)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def test_a_refusal_stops_the_forked_workers_and_nothing_else() -> None:
    """The worker is killed (SIGKILL, not its own exit 600 s later) and waited for: exited when
    the call returns, which is on the exit, not at the end of the call's 60 s bound."""
    pid = os.fork()
    if pid == 0:  # the "worker": a fork of this process, same command line
        time.sleep(600)
        os._exit(0)
    try:
        assert forked_workers() == [pid]
        start = time.monotonic()
        assert stop_forked_workers(wait_s=60) == [pid]
        assert time.monotonic() - start < 30  # returned on the exit (ms), not its 60 s deadline
        assert exited(pid)
        _, status = os.waitpid(pid, 0)  # gevent's, once it has patched this process: the status it reaped
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert forked_workers() == []
