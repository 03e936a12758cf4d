"""The LLM tab in Locust's web UI: declared in the page, rows in /stats/requests, and the
summary route, from a real locust process running with its web UI.

Each run is a :class:`tests.e2e.locust_pool.Driven` scenario (it polls and acts on its web UI
mid-run), run once, each with a simulator of its own: the tab's rows first, alone (its ITL is
read to the 0.01 ms), then the other three side by side."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.e2e.locust_pool import Driven, driven_in
from tests.helpers import LOCUST, ROOT, free_port, start_locust
from tests.real.servers import die_with_parent

pytestmark = pytest.mark.slow



def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def _web_locust(sim: SimProcess, port: int, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """locust on vllm.py with its web UI on ``port``, autostarted (the environment without LOCUST_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    return subprocess.Popen([LOCUST, "-f", str(ROOT / "locustfiles" / "vllm.py"), "--host", sim.url,
                             "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", *args],
                            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent())


def _stop(proc: subprocess.Popen[bytes] | None, sim: SimProcess) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait(30)
    sim.stop()


def _polled(get: Any) -> Any:
    """``get()``, or None while the web UI does not answer yet."""
    try:
        return get()
    except OSError:
        return None


#: the scenarios running now that the others wait for (see :func:`_after_busy`)
BUSY: set[str] = set()


def _after_busy() -> tuple[Any, float, str, float]:
    """What a scenario yields first: to wait until no scenario that must run alone is running."""
    return (lambda: not BUSY, 120, "the end of the run of the tab's rows", 0.2)


def _merged_rows(base: Path) -> Iterator[Any]:
    # alone: its ITL p50 must be above 0 (a client starved of CPU by the others' startups reads
    # the simulator's 3 ms gaps in bunches); the others start once it has ended
    BUSY.add("rows")
    try:
        return (yield from _merged_rows_run(base))
    finally:
        BUSY.discard("rows")


def _merged_rows_run(base: Path) -> Iterator[Any]:
    sim = start_simulator(["--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "10", "--seed", "1"])
    base.mkdir(parents=True)
    port, log, proc = free_port(), base / "log", None
    try:
        proc = _web_locust(sim, port, log, "-u", "4", "-r", "4", "-t", "30s", "--llm-prometheus-port", "0")
        url = f"http://127.0.0.1:{port}"
        seen: list[Any] = []

        def eight() -> bool:
            stats = _polled(lambda: json.loads(fetch(url + "/stats/requests")))
            if stats is None:
                return False
            ext = {e["key"]: e["data"] for e in stats.get("extendedStats", [])}
            seen[:] = ext.get("llm", [])
            return bool(seen) and seen[-1]["requests"] >= 8

        try:
            yield (eight, 30, "8 requests in the LLM rows", 1.0)
        except AssertionError:
            pass  # what the rows hold by then is the test's to judge
        rows = list(seen)
        if not rows:
            return SimpleNamespace(rows=rows, log=log.read_text()[-2000:])
        page = fetch(url + "/").decode()
        summary = json.loads(fetch(url + "/llm/summary.json"))
        urllib.request.urlopen(urllib.request.Request(url + "/stop", method="POST"), timeout=10).read()
        yield (lambda: json.loads(fetch(url + "/stats/requests"))["state"] == "stopped", 60, "the stop", 0.2)
        o = json.loads(fetch(url + "/llm/summary.json"))["overall"]
        stats = json.loads(fetch(url + "/stats/requests"))
        notes = json.loads(fetch(url + "/llm/live.json"))["notes"]
        return SimpleNamespace(rows=rows, log=log.read_text()[-2000:], page=page, summary=summary, o=o, stats=stats,
                               notes=notes)
    finally:
        _stop(proc, sim)


def test_llm_tab_serves_merged_rows(runs) -> None:
    got = runs.get("rows")
    rows = got.rows
    assert rows, got.log
    agg = rows[-1]
    assert agg["name"] == "Aggregated" and agg["failures"] == 0
    page = got.page
    assert '"extendedTabs"' in page or "extendedTabs" in page
    summary = got.summary
    assert summary["overall"]["requests"] >= agg["requests"]
    # stopped, the row is the run's own figures: summary.json's (read first: it takes in every
    # record still waiting), rounded as the tab rounds; TTFT at least the simulator's 30 ms and
    # E2E at least its 30 + 9 x 3, TTFT p50 <= E2E p50 (each request's TTFT <= its E2E): the
    # columns hold TTFT, ITL and E2E in ms, whatever the machine's speed
    o, stats = got.o, got.stats
    assert stats["state"] == "stopped", stats["state"]
    row = {e["key"]: e["data"] for e in stats["extendedStats"]}["llm"][-1]
    assert row["name"] == "Aggregated" and row["requests"] == o["requests"] >= agg["requests"], (row, o)
    assert (row["ttftP50"], row["itlP50"], row["e2eP50"]) == \
        (round(o["ttft"]["p50"], 1), round(o["itl"]["p50"], 2), round(o["e2e"]["p50"])), (row, o)
    # lower bounds only (a loaded machine lengthens, never shortens, the simulator's pacing); the ITL
    # median is the merged one (above), not > 0: beside two busy loops the client read chunks
    # bunched, and more than half its gaps were under 5 us
    assert 29 <= row["ttftP50"] <= row["e2eP50"] and row["e2eP50"] >= 30 + 9 * 3 - 1 and row["itlP50"] >= 0, row
    assert got.notes == []  # raw mode reuses its connections


def _summary_route(base: Path) -> Iterator[Any]:
    yield _after_busy()
    sim = start_simulator(["--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4", "--seed", "1"])
    base.mkdir(parents=True)
    port, log, proc = free_port(), base / "log", None
    export, report = base / "vllm.json", base / "report"
    try:
        proc = _web_locust(sim, port, log, "-u", "2", "-r", "2", "-t", "3s", "--llm-prometheus-port", "0",
                           "--llm-report", str(report), "--llm-export", "vllm-bench", str(export))
        try:
            yield (lambda: (report / "report.html").exists(), 40, "report.html", 0.5)
        except AssertionError:
            pass  # the export's absence says so, with the log
        yield 1.0  # the last file of the stop is written
        if not export.exists():
            return SimpleNamespace(written=None, log=log.read_text()[-2000:])
        written = json.loads(export.read_text())
        export.unlink()
        (report / "summary.json").unlink()
        url = f"http://127.0.0.1:{port}"
        for _ in range(2):
            summary = json.loads(fetch(url + "/llm/summary.json"))
        yield 0.5
        return SimpleNamespace(written=written, summary=summary, export=export.exists(),
                               summary_file=(report / "summary.json").exists(), log=log.read_text())
    finally:
        _stop(proc, sim)


def test_the_summary_route_only_reads_after_the_stop(runs) -> None:
    """Issue 26: files are written once, at the stop; GET /llm/summary.json after it builds the
    summary again but rewrites nothing (the vLLM bench export was rewritten on every GET)."""
    got = runs.get("summary")
    written = got.written
    assert written is not None, got.log
    assert written["completed"] > 0
    assert got.summary["overall"]["successes"] == written["completed"]
    assert not got.export and not got.summary_file
    assert got.log.count("vLLM bench result written") == 1


#: The SDK-mode web UI run: the openai SDK (a connection per streamed request) on this simulator.
SDK_UI_SIM = ["--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "10", "--seed", "1"]


def sdk_web_ui_args(sim_url: str, port: int) -> list[str]:
    """locust's arguments for its web UI, started, with 2 users of locustfiles/openai.py in SDK mode."""
    return ["--host", sim_url, "--llm-client", "sdk", "--web-host", "127.0.0.1", "--web-port", str(port),
            "--autostart", "-u", "2", "-r", "2", "-t", "60s", "--llm-prometheus-port", "0"]


def start_sdk_web_ui(sim_factory, tmp_path) -> tuple[subprocess.Popen[bytes], str]:
    """locust with its web UI, started, 2 users of locustfiles/openai.py through the openai SDK
    (a connection per streamed request) on the simulator; with the web UI's URL (the browser test)."""
    sim = sim_factory(*SDK_UI_SIM)
    port = free_port()
    proc = start_locust(sdk_web_ui_args(sim.url, port), tmp_path / "log", locustfile="openai.py",
                        env={"OPENAI_API_KEY": "sk-test"})
    return proc, f"http://127.0.0.1:{port}"


def _sdk_notes(base: Path) -> Iterator[Any]:
    """locust with its web UI, started, 2 users of locustfiles/openai.py through the openai SDK
    (a connection per streamed request) on the simulator: the tab's notes, once there are some."""
    yield _after_busy()
    sim = start_simulator(SDK_UI_SIM)
    base.mkdir(parents=True)
    port, log, proc = free_port(), base / "log", None
    try:
        proc = start_locust(sdk_web_ui_args(sim.url, port), log, locustfile="openai.py",
                            env={"OPENAI_API_KEY": "sk-test"})
        url = f"http://127.0.0.1:{port}"
        notes: list[str] = []

        def some() -> bool:
            notes[:] = _polled(lambda: json.loads(fetch(url + "/llm/live.json"))["notes"]) or []
            return bool(notes)

        try:
            yield (some, 30, "the tab's notes", 1.0)
        except AssertionError:
            pass  # no note: the test says so, with the log
        return SimpleNamespace(notes=notes, log=log.read_text()[-2000:])
    finally:
        _stop(proc, sim)


def test_the_tab_notes_a_connection_per_request_in_sdk_mode(runs) -> None:
    """The openai SDK opens a connection per streamed request: the tab's live data carries the
    console's note with the count since the reset, as summary.json counts them."""
    got = runs.get("sdk_notes")
    notes = got.notes
    assert len(notes) == 1, got.log
    m = re.match(r"(\d+) of (\d+) requests opened their own connection \(connect p50 (\S+) ms", notes[0])
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 1, notes
    assert 0 < float(m.group(3)) < 50, notes  # a loopback connect


def _open_loop(base: Path) -> Iterator[Any]:
    yield _after_busy()
    sim = start_simulator(["--ttft-ms", "100", "--itl-ms", "20", "--output-tokens", "20", "--seed", "1"])
    base.mkdir(parents=True)
    port, log, proc = free_port(), base / "log", None
    try:
        proc = _web_locust(sim, port, log, "-u", "1", "-t", "14s", "--llm-arrival", "constant", "--llm-stages",
                           "8:6s,16:6s", "--llm-warmup", "0", "--llm-prometheus-port", "0")
        url = f"http://127.0.0.1:{port}"
        try:
            yield (lambda: _polled(lambda: json.loads(fetch(url + "/stats/requests"))["state"]) == "stopped", 45,
                   "the run's end", 1.0)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{log.read_text()[-2000:]}") from None
        yield 2.5  # the last seconds settle (1 s lag)
        live = json.loads(fetch(url + "/llm/live.json"))
        summary = json.loads(fetch(url + "/llm/summary.json"))
        return SimpleNamespace(live=live, summary=summary)
    finally:
        _stop(proc, sim)


def test_open_loop_stages_in_the_live_data(runs) -> None:
    """Issue 28: the live route of an open-loop run with stages says so, marks each stage's
    start, and gives per-second arrivals (the stage's rate) and in-flight requests (Little's
    law: the arrival rate times the mean request time)."""
    got = runs.get("open_loop")
    live, summary = got.live, got.summary
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


#: each test's scenario; the open-loop run last, so it starts once a web UI's startup is done
SCENARIOS = {"test_llm_tab_serves_merged_rows": "rows", "test_the_summary_route_only_reads_after_the_stop": "summary",
             "test_the_tab_notes_a_connection_per_request_in_sdk_mode": "sdk_notes",
             "test_open_loop_stages_in_the_live_data": "open_loop"}


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    base = tmp_path_factory.mktemp("webui")
    makers = {"rows": lambda: _merged_rows(base / "rows"), "summary": lambda: _summary_route(base / "summary"),
              "sdk_notes": lambda: _sdk_notes(base / "sdk_notes"), "open_loop": lambda: _open_loop(base / "open_loop")}
    yield from driven_in(request, makers, lambda item: [SCENARIOS[item.originalname]], parallel=3)
