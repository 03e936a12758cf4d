"""sim/launcher.py: a dead child reported, stop and context, the simulator exits with its parent."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llm_users.sim.launcher import start_simulator


def test_launcher_reports_a_dead_child():
    with pytest.raises(RuntimeError) as info:
        start_simulator(["--ttft-dist", "bogus"], timeout=20)
    assert "exited with status" in str(info.value) and "invalid choice" in str(info.value)


def test_launcher_stop_and_context(tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_simulator(["--trace-file", str(trace), "--ttft-ms", "1", "--itl-ms", "1", "--output-tokens", "3"])
    try:
        assert sim.url.startswith("http://127.0.0.1:") and sim.alive()
        from tests.sim import simhttp

        r = simhttp.request(sim.url, "/api/generate", {"model": "o", "prompt": "x"}, {"X-Request-Id": "file-1"})
        assert r.status == 200
        simhttp.trace(sim.url, "file-1")
    finally:
        code = sim.stop()
    assert code == 0 and not sim.alive()
    lines = trace.read_text().splitlines()
    assert len(lines) == 1 and '"request_id":"file-1"' in lines[0]


def test_simulator_exits_with_its_parent():
    """A Locust killed with SIGKILL must not leave its auto-started simulator behind."""
    import os
    import time

    code = ("import time; from llm_users.sim.launcher import start_simulator; s = start_simulator([]); "
            "print(s.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not gone():
        os.kill(pid, 9)
        pytest.fail("the simulator outlived its parent")
