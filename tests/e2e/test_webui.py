"""The LLM tab in Locust's web UI: declared in the page, rows in /stats/requests, and the
summary route, from a real locust process running with its web UI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from tests.helpers import LOCUST, ROOT, free_port, start_locust

pytestmark = pytest.mark.slow



def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_llm_tab_serves_merged_rows(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "10", "--seed", "1")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    proc = subprocess.Popen([LOCUST, "-f", str(ROOT / "locustfiles" / "vllm.py"), "--host", sim.url,
                             "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "4", "-r", "4",
                             "-t", "30s", "--llm-prometheus-port", "0"], cwd=ROOT, env=env,
                            stdout=(tmp_path / "log").open("w"), stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        rows = []
        while time.time() < deadline:
            time.sleep(1)
            try:
                stats = json.loads(fetch(base + "/stats/requests"))
            except OSError:
                continue
            ext = {e["key"]: e["data"] for e in stats.get("extendedStats", [])}
            rows = ext.get("llm", [])
            if rows and rows[-1]["requests"] >= 8:
                break
        assert rows, (tmp_path / "log").read_text()[-2000:]
        agg = rows[-1]
        assert agg["name"] == "Aggregated" and agg["failures"] == 0
        page = fetch(base + "/").decode()
        assert '"extendedTabs"' in page or "extendedTabs" in page
        summary = json.loads(fetch(base + "/llm/summary.json"))
        assert summary["overall"]["requests"] >= agg["requests"]
        # stopped, the row is the run's own figures: summary.json's (read first: it takes in every
        # record still waiting), rounded as the tab rounds; TTFT at least the simulator's 30 ms and
        # E2E at least its 30 + 9 x 3, TTFT p50 <= E2E p50 (each request's TTFT <= its E2E): the
        # columns hold TTFT, ITL and E2E in ms, whatever the machine's speed
        urllib.request.urlopen(urllib.request.Request(base + "/stop", method="POST"), timeout=10).read()
        deadline = time.time() + 60
        while json.loads(fetch(base + "/stats/requests"))["state"] != "stopped" and time.time() < deadline:
            time.sleep(0.2)
        o = json.loads(fetch(base + "/llm/summary.json"))["overall"]
        stats = json.loads(fetch(base + "/stats/requests"))
        assert stats["state"] == "stopped", stats["state"]
        row = {e["key"]: e["data"] for e in stats["extendedStats"]}["llm"][-1]
        assert row["name"] == "Aggregated" and row["requests"] == o["requests"] >= agg["requests"], (row, o)
        assert (row["ttftP50"], row["itlP50"], row["e2eP50"]) == \
            (round(o["ttft"]["p50"], 1), round(o["itl"]["p50"], 2), round(o["e2e"]["p50"])), (row, o)
        assert 29 <= row["ttftP50"] <= row["e2eP50"] and row["e2eP50"] >= 30 + 9 * 3 - 1 and row["itlP50"] > 0, row
        assert json.loads(fetch(base + "/llm/live.json"))["notes"] == []  # raw mode reuses its connections
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_summary_route_only_reads_after_the_stop(sim_factory, tmp_path) -> None:
    """Issue 26: files are written once, at the stop; GET /llm/summary.json after it builds the
    summary again but rewrites nothing (the vLLM bench export was rewritten on every GET)."""
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4", "--seed", "1")
    port = free_port()
    export, report = tmp_path / "vllm.json", tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    proc = subprocess.Popen([LOCUST, "-f", str(ROOT / "locustfiles" / "vllm.py"), "--host", sim.url,
                             "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "2", "-r", "2",
                             "-t", "3s", "--llm-prometheus-port", "0", "--llm-report", str(report),
                             "--llm-export", "vllm-bench", str(export)], cwd=ROOT, env=env,
                            stdout=(tmp_path / "log").open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 40
        while not (report / "report.html").exists() and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(1)  # the last file of the stop is written
        assert export.exists(), (tmp_path / "log").read_text()[-2000:]
        written = json.loads(export.read_text())
        assert written["completed"] > 0
        export.unlink()
        (report / "summary.json").unlink()
        base = f"http://127.0.0.1:{port}"
        for _ in range(2):
            summary = json.loads(fetch(base + "/llm/summary.json"))
        assert summary["overall"]["successes"] == written["completed"]
        time.sleep(0.5)
        assert not export.exists() and not (report / "summary.json").exists()
        assert (tmp_path / "log").read_text().count("vLLM bench result written") == 1
    finally:
        proc.terminate()
        proc.wait(30)


def test_open_loop_stages_in_the_live_data(sim_factory, tmp_path) -> None:
    """Issue 28: the live route of an open-loop run with stages says so, marks each stage's
    start, and gives per-second arrivals (the stage's rate) and in-flight requests (Little's
    law: the arrival rate times the mean request time)."""
    sim = sim_factory("--ttft-ms", "100", "--itl-ms", "20", "--output-tokens", "20", "--seed", "1")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    proc = subprocess.Popen([LOCUST, "-f", str(ROOT / "locustfiles" / "vllm.py"), "--host", sim.url,
                             "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "1", "-t", "14s",
                             "--llm-arrival", "constant", "--llm-stages", "8:6s,16:6s", "--llm-warmup", "0",
                             "--llm-prometheus-port", "0"], cwd=ROOT, env=env,
                            stdout=(tmp_path / "log").open("w"), stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 45
        state = None
        while time.time() < deadline and state != "stopped":
            time.sleep(1)
            try:
                state = json.loads(fetch(base + "/stats/requests"))["state"]
            except OSError:
                continue
        assert state == "stopped", (tmp_path / "log").read_text()[-2000:]
        time.sleep(2.5)  # the last seconds settle (1 s lag)
        live = json.loads(fetch(base + "/llm/live.json"))
        summary = json.loads(fetch(base + "/llm/summary.json"))
    finally:
        proc.terminate()
        proc.wait(30)
    assert live["openLoop"] is True
    assert [m["label"] for m in live["stages"]] == ["8 req/s", "16 req/s"]
    t8, t16 = (m["time"] for m in live["stages"])
    assert t16 - t8 == pytest.approx(6, abs=0.5)
    points = {p["time"]: p for p in live["series"]}
    assert sum(p["arrivalS"] for p in points.values()) == summary["overall"]["requests"]
    e2e_s = summary["overall"]["e2e"]["mean"] / 1000
    assert 0.45 <= e2e_s <= 1.5, e2e_s  # 100 ms + 19 x 20 ms, and what a loaded machine adds
    for start, rate in ((t8, 8), (t16, 16)):
        steady = [points[t] for t in range(int(start) + 2, int(start) + 5)]  # whole seconds well inside the stage
        arrivals = [p["arrivalS"] for p in steady]  # by start time: a late send may cross a second's edge
        assert all(abs(a - rate) <= 1 for a in arrivals) and abs(sum(arrivals) - 3 * rate) <= 1, arrivals
        inflight = sum(p["inflight"] for p in steady) / len(steady)
        assert inflight == pytest.approx(rate * e2e_s, rel=0.15), (rate, e2e_s, steady)


def start_sdk_web_ui(sim_factory, tmp_path) -> tuple[subprocess.Popen[bytes], str]:
    """locust with its web UI, started, 2 users of locustfiles/openai.py through the openai SDK
    (a connection per streamed request) on the simulator; with the web UI's URL."""
    sim = sim_factory("--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "10", "--seed", "1")
    port = free_port()
    proc = start_locust(["--host", sim.url, "--llm-client", "sdk", "--web-host", "127.0.0.1", "--web-port", str(port),
                         "--autostart", "-u", "2", "-r", "2", "-t", "60s", "--llm-prometheus-port", "0"],
                        tmp_path / "log", locustfile="openai.py", env={"OPENAI_API_KEY": "sk-test"})
    return proc, f"http://127.0.0.1:{port}"


def test_the_tab_notes_a_connection_per_request_in_sdk_mode(sim_factory, tmp_path) -> None:
    """The openai SDK opens a connection per streamed request: the tab's live data carries the
    console's note with the count since the reset, as summary.json counts them."""
    proc, base = start_sdk_web_ui(sim_factory, tmp_path)
    try:
        deadline = time.time() + 30
        notes: list[str] = []
        while time.time() < deadline and not notes:
            time.sleep(1)
            try:
                notes = json.loads(fetch(base + "/llm/live.json"))["notes"]
            except OSError:
                continue
        assert len(notes) == 1, (tmp_path / "log").read_text()[-2000:]
        m = re.match(r"(\d+) of (\d+) requests opened their own connection \(connect p50 (\S+) ms", notes[0])
        assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 1, notes
        assert 0 < float(m.group(3)) < 50, notes  # a loopback connect
    finally:
        proc.terminate()
        proc.wait(30)
