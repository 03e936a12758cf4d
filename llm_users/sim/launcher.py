"""Start the simulator as a child process and wait until it serves.

Used by the locustfiles (auto-start when no ``--host`` is given) and by tests::

    with start_simulator(["--ttft-ms", "100", "--itl-ms", "10"]) as sim:
        requests.post(sim.url + "/v1/chat/completions", ...)

The child is ``sys.executable -m llm_users.sim --host 127.0.0.1 --port 0 --exit-with-parent
*args``; its ready line on stdout gives the URL. Its stderr goes to a temporary file, quoted in
the RuntimeError raised when the child dies or does not get ready in time. Standard library
only, so gevent-patched processes (Locust) can use it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO

READY = re.compile(r"^llm-sim: serving on (https?://\S+)\s*$")


class SimProcess:
    """A running simulator child: ``url``, ``process``, ``stop()``; a context manager."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, stderr: IO[bytes]) -> None:
        self.process = process
        self.url = url
        self._stderr = stderr

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr_text(self) -> str:
        return _read_all(self._stderr)

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds. Returns the exit code."""
        proc = self.process
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self._stderr.closed:
            self._stderr.close()
        return proc.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SimProcess pid={self.process.pid} url={self.url}>"


def _read_all(f: IO[bytes]) -> str:
    if f.closed:
        return ""
    f.flush()
    f.seek(0)
    return f.read().decode(errors="replace")


def _drain(stream: IO[bytes]) -> None:
    try:
        while stream.read(65536):
            pass
    except (OSError, ValueError):
        pass


def start_simulator(
    args: Sequence[str] = (), *, env: Mapping[str, str] | None = None, timeout: float = 20,
    pythonpath: Sequence[str] = (),
) -> SimProcess:
    """Run the simulator with extra CLI ``args``; return once it prints its ready line.

    ``env`` entries are added to this process's environment for the child; ``pythonpath``
    directories go first on its PYTHONPATH (where a ``--routes`` module lives). Raises
    RuntimeError (with the child's stderr) if it exits or is not ready within ``timeout`` s.
    """
    cmd = [sys.executable, "-m", "llm_users.sim", "--host", "127.0.0.1", "--port", "0", "--exit-with-parent",
           *args]
    child_env = dict(os.environ)
    if env:
        child_env.update(env)
    if pythonpath:
        child_env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *filter(None, [child_env.get("PYTHONPATH")])])
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 - owned by the SimProcess
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=child_env)
    assert proc.stdout is not None
    lines: list[bytes] = []
    got = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        lines.append(line)
        got.set()
        _drain(proc.stdout)  # keep the pipe from filling, whatever the child prints later

    threading.Thread(target=reader, name="llm-sim-stdout", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not got.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            break
    m = READY.match(lines[0].decode(errors="replace")) if lines else None
    if m is None:
        if got.is_set():  # stdout closed (or an unexpected line): give the child a moment to exit
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                pass
        died = proc.poll() is not None
        if not died:
            proc.kill()
            proc.wait()
        reason = f"exited with status {proc.returncode}" if died else f"was not ready after {timeout:g} s"
        first = lines[0].decode(errors="replace").strip() if lines and lines[0] else ""
        detail = _read_all(stderr).strip()
        stderr.close()
        raise RuntimeError(
            f"llm-sim {reason} (command: {' '.join(cmd)})"
            + (f"\nstdout: {first}" if first else "")
            + (f"\nstderr:\n{detail}" if detail else "\n(no stderr output)")
        )
    return SimProcess(proc, m.group(1), stderr)
