"""Start-time refusals, one line everywhere: ``locust-llm: <what is wrong>``, exit 1, no traceback,
and no process of the run left behind.

Our own checks (the settings, the host, the preflight) call :func:`refuse`. Locust's own start
errors are caught where they happen:

- a bad ``-u``/``-r``/``-t`` (or any other argument Locust's parser refuses): the parser's
  ``error`` (:func:`on_parser`, an ``init_command_line_parser`` listener) says it as our line,
  exit 1 where argparse would exit 2 with a usage; a negative ``-u``, which Locust's parser takes
  (its dispatcher then raised a 48-line traceback and the run waited out ``-t``), is refused there
  too (:func:`users_count`);
- the master's port in use (``--master-bind-port``): Locust's ``RPCError`` from the zmq bind
  leaves ``main`` uncaught, before the ``init`` event; our ``sys.excepthook`` turns it into one
  line (the process exits 1 as with any uncaught exception);
- the web UI's port in use (``--web-port``): gevent's server binds in the web UI's greenlet after
  ``init``, and its ``OSError`` was a 71-line traceback; :func:`guard_web_ui` wraps the greenlet's
  ``start_server`` so the bind's ``OSError`` is a refusal.

With ``--processes N`` the refusing parent has forked its workers already, and Locust's own
clean-up at exit (``kill_workers``) drops a child it polls before the child has exited without
signalling it: the workers ran on for about a minute with parent 1, until their master heartbeat
timed out. :func:`refuse` (and the excepthook) kill this process's forked workers first (children
with this process's own command line, found in ``/proc``) and wait until they are gone.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import gevent

PREFIX = "locust-llm: "
WORKERS_GONE_S = 3.0  # how long a refusal waits for its killed forked workers to exit
_previous_hook: Any = None


def say(message: str) -> None:
    print(f"{PREFIX}{message}", file=sys.stderr, flush=True)


def refuse(message: str) -> NoReturn:
    """Stop at start: one line, this process's forked workers stopped, exit 1."""
    say(message)
    stop_forked_workers()
    sys.exit(1)


# -- Locust's own start errors -------------------------------------------------------------------

def on_parser(parser: Any, **_: Any) -> None:
    """``init_command_line_parser``: Locust's argument errors and uncaught bind errors as our line."""
    parser.error = _argument_error
    for action in getattr(parser, "_actions", ()):
        if action.dest == "num_users":  # -u/--users (LOCUST_USERS, a config file's users)
            action.type = users_count
    install_excepthook()


def users_count(value: str) -> int:
    """``-u``'s type: a whole number, 0 or more."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"the number of users must be 0 or more, got {n}")
    return n


def _argument_error(message: str) -> NoReturn:
    refuse(f"{message} (llm-options lists the --llm-* options, locust --help Locust's own)")


def install_excepthook() -> None:
    global _previous_hook
    if sys.excepthook is not _excepthook:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    line = start_error_line(value)
    if line is None:
        (_previous_hook or sys.__excepthook__)(kind, value, tb)
        return
    say(line)
    stop_forked_workers()


def start_error_line(exc: BaseException) -> str | None:
    """The one line for a known start-time error Locust raises uncaught, or None."""
    text = str(exc)
    if type(exc).__name__ == "RPCError" and "Address already in use" in text:
        found = re.search(r"addr='([^']+)'", text)
        where = found.group(1) if found else "its address"
        return (f"the master's port is in use ({where}, --master-bind-port): stop what holds it or choose "
                "another port")
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"an address this run binds is in use ({exc.strerror}): stop what holds it or choose another port"
    return None


def web_port_line(exc: OSError, host: str, port: int) -> str:
    where = f"{host or '*'}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"the web UI's port is in use ({where}, --web-port): stop what holds it, choose another "
                "port, or run --headless")
    return f"cannot open the web UI at {where} (--web-host/--web-port): {exc.strerror or exc}"


def guard_web_ui(web_ui: Any) -> None:
    """Make a failed bind of the web UI (after ``init``, in its own greenlet) a refusal."""
    if web_ui is None or getattr(web_ui, "_llm_guarded", False):
        return
    start = web_ui.start_server

    def start_server() -> None:
        try:
            start()
        except OSError as e:  # the bind
            if getattr(web_ui, "server", None) is not None and getattr(web_ui.server, "started", False):
                raise
            say(web_port_line(e, web_ui.host, web_ui.port))
            stop_forked_workers()
            # exit 1 from the main greenlet, as gevent does with a SystemExit raised in a greenlet,
            # without Locust's log line about this greenlet's sys.exit
            gevent.get_hub().parent.throw(SystemExit(1))

    web_ui.start_server = start_server
    web_ui._llm_guarded = True


# -- the forked workers (--processes) ------------------------------------------------------------

def forked_workers() -> list[int]:
    """This process's children that are forks of it (same command line): ``--processes`` workers."""
    me = os.getpid()
    try:
        mine = Path(f"/proc/{me}/cmdline").read_bytes()
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == me and Path(f"/proc/{entry}/cmdline").read_bytes() == mine:
                pids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def stop_forked_workers(wait_s: float = WORKERS_GONE_S) -> list[int]:
    """Kill the forked workers (they have done nothing yet) and wait until they have exited,
    leaving them to be reaped by whoever waits for them (Locust's exit clean-up)."""
    pids = forked_workers()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    break
            except ChildProcessError:
                break
            time.sleep(0.02)
    return pids
