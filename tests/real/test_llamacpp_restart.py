"""Issue 33 item 1 against llama.cpp's own server: it is killed (SIGKILL) while users stream and
started again on the same port (the model loads again: a real restart). The streams in flight end
as ``connection_reset``, the requests while it is down fail fast (``connect_error``; a 503 while
it loads), the run recovers by itself, and every generation each life of the server ran (its
log's ``launch_slot_`` lines) is a record: records == generations across both lives. summary.json's
``outages`` holds the window and the recovery time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import LOCUST, ROOT, read_records, read_summary, wait_until
from tests.real.servers import free_port, start_llama

pytestmark = pytest.mark.slow

USERS = 2
DOWN_S = 2.0
#: a generation of this many tokens on 2 slots takes 4-6 s: both users are mid-stream 0.5 s after the
#: third launch (the kill), and the stop waits for no more than that (32 tokens, tried for issue 55, let
#: a user's answer end before the kill on a loaded CI machine: 1 stream cut of 2)
MAX_TOKENS = 64


def _launches(log: Path) -> int:
    return log.read_text(errors="replace").count("launch_slot_")


def _left(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid() and state != "Z":
            found.append(f"{pid}: {cmd}")
    return found


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_llamacpp_killed_and_restarted_on_the_same_port(client: str, tmp_path) -> None:
    port = free_port()
    first = start_llama(tmp_path / "life1", slots=USERS, ctx_per_slot=512, port=port)
    second = None
    report = tmp_path / "r"
    proc = subprocess.Popen(
        [
            LOCUST,
            "-f",
            str(ROOT / "locustfiles" / "vllm.py"),
            "--headless",
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--host",
            first.url,
            "-u",
            str(USERS),
            "-r",
            str(USERS),
            "-t",
            "40s",
            "--stop-timeout",
            "60",
            "--llm-model",
            "gemma-3-270m",
            "--llm-max-tokens",
            str(MAX_TOKENS),
            "--llm-warmup",
            "0",
            "--llm-client",
            client,
            "--llm-preflight",
            "off",  # every generation the server ran is a record
            "--exit-code-on-error",
            "0",
            "--llm-report",
            str(report),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _launches(first.log) < USERS + 1:
            time.sleep(0.1)
        time.sleep(0.5)  # every user is mid-stream (one generation each is done)
        killed_at = time.time()
        first.kill()
        time.sleep(DOWN_S)
        restarted_at = time.time()
        second = start_llama(tmp_path / "life2", slots=USERS, ctx_per_slot=512, port=port)
        ready_at = time.time()
        # recovering: the second life has launched a generation. Then the run is stopped (SIGTERM stops it as
        # -t does: the requests in flight end, so that one is the recovery), not left to run out its 40 s
        wait_until(lambda: _launches(second.log) >= 1, timeout=120, step=0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        first.stop()
        if second is not None:
            second.stop()
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    records = read_records(report)
    cats = {r["error_category"] or "ok" for r in records}
    assert cats <= {"ok", "connection_reset", "connect_error", "http_503"}, cats
    life1 = [r for r in records if r["start_time"] < killed_at]
    down = [r for r in records if killed_at < r["start_time"] < restarted_at]
    life2 = [
        r
        for r in records
        if r["start_time"] > restarted_at and r["error_category"] not in ("connect_error", "http_503")
    ]
    # records == generations, each life; nothing resent. A request sent in the instant before the
    # kill that the server never launched (no answer: no TTFB) is reset too, but is no generation
    # (seen once in CI: a user's next request went out as the kill came)
    unlaunched = [r for r in life1 if r["ttfb_ns"] is None and r["error_category"] == "connection_reset"]
    assert len(life1) - len(unlaunched) == _launches(first.log), (len(life1), len(unlaunched), first.log)
    assert len(life2) == _launches(second.log) > 0, (len(life2), second.log)
    assert all(r["status"] == "ok" for r in life2)
    cut = [r for r in life1 if r["status"] != "ok" and r not in unlaunched]
    assert len(cut) + len(unlaunched) == USERS and {r["error_category"] for r in cut} <= {"connection_reset"}
    assert cut and all(r["ttfb_ns"] is not None for r in cut)  # the server had answered them
    assert all(r["status"] == "error" and r["e2e_ns"] < 0.5e9 for r in down)
    # its 503 `Loading model` answers (~2 ms each) are the same failure repeated: backed off (issue
    # 33 item 5), a few per user instead of some 500 in the second or two the model loads
    assert sum(r["error_category"] == "http_503" for r in records) <= USERS * 8, cats
    s = read_summary(report)
    (o,) = s["outages"]
    failed = [r for r in records if r["status"] == "error"]
    assert o["failures"] == len(failed)
    assert abs(o["start"] - killed_at) < 0.5
    assert o["recovered_at"] > ready_at - 1.0  # not before the server was back (503 while loading)
    first_ok = min(
        r["start_time"] + r["e2e_ns"] / 1e9
        for r in records
        if r["status"] == "ok" and r["start_time"] + r["e2e_ns"] / 1e9 > o["end"]
    )
    assert o["recovered_at"] == pytest.approx(first_ok, abs=0.002)
    assert o["recovery_s"] == pytest.approx(o["recovered_at"] - o["start"], abs=0.002)
    assert DOWN_S < o["recovery_s"] < 40
    assert "outage at" in out and "recovered" in out
    assert not _left(str(tmp_path)), _left(str(tmp_path))
    assert not first.alive() and not second.alive()
