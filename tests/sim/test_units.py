"""In-process unit tests of the simulator's pure parts (no sockets), and the launcher."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys

import pytest

from llm_users.sim.cli import build_parser, config_from_args
from llm_users.sim.config import FAULT_KINDS, SimConfig
from llm_users.sim.engine import Engine, QueueFull
from llm_users.sim.faults import Fault, FaultHeaderError, draw_fault, parse_fault_header
from llm_users.sim.launcher import start_simulator
from llm_users.sim.text import TokenSource, count_input_tokens, expected_text, expected_tokens, vocabulary
from llm_users.sim.timing import Dist, request_rng


def test_text_is_deterministic_and_prefix_stable():
    a = expected_text(1, "hello world", 50)
    assert a == expected_text(1, "hello world", 50)
    assert expected_text(1, "hello world", 10) == "".join(expected_tokens(1, "hello world", 50)[:10])
    assert a != expected_text(2, "hello world", 50) and a != expected_text(1, "hello there", 50)
    toks = expected_tokens(1, "hello world", 50)
    assert all(t.startswith(" ") and t[1:].isalpha() and t[1:].isascii() for t in toks)
    src = TokenSource(1)
    words = vocabulary()
    assert [words[i] for i in src.indices("hello world", 5)] == toks[:5]
    assert [words[i] for i in src.indices("hello world", 50)] == toks
    assert len(set(vocabulary())) == len(vocabulary())


def test_input_token_estimate():
    assert count_input_tokens("one two  three\nfour") == 4
    assert count_input_tokens("") == 1


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_distributions_seeded_and_non_negative(kind):
    d = Dist(kind, 10.0, 8.0)
    a = [d.sample_ns(request_rng(7, i, "timing")) for i in range(2000)]
    b = [d.sample_ns(request_rng(7, i, "timing")) for i in range(2000)]
    assert a == b and min(a) >= 0
    assert abs(statistics.fmean(a) / 1e6 - 10.0) < 1.5
    assert Dist("fixed", 10.0, 8.0).sample_ns(random.Random(1)) == 10_000_000


def test_fault_header_parsing():
    assert parse_fault_header("reset") == Fault("reset", None)
    assert parse_fault_header(" truncate ; after=3 ") == Fault("truncate", 3)
    assert parse_fault_header("HTTP_429").http_status == 429
    for bad in ("boom", "reset;after=x", "reset;after=-1", "reset;when=2"):
        with pytest.raises(FaultHeaderError):
            parse_fault_header(bad)
    assert Fault("reset", 100).chunk_index(10) == 9
    assert Fault("reset").chunk_index(10) == 5 and Fault("reset").chunk_index(1) == 0


def test_fault_draw():
    rng = random.Random(3)
    draws = [draw_fault(rng, 0.3, FAULT_KINDS, 10) for _ in range(2000)]
    hit = [d for d in draws if d is not None]
    assert 0.25 < len(hit) / len(draws) < 0.35
    assert {d.kind for d in hit} == set(FAULT_KINDS)
    assert all(0 <= d.after < 10 for d in hit)
    assert draw_fault(rng, 0.0, FAULT_KINDS, 10) is None


def test_engine_fifo_and_queue_limit():
    import asyncio

    async def run() -> None:
        eng = Engine(2, max_queue=1)
        assert eng.try_acquire() is None and eng.try_acquire() is None
        fut = eng.try_acquire()
        assert fut is not None and eng.waiting == 1
        with pytest.raises(QueueFull):
            eng.try_acquire()
        eng.release()
        assert fut.done() and eng.running == 2 and eng.waiting == 0
        assert eng.kv_usage() == 1.0

    asyncio.run(run())


def test_cli_options_and_help():
    cfg, _ = config_from_args(["--port", "0", "--ttft-ms", "5", "--itl-dist", "lognormal", "--itl-sd-ms", "2",
                               "--fault-kinds", "reset,stall", "--max-queue", "3", "--output-tokens", "7"])
    assert cfg.port == 0 and cfg.ttft_ms == 5 and cfg.itl_dist == "lognormal" and cfg.fault_kinds == ("reset", "stall")
    assert cfg.max_queue == 3 and cfg.output_tokens == 7
    text = build_parser().format_help()
    for opt in ("--host", "--port", "--ttft-ms", "--itl-ms", "--output-tokens", "--seed", "--ttft-dist",
                "--ttft-sd-ms", "--itl-dist", "--itl-sd-ms", "--tokens-per-chunk", "--gemini-tokens-per-chunk",
                "--max-batch", "--itl-slope-ms", "--max-queue", "--cold-start-ms", "--fault-rate", "--fault-kinds",
                "--stall-ms", "--require-api-key", "--trace-file", "--trace-limit"):
        assert opt in text, opt
    with pytest.raises(SystemExit):
        config_from_args(["--fault-kinds", "nope"])
    with pytest.raises(ValueError):
        SimConfig(fault_rate=2.0)


def test_help_runs():
    out = subprocess.run([sys.executable, "-m", "llm_users.sim", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--max-batch" in out.stdout and "X-Sim-Fault" in out.stdout


def test_import_has_no_side_effects():
    code = ("import sys, asyncio; import llm_users.sim, llm_users.sim.app, llm_users.sim.cli, llm_users.sim.launcher;"
            "import prometheus_client; assert not list(prometheus_client.REGISTRY._names_to_collectors.keys() "
            "& {'vllm:num_requests_running'}); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "ok", out.stderr


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


@pytest.mark.parametrize(("args", "says"), [
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"], "--tls-cert/--tls-key: "),
])
def test_tls_options_refused_with_one_line(args, says, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        config_from_args(args)
    assert e.value.code == 2 and says in capsys.readouterr().err
