"""Issue 31 item 2: embeddings and rerank Users in real locust processes against the simulator.

The acceptance test: a step study over an embeddings User gives every stage's throughput within
5% of the simulator's analytic model (docs/simulator.md, "Embeddings and rerank"): a request
holds one of C slots for S = base + per-token x T, T the batch's input tokens, so N closed-loop
users run min(N, C) / S requests/s. Then raw and SDK mode for each dialect's route, and
``--processes 2`` merging exactly.

Each scenario (a locustfile, a client mode, its options) runs once for the module, on simulators
shared by the scenarios that start them alike (tests/e2e/locust_pool.py). The runs whose timing
a test bounds (the step study, each route's latency, the open-loop rates) run alone; the others
(the refusals at start, the faults, the two processes) a few at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.metrics import Distribution
from llm_users.protocols.embed import DEFAULT_QUERY
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import get_json, processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "GEMINI_API_KEY": "gm-test"}
QUERY_TOKENS = len(DEFAULT_QUERY.split())  # the simulator's count: one token per word

# the step study: S = 150 + 0.2 x (4 inputs x 64 tokens) = 201.2 ms: long beside the client's own ~1-3 ms
# per request on a busy machine, short enough for ~40 requests per user per stage (a whole request is 2.5%)
STEP_BASE, STEP_PER_TOKEN, STEP_SLOTS, STEP_BATCH, STEP_TOKENS = 150.0, 0.2, 4, 4, 64
STEP_SIM = ("--embed-base-ms", str(STEP_BASE), "--embed-token-ms", str(STEP_PER_TOKEN), "--embed-max-batch",
            str(STEP_SLOTS), "--seed", "1")
ROUTE_SIM = ("--embed-base-ms", "20", "--embed-token-ms", "0.1", "--embed-dim", "16", "--seed", "5")
PROCESSES_SIM = ("--embed-base-ms", "15", "--embed-token-ms", "0.05", "--seed", "7")
OPEN_LOOP_SIM = ("--embed-base-ms", "30", "--embed-token-ms", "0.05", "--seed", "3")
FAULT_SIM = ("--embed-base-ms", "5", "--fault-rate", "0.4", "--fault-kinds", "http_503,malformed,empty_200",
             "--seed", "9")


def service_ms(base_ms: float, token_ms: float, tokens: int) -> float:
    return base_ms + token_ms * tokens


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

REFUSALS = [
    ("vllm.py", ("--llm-batch-size", "4"),
     "locust-llm: --llm-batch-size applies to embeddings and rerank routes, not vllm's 'chat' (a chat stream)"),
    ("gemini.py", ("--llm-endpoint", "embed_content", "--llm-batch-size", "2"),
     "locust-llm: --llm-batch-size: gemini's 'embed_content' takes at most 1 input(s) per request, got 2"),
    ("rerank.py", ("--llm-client", "sdk"),
     "locust-llm: --llm-client sdk is not available for vllm's 'rerank' route (it is for chat, completions, responses, embeddings)"),
    ("tei.py", ("--llm-batch-size", "0"),
     "locust-llm: --llm-batch-size must be a whole number of inputs per request, at least 1, got '0'"),
]
FAULT_LOCUSTFILES = ["embeddings.py", "ollama.py"]


def _short_run_args(*args: str) -> tuple[str, ...]:
    """The options of each route's and each fault's run: 3 users, then ``args``."""
    # an SDK's first request (its import, its client) took 1.4 s beside CI's other shards: longer runs
    seconds = 6 if "sdk" in args else 3
    return ("-u", "3", "-r", "3", "-t", f"{seconds}s", "--stop-timeout", "5", "--llm-prometheus-port", "0", *args)


def _route_run(case: str) -> str:
    return f"route-{case}"


def _fault_run(locustfile: str, client: str) -> str:
    return f"faults-{locustfile}-{client}"


def _refusal_run(locustfile: str) -> str:
    return f"refusal-{locustfile}"


def _scenarios() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    # Ollama's route: no /tokenize, so exact lengths come from calibration, not a call per input
    out["step-study"] = Scenario("ollama.py", (
        "--llm-endpoint", "embed", "--llm-batch-size", str(STEP_BATCH), "--llm-input-tokens", str(STEP_TOKENS),
        "--llm-steps", "2:6:2:15s", "--llm-prometheus-port", "0"), sim=STEP_SIM, timeout=150, alone=True)
    for case, (locustfile, extra, *_) in CASES.items():  # each route's latency is bounded: alone
        args = _short_run_args("--llm-batch-size", "3", "--llm-input-tokens", "20", *extra)
        out[_route_run(case)] = Scenario(locustfile, args, sim=ROUTE_SIM, env=KEYS, alone=True)
    out["open-loop"] = Scenario("embeddings.py", (
        "--llm-batch-size", "2", "--llm-steps", "10:20:10:5s", "--llm-arrival", "constant", "--llm-seed", "1",
        "--llm-prometheus-port", "0"), sim=OPEN_LOOP_SIM, alone=True)
    # Locust's forked workers dial --master-port: one of our own (processes_args), taken at start
    out["processes"] = Scenario("embeddings.py", (
        "-u", "4", "-r", "4", "-t", "4s", lambda: processes_args(2), "--llm-batch-size", "2",
        "--llm-prometheus-port", "0"), sim=PROCESSES_SIM)
    for locustfile, args, _ in REFUSALS:
        out[_refusal_run(locustfile)] = Scenario(locustfile, ("--host", "http://127.0.0.1:9", "-u", "1", "-t", "2s",
                                                              *args), env=KEYS, report=False)
    for locustfile in FAULT_LOCUSTFILES:
        for client in ("raw", "sdk"):
            args = _short_run_args("--llm-client", client, "--llm-endpoint",
                                   "embed" if locustfile == "ollama.py" else "embeddings", "--llm-backoff", "off",
                                   "--llm-preflight", "off", "--exit-code-on-error", "0")
            out[_fault_run(locustfile, client)] = Scenario(locustfile, args, sim=FAULT_SIM, env=KEYS)
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_step_study_every_stage_within_5_percent_of_analytic": lambda: ["step-study"],
        "test_each_route_raw_and_sdk": lambda: [_route_run(p["case"])],
        "test_open_loop_rate_steps_over_an_embeddings_user": lambda: ["open-loop"],
        "test_two_processes_merge_exactly": lambda: ["processes"],
        "test_refused_at_start_with_one_line": lambda: [_refusal_run(p["locustfile"])],
        "test_faults_get_the_same_categories_raw_and_sdk": lambda: [
            _fault_run(p["locustfile"], client) for client in ("raw", "sdk")],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every scenario of the module, each run once (when a test first needs it, or ahead)."""
    yield from pool_in(request, tmp_path_factory.mktemp("embeddings"), _scenarios(), _needs)


