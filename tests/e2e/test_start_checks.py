"""Issue 10 item 2: every bad --llm-* value and host is refused at start: one ``locust-llm:`` line
naming the option and what is allowed, exit code 1, no traceback, no request at the server.
Issue 33 item 6: so are the refusals Locust raises (a port in use, a bad -u/-r/-t), and a refusal
with --processes leaves no forked worker behind (health/refusal.py). Issue 54 item 6: a dataset
that is a directory, a device, unreadable or holds a line over 16 MiB, and a negative -u, too.

Each refusal is one real ``locust`` run of the module's pool (tests/e2e/locust_pool.py), a few at
once; every run talks to one simulator of the module, which must see no request from any of them."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.launcher import start_simulator
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import free_port, get_json

pytestmark = pytest.mark.slow

# (arguments, the option the line must name, a word of what is allowed); {sim} is the simulator's
# URL, {file} an existing file, {dir} a directory, {long} a dataset whose line 2 is over 16 MiB.
CASES = [
    (["--host", "{hostport}"], "--host", "http://"),
    (["--host", "ftp://{hostport}"], "--host", "http://"),
    (["--llm-endpoint", "nope"], "--llm-endpoint", "chat, completions"),
    (["--llm-report", "{file}"], "--llm-report", "directory"),
    (["--llm-report", "/proc/locust-llm/r"], "--llm-report", "cannot write"),
    (["--llm-prompts", "{dir}"], "--llm-dataset", "a directory, not a dataset file"),  # --llm-prompts is its alias
    (["--llm-dataset", "/dev/zero"], "--llm-dataset", "a device, pipe or socket"),
    (["--llm-dataset", "/proc/self/mem"], "--llm-dataset", "cannot read it (Input/output error)"),  # root too
    (["--llm-dataset", "{long}"], "--llm-dataset", "line 2 is over 16 MiB"),
    (["--llm-prometheus-port", "99999"], "--llm-prometheus-port", "1..65535"),
    (["--llm-prometheus-port", "x"], "--llm-prometheus-port", "number"),
    (["--llm-timeout", "-1"], "--llm-timeout", "above 0"),
    (["--llm-read-timeout", "0"], "--llm-read-timeout", "above 0"),
    (["--llm-temperature", "9"], "--llm-temperature", "between 0 and 2"),
    (["--llm-max-tokens", "0"], "--llm-max-tokens", ">= 1"),
    (["--llm-max-tokens", "lots"], "--llm-max-tokens", "whole number"),
    (["--llm-top-p", "2"], "--llm-top-p", "(0, 1]"),
    (["--llm-client", "grpc"], "--llm-client", "raw or sdk"),
    (["--llm-ignore-eos", "maybe"], "--llm-ignore-eos", "true or false"),
    (["--llm-backoff", "maybe"], "--llm-backoff", "true or false"),
    (["--llm-cooldown", "10"], "--llm-cooldown", "unit"),
    (["--llm-warmup", "soon"], "--llm-warmup", "duration"),
    (["--llm-slo", "ttft=fast"], "--llm-slo", "ttft=500ms"),
    (["--llm-api-key-env", "sk-not-a-name"], "--llm-api-key-env", "NAME"),
    (["--llm-server-metrics", "vllm:8000/metrics"], "--llm-server-metrics", "http://"),
    (["--llm-scrape-interval", "0"], "--llm-scrape-interval", "more than 0"),
    (["--llm-responses-chain", "sometimes"], "--llm-responses-chain", "full or previous_id"),
    (["--llm-images", "2", "--llm-image-size", "big"], "--llm-image-size", "WIDTHxHEIGHT"),
    (["--llm-images", "1", "--llm-endpoint", "completions"], "--llm-images", "use --llm-endpoint chat"),
    (["--llm-images", "1", "--llm-trace", "{file}"], "--llm-images", "--llm-trace builds its own prompts"),
]


# Issue 33 item 6: Locust's own start errors. {port} is a port a listening socket holds; {free} a
# free one; {sim} the simulator's URL. (arguments, a word the line must hold)
LOCUST_CASES = [
    (["--host", "{sim}", "--headful", "--web-host", "127.0.0.1", "--web-port", "{port}", "-t", "3s"], "--web-port"),
    (["--host", "{sim}", "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", "{port}",
      "--expect-workers", "1", "-u", "2", "-t", "3s"], "--master-bind-port"),
    (["--host", "{sim}", "-u", "abc", "-t", "3s"], "-u/--users"),
    (["--host", "{sim}", "-u", "2", "-r", "x", "-t", "3s"], "-r/--spawn-rate"),
    (["--host", "{sim}", "-u", "2", "-t", "2xyz"], "-t/--run-time"),
    (["--processes", "2", "-u", "2", "-t", "3s", "--master-bind-port", "{free}", "--master-port", "{free}"],
     "--host"),  # forked workers, then the refusal (on a free master port: Locust's 5557 may be another test's)
    (["--host", "{sim}", "--processes", "2", "--headful", "--web-host", "127.0.0.1", "--web-port", "{port}",
      "--master-bind-port", "{free}", "--master-port", "{free}"],
     "--web-port"),  # the workers are forked and connected before the web UI binds
]

CASE_IDS = [" ".join(c[0]) for c in CASES]
LOCUST_IDS = [" ".join(c[0][2:6]) for c in LOCUST_CASES]
NEGATIVE = "negative-users"


def _needs(item: Any) -> list[str]:
    p = params(item)
    if item.originalname == "test_a_bad_value_is_one_line_before_any_request":
        return [f"value:{' '.join(p['args'])}"]
    if item.originalname == "test_locusts_own_start_errors_are_one_line_and_leave_no_process":
        return [f"locust:{LOCUST_IDS[[c[0] for c in LOCUST_CASES].index(p['args'])]}"]
    return [NEGATIVE]


def _one_free(args: list[str], values: dict[str, Any]) -> list[str]:
    free = free_port()
    return [a.format(free=free, **values) for a in args]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The module's simulator, files and a port a listening socket holds for the whole module."""
    tmp = tmp_path_factory.mktemp("start-checks-files")
    (tmp / "a-file").write_text("x")
    (tmp / "long.jsonl").write_bytes(b'{"prompt": "hi"}\n{"prompt": "' + b"x" * (17 << 20) + b'"}\n')
    sim = start_simulator(["--output-tokens", "5"])
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        yield {"sim": sim.url, "hostport": sim.url.removeprefix("http://"), "file": str(tmp / "a-file"),
               "dir": str(tmp), "long": str(tmp / "long.jsonl"), "port": holder.getsockname()[1], "tmp": tmp}
    finally:
        holder.close()
        sim.stop()


