"""Issues 13 and 28: Locust's web UI driven in a real headless Chromium (Debian's chromium and
chromium-driver through Selenium; nothing is downloaded).

A master with its web UI and two workers on loopback, the simulator behind them. The start
form has its own LLM group listing the documented options (SLOs, input/output tokens, turns,
dataset, rate, steps, price, ...) with the command line's values, and none under Locust's
"Custom parameters"; the test sets max tokens, SLOs and input tokens there and starts the run
from the form, then checks the run used them (the summary's token counts and SLO limits, the
workers' per-SLO counts). The LLM tab shows live rows (sane TTFT/ITL/tokens, merged from both
workers) and its ECharts charts with data, GPU utilization included (the real sidecar exporter,
in-process, reading a fake NVML: this machine has no GPU), the users running beside requests/s
and one unit per axis; the user count is changed mid-run
with Locust's Edit form and the current rates follow; Reset stats empties the tab; the run is
stopped, and a new test starts the tab afresh. The run's report.html is opened as a file.
Screenshots go to the test's tmp dir and must not be blank; with LLM_DOCS_SCREENSHOTS=1 the
live tab and the report's first screen also go to docs/img/ (docs/report.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_webui import start_sdk_web_ui
from tests.exporters.fake_nvml import FakeGPU, FakeNVML
from tests.helpers import LOCUST, ROOT, free_port

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
MAX_TOKENS_FROM_FORM = 16  # the simulator would send 40: the form's value must reach the workers
INPUT_TOKENS_FROM_FORM = 300
SLO_FROM_FORM = "ttft=300ms,tpot=50ms"  # the command line says ttft=500ms: tpot only from the form
# the start form's LLM group: the options the issue lists, by the names users type
LISTED = ["--llm-slo", "--llm-input-tokens", "--llm-output-tokens", "--llm-turns", "--llm-dataset",
          "--llm-rate", "--llm-steps", "--llm-price"]
DOCS_IMG = ROOT / "docs" / "img"
GPU_UTIL = [40, 60]  # two fake GPUs: the tab shows their mean


@pytest.fixture
def sidecar() -> Iterator[str]:
    """The GPU sidecar's real collector and HTTP server, over a fake NVML; yields host:port."""
    from prometheus_client import CollectorRegistry

    from exporters import nvml as sidecar_mod

    nvml = FakeNVML([FakeGPU(uuid=f"GPU-{i}", name="Fake H100", util_gpu=u) for i, u in enumerate(GPU_UTIL)])
    nvml.nvmlInit()
    registry = CollectorRegistry()
    registry.register(sidecar_mod.GPUCollector(nvml))
    server, _ = sidecar_mod.serve(registry, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - the page may be re-rendering; try again
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100",
                f"--user-data-dir={tmp_path / 'chrome'}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for failures
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def cluster(sim_factory, sidecar: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A master with its web UI and two workers; yields the UI's and the simulator's URLs."""
    sim = sim_factory("--ttft-ms", "40", "--itl-ms", "5", "--output-tokens", "40", "--seed", "3")
    web, master_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    base = [LOCUST, "-f", str(ROOT / "locustfiles" / "vllm.py"), "--loglevel", "INFO"]
    procs = [subprocess.Popen(
        [*base, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
         "--web-host", "127.0.0.1", "--web-port", str(web), "--host", sim.url, "--llm-model", "sim-model",
         "--llm-max-tokens", "64", "--llm-slo", "ttft=500ms", "--llm-prometheus-port", "0",
         "--llm-gpu-sidecar", sidecar, "--llm-scrape-interval", "1", "--llm-report", str(tmp_path / "report")],
        cwd=ROOT, env=env, stdout=(tmp_path / "master.log").open("w"), stderr=subprocess.STDOUT)]
    procs += [subprocess.Popen(
        [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
        cwd=ROOT, env=env, stdout=(tmp_path / f"w{i}.log").open("w"), stderr=subprocess.STDOUT) for i in range(2)]
    url = f"http://127.0.0.1:{web}"
    try:
        wait_for(lambda: fetch_json(url + "/stats/requests").get("worker_count") == 2, 40, "two workers")
        yield url, sim.url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def screenshot(driver: Any, path: Path, docs_name: str | None = None) -> None:
    """Save a screenshot and check it is not blank: many colours, not one flat field; with
    LLM_DOCS_SCREENSHOTS=1, ``docs_name`` is also written to docs/img/ (the docs' pictures)."""
    from matplotlib import image

    driver.save_screenshot(str(path))
    if docs_name and os.environ.get("LLM_DOCS_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMG / docs_name)
    pixels = image.imread(str(path))[:, :, :3]
    flat = pixels.reshape(-1, 3)
    assert flat.std(axis=0).max() > 0.05, f"{path.name} is nearly uniform"
    assert len({tuple(p) for p in flat[:: max(1, len(flat) // 20000)]}) > 50, f"{path.name} has few colours"


def button(driver: Any, text: str) -> Any:
    from selenium.webdriver.common.by import By

    for b in driver.find_elements(By.CSS_SELECTOR, "button"):
        if b.text.strip().lower() == text.lower() and b.is_displayed():
            return b
    return None


def set_field(driver: Any, name: str, value: str, scope: Any = None) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    el = (scope or driver).find_element(By.CSS_SELECTOR, f"input[name='{name}']")
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.BACKSPACE)
    el.send_keys(value)


def llm_rows(driver: Any) -> dict[str, dict[str, str]]:
    """The LLM tab's table as {row name: {column title: text}}, read in one go (React
    re-renders the rows every couple of seconds)."""
    table = driver.execute_script("""
        const t = document.querySelector('table');
        if (!t) return null;
        return {heads: [...t.querySelectorAll('thead th')].map(e => e.innerText.replace(/\\s+/g, ' ').trim()),
                rows: [...t.querySelectorAll('tbody tr')].map(tr => [...tr.querySelectorAll('td')]
                      .map(td => td.innerText.trim()))};""")
    if not table:
        return {}
    return {cells[0]: dict(zip(table["heads"], cells, strict=False)) for cells in table["rows"] if cells}


def echarts_data(driver: Any) -> dict[str, list[list[list[float]]]]:
    """Each LLM chart's series data, {chart: [[[ms, value], ...] per line]}, read through
    ECharts' own registry (an element that is no ECharts instance is missing)."""
    return driver.execute_script("""
        const out = {};
        if (!window.echarts) return out;
        for (const el of document.querySelectorAll('#llm-charts [data-chart]')) {
            const chart = echarts.getInstanceByDom(el);
            if (chart) out[el.getAttribute('data-chart')] = chart.getOption().series.map(s => s.data);
        }
        return out;""") or {}


def page_state(driver: Any, shot: Path) -> str:
    """What the page shows, for a failure message: its text, the browser console, a screenshot
    (each part best-effort: the page may be gone)."""
    parts = []
    for what, get in (("page text", lambda: (driver.execute_script("return document.body.innerText") or "")[-1500:]),
                      ("browser console", lambda: [e.get("message") for e in driver.get_log("browser")][-10:]),
                      ("screenshot", lambda: driver.save_screenshot(str(shot)) and str(shot))):
        try:
            parts.append(f"{what}: {get()!r}")
        except Exception as err:  # noqa: BLE001 - a diagnostic must not hide the failure
            parts.append(f"{what}: unavailable ({err.__class__.__name__})")
    return "; ".join(parts)


def wait_running(ui: str) -> None:
    """Until the master itself says spawning or running. Locust's page shows Edit as soon as
    /swarm answers, while the master starts the test in a greenlet a moment later; a page
    loaded in between is rendered "stopped" and never polls again (Locust's UI polls only
    while spawning or running), so the test reloads only once the master has started."""
    wait_for(lambda: fetch_json(ui + "/stats/requests")["state"] in ("spawning", "running"), 20,
             "the master's state to be running")


def num(text: str) -> float:
    return float(text.replace(",", "")) if text else float("nan")


def test_the_web_ui_in_a_browser(browser, cluster, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    d = browser
    ui, sim = cluster
    d.get(ui + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "input[name='userCount']"), 30, "the start form")
    # the --llm-* options in the start form's own LLM group, by the names users type, with the
    # command line's values; none under Locust's "Custom parameters"
    group = wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "form #llm-form"), 20, "the LLM group")[0]
    fields = {e.get_attribute("data-flag"): e for e in group.find_elements(By.CSS_SELECTOR, "input")}
    assert set(LISTED) <= set(fields), sorted(fields)
    assert all(fields[f].get_attribute("name") == f[2:].replace("-", "_") for f in fields)
    assert "--llm-prompts" not in fields and "Custom parameters" not in d.find_element(By.TAG_NAME, "form").text
    values = {f: e.get_attribute("value") for f, e in fields.items()}
    assert values["--llm-model"] == "sim-model" and values["--llm-max-tokens"] == "64"
    assert values["--llm-slo"] == "ttft=500ms" and values["--llm-input-tokens"] == ""
    assert fields["--llm-price"].get_attribute("readonly") and not fields["--llm-slo"].get_attribute("readonly")
    assert not [e for e in d.find_elements(By.CSS_SELECTOR, "form input[name^='llm']")
                if not e.get_attribute("data-flag")], "LLM fields outside the LLM group"
    set_field(d, "llm_max_tokens", str(MAX_TOKENS_FROM_FORM))
    set_field(d, "llm_slo", SLO_FROM_FORM)
    set_field(d, "llm_input_tokens", str(INPUT_TOKENS_FROM_FORM))
    set_field(d, "userCount", "4")
    set_field(d, "spawnRate", "4")
    d.execute_script("arguments[0].scrollIntoView(); window.scrollBy(0, -24)", group)
    screenshot(d, tmp_path / "1-start-form.png", docs_name="start-form.png")
    button(d, "Start").click()

    # the LLM tab: live rows from both workers
    wait_for(lambda: button(d, "Edit"), 30, "the run to start")
    wait_running(ui)
    d.get(ui + "/?tab=llm")
    try:
        rows = wait_for(lambda: (r := llm_rows(d)) and num(r.get("Aggregated", {}).get("Requests", "0")) >= 40 and r,
                        40, "LLM rows")
    except AssertionError as e:  # say what the page was showing (a blank app, another tab, an error)
        server_rows = fetch_json(ui + "/stats/requests").get("extendedStats")
        raise AssertionError(f"{e}; the server's LLM rows {server_rows}; "
                             f"{page_state(d, tmp_path / 'failed-llm-rows.png')}") from None
    agg = rows["Aggregated"]
    # the columns hold TTFT, ITL and E2E in ms, told by what the machine's speed cannot change: TTFT
    # at least the simulator's 40 ms, E2E at least its 40 + 15 x 5 (16 tokens), each request's TTFT
    # and each of its gaps at most its E2E (so the medians too: every request has 15 gaps)
    ttft_p50, itl_p50, e2e_p50 = (num(agg[k]) for k in ("TTFT p50 (ms)", "ITL p50 (ms)", "E2E p50 (ms)"))
    assert 39 <= ttft_p50 <= e2e_p50 and e2e_p50 >= 40 + 15 * 5 - 1, agg
    assert 0 < itl_p50 <= e2e_p50, agg
    assert num(agg["Failures"]) == 0
    summary = fetch_json(ui + "/llm/summary.json")
    assert len(summary["workers"]["reported"]) == 2, "rows merged from both workers"
    s = summary["overall"]
    assert s["output_tokens"] == MAX_TOKENS_FROM_FORM * s["requests"], "the max tokens typed into the form"
    # the input tokens typed into the form: the simulator counted prompts of that length
    assert s["input_tokens"] == INPUT_TOKENS_FROM_FORM * s["requests"], (s["input_tokens"], s["requests"])
    # the SLOs typed into the form: tpot (not on the command line) counted by both workers
    assert s["slo"]["limits_ms"] == {"ttft": 300.0, "tpot": 50.0}, s["slo"]
    assert s["slo"]["share_meeting"]["tpot"] > 0.95 and s["slo"]["share_meeting"]["ttft"] > 0.95, s["slo"]
    assert s["slo"]["good_requests"] >= 0.95 * s["requests"], s["slo"]

    def rates() -> tuple[float, float]:
        a = llm_rows(d)["Aggregated"]
        return num(a["Req/s (now)"]), num(a["Output tok/s (now)"])

    # one request takes ~40 + 15 x 5 = 115 ms: 4 users give ~30 req/s; wait for a full window
    time.sleep(11)
    rps_4, tok_4 = rates()
    assert tok_4 == pytest.approx(MAX_TOKENS_FROM_FORM * rps_4, rel=0.02)
    assert rps_4 > 10, rps_4
    # the charts are ECharts instances (the vendored build Locust's own charts' library) with data
    charts = wait_for(lambda: (c := echarts_data(d)) and all(len(c.get(k, [[]])[0]) >= 5 for k in
                                                             ("ttft", "itl", "tokens", "goodput", "gpu")) and c,
                      20, "the live charts")
    # closed loop: no in-flight chart; the simulator's own /metrics is found by default: its chart
    assert set(charts) == {"tokens", "ttft", "itl", "goodput", "gpu", "server"}, set(charts)
    for series in charts.values():  # no gaps: a second without a sample is skipped, not null
        assert all(v is not None for line in series for _, v in line)
    slo_line = d.execute_script("""return echarts.getInstanceByDom(document.querySelector('[data-chart=ttft]'))
        .getOption().series[0].markLine.data.map(m => m.yAxis).filter(y => y !== undefined)""")
    assert slo_line == [300], slo_line  # the form's TTFT SLO, drawn on the TTFT chart
    ttft_points = [v for _, v in charts["ttft"][0]]
    # TTFT's chart (not E2E's): at least the simulator's 40 ms, under the table's E2E p50 (each
    # request's first token comes 15 tokens before its end)
    assert 39 <= sorted(ttft_points)[len(ttft_points) // 2] < e2e_p50, (ttft_points, e2e_p50)
    tokens = [v for _, v in charts["tokens"][0][1:-1]]
    assert max(tokens) <= MAX_TOKENS_FROM_FORM * 4 * 20, tokens  # 4 users, each < 20 req/s
    gpu = [p["gpuUtil"] for p in fetch_json(ui + "/llm/live.json")["series"] if "gpuUtil" in p]
    assert gpu and set(gpu) == {sum(GPU_UTIL) / len(GPU_UTIL)}, gpu
    # raw mode keeps its connections: the notes' place is there, empty
    assert d.execute_script("return document.querySelectorAll('#llm-charts #llm-notes .llm-note').length") == 0
    screenshot(d, tmp_path / "2-llm-tab-4-users.png", docs_name="live-tab.png")
    # issue 53 item 6: the users running drawn beside requests/s, each unit on its own axis (the
    # server's running/waiting counts were flattened by its queue time's milliseconds on one axis)
    users = wait_for(lambda: [v for _, v in echarts_data(d)["goodput"][2]], 20, "the users line")
    assert set(users) <= {1, 2, 3, 4} and users[-1] == 4, users  # 4 users spawned at 4/s
    axes = d.execute_script("""const out = {};
        for (const id of ['goodput', 'server']) {
            const o = echarts.getInstanceByDom(document.querySelector(`[data-chart=${id}]`)).getOption();
            out[id] = {axes: o.yAxis.map(a => a.name), lines: o.series.map(s => [s.name, s.yAxisIndex])};
        }
        return out;""")
    assert axes["goodput"] == {"axes": ["req/s", "users"], "lines": [["Requests/s", 0], ["Goodput/s", 0],
                                                                     ["Users", 1]]}, axes
    assert axes["server"] == {"axes": ["requests", "ms"], "lines": [["Running", 0], ["Waiting", 0],
                                                                    ["Queue time (ms)", 1]]}, axes
    d.execute_script("document.querySelector('[data-chart=goodput]').scrollIntoView()")
    screenshot(d, tmp_path / "2b-llm-tab-users-and-server.png")
    d.execute_script("window.scrollTo(0, 0)")

    # Locust's Edit form: 12 users mid-run; the current rates follow (the simulator is not the limit)
    button(d, "Edit").click()  # while running, the only user-count field is the edit form's
    wait_for(lambda: d.find_element(By.CSS_SELECTOR, "input[name='userCount']").is_displayed(), 10, "the edit form")
    set_field(d, "userCount", "12")
    set_field(d, "spawnRate", "12")
    screenshot(d, tmp_path / "3-edit-users.png")
    [b for b in d.find_elements(By.CSS_SELECTOR, "button[type='submit']") if b.is_displayed()][0].click()
    time.sleep(4)
    served = fetch_json(sim + "/_sim/stats")["served"]
    time.sleep(10)
    served_rate = (fetch_json(sim + "/_sim/stats")["served"] - served) / 10
    time.sleep(3)  # the tab's window ends 3 s back (a master hears from workers every 2 s)
    rps_12, tok_12 = rates()
    # current, not whole-run rates: the tab's window (10 s, 3 s back) is the simulator's
    # last 10 s; it grew (by less than 3x when the shared machine's cores are the limit)
    assert rps_12 == pytest.approx(served_rate, rel=0.15), (rps_4, rps_12, served_rate)
    assert 1.5 <= rps_12 / rps_4 <= 3.6, (rps_4, rps_12, served_rate)
    assert tok_12 == pytest.approx(MAX_TOKENS_FROM_FORM * rps_12, rel=0.02)
    d.find_element(By.CSS_SELECTOR, "#llm-charts")  # still there
    screenshot(d, tmp_path / "4-llm-tab-12-users.png")

    # Reset stats empties the tab, as it empties Locust's table; stop ends the run
    before = num(llm_rows(d)["Aggregated"]["Requests"])
    reset = wait_for(lambda: d.find_elements(By.XPATH, "//*[normalize-space(text())='Reset' or "
                                              "normalize-space(text())='Reset Stats' or @aria-label='Reset stats']"),
                     10, "the reset button")
    reset[0].click()
    wait_for(lambda: num(llm_rows(d)["Aggregated"]["Requests"]) < before / 4, 10, "the LLM tab reset")
    button(d, "Stop").click()
    wait_for(lambda: fetch_json(ui + "/stats/requests")["state"] == "stopped", 30, "the stop")
    new = wait_for(lambda: button(d, "New"), 60, "the New button")  # the UI polls; a loaded machine is slow
    screenshot(d, tmp_path / "5-stopped.png")
    stopped = num(llm_rows(d)["Aggregated"]["Requests"])
    assert stopped > 0

    # a new test from Locust's New button: the tab starts again from nothing
    new.click()
    wait_for(lambda: button(d, "Start"), 10, "the start form again")
    set_field(d, "userCount", "2")
    set_field(d, "spawnRate", "2")
    button(d, "Start").click()
    wait_for(lambda: button(d, "Edit"), 30, "the second run")
    wait_running(ui)
    d.get(ui + "/?tab=llm")
    try:
        rows = wait_for(lambda: (r := llm_rows(d)) and num(r.get("Aggregated", {}).get("Requests", "0")) > 0 and r,
                        30, "rows of the new test")
    except AssertionError as e:
        stats = fetch_json(ui + "/stats/requests")
        raise AssertionError(f"{e}; state {stats['state']}, users {stats['user_count']}, locust requests "
                             f"{stats['stats'][-1]['num_requests']}, the server's LLM rows "
                             f"{stats.get('extendedStats')}, table {llm_rows(d)}; "
                             f"{page_state(d, tmp_path / 'failed-new-test.png')}; master log: "
                             f"{(tmp_path / 'master.log').read_text()[-1500:]}") from None
    assert num(rows["Aggregated"]["Requests"]) < stopped, (rows["Aggregated"], stopped)
    screenshot(d, tmp_path / "6-new-test.png")

    # the first test's report.html (written at its stop), opened as a file: its first screen
    report = tmp_path / "report" / "report.html"
    assert report.exists(), sorted(p.name for p in report.parent.iterdir())
    d.get(report.as_uri())
    wait_for(lambda: d.execute_script("return document.readyState") == "complete", 10, "the report")
    assert len(d.find_element(By.TAG_NAME, "body").text) > 200, "an empty report page"
    screenshot(d, tmp_path / "7-report.png", docs_name="report-first-screen.png")


def test_the_tab_shows_the_connection_per_request_note(browser, sim_factory, tmp_path) -> None:
    """The openai SDK opens a connection per streamed request: the LLM tab says so above its
    charts, in the console's words, with the count since the reset."""
    from selenium.webdriver.common.by import By

    proc, ui = start_sdk_web_ui(sim_factory, tmp_path)
    try:
        wait_running(ui)
        browser.get(ui + "/?tab=llm")
        try:
            note = wait_for(lambda: [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#llm-charts .llm-note")],
                            30, "the note")
        except AssertionError as e:
            raise AssertionError(f"{e}; {page_state(browser, tmp_path / 'failed-note.png')}") from None
        assert len(note) == 1 and note[0].startswith("note: "), note
        assert " requests opened their own connection (connect p50 " in note[0], note
        assert browser.find_element(By.ID, "llm-charts").is_displayed()
    finally:
        proc.terminate()
        proc.wait(30)
