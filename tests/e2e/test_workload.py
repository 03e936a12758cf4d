"""Issue 12 workloads against the simulator, in real locust processes: synthetic prompts of an
exact server-counted length (tokenizer path and calibration path), output lengths, and datasets.

One simulator serves every case: its prompt count is deterministic (one token per word, plus
``--template-tokens 7`` per chat message, which the client must measure and subtract).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.launcher import start_simulator
from tests.helpers import get_json, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_API_KEY": "sk-ant-test-key",
        "GEMINI_API_KEY": "gm-test-key"}
TEMPLATE = 7


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    s = start_simulator(["--ttft-ms", "5", "--itl-ms", "1", "--template-tokens", str(TEMPLATE), "--seed", "5"])
    yield s
    s.stop()


def _run(sim: Any, locustfile: str, tmp_path, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    report = tmp_path / "r"
    proc = run_locust(locustfile, "--host", sim.url, "-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "10",
                      *args, report=report, env=KEYS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert records and all(r["status"] == "ok" for r in records), records[:2]
    return records, read_summary(report)


@pytest.mark.parametrize(("locustfile", "target", "overhead"), [
    ("vllm.py", "128", TEMPLATE), ("vllm.py", "512", TEMPLATE), ("vllm.py", "2048", TEMPLATE),
    ("tgi.py", "512", 0),  # /generate_stream: a raw prompt, no chat template
])
def test_exact_lengths_on_the_tokenizer_path(sim, tmp_path, locustfile: str, target: str, overhead: int) -> None:
    records, summary = _run(sim, locustfile, tmp_path, "--llm-input-tokens", target, "--llm-output-tokens", "8")
    trace = {t["request_id"]: t for t in get_json(sim.url + "/_sim/trace")}
    for r in records:
        assert r["target_input_tokens"] == int(target)
        assert r["input_tokens"] == trace[r["request_id"]]["input_tokens"] == int(target), r
        assert r["output_tokens"] == r["target_output_tokens"] == 8
    source = summary["workload"]["source"]
    assert source["kind"] == "synthetic" and source["method"] == "tokenizer"
    assert source["overhead_tokens"] == overhead
    err = summary["workload"]["input_tokens_error"]
    assert err["exact_share"] == 1.0 and err["abs_tokens"]["p99"] == 0 and err["requests"] >= 2


@pytest.mark.parametrize("locustfile", ["ollama.py", "claude.py"])  # no tokenizer endpoint: calibrated
def test_lengths_on_the_calibration_path(sim, tmp_path, locustfile: str) -> None:
    records, summary = _run(sim, locustfile, tmp_path, "--llm-input-tokens", "512", "--llm-output-tokens", "8")
    for r in records:
        assert abs(r["input_tokens"] - 512) <= 0.02 * 512, r
    source = summary["workload"]["source"]
    assert source["method"] == "calibration" and source["overhead_tokens"] == TEMPLATE
    assert summary["workload"]["input_tokens_error"]["pct"]["p99"] <= 2.0


def test_length_distributions(sim, tmp_path) -> None:
    records, summary = _run(sim, "vllm.py", tmp_path, "--llm-input-tokens", "128:2048", "--llm-output-tokens",
                            "4:24", "--llm-workload-seed", "3")
    assert len({r["target_input_tokens"] for r in records}) > 3  # drawn, not fixed
    for r in records:
        assert 128 <= r["input_tokens"] == r["target_input_tokens"] <= 2048
        assert 4 <= r["output_tokens"] == r["target_output_tokens"] <= 24
    assert summary["workload"]["source"]["input_tokens"] == "128:2048"
    assert summary["workload"]["source"]["output_tokens"] == "4:24"


def test_jsonl_dataset_with_per_item_lengths(sim, tmp_path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "one two three", "max_tokens": 5}\n'
                    '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "four"}],'
                    ' "output_tokens": 9}\n')
    records, summary = _run(sim, "vllm.py", tmp_path, "--llm-dataset", str(data))
    by_len = {r["output_tokens"] for r in records}
    assert by_len == {5, 9}
    for r in records:  # one or two chat messages, each with the template's 7
        assert r["input_tokens"] == (3 + TEMPLATE if r["output_tokens"] == 5 else 3 + 2 * TEMPLATE)
    src = summary["workload"]["source"]
    assert src["format"] == "jsonl" and src["path"] == str(data) and len(src["sha256"]) == 64


def test_cost_equals_the_hand_computed_total(sim, tmp_path) -> None:
    records, summary = _run(sim, "vllm.py", tmp_path, "--llm-html", "on", "--llm-input-tokens", "300", "--llm-output-tokens", "20",
                            "--llm-price", "in=2.5,out=10,currency=USD")
    measured = [r for r in records if not r["warmup"]]
    by_hand = sum(r["input_tokens"] for r in measured) * 2.5 / 1e6 + sum(r["output_tokens"] for r in measured) * 10 / 1e6
    cost = summary["cost"]
    assert round(cost["total"], 2) == round(by_hand, 2) and cost["total"] == pytest.approx(by_hand, rel=1e-12)
    assert cost["requests"] == len(measured) and cost["currency"] == "USD"
    assert cost["per_1k_output_tokens"] == pytest.approx(by_hand / sum(r["output_tokens"] for r in measured) * 1000)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Cost</h2>" in page and f"{cost['total']:.3f}" in page
    assert "Input length: achieved vs target" in page


VLLM_BENCH_KEYS = {  # what `vllm bench serve --save-result` writes (vLLM benchmarks/serve.py)
    "date", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")),
}


def test_environment_and_vllm_bench_export(sim, tmp_path) -> None:
    export = tmp_path / "bench" / "vllm.json"
    secret = "sk-this-must-never-show-12345"
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10",
                      "--llm-output-tokens", "6", "--llm-export", "vllm-bench", str(export),
                      "--llm-api-key-env", "MY_VLLM_KEY", report=report, env={"MY_VLLM_KEY": secret})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(report)
    env = summary["environment"]
    assert env["locust_version"] and env["tool"]["name"] == "locust-llm" and env["python"]["version"]
    assert "--llm-export" in env["command_line"] and env["options"]["llm_output_tokens"] == "6"
    assert env["dataset"]["path"].endswith("short.json") and len(env["dataset"]["sha256"]) == 64
    assert env["server"]["model_id"] == "sim-model" and env["server"]["version"] == "0.0.0-sim"
    assert env["client"]["hostname"] and env["client"]["cpus"] >= 1
    for f in report.iterdir():
        assert secret not in f.read_text(errors="replace"), f
    page = (report / "report.html").read_text()  # the first screen says what ran
    for text in ("Load plan", "vllm.py", "2 users, spawned at 2/s", "sim-model", "(version 0.0.0-sim)", "UTC",
                 "6 output tokens"):
        assert text in page, text
    assert "Failures over time" not in page  # nothing failed: no empty failures chart (issue 28)
    data = json.loads(export.read_text())
    assert set(data) >= VLLM_BENCH_KEYS, VLLM_BENCH_KEYS - set(data)
    ov = summary["overall"]
    assert data["completed"] == ov["successes"] and data["failed"] == ov["failures"]
    assert data["total_input_tokens"] == ov["input_tokens"] and data["total_output_tokens"] == ov["output_tokens"]
    assert data["duration"] == summary["window"]["measured_s"]
    assert data["output_throughput"] == ov["output_tokens_per_s"]
    assert data["model_id"] == "sim-model" and data["backend"] == "openai-chat"
    for theirs, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        assert data[f"median_{theirs}_ms"] == ov[ours]["p50"] and data[f"p99_{theirs}_ms"] == ov[ours]["p99"]
        assert data[f"mean_{theirs}_ms"] == ov[ours]["mean"] and data[f"std_{theirs}_ms"] > 0



def test_shared_prefixes(sim_factory, tmp_path) -> None:
    own = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--template-tokens", str(TEMPLATE), "--trace-prompts",
                      "--prefix-cache-block", "16")
    records, summary = _run(own, "vllm.py", tmp_path, "--llm-input-tokens", "256", "--llm-prefix-tokens", "128",
                            "--llm-prefix-count", "2", "--llm-output-tokens", "4")
    trace = {t["request_id"]: t for t in get_json(own.url + "/_sim/trace")}
    heads: dict[int, set[str]] = {0: set(), 1: set()}
    for r in records:
        assert r["input_tokens"] == 256 and r["prefix_id"] in (0, 1)
        words = trace[r["request_id"]]["prompt"].split()
        heads[r["prefix_id"]].add(" ".join(words[:128]))
    assert len(heads[0]) == len(heads[1]) == 1 and heads[0] != heads[1]  # two shared 128-token prefixes
    tails = [" ".join(trace[r["request_id"]]["prompt"].split()[128:]) for r in records]
    assert len(set(tails)) == len(tails)  # the rest of every prompt is its own
    by_prefix = summary["workload"]["prefixes"]["by_prefix"]
    assert [p["prefix"] for p in by_prefix] == [0, 1] and all(p["ttft"]["p50"] for p in by_prefix)
    assert summary["workload"]["source"]["prefix_tokens"] == 128
    # the server says how much was cached (usage.prompt_tokens_details.cached_tokens): after each
    # prefix's first request, its 128 tokens (8 blocks of 16); the unique tails never
    cached = [r["server"]["cached_tokens"] for r in records]
    assert set(cached) <= {0, 128} and cached.count(128) >= len(records) - 2
    hits = summary["workload"]["prefixes"]["by_cache_hit"]
    assert hits["hit"]["requests"] == sum(1 for r in records if not r["warmup"] and r["server"]["cached_tokens"])
