"""Issue 10 item 8: an API key never appears anywhere: a canary key, given through the
environment and inside the simulator's arguments, is looked for in every locustfile's console
output and report files (in raw mode, and in SDK mode for every locustfile that has an SDK, whose
clients log at DEBUG too), and in a web-UI run's pages, summary route and /metrics.

The headless runs are the module's pool (tests/e2e/locust_pool.py): each once, a few at a time."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.protocols.backend import all_backends
from tests.e2e.locust_pool import Pool, Scenario, params, pool_in
from tests.helpers import LOCUST, ROOT, free_port, read_records, read_summary

pytestmark = pytest.mark.slow

CANARY = "sk-canary-7f3a9c2e5b1d4e8f"
LOCUSTFILES = [b.docs.locustfile for b in all_backends().values() if b.docs]
SDK_LOCUSTFILES = [b.docs.locustfile for b in all_backends().values() if b.docs and b.sdk_module]  # not tgi
RUNS = [(f, "raw") for f in LOCUSTFILES] + [(f, "sdk") for f in SDK_LOCUSTFILES]
ENV = {"CANARY_LLM_KEY": CANARY, "OPENAI_API_KEY": CANARY, "ANTHROPIC_API_KEY": CANARY, "GEMINI_API_KEY": CANARY}
SIM_ARGS = f"--require-api-key {CANARY} --output-tokens 5 --ttft-ms 5 --itl-ms 2"


def leaks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]


def _needs(item: Any) -> list[str]:
    p = params(item)
    return [f"{p['locustfile']}-{p['client']}"] if "locustfile" in p else []


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Each (locustfile, client) run once, a few at a time (each with its own embedded simulator)."""
    scenarios = {f"{f}-{c}": Scenario(f, ("-u", "2", "-r", "2", "-t", "3s", "--llm-api-key-env", "CANARY_LLM_KEY",
                                          "--llm-sim-args", SIM_ARGS, "--llm-prometheus-port", "0", "--loglevel",
                                          "DEBUG", "--llm-client", c), env=ENV, timeout=90) for f, c in RUNS}
    yield from pool_in(request, tmp_path_factory.mktemp("secrets"), scenarios, _needs, parallel=2)


@pytest.mark.parametrize(("locustfile", "client"), RUNS)
def test_no_output_file_or_log_line_carries_the_key(runs, locustfile, client) -> None:
    run = runs.run(f"{locustfile}-{client}")
    proc, report = run.proc, run.report
    tail = f"stdout tail:\n{proc.stdout[-2000:]}\nstderr tail:\n{proc.stderr[-2000:]}"
    assert proc.returncode in (0, 1), tail
    assert CANARY not in proc.stdout and CANARY not in proc.stderr
    assert "***" in proc.stdout, tail  # the simulator's start line, masked
    assert leaks(report) == []
    summary = read_summary(report)
    assert summary["overall"]["successes"] > 0, tail  # the key reached the server: it was really in use
    assert {r["client"] for r in read_records(report)} == {client}
    config = summary["config"]
    assert "llm_max_tokens" in config and config["llm_sim_args"] == SIM_ARGS.replace(CANARY, "***")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_web_ui_pages_summary_route_and_metrics_carry_no_key(tmp_path) -> None:
    web, prom = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | ENV
    proc = subprocess.Popen(
        [LOCUST, "-f", str(ROOT / "locustfiles" / "openai.py"), "--web-host", "127.0.0.1", "--web-port", str(web),
         "--autostart", "-u", "2", "-r", "2", "-t", "30s", "--llm-api-key-env", "CANARY_LLM_KEY",
         "--llm-sim-args", SIM_ARGS, "--llm-prometheus-port", str(prom), "--llm-prometheus-host", "127.0.0.1",
         "--llm-max-tokens", "7"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{web}"
        limit = time.monotonic() + 30
        while True:
            try:
                if json.loads(_get(base + "/llm/summary.json")).get("records"):
                    break
            except OSError:
                pass
            assert time.monotonic() < limit, "the web UI run never produced records"
            time.sleep(0.5)
        pages = {path: _get(base + path) for path in ("/", "/llm/summary.json", "/stats/requests",
                                                      "/llm/live.json", "/llm/form.json")}
        pages["/metrics"] = _get(f"http://127.0.0.1:{prom}/metrics")
        for path, body in pages.items():
            assert CANARY not in body, path
        config = json.loads(pages["/llm/summary.json"])["config"]
        assert config["llm_max_tokens"] == "7" or config["llm_max_tokens"] == 7
        assert CANARY not in json.dumps(config) and "***" in config["llm_sim_args"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=60)[0]
    assert CANARY not in out
