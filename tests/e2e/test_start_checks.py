"""Issue 10 item 2: every bad --llm-* value and host is refused at start: one ``locust-llm:`` line
naming the option and what is allowed, exit code 1, no traceback, no request at the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import get_json, run_locust

pytestmark = pytest.mark.slow

# (arguments, the option the line must name, a word of what is allowed); {sim} is the simulator's
# URL, {file} an existing file, {dir} a directory.
CASES = [
    (["--host", "{hostport}"], "--host", "http://"),
    (["--host", "ftp://{hostport}"], "--host", "http://"),
    (["--llm-endpoint", "nope"], "--llm-endpoint", "chat, completions"),
    (["--llm-report", "{file}"], "--llm-report", "directory"),
    (["--llm-report", "/proc/locust-llm/r"], "--llm-report", "cannot write"),
    (["--llm-prompts", "{dir}"], "dataset file", "shipped datasets"),  # the line names the path given
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
]


@pytest.mark.parametrize(("args", "option", "allowed"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_value_is_one_line_before_any_request(sim_factory, tmp_path: Path, args: list[str], option: str,
                                                    allowed: str) -> None:
    sim = sim_factory("--output-tokens", "5")
    afile = tmp_path / "a-file"
    afile.write_text("x")
    values = {"hostport": sim.url.removeprefix("http://"), "file": str(afile), "dir": str(tmp_path)}
    args = [a.format(**values) for a in args]
    host = [] if "--host" in args else ["--host", sim.url]
    proc = run_locust("vllm.py", *host, "-u", "2", "-r", "2", "-t", "3s", "--llm-prometheus-port", "0", *args,
                      timeout=60)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "locust-llm" in line]
    assert proc.returncode == 1, out[-2000:]
    assert len(lines) == 1, out[-2000:]
    assert lines[0].startswith("locust-llm: ") and option in lines[0] and allowed in lines[0], lines[0]
    assert "Traceback" not in out
    assert get_json(sim.url + "/_sim/stats")["started"] == 0
