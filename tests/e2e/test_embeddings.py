"""Issue 31 item 2: embeddings and rerank Users in real locust processes against the simulator.

The acceptance test: a step study over an embeddings User gives every stage's throughput within
5% of the simulator's analytic model (docs/simulator.md, "Embeddings and rerank"): a request
holds one of C slots for S = base + per-token x T, T the batch's input tokens, so N closed-loop
users run min(N, C) / S requests/s. Then raw and SDK mode for each dialect's route, and
``--processes 2`` merging exactly.
"""

from __future__ import annotations

import pytest

from llm_users.metrics import Distribution
from llm_users.protocols.embed import DEFAULT_QUERY
from tests.helpers import free_port, get_json, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "GEMINI_API_KEY": "gm-test"}
QUERY_TOKENS = len(DEFAULT_QUERY.split())  # the simulator's count: one token per word


def service_ms(base_ms: float, token_ms: float, tokens: int) -> float:
    return base_ms + token_ms * tokens


@pytest.mark.serial  # throughput against the analytic service time: run alone (tests/sharding.py)
def test_step_study_every_stage_within_5_percent_of_analytic(sim_factory, tmp_path) -> None:
    # S = 150 + 0.2 x (4 inputs x 64 tokens) = 201.2 ms: long beside the client's own ~1-3 ms per request
    # on a busy machine, short enough for ~40 requests per user per stage (a whole request is 2.5%)
    base, per_token, slots, batch, tokens = 150.0, 0.2, 4, 4, 64
    sim = sim_factory("--embed-base-ms", str(base), "--embed-token-ms", str(per_token), "--embed-max-batch",
                      str(slots), "--seed", "1")
    report = tmp_path / "r"
    # Ollama's route: no /tokenize, so exact lengths come from calibration, not a call per input
    proc = run_locust("ollama.py", "--host", sim.url, "--llm-endpoint", "embed", "--llm-batch-size", str(batch),
                      "--llm-input-tokens", str(tokens), "--llm-steps", "2:6:2:15s", "--llm-prometheus-port", "0",
                      report=report, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(report)["stages"]
    assert [st["users"] for st in stages] == [2, 4, 6]
    s = service_ms(base, per_token, batch * tokens) / 1000
    got = {st["users"]: (st["requests_per_s"], min(st["users"], slots) / s) for st in stages}
    print("per stage (measured, analytic) req/s:", got)
    for n, (measured, analytic) in got.items():
        assert measured == pytest.approx(analytic, rel=0.05), (n, got)
    for st in stages:  # the embeddings figures of every stage: inputs/s and input tokens/s follow req/s
        assert st["request_kinds"] == {"embed": st["requests"]} and st["failures"] == 0
        assert st["inputs_per_s"] == pytest.approx(batch * st["requests_per_s"])
        assert st["input_tokens_per_s"] == pytest.approx(batch * tokens * st["requests_per_s"])
        assert st["ttft"]["count"] == 0 and st["e2e"]["p50"] >= s * 1000


def _run(sim_url: str, locustfile: str, report, *args: str) -> tuple[list[dict], dict]:
    # an SDK's first request (its import, its client) took 1.4 s beside CI's other shards: longer runs
    seconds = 6 if "sdk" in args else 3
    proc = run_locust(locustfile, "--host", sim_url, "-u", "3", "-r", "3", "-t", f"{seconds}s", "--stop-timeout", "5",
                      "--llm-prometheus-port", "0", *args, report=report, env=KEYS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "embeddings/rerank (" in proc.stdout, proc.stdout[-2000:]  # the console's line
    return read_records(report), read_summary(report)


# (locustfile, extra arguments, record name, kind, input tokens per input from usage (None: the workload's))
CASES = {
    "vllm-embed-raw": ("embeddings.py", (), "/v1/embeddings", "embed", "usage"),
    "vllm-embed-sdk": ("embeddings.py", ("--llm-client", "sdk"), "sdk:/v1/embeddings", "embed", "usage"),
    "openai-embed-sdk": ("openai.py", ("--llm-endpoint", "embeddings", "--llm-client", "sdk"), "sdk:/v1/embeddings",
                         "embed", "usage"),
    "vllm-rerank-raw": ("rerank.py", (), "/v1/rerank", "rerank", "usage"),
    "ollama-embed-raw": ("ollama.py", ("--llm-endpoint", "embed"), "/api/embed", "embed", "usage"),
    "ollama-embed-sdk": ("ollama.py", ("--llm-endpoint", "embed", "--llm-client", "sdk"), "sdk:/api/embed", "embed",
                         "usage"),
    "gemini-embed-raw": ("gemini.py", ("--llm-endpoint", "embed"), "/v1beta/models/gemini-2.5-flash:batchEmbedContents",
                         "embed", "workload"),
    "gemini-embed-sdk": ("gemini.py", ("--llm-endpoint", "embed", "--llm-client", "sdk"),
                         "sdk:/v1beta/models/gemini-2.5-flash:batchEmbedContents", "embed", "workload"),
    "tei-embed-raw": ("tei.py", (), "/embed", "embed", "workload"),
    "tei-rerank-raw": ("tei.py", ("--llm-endpoint", "rerank"), "/rerank", "rerank", "workload"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_route_raw_and_sdk(case: str, sim_factory, tmp_path) -> None:
    locustfile, args, name, kind, source = CASES[case]
    sim = sim_factory("--embed-base-ms", "20", "--embed-token-ms", "0.1", "--embed-dim", "16", "--seed", "5")
    records, summary = _run(sim.url, locustfile, tmp_path, "--llm-batch-size", "3", "--llm-input-tokens", "20", *args)
    ok = [r for r in records if r["status"] == "ok"]
    assert ok and len(ok) == len([r for r in records if r["status"] != "interrupted"]), records[:1]
    assert {(r["name"], r["kind"], r["inputs"]) for r in ok} == {(name, kind, 3)}
    assert all(r["ttft_ns"] is None and r["itl_ns"] == [] and r["output_tokens"] is None for r in ok)
    assert all(r["input_tokens_source"] == source for r in ok)
    # the target is the server's count per input: for vLLM's rerank a pair, query included (the synthetic
    # source measures the query as it does a chat template); TEI says no count: the documents' target
    per_request = 60
    assert {r["input_tokens"] for r in ok} == {per_request}
    assert all(r["vector_dim"] == (16 if kind == "embed" else None) for r in ok)
    e2e = sorted(r["e2e_ns"] / 1e6 for r in ok)
    tokens_seen = 60 + (3 * QUERY_TOKENS if kind == "rerank" and source == "workload" else 0)  # query per pair
    service = service_ms(20, 0.1, tokens_seen)
    if "--llm-client" in args:  # an SDK builds its answer object too (openai's: one object per number, ~ms)
        assert service - 1 <= e2e[len(e2e) // 2] <= service + 30, e2e
    else:  # never below the server's time; above it by our client's own time (up to 9 ms beside CI's shards)
        assert service - 1 <= e2e[len(e2e) // 2] <= service + 20, e2e
    ov = summary["overall"]
    measured = [r for r in ok if not r["warmup"]]
    assert ov["request_kinds"] == {kind: len(measured)} and ov["inputs"] == 3 * len(measured)
    assert ov["inputs_per_s"] == pytest.approx(3 * ov["requests_per_s"])
    assert ov["input_tokens_per_s"] == pytest.approx(per_request * ov["requests_per_s"])
    assert ov["ttft"]["count"] == 0 and ov["e2e"]["count"] == len(measured)


def test_two_processes_merge_exactly(sim_factory, tmp_path) -> None:
    sim = sim_factory("--embed-base-ms", "15", "--embed-token-ms", "0.05", "--seed", "7")
    port = str(free_port())
    report = tmp_path / "r"
    proc = run_locust("embeddings.py", "--host", sim.url, "-u", "4", "-r", "4", "-t", "4s", "--processes", "2",
                      "--master-bind-port", port, "--master-port", port, "--llm-batch-size", "2",
                      "--llm-prometheus-port", "0", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len({r["worker"] for r in records}) == 2
    measured = [r for r in records if r["status"] == "ok" and not r["warmup"]]
    ov = read_summary(report)["overall"]
    e2e = Distribution()
    for r in measured:
        e2e.add(r["e2e_ns"])
    for key in ("p50", "p90", "p99", "max"):
        assert ov["e2e"][key] == e2e.summary_ms()[key], key
    assert ov["requests"] == len(measured) and ov["request_kinds"] == {"embed": len(measured)}
    assert ov["inputs"] == sum(r["inputs"] for r in measured) == 2 * len(measured)
    assert ov["input_tokens"] == sum(r["input_tokens"] for r in measured)
    served = get_json(sim.url + "/_sim/stats")["by_route"]["/v1/embeddings"]["served"]
    # every request the simulator answered is a record (the preflight's and the tokenizer probe's are not)
    assert served - len([r for r in records if r["status"] != "interrupted"]) in range(0, 4), served


def test_open_loop_rate_steps_over_an_embeddings_user(sim_factory, tmp_path) -> None:
    """The open-loop scheduler sends embeddings batches as it sends chat requests."""
    sim = sim_factory("--embed-base-ms", "30", "--embed-token-ms", "0.05", "--seed", "3")
    report = tmp_path / "r"
    proc = run_locust("embeddings.py", "--host", sim.url, "--llm-batch-size", "2", "--llm-steps", "10:20:10:5s",
                      "--llm-arrival", "constant", "--llm-seed", "1", "--llm-prometheus-port", "0", report=report,
                      timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(report)["stages"]
    assert [st["rate"] for st in stages] == [10, 20]
    for st in stages:
        assert st["requests_per_s"] == pytest.approx(st["rate"], rel=0.05), stages
        assert st["inputs_per_s"] == pytest.approx(2 * st["requests_per_s"])
        assert st["request_kinds"] == {"embed": st["requests"]}


@pytest.mark.parametrize(("locustfile", "args", "line"), [
    ("vllm.py", ("--llm-batch-size", "4"),
     "locust-llm: --llm-batch-size applies to embeddings and rerank routes, not vllm's 'chat' (a chat stream)"),
    ("gemini.py", ("--llm-endpoint", "embed_content", "--llm-batch-size", "2"),
     "locust-llm: --llm-batch-size: gemini's 'embed_content' takes at most 1 input(s) per request, got 2"),
    ("rerank.py", ("--llm-client", "sdk"),
     "locust-llm: --llm-client sdk is not available for vllm's 'rerank' route (it is for chat, completions, responses, embeddings)"),
    ("tei.py", ("--llm-batch-size", "0"),
     "locust-llm: --llm-batch-size must be a whole number of inputs per request, at least 1, got '0'"),
])
def test_refused_at_start_with_one_line(locustfile: str, args: tuple[str, ...], line: str) -> None:
    proc = run_locust(locustfile, "--host", "http://127.0.0.1:9", "-u", "1", "-t", "2s", *args, env=KEYS)
    assert proc.returncode == 1 and line in proc.stderr.splitlines(), proc.stderr[-2000:]


@pytest.mark.parametrize("locustfile", ["embeddings.py", "ollama.py"])
def test_faults_get_the_same_categories_raw_and_sdk(locustfile: str, sim_factory, tmp_path) -> None:
    """HTTP errors, a cut JSON body and an empty 200, drawn by the simulator: one category each, the
    same in raw and SDK mode (the SDK's own exceptions mapped as raw mode names the fault)."""
    sim = sim_factory("--embed-base-ms", "5", "--fault-rate", "0.4", "--fault-kinds", "http_503,malformed,empty_200",
                      "--seed", "9")
    seen = {}
    for client in ("raw", "sdk"):
        records, summary = _run(sim.url, locustfile, tmp_path / client, "--llm-client", client, "--llm-endpoint",
                                "embed" if locustfile == "ollama.py" else "embeddings", "--llm-backoff", "off",
                                "--llm-preflight", "off", "--exit-code-on-error", "0")
        failed = [r for r in records if r["status"] == "error"]
        seen[client] = {r["error_category"] for r in failed}
        assert summary["overall"]["failures_by_category"].keys() <= seen[client]
        assert any(r["status"] == "ok" for r in records)
    assert seen["raw"] == seen["sdk"] == {"http_503", "malformed_stream", "empty_response"}, seen
