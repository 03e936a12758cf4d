"""Issue 12 workloads against the simulator, in real locust processes: synthetic prompts of an
exact server-counted length (tokenizer path and calibration path), output lengths, and datasets.

One simulator serves every case: its prompt count is deterministic (one token per word, plus
``--template-tokens 7`` per chat message, which the client must measure and subtract). Each run
is one scenario of the module's pool (tests/e2e/locust_pool.py), run once, a few at a time; the
simulator's trace, read at a run's end where a test needs it, is looked up by the run's own
request ids (its ring holds every run's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_API_KEY": "sk-ant-test-key",
        "GEMINI_API_KEY": "gm-test-key"}
TEMPLATE = 7
SIM = ("--ttft-ms", "5", "--itl-ms", "1", "--template-tokens", str(TEMPLATE), "--seed", "5", "--trace-limit", "100000")
PREFIX_SIM = ("--ttft-ms", "5", "--itl-ms", "1", "--template-tokens", str(TEMPLATE), "--trace-prompts",
              "--prefix-cache-block", "16")
SECRET = "sk-this-must-never-show-12345"
DATASET = ('{"prompt": "one two three", "max_tokens": 5}\n'
           '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "four"}],'
           ' "output_tokens": 9}\n')


def _scenarios(base: Path) -> dict[str, Scenario]:
    common = ("-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "10")
    out: dict[str, Scenario] = {}

    def add(name: str, locustfile: str, *args: str, sim: tuple[str, ...] = SIM, trace: bool = False) -> None:
        out[name] = Scenario(locustfile, (*common, *args), sim=sim, env=KEYS, trace=trace)

    for locustfile, target in (("vllm.py", "128"), ("vllm.py", "512"), ("vllm.py", "2048"), ("tgi.py", "512")):
        add(f"exact-{locustfile}-{target}", locustfile, "--llm-input-tokens", target, "--llm-output-tokens", "8",
            trace=True)
    for locustfile in ("ollama.py", "claude.py"):
        add(f"calibrated-{locustfile}", locustfile, "--llm-input-tokens", "512", "--llm-output-tokens", "8")
    add("distributions", "vllm.py", "--llm-input-tokens", "128:2048", "--llm-output-tokens", "4:24",
        "--llm-workload-seed", "3")
    add("jsonl", "vllm.py", "--llm-dataset", str(base / "d.jsonl"))
    add("cost", "vllm.py", "--llm-html", "on", "--llm-input-tokens", "300", "--llm-output-tokens", "20",
        "--llm-price", "in=2.5,out=10,currency=USD")
    add("prefixes", "vllm.py", "--llm-input-tokens", "256", "--llm-prefix-tokens", "128", "--llm-prefix-count", "2",
        "--llm-output-tokens", "4", sim=PREFIX_SIM, trace=True)
    out["environment"] = Scenario(
        "vllm.py", ("--llm-html", "on", "-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10",
                    "--llm-output-tokens", "6", "--llm-export", "vllm-bench", str(base / "bench" / "vllm.json"),
                    "--llm-api-key-env", "MY_VLLM_KEY"), sim=SIM, env={"MY_VLLM_KEY": SECRET})
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_exact_lengths_on_the_tokenizer_path": lambda: [f"exact-{p['locustfile']}-{p['target']}"],
        "test_lengths_on_the_calibration_path": lambda: [f"calibrated-{p['locustfile']}"],
        "test_length_distributions": lambda: ["distributions"],
        "test_jsonl_dataset_with_per_item_lengths": lambda: ["jsonl"],
        "test_cost_equals_the_hand_computed_total": lambda: ["cost"],
        "test_environment_and_vllm_bench_export": lambda: ["environment"],
        "test_shared_prefixes": lambda: ["prefixes"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    base = tmp_path_factory.mktemp("workload")
    (base / "d.jsonl").write_text(DATASET)
    yield from pool_in(request, base, _scenarios(base), _needs)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


def _run(runs: Pool, name: str) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], Run]:
    """The scenario's records (all ok), summary, the simulator's trace by request id, and the run."""
    run = runs.run(name)
    assert run.proc.returncode == 0, _tail(run)
    records = read_records(run.report)
    assert records and all(r["status"] == "ok" for r in records), (records[:2], _tail(run))
    return records, read_summary(run.report), {t["request_id"]: t for t in run.trace or []}, run


@pytest.mark.parametrize(("locustfile", "target", "overhead"), [
    ("vllm.py", "128", TEMPLATE), ("vllm.py", "512", TEMPLATE), ("vllm.py", "2048", TEMPLATE),
    ("tgi.py", "512", 0),  # /generate_stream: a raw prompt, no chat template
])
def test_exact_lengths_on_the_tokenizer_path(runs, locustfile: str, target: str, overhead: int) -> None:
    records, summary, trace, _ = _run(runs, f"exact-{locustfile}-{target}")
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
def test_lengths_on_the_calibration_path(runs, locustfile: str) -> None:
    records, summary, _, _ = _run(runs, f"calibrated-{locustfile}")
    for r in records:
        assert abs(r["input_tokens"] - 512) <= 0.02 * 512, r
    source = summary["workload"]["source"]
    assert source["method"] == "calibration" and source["overhead_tokens"] == TEMPLATE
    assert summary["workload"]["input_tokens_error"]["pct"]["p99"] <= 2.0


def test_length_distributions(runs) -> None:
    records, summary, _, _ = _run(runs, "distributions")
    assert len({r["target_input_tokens"] for r in records}) > 3  # drawn, not fixed
    for r in records:
        assert 128 <= r["input_tokens"] == r["target_input_tokens"] <= 2048
        assert 4 <= r["output_tokens"] == r["target_output_tokens"] <= 24
    assert summary["workload"]["source"]["input_tokens"] == "128:2048"
    assert summary["workload"]["source"]["output_tokens"] == "4:24"


def test_jsonl_dataset_with_per_item_lengths(runs) -> None:
    records, summary, _, run = _run(runs, "jsonl")
    data = run.report.parent.parent / "d.jsonl"
    by_len = {r["output_tokens"] for r in records}
    assert by_len == {5, 9}
    for r in records:  # one or two chat messages, each with the template's 7
        assert r["input_tokens"] == (3 + TEMPLATE if r["output_tokens"] == 5 else 3 + 2 * TEMPLATE)
    src = summary["workload"]["source"]
    assert src["format"] == "jsonl" and src["path"] == str(data) and len(src["sha256"]) == 64


def test_cost_equals_the_hand_computed_total(runs) -> None:
    records, summary, _, run = _run(runs, "cost")
    measured = [r for r in records if not r["warmup"]]
    by_hand = sum(r["input_tokens"] for r in measured) * 2.5 / 1e6 + sum(r["output_tokens"] for r in measured) * 10 / 1e6
    cost = summary["cost"]
    assert round(cost["total"], 2) == round(by_hand, 2) and cost["total"] == pytest.approx(by_hand, rel=1e-12)
    assert cost["requests"] == len(measured) and cost["currency"] == "USD"
    assert cost["per_1k_output_tokens"] == pytest.approx(by_hand / sum(r["output_tokens"] for r in measured) * 1000)
    page = (run.report / "report.html").read_text()
    assert "<h2>Cost</h2>" in page and f"{cost['total']:.3f}" in page
    assert "Input length: achieved vs target" in page


VLLM_BENCH_KEYS = {  # what `vllm bench serve --save-result` writes (vLLM benchmarks/serve.py)
    "date", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")),
}


def test_environment_and_vllm_bench_export(runs) -> None:
    run = runs.run("environment")
    secret, report = SECRET, run.report
    export = report.parent.parent / "bench" / "vllm.json"
    assert run.proc.returncode == 0, _tail(run)
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


def test_shared_prefixes(runs) -> None:
    records, summary, trace, _ = _run(runs, "prefixes")
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