def _scenarios(v: dict[str, Any]) -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for (args, _, _), cid in zip(CASES, CASE_IDS, strict=True):
        args = [a.format(**v) for a in args]
        host = [] if "--host" in args else ["--host", v["sim"]]
        out[f"value:{cid}"] = Scenario("vllm.py", (*host, "-u", "2", "-r", "2", "-t", "3s", "--llm-prometheus-port", "0",
                                                   *args), report=False, timeout=60)
    for i, ((args, _), lid) in enumerate(zip(LOCUST_CASES, LOCUST_IDS, strict=True)):
        marker = str(v["tmp"] / f"refusal-marker-{i}")  # in the command line of the run and of every fork of it
        values = {"sim": v["sim"], "port": v["port"]}
        out[f"locust:{lid}"] = Scenario("vllm.py", (lambda args=args, values=values: _one_free(args, values),
                                                    "--llm-prometheus-port", "0", "--llm-preflight", "off",
                                                    "--llm-report", marker), report=False, timeout=60)
    out[NEGATIVE] = Scenario("vllm.py", ("--host", "http://127.0.0.1:9", "-u", "-5", "-t", "600s", "--llm-preflight",
                                         "off", "--llm-prometheus-port", "0"), report=False, timeout=120)
    return out


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, shared: dict[str, Any],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from pool_in(request, tmp_path_factory.mktemp("start-checks"), _scenarios(shared), _needs, parallel=4)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-2000:]}"


def _no_load(shared: dict[str, Any]) -> None:
    stats = get_json(shared["sim"] + "/_sim/stats")
    assert stats["started"] == 0, ("a run of this module reached the simulator", stats)


@pytest.mark.parametrize(("args", "option", "allowed"), CASES, ids=CASE_IDS)
def test_a_bad_value_is_one_line_before_any_request(runs, shared, args: list[str], option: str, allowed: str) -> None:
    run = runs.run(f"value:{' '.join(args)}")
    proc = run.proc
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "locust-llm" in line]
    assert proc.returncode == 1, _tail(run)
    assert len(lines) == 1, _tail(run)
    assert lines[0].startswith("locust-llm: ") and option in lines[0] and allowed in lines[0], lines[0]
    assert "Traceback" not in out
    _no_load(shared)


def test_a_negative_user_count_is_refused_at_once(runs) -> None:
    """``-u -5`` was Locust's dispatcher's traceback (48 lines), then the run waited out ``-t``:
    with ``-t 600s`` such a run meets the subprocess's timeout (120 s) instead of exiting 1."""
    run = runs.run(NEGATIVE)
    proc = run.proc
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "locust-llm" in line]
    assert proc.returncode == 1, _tail(run)
    assert lines == [line for line in proc.stderr.splitlines() if line.strip()], _tail(run)  # one line, all said
    assert len(lines) == 1 and lines[0].startswith("locust-llm: ") and "-u/--users" in lines[0], lines
    assert "0 or more, got -5" in lines[0] and "Traceback" not in out


def run_processes(marker: str) -> list[str]:
    """Command lines of the processes still running that carry the test's marker."""
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.parametrize(("args", "named"), LOCUST_CASES, ids=LOCUST_IDS)
def test_locusts_own_start_errors_are_one_line_and_leave_no_process(runs, shared, args: list[str],
                                                                    named: str) -> None:
    i = [c[0] for c in LOCUST_CASES].index(args)
    run = runs.run(f"locust:{LOCUST_IDS[i]}")
    marker = str(shared["tmp"] / f"refusal-marker-{i}")
    proc = run.proc
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "locust-llm" in line]
    assert proc.returncode == 1, _tail(run)
    assert len(lines) == 1, _tail(run)
    assert lines[0].startswith("locust-llm: ") and named in lines[0], lines[0]
    assert "Traceback" not in out and "error:" not in out.lower().replace("locust-llm:", ""), _tail(run)
    deadline = time.monotonic() + 3
    while run_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_processes(marker) == []  # no forked worker left running with parent 1
    _no_load(shared)
