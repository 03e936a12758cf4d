"""Issue 54 items 1 and 2: a server that misbehaves without end cannot grow the client or hold
the run. Per misbehaviour (tests/e2e/hostile_server.py: a line, an NDJSON line, a body or a
header that never ends, tokens forever, a gzip bomb) a real ``locust`` run in raw mode and one in
SDK mode, side by side against one shared server: the client's RSS stays within 200 MB of what it
was at the first request, every request is one record of the expected category, the records are
the requests the server saw, and the run ends within -t + --stop-timeout + 5 s. Each run's RSS is
watched from /proc, and a run past 1 GB is killed (so a client without bounds fails the test
instead of filling the machine).

The run's end is judged from the run's own stamps, not this test's clock: summary.json's
``window.test_stop`` (Locust's ``test_stop``, once every user has stopped: -t, then at most
--stop-timeout) against the server's stamp of the first request. So the bound holds in the
parallel shards (a busy machine delays the process's start and exit, not what -t and
--stop-timeout decide); the process must still exit on its own (``run_locust``'s timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, get_json, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow  # the run-end bound reads the run's own test_stop stamp: not a wall-clock bound

RUN_S, STOP_TIMEOUT_S = 3, 5
RSS_BOUND_KB = 200 * 1024
KILL_KB = 1024 * 1024
COMMON = ("-u", "2", "-r", "2", "-t", f"{RUN_S}s", "--stop-timeout", str(STOP_TIMEOUT_S), "--llm-model", "m",
          "--llm-preflight", "off", "--llm-prometheus-port", "0", "--llm-server-metrics", "off")

# misbehaviour -> (locustfile, extra options, category raw mode gives, category SDK mode gives)
CASES: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "endless_line": ("vllm.py", (), "response_too_large", "response_too_large"),
    "endless_ndjson": ("ollama.py", (), "response_too_large", "response_too_large"),
    "endless_body": ("embeddings.py", ("--llm-max-body-bytes", "8MiB"), "response_too_large", "response_too_large"),
    "endless_head": ("vllm.py", (), "response_too_large", "response_too_large"),
    "endless_tokens": ("vllm.py", ("--llm-max-tokens", "8"), "runaway_stream", "runaway_stream"),
    "gzip_bomb": ("vllm.py", (), "malformed_stream", "response_too_large"),
}
SDK_LOCUSTFILE = {"vllm.py": "openai.py"}  # the openai SDK through the OpenAI user; the others: their own SDK
MESSAGE = {  # a word of each failure's message, per mode
    ("endless_line", "raw"): "an SSE event over 8 MiB", ("endless_line", "sdk"): "an SSE event of the body over 8 MiB",
    ("endless_ndjson", "raw"): "an NDJSON line over 8 MiB", ("endless_ndjson", "sdk"): "a line of the body over 8 MiB",
    ("endless_body", "raw"): "a whole-body answer over 8 MiB", ("endless_body", "sdk"): "a whole-body answer over 8 MiB",
    ("endless_head", "raw"): "a response head", ("endless_head", "sdk"): "a response head",
    ("endless_tokens", "raw"): "past the runaway bound of 4096", ("endless_tokens", "sdk"): "past the runaway bound",
    ("gzip_bomb", "raw"): "gzip-compressed body (Content-Encoding: gzip)", ("gzip_bomb", "sdk"): "over 8 MiB",
}


@pytest.fixture(scope="module")
def hostile() -> Any:
    names = [f"{case}/{mode}" for case in CASES for mode in ("raw", "sdk")]
    proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.hostile_server", *names], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        info["stats"] = lambda: get_json(f"http://127.0.0.1:{info['control']}/stats")
        yield info
    finally:
        proc.kill()
        proc.wait()


class RSSWatch(threading.Thread):
    """Samples (time, VmRSS, VmHWM in kB) of the locust process whose command line holds ``mark``;
    kills it past :data:`KILL_KB`."""

    def __init__(self, mark: str) -> None:
        super().__init__(daemon=True)
        self.mark = mark.encode()
        self.samples: list[tuple[float, int, int]] = []
        self.killed = False
        self.done = threading.Event()

    def run(self) -> None:
        pid = None
        while not self.done.is_set():
            pid = pid or self._find()
            status = self._status(pid) if pid else None
            if status:
                self.samples.append((time.time(), status.get("VmRSS", 0), status.get("VmHWM", 0)))
                if status.get("VmRSS", 0) > KILL_KB:
                    os.kill(pid, 9)
                    self.killed = True
            time.sleep(0.02)

    def _find(self) -> int | None:
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if self.mark in (d / "cmdline").read_bytes():
                        return int(d.name)
                except OSError:
                    continue
        return None

    @staticmethod
    def _status(pid: int) -> dict[str, int] | None:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return None
        return {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if k in ("VmRSS", "VmHWM")}

    def growth_kb(self, since: float) -> int:
        """The peak (VmHWM) less the RSS at ``since`` (the first request)."""
        before = [rss for t, rss, _ in self.samples if t <= since] or [self.samples[0][1]]
        return self.samples[-1][2] - before[-1]


def _run(case: str, mode: str, port: int, report: Path, out: dict[str, Any]) -> None:
    locustfile, extra, _, _ = CASES[case]
    if mode == "sdk":
        locustfile = SDK_LOCUSTFILE.get(locustfile, locustfile)
    watch = RSSWatch(str(report))
    watch.start()
    try:
        out["proc"] = run_locust(locustfile, "--host", f"http://127.0.0.1:{port}", *COMMON, *extra,
                                 "--llm-client", mode, report=report, env={"OPENAI_API_KEY": "sk-any"}, timeout=90)
    finally:
        watch.done.set()
        watch.join()
        out["watch"] = watch


@pytest.mark.parametrize("case", list(CASES))
def test_a_misbehaving_server_is_cut_with_memory_flat_and_every_request_recorded(case: str, hostile,
                                                                                 tmp_path) -> None:
    runs: dict[str, dict[str, Any]] = {"raw": {}, "sdk": {}}
    threads = [threading.Thread(target=_run, args=(case, mode, hostile["ports"][f"{case}/{mode}"], tmp_path / mode,
                                                   runs[mode])) for mode in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = hostile["stats"]()
    for mode, run in runs.items():
        proc, watch = run["proc"], run["watch"]
        seen = stats.get(f"{case}/{mode}")
        assert seen and seen["requests"] >= 2, (mode, seen, proc.stderr[-2000:])
        assert not watch.killed and watch.samples, (mode, "the client passed 1 GB: killed")
        growth = watch.growth_kb(seen["first"])
        assert growth < RSS_BOUND_KB, (mode, f"RSS grew {growth / 1024:.0f} MB")
        window = read_summary(tmp_path / mode)["window"]  # the run's own stamps (time.time(), as the server's)
        assert window["test_start"] <= seen["first"], (mode, window, seen)
        ran = window["test_stop"] - seen["first"]
        assert ran < RUN_S + STOP_TIMEOUT_S + 5, (mode, ran)
        assert seen["accept_encoding"] == ["identity"], (mode, seen)  # raw mode, and every SDK in SDK mode
        records = read_records(tmp_path / mode)
        expected = CASES[case][2 if mode == "raw" else 3]
        assert len(records) == seen["requests"], (mode, len(records), seen, proc.stderr[-2000:])
        assert {(r["status"], r["error_category"]) for r in records} == {("error", expected)}, (mode, records[:2])
        assert all(MESSAGE[case, mode] in r["error_message"] for r in records), (mode, records[0]["error_message"])
