"""sim/cli.py: the simulator's options, its --help, and the TLS options refused with one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llm_users.sim.cli import build_parser, config_from_args
from llm_users.sim.config import SimConfig


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


@pytest.mark.parametrize(("args", "says"), [
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"], "--tls-cert/--tls-key: "),
])
def test_tls_options_refused_with_one_line(args, says, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        config_from_args(args)
    assert e.value.code == 2 and says in capsys.readouterr().err
