"""Test helpers: run a real locust process, read its outputs, talk to the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.real.servers import die_with_parent, free_port  # servers.py is standalone

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")


def get_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def run_locust(
    locustfile: str,
    *args: str,
    report: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    csv_prefix: Path | None = None,
    only_summary: bool = True,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a real `locust` process headless from the project root (``only_summary=False``:
    with Locust's stats table every 2 s on stderr; ``preexec_fn``: run in the child before it
    starts, e.g. its CPUs and niceness)."""
    cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / locustfile), "--headless",
           *(["--only-summary"] if only_summary else []), "--loglevel", "WARNING", *args]
    if report is not None:
        cmd += ["--llm-report", str(report)]
    if csv_prefix is not None:  # Locust's final stats, written at exit (its CSV is periodic)
        cmd += ["--json-file", str(csv_prefix)]
    dies = die_with_parent()  # a test run killed from outside ends it too

    def before() -> None:
        dies()
        if preexec_fn is not None:
            preexec_fn()

    return subprocess.run(cmd, cwd=ROOT, env=locust_env(env), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=before)


#: The locustfile of each client mode in runs that test both: raw mode the vLLM locustfile (our
#: stream client), SDK mode (``--llm-client sdk``) the OpenAI locustfile through the openai SDK
#: (named like the SDK, decision 4c; it wants OPENAI_API_KEY set, any value for the simulator).
LOCUSTFILES = {"raw": "vllm.py", "sdk": "openai.py"}

#: Runs started by these helpers write no report.html unless the test asks (``"--llm-html",
#: "on"``): its charts cost 2-5 s of CPU at every run's end, the suite's largest single cost.
NO_HTML = {"LOCUST_LLM_HTML": "off"}


def locust_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``LOCUST_*`` settings (a developer's own would leak
    into the run), :data:`NO_HTML`, plus ``extra``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | NO_HTML | (extra or {})


def start_locust(args: list[str], log: Path, *, locustfile: str | Path = "vllm.py", loglevel: str = "INFO",
                 cwd: Path = ROOT, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
    """Start a real `locust` process in the background, stdout and stderr into ``log``
    (a locustfile name is one of locustfiles/; a path is taken as it is). Started elsewhere
    than the project root, the project stays importable (PYTHONPATH)."""
    path = locustfile if isinstance(locustfile, Path) else ROOT / "locustfiles" / locustfile
    where = {} if cwd == ROOT else {"PYTHONPATH": str(ROOT)}
    popen.setdefault("preexec_fn", die_with_parent())  # a test run killed from outside ends it too
    return subprocess.Popen([LOCUST, "-f", str(path), "--loglevel", loglevel, *args], cwd=cwd,
                            env=locust_env(where | (env or {})), stdout=log.open("w"), stderr=subprocess.STDOUT, **popen)


def master_args(port: int, workers: int = 2) -> list[str]:
    """A master on loopback ``port`` waiting for ``workers`` workers."""
    return ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--expect-workers", str(workers)]


def worker_args(port: int) -> list[str]:
    return ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]


def processes_args(n: int = 2) -> list[str]:
    """``--processes n`` on a free master port (Locust's default 5557 may be taken by another test)."""
    port = str(free_port())
    return ["--processes", str(n), "--master-bind-port", port, "--master-port", port]


def wait_until(cond: Callable[[], Any], timeout: float, step: float = 0.25) -> Any:
    """Poll ``cond`` every ``step`` seconds until it returns something true (returned) or
    ``timeout`` seconds pass (None)."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            return None
        time.sleep(step)


def wait_served(sim_url: str, n: int, timeout: float = 60) -> None:
    """Until the simulator has served ``n`` requests (its ``/_sim/stats``): a run under way."""
    if not wait_until(lambda: get_json(sim_url + "/_sim/stats")["served"] >= n, timeout, step=0.2):
        raise AssertionError(f"the simulator did not serve {n} requests within {timeout} s: the run did not start")


def read_records(report: Path) -> list[dict[str, Any]]:
    with (report / "requests.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def read_summary(report: Path) -> dict[str, Any]:
    return json.loads((report / "summary.json").read_text())


def locust_request_count(prefix: Path) -> int:
    """Locust's own request count, from the stats it saved with --json-file at exit."""
    entries = json.loads(Path(f"{prefix}.json").read_text())
    return sum(int(e["num_requests"]) for e in entries)


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class closing_sse_server:  # noqa: N801 - used as a context manager, like open()
    """A loopback server that answers every request with a short chunked stream (OpenAI's or
    Anthropic's ``frames``, and ``Keep-Alive``), then closes the connection ``close_after`` seconds later whatever arrived
    meanwhile: llama.cpp's server's habit. ``url``, ``port``, ``requests`` (answered)."""

    OPENAI = (b'data: {"choices":[{"index":0,"delta":{"content":"y"},"finish_reason":"stop"}],'
              b'"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n', b"data: [DONE]\n\n")
    ANTHROPIC = tuple(b"event: %b\ndata: %b\n\n" % (e.split(b'"')[3], e) for e in (
        b'{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],'
        b'"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}',
        b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"y"}}',
        b'{"type":"content_block_stop","index":0}',
        b'{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}',
        b'{"type":"message_stop"}'))

    def __init__(self, close_after: float = 0.003, frames: tuple[bytes, ...] = OPENAI) -> None:
        import gevent.socket

        self.close_after = close_after
        self.answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                       b"Keep-Alive: timeout=5, max=100\r\n\r\n"
                       + b"".join(b"%x\r\n%b\r\n" % (len(f), f) for f in frames) + b"0\r\n\r\n")
        self.listener = gevent.socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = 0

    def _handle(self, conn: Any) -> None:
        import gevent

        if conn.recv(65536):
            self.requests += 1
            conn.sendall(self.answer)
        gevent.sleep(self.close_after)  # then closes; what arrived meanwhile is unread: the kernel resets
        conn.close()

    def _serve(self) -> None:
        import gevent

        while True:
            conn, _ = self.listener.accept()
            gevent.spawn(self._handle, conn)

    def __enter__(self) -> closing_sse_server:
        import gevent

        self._greenlet = gevent.spawn(self._serve)
        return self

    def __exit__(self, *exc: object) -> None:
        self._greenlet.kill()
        self.listener.close()


def run_delay_ms(pid: int | str = "self") -> float:
    """How long process ``pid``'s threads have waited for a core, in all, in ms (the second field
    of each thread's /proc schedstat; 0 where unreadable). A timing test in the quiet lane takes
    the difference over its measurement as the contention it met, and allows that much more
    (issue 55 item 3: a figure corrected for the contention it measured, not a looser bound)."""
    total = 0
    for f in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(f.read_text().split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6
