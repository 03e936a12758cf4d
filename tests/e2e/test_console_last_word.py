"""Issue 28 item 4: the LLM summary is the last table a headless run prints (after Locust's own
final table, on stdout and stderr as a terminal shows them), with exact tokens per request and
the total token throughput; SDK mode prints no per-request HTTP log line and names requests by
the one rule (``sdk:`` + raw mode's name)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import LOCUST, ROOT, processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
LOCUST_TABLE = ("# reqs", "Response time percentiles", "Error report")


def _run(locustfile: str, *args: str, loglevel: str = "WARNING") -> list[str]:
    """A headless run with stderr merged into stdout, in the order a terminal shows them."""
    cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / locustfile), "--headless", "--loglevel", loglevel, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | KEYS
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout.splitlines()


def _assert_llm_table_last(lines: list[str]) -> None:
    ours = [i for i, ln in enumerate(lines) if ln.startswith("LLM summary")]
    theirs = [i for i, ln in enumerate(lines) if any(t in ln for t in LOCUST_TABLE)]
    assert len(ours) == 1, "\n".join(lines[-60:])
    assert theirs and max(theirs) < ours[0], "\n".join(lines[-60:])  # Locust's final table, then ours


@pytest.mark.parametrize(("mode", "only_summary"), [("local", True), ("processes", True), ("local", False)])
def test_only_summary_ends_with_the_llm_table_and_exact_token_keys(mode: str, only_summary: bool, sim_factory,
                                                                   tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "20", "--seed", "3")
    report = tmp_path / "r"
    extra = []
    if mode == "processes":
        extra = [*processes_args(2)]
    if only_summary:
        extra.append("--only-summary")  # without: Locust's table every 2 s as well, then its final one
    lines = _run("vllm.py", *extra, "--host", sim.url, "-u", "4", "-r", "4", "-t", "3s",
                 "--stop-timeout", "5", "--llm-input-tokens", "64", "--llm-report", str(report))
    _assert_llm_table_last(lines)
    ov = read_summary(report)["overall"]
    ok = [r for r in read_records(report) if r["status"] == "ok" and not r["warmup"]]
    assert ov["requests"] == len(ok) >= 10
    # the simulator answers exactly 20 tokens; the synthetic prompts are exactly 64 (server-counted)
    assert ov["output_tokens_per_request"] == {"p50": 20, "mean": 20.0, "count": len(ok)}
    assert ov["input_tokens_per_request"] == {"p50": 64, "mean": 64.0, "count": len(ok)}
    total = (ov["input_tokens"] + ov["output_tokens"]) / ov["duration_s"]
    assert ov["total_tokens_per_s"] == pytest.approx(total, rel=1e-9)
    assert ov["total_tokens_per_s"] == pytest.approx(ov["output_tokens_per_s"] * (64 + 20) / 20, rel=1e-9)
    tokens = next(ln for ln in lines if ln.startswith("tokens per request"))
    assert tokens.startswith("tokens per request: input p50 64, mean 64.0; output p50 20, mean 20.0;"), tokens


@pytest.mark.parametrize(("locustfile", "name"), [
    ("claude.py", "sdk:/v1/messages"),
    ("gemini.py", "sdk:/v1beta/models/{model}:streamGenerateContent"),
])
def test_sdk_mode_is_quiet_and_named_by_the_raw_rule(locustfile: str, name: str, sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8")
    report = tmp_path / "r"
    # no warm-up: on a loaded machine an SDK user's first requests take 0.3 s and more, and 2 s held
    # only warm-up and cut ones (CI: "nothing measured")
    lines = _run(locustfile, "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--llm-client", "sdk",
                 "--llm-warmup", "0", "--only-summary", "--llm-report", str(report), loglevel="INFO")
    assert not [ln for ln in lines if "HTTP Request:" in ln], [ln for ln in lines if "HTTP Request:" in ln][:3]
    records = read_records(report)
    assert records and {r["client"] for r in records} == {"sdk"}
    model = records[0]["model"]
    assert {r["name"] for r in records} == {name.format(model=model)}
    raw = {n for n in read_summary(report)["by_name"]}
    assert raw == {name.format(model=model)}
    _assert_llm_table_last(lines)
