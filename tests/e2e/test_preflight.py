"""Issue 29 items 2 and 3 on real locust processes and the simulator: a dead host, a 401, a 404 and
a wrong endpoint each stop at start (one line, exit 1, no load at the simulator);
with ``--llm-preflight off`` the run goes on as before; a run whose every request fails stops
after ``--llm-fail-stop``; a run that measured nothing exits 1 with its hint.

The runs that must stop early ask for ``-t 600s``: a run that waited it out would meet the
subprocess's own timeout (a couple of minutes) instead of finishing in seconds, so how fast the
machine is never decides them."""

from __future__ import annotations

import time

import pytest

from tests.helpers import free_port, get_json, processes_args, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

# (id, simulator arguments, the locustfile, its arguments, words the one line must hold);
# {sim} is the simulator's URL, {dead} a port nothing listens on
CASES = [
    ("dead-host", [], "vllm.py", ["--host", "{dead}", "--llm-model", "m"],
     ["POST /v1/chat/completions", "could not connect", "Connection refused", "--host"]),
    ("dead-host-model-probe", [], "vllm.py", ["--host", "{dead}"],
     ["GET /v1/models", "could not connect", "--host"]),
    ("401", ["--require-api-key", "sekrit-value"], "vllm.py", ["--host", "{sim}", "--llm-model", "m"],
     ["answered 401 (unauthorized)", "--llm-api-key-env"]),
    ("401-key-refused", ["--require-api-key", "sekrit-value"], "openai.py", ["--host", "{sim}", "--llm-model", "m"],
     ["answered 401", "the key in OPENAI_API_KEY was refused"]),
    ("404", [], "vllm.py", ["--host", "{sim}/not-here", "--llm-model", "m"],
     ["answered 404 (no such route)", "drop a path from --host", "--llm-endpoint"]),
    ("wrong-locustfile", ["--only-backends", "tgi"], "vllm.py", ["--host", "{sim}"],
     ["model probe (GET /v1/models", "answered 404", "wrong locustfile for this server", "vllm.py"]),
    ("wrong-endpoint", ["--only-backends", "ollama"], "ollama.py", ["--host", "{sim}", "--llm-endpoint", "openai"],
     ["POST /v1/chat/completions", "answered 404", "--llm-endpoint (chat, generate, openai, embed; now openai)"]),
]


@pytest.mark.parametrize(("sim_args", "locustfile", "args", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_wrong_setup_stops_at_start_in_one_line(sim_factory, sim_args: list[str], locustfile: str,
                                                  args: list[str], words: list[str]) -> None:
    sim = sim_factory("--output-tokens", "5", *sim_args)
    values = {"sim": sim.url, "dead": f"http://127.0.0.1:{free_port()}"}
    args = [a.format(**values) for a in args]
    proc = run_locust(locustfile, "-u", "2", "-r", "2", "-t", "600s", "--llm-prometheus-port", "0", *args,
                      env={"OPENAI_API_KEY": "sk-wrong"}, timeout=120)  # stopped at start, not after -t
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "locust-llm" in line]
    assert proc.returncode == 1, out[-2000:]
    assert len(lines) == 1 and lines[0].startswith("locust-llm: the "), out[-2000:]
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "sekrit-value" not in out and "sk-wrong" not in out
    assert "Traceback" not in out
    stats = get_json(sim.url + "/_sim/stats")
    assert stats["started"] == 0, stats  # no load: the preflight itself never reached a model


def test_preflight_off_keeps_the_old_behaviour(tmp_path) -> None:
    report = tmp_path / "r"
    t0 = time.monotonic()
    proc = run_locust("vllm.py", "--host", f"http://127.0.0.1:{free_port()}", "-u", "2", "-r", "2", "-t", "3s",
                      "--llm-model", "m", "--llm-prometheus-port", "0", "--llm-preflight", "off", report=report,
                      timeout=60)
    assert time.monotonic() - t0 >= 3  # it ran its -t
    assert proc.returncode == 1
    records = read_records(report)
    assert len(records) >= 4 and all(r["error_category"] == "connect_error" for r in records)
    assert "locust-llm: the preflight" not in proc.stderr


def test_a_worker_side_preflight_stops_the_whole_run(tmp_path) -> None:
    proc = run_locust("vllm.py", *processes_args(2),
                      "--host", f"http://127.0.0.1:{free_port()}", "-u", "2", "-r", "2", "-t", "600s",
                      "--llm-model", "m", "--llm-prometheus-port", "0", timeout=120)  # stopped at start, not after -t
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.startswith("locust-llm:")]
    assert proc.returncode == 1, out[-2000:]
    assert len(lines) == 1 and "could not connect" in lines[0], out[-2000:]
    assert "Traceback" not in out


@pytest.mark.parametrize("processes", [False, True], ids=["local", "processes-2"])
def test_a_run_whose_every_request_fails_stops_early(sim_factory, tmp_path, processes: bool) -> None:
    # the preflight meets a 500 too: tried three times, a warning, and the run goes on
    sim = sim_factory("--fault-rate", "1", "--fault-kinds", "http_500", "--output-tokens", "5", "--seed", "2")
    report = tmp_path / "r"
    extra = processes_args(2) if processes else []
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "600s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--llm-fail-stop", "2s", *extra, report=report,
                      timeout=150)  # 600 s asked; stopped 2 s after failing, by the line below, not after -t
    assert proc.returncode == 1, proc.stderr[-2000:]
    stops = [ln for ln in proc.stderr.splitlines() if "every request failed for 2 s" in ln]
    assert len(stops) == 1 and "top category http_500" in stops[0], proc.stderr[-2000:]
    assert "nothing measured" not in proc.stderr  # one line says why
    warnings = [ln for ln in proc.stderr.splitlines() if "the preflight request" in ln]
    assert warnings and all("failed (500" in w and "going on" in w for w in warnings)
    summary = read_summary(report)
    assert summary["fail_stop"]["stopped"] and summary["overall"]["successes"] == 0


def test_a_run_that_measured_nothing_exits_1_with_its_hint(sim_factory, tmp_path) -> None:
    # 150 tokens at 20 ms: 3 s a request; each of 2 users ends its warm-up request, then the stop
    # cuts the second: nothing measured
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "20", "--output-tokens", "150")
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "5s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--llm-spawn-spread", "off", report=tmp_path / "r", timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("locust-llm: nothing measured")]
    assert len(lines) == 1, proc.stderr[-2000:]
    line = lines[0]
    assert "the 2 requests that ended were warm-up" in line and "2 were cut by the stop" in line
    e2e = float(line.split("about ")[1].split(" s (E2E)")[0])
    assert 2.9 <= e2e <= 3.6, line  # 20 ms + 149 x 20 ms
    need = float(line.split("run longer than ")[1].split(" s")[0])
    assert 2 * 2.9 <= need <= 2 * 3.6 + 1, line
    assert "--llm-max-tokens, now 512" in line
