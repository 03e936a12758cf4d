"""Issue 31 item 3: with ``--llm-tokenizer`` a run fits its exact-length prompts on the client: the
simulator (counting with the same tokenizer.json, plus a 7-token chat template) sees a handful of
``/tokenize`` calls for 200+ requests, and every prompt counts exactly 512 tokens as it reports
them. Local and ``--processes 2``; and a trace replay on the same path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import get_json, processes_args, read_records, read_summary, run_locust
from tests.workload.tokenizer_files import train_tokenizer

pytestmark = pytest.mark.slow
TEMPLATE = 7
TRACES = Path(__file__).parent.parent / "fixtures" / "traces"


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.mark.parametrize("processes", [False, True], ids=["local", "processes-2"])
def test_exact_512_with_a_handful_of_tokenize_calls(sim_factory, tok, tmp_path, processes: bool) -> None:
    sim = sim_factory("--tokenizer", str(tok), "--template-tokens", str(TEMPLATE), "--ttft-ms", "2", "--itl-ms", "1",
                      "--output-tokens", "2", "--trace-limit", "10000")
    extra = processes_args(2) if processes else []
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "16", "-r", "16", "-t", "5s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--llm-input-tokens", "512", "--llm-output-tokens", "2",
                      "--llm-tokenizer", str(tok), *extra, report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] == "ok"]
    stats = get_json(sim.url + "/_sim/stats")
    assert len(records) >= 200, len(records)
    trace = {t["request_id"]: t for t in get_json(sim.url + "/_sim/trace")}
    bad = [(r["input_tokens"], trace[r["request_id"]]["input_tokens"]) for r in records
           if not r["input_tokens"] == trace[r["request_id"]]["input_tokens"] == 512]
    assert not bad, (len(bad), bad[:10])
    # one check per load-generating process (the tokenizer path without it: up to 8 per request)
    assert stats["tokenize_calls"] <= (2 if processes else 1), stats["tokenize_calls"]
    source = read_summary(report)["workload"]["source"]
    if not processes:  # a master says each worker measured its own
        assert source["method"] == "local_tokenizer" and source["overhead_tokens"] == TEMPLATE
        assert source["verified"] is True and source["tokenize_calls"] == 0


def test_trace_replay_fits_its_prompts_locally(sim_factory, tok, tmp_path) -> None:
    sim = sim_factory("--tokenizer", str(tok), "--template-tokens", str(TEMPLATE), "--ttft-ms", "2", "--itl-ms", "1",
                      "--trace-prompts")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-t", "6s", "--llm-model", "m", "--llm-prometheus-port", "0",
                      "--llm-warmup", "0", "--llm-trace", str(TRACES / "mooncake_trace.jsonl"), "--llm-trace-speedup",
                      "4", "--llm-tokenizer", str(tok), report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len(records) >= 20 and all(r["input_tokens"] == r["target_input_tokens"] for r in records), \
        [(r["input_tokens"], r["target_input_tokens"]) for r in records][:5]
    assert get_json(sim.url + "/_sim/stats")["tokenize_calls"] <= 1
    prompts = read_summary(report)["arrivals"]["trace_prompts"]
    assert prompts["method"] == "local_tokenizer" and prompts["verified"] is True
