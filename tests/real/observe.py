"""What a real server says it did, to judge our records by: llama.cpp's /metrics counters and
its log (one ``launch_slot_`` line per generation it ran), LiteLLM's access log."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import LOCUST, ROOT, locust_env
from tests.real.servers import ServerProcess, die_with_parent


def llama_counters(llama: ServerProcess) -> dict[str, float]:
    """llama.cpp's Prometheus counters (``llamacpp:`` prefix dropped)."""
    with urllib.request.urlopen(llama.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name.removeprefix("llamacpp:")] = s.value
    return out


@dataclass
class Window:
    """The server's view between :meth:`open` and :meth:`close`: tokens it generated and prompt
    tokens it processed (/metrics), generations it ran and requests it answered (its log)."""

    server: ServerProcess
    counters: dict[str, float]
    log_at: int

    @classmethod
    def open(cls, server: ServerProcess) -> Window:
        counters = llama_counters(server) if server.name == "llama.cpp" else {}
        return cls(server, counters, server.log.stat().st_size)

    def log_text(self) -> str:
        with self.server.log.open("rb") as f:
            f.seek(self.log_at)
            return f.read().decode(errors="replace")

    def generations(self) -> int:
        """llama.cpp: generations started in the window (one slot launch each)."""
        return self.log_text().count("launch_slot_")

    def requests(self, path: str) -> int:
        """LiteLLM: requests to ``path`` it answered (uvicorn's access log)."""
        return sum(1 for line in self.log_text().splitlines() if f'"POST {path}' in line)

    #: aiohttp's words for a request sent on a connection the backend had closed (the log's tracebacks)
    RACE_CAUSES = (
        "closing transport",
        "Can not write request body",
        "ServerDisconnectedError: Server disconnected",
    )

    def connection_races(self) -> int:
        """LiteLLM: requests it answered HTTP 500 because it reused a pooled connection to the
        backend just as the backend closed it (llama.cpp ends a keep-alive 5 s after a request,
        and a connection at once after a streamed response; LiteLLM, with ``num_retries: 0``, does
        not retry; the model never saw the request: docs/real-servers.md). One router line each,
        with the connection error behind it: aiohttp could not write the request (the close seen
        first), or wrote it and read the close where the response head should be (CI r78, mid-run:
        ``ServerDisconnectedError`` in ``ClientResponse.start``)."""
        log = self.log_text()
        # the router's line: "APIConnectionError" (chat, Messages, Gemini routes) or, on the
        # Responses bridge (hosted_vllm), "InternalServerError: Hosted_vllmException - Connection error."
        races = sum(
            1
            for ln in log.splitlines()
            if "Router" in ln and ("APIConnectionError" in ln or "Connection error." in ln)
        )
        if races and not any(cause in log for cause in self.RACE_CAUSES):
            raise AssertionError(f"LiteLLM's connection errors are not the keep-alive race:\n{log[-3000:]}")
        return races

    def ok_but_races(self, records: list[dict[str, Any]], logs: str = "") -> list[dict[str, Any]]:
        """LiteLLM: ``records``' successes, once every failure among them is shown to be one of
        :meth:`connection_races` (an HTTP 500, or a reset where the streamed answer had begun);
        at most two a run. A request cut by the stop (``interrupted``, :func:`held`: in flight when
        the run stopped) is no failure: at most one."""
        races = self.connection_races()
        cut = held(records)
        failed = [r for r in records if r["status"] not in ("ok", "interrupted")]
        assert len(failed) == races <= 2 and {r["error_category"] for r in failed} <= {
            "http_500",
            "connection_reset",
        }, ([r["error_message"] for r in failed], races, logs)
        assert cut <= 1, (cut, logs)
        return [r for r in records if r["status"] == "ok"]

    def delta(self, name: str) -> float:
        return llama_counters(self.server)[name] - self.counters[name]

    def assert_ran(self, ok: list[dict[str, Any]], cut: int, max_tokens: int | None = None) -> None:
        """llama.cpp: each of ``ok`` run once, each of the ``cut`` requests (:func:`held`) once at
        most; with ``max_tokens``, its token counter holds ``ok``'s output tokens and up to that many
        a cut request."""
        assert len(ok) <= self.generations() <= len(ok) + cut, (self.generations(), len(ok), cut)
        if max_tokens is not None:
            extra = self.delta("tokens_predicted_total") - sum(r["output_tokens"] for r in ok)
            assert 0 <= extra <= cut * max_tokens, (extra, cut)

    def assert_answered(self, path: str, records: list[dict[str, Any]]) -> None:
        """LiteLLM: every record's request to ``path`` in its log, but a cut one (:func:`held`)
        that may not have reached it."""
        assert len(records) - held(records) <= self.requests(path) <= len(records), (
            self.requests(path),
            len(records),
        )