def _finished(run: Run) -> tuple[list[dict], dict]:
    """A route or fault run's records and summary, once it ended well and the console said its line."""
    proc = run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "embeddings/rerank (" in proc.stdout, proc.stdout[-2000:]  # the console's line
    return read_records(run.report), read_summary(run.report)


@pytest.mark.serial  # throughput against the analytic service time: run alone (tests/sharding.py)
def test_step_study_every_stage_within_5_percent_of_analytic(runs: Pool) -> None:
    run = runs.run("step-study")
    proc = run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(run.report)["stages"]
    assert [st["users"] for st in stages] == [2, 4, 6]
    s = service_ms(STEP_BASE, STEP_PER_TOKEN, STEP_BATCH * STEP_TOKENS) / 1000
    got = {st["users"]: (st["requests_per_s"], min(st["users"], STEP_SLOTS) / s) for st in stages}
    print("per stage (measured, analytic) req/s:", got)
    for n, (measured, analytic) in got.items():
        assert measured == pytest.approx(analytic, rel=0.05), (n, got)
    for st in stages:  # the embeddings figures of every stage: inputs/s and input tokens/s follow req/s
        assert st["request_kinds"] == {"embed": st["requests"]} and st["failures"] == 0
        assert st["inputs_per_s"] == pytest.approx(STEP_BATCH * st["requests_per_s"])
        assert st["input_tokens_per_s"] == pytest.approx(STEP_BATCH * STEP_TOKENS * st["requests_per_s"])
        assert st["ttft"]["count"] == 0 and st["e2e"]["p50"] >= s * 1000


@pytest.mark.parametrize("case", list(CASES))
def test_each_route_raw_and_sdk(case: str, runs: Pool) -> None:
    _, args, name, kind, source = CASES[case]
    records, summary = _finished(runs.run(_route_run(case)))
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


def test_open_loop_rate_steps_over_an_embeddings_user(runs: Pool) -> None:
    """The open-loop scheduler sends embeddings batches as it sends chat requests."""
    run = runs.run("open-loop")
    proc = run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(run.report)["stages"]
    assert [st["rate"] for st in stages] == [10, 20]
    for st in stages:
        assert st["requests_per_s"] == pytest.approx(st["rate"], rel=0.05), stages
        assert st["inputs_per_s"] == pytest.approx(2 * st["requests_per_s"])
        assert st["request_kinds"] == {"embed": st["requests"]}


def test_two_processes_merge_exactly(runs: Pool) -> None:
    run = runs.run("processes")
    proc, report = run.proc, run.report
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
    # this run's simulator serves no other scenario (PROCESSES_SIM is its own)
    served = get_json(run.sim_url + "/_sim/stats")["by_route"]["/v1/embeddings"]["served"]
    # every request the simulator answered is a record (the preflight's and the tokenizer probe's are not)
    assert served - len([r for r in records if r["status"] != "interrupted"]) in range(0, 4), served


@pytest.mark.parametrize(("locustfile", "args", "line"), REFUSALS)
def test_refused_at_start_with_one_line(locustfile: str, args: tuple[str, ...], line: str, runs: Pool) -> None:
    proc = runs.run(_refusal_run(locustfile)).proc
    assert proc.returncode == 1 and line in proc.stderr.splitlines(), proc.stderr[-2000:]


@pytest.mark.parametrize("locustfile", FAULT_LOCUSTFILES)
def test_faults_get_the_same_categories_raw_and_sdk(locustfile: str, runs: Pool) -> None:
    """HTTP errors, a cut JSON body and an empty 200, drawn by the simulator: one category each, the
    same in raw and SDK mode (the SDK's own exceptions mapped as raw mode names the fault)."""
    seen = {}
    for client in ("raw", "sdk"):
        records, summary = _finished(runs.run(_fault_run(locustfile, client)))
        failed = [r for r in records if r["status"] == "error"]
        seen[client] = {r["error_category"] for r in failed}
        assert summary["overall"]["failures_by_category"].keys() <= seen[client]
        assert any(r["status"] == "ok" for r in records)
    assert seen["raw"] == seen["sdk"] == {"http_503", "malformed_stream", "empty_response"}, seen