def exit_code_for(records: list[dict[str, Any]]) -> int:
    """The run's expected exit code: 1 when a request failed (an ``interrupted`` one is no failure)."""
    return 1 if any(r["status"] not in ("ok", "interrupted") for r in records) else 0


def held(records: list[dict[str, Any]]) -> int:
    """Requests cut by the stop: the gateway and the model may or may not have seen them."""
    return sum(r["status"] == "interrupted" for r in records)


def records_so_far(report: Path) -> list[dict[str, Any]]:
    """The records a run has written so far (whole lines only: it is still writing the file)."""
    path = report / "requests.jsonl"
    try:
        lines = path.read_text().splitlines(keepends=True)
    except OSError:
        return []
    return [json.loads(ln) for ln in lines if ln.endswith("\n") and ln.strip()]


def ok_records(n: int) -> Callable[[Path], bool]:
    """A :func:`run_until` condition: ``n`` successful records written."""
    return lambda report: sum(r["status"] == "ok" for r in records_so_far(report)) >= n


def run_until(
    locustfile: str,
    *args: str,
    report: Path,
    until: Callable[[Path], object],
    env: dict[str, str] | None = None,
    cap_s: int = 120,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """A headless ``locust`` run (as :func:`tests.helpers.run_locust`) that stops as soon as
    ``until(report)`` is true: SIGTERM, which stops the test the way ``-t`` does (the users end the
    request they are in, within ``--stop-timeout``; run.py's ``on_quitting``), so every record is
    kept and the exit code is the run's. ``-t cap_s`` only guards a run whose condition never
    comes: the model decodes ~25 tokens/s, so a run that holds the few requests its assertions need
    is seconds, where a fixed ``-t`` had to be sized for a loaded CI machine."""
    report.mkdir(parents=True, exist_ok=True)
    out, err = report.parent / f"{report.name}.stdout", report.parent / f"{report.name}.stderr"
    cmd = [
        LOCUST,
        "-f",
        str(ROOT / "locustfiles" / locustfile),
        "--headless",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "-t",
        f"{cap_s}s",
        *args,
        "--llm-report",
        str(report),
    ]
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=locust_env(env), stdout=o, stderr=e, text=True, preexec_fn=die_with_parent()
        )
        try:
            deadline = time.monotonic() + cap_s + 30  # the cap ends the run by itself before this
            while proc.poll() is None and time.monotonic() < deadline and not until(report):
                time.sleep(0.05)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())


def any_records(n: int) -> Callable[[Path], bool]:
    """A :func:`run_until` condition: ``n`` records of any status written."""
    return lambda report: len(records_so_far(report)) >= n


def launched(server: ServerProcess, n: int) -> Callable[[Path], bool]:
    """A :func:`run_until` condition: llama.cpp has launched ``n`` generations since this call
    (its log's ``launch_slot_`` lines). Stopping then ends those requests (the stop lets a request
    in flight finish) before any user sends another: the fewest generations that hold them."""
    at = server.log.stat().st_size

    def cond(_report: Path) -> bool:
        with server.log.open("rb") as f:
            f.seek(at)
            return f.read().count(b"launch_slot_") >= n

    return cond
