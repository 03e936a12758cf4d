"""Issue 30 item 1: ``--llm-endpoint responses`` in real locust processes against the simulator,
raw and SDK mode, local and ``--processes 2``, single requests and sessions chained by
``previous_response_id`` or sent whole. Records must be the simulator's ground truth: one record
per request it served, its token counts (reasoning apart), and each later turn the earlier
prompt + the simulator's own reply + the new message."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.text import expected_text
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import get_json, processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

SEED = 17
REASONING = 2
KEYS = {"OPENAI_API_KEY": "sk-test-not-a-real-key"}
SINGLE = [("vllm.py", "raw", 8), ("vllm.py", "sdk", 8), ("openai.py", "raw", 16)]
CHAINS = [("previous_id", "raw", 2), ("previous_id", "sdk", 1), ("full", "raw", 1)]

# Each run is one scenario of the module's pool (tests/e2e/locust_pool.py), run once, a few at a time,
# each against a simulator of its own (a distinct --trace-limit): its trace and its count of chained
# responses are the run's alone.


def _sim(n: int) -> tuple[str, ...]:
    return ("--ttft-ms", "5", "--itl-ms", "1", "--seed", str(SEED), "--trace-prompts",
            "--reasoning-tokens", str(REASONING), "--trace-limit", str(100_000 + n))


def _scenarios() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    n = iter(range(100))
    for locustfile, client, max_tokens in SINGLE:
        args = ("-u", "2", "-r", "2", "-t", "4s" if client == "sdk" else "2s", "--stop-timeout", "10",
                "--llm-endpoint", "responses", "--llm-max-tokens", str(max_tokens), "--llm-client", client,
                "--llm-prometheus-port", "0")
        out[f"single-{locustfile}-{client}"] = Scenario(locustfile, args, sim=_sim(next(n)), env=KEYS, trace=True)
    for chain, client, processes in CHAINS:
        dist = (lambda p=processes: processes_args(p),) if processes > 1 else ()  # a free port, taken at the start
        args = (*dist, "-u", "4", "-r", "4", "-t", "5s" if client == "sdk" or processes > 1 else "3s",
                "--stop-timeout", "10", "--llm-endpoint", "responses", "--llm-max-tokens", "6", "--llm-turns", "3",
                "--llm-responses-chain", chain, "--llm-client", client, "--llm-prometheus-port", "0")
        out[f"chain-{chain}-{client}-{processes}"] = Scenario("vllm.py", args, sim=_sim(next(n)), trace=True,
                                                              timeout=180)
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_single_requests_match_the_ground_truth": lambda: [f"single-{p['locustfile']}-{p['client']}"],
        "test_sessions_chain_or_send_the_whole_history": lambda: [
            f"chain-{p['chain']}-{p['client']}-{p['processes']}"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from pool_in(request, tmp_path_factory.mktemp("responses"), _scenarios(), _needs, parallel=3)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


@pytest.mark.parametrize(("locustfile", "client", "max_tokens"), SINGLE)
def test_single_requests_match_the_ground_truth(runs, locustfile: str, client: str, max_tokens: int) -> None:
    run = runs.run(f"single-{locustfile}-{client}")
    assert run.proc.returncode == 0, _tail(run)
    report = run.report
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    assert len(records) >= 4 and [r["error_message"] for r in records if r["status"] != "ok"] == [], _tail(run)
    name = "/v1/responses" if client == "raw" else "sdk:/v1/responses"
    trace = {t["request_id"]: t for t in run.trace or []}
    for r in records:
        t = trace[r["request_id"]]  # raw and SDK mode both tag the request: one served request per record
        assert t["completed"] and r["name"] == name and r["client"] == client
        assert r["output_tokens"] == t["output_tokens"] == max_tokens and r["tokens_source"] == "usage"
        assert r["input_tokens"] == t["input_tokens"] and r["reasoning_tokens"] == REASONING
        assert r["chunks"] == max_tokens  # reasoning deltas are token-bearing chunks too
        assert r["output_chars"] == len(expected_text(SEED, t["prompt"], max_tokens)) - len(
            expected_text(SEED, t["prompt"], REASONING))  # the answer's text only
        assert r["finish_reason"] == "max_output_tokens"  # OpenAI's response.incomplete at the maximum
        assert r["server"]["response_id"] == f"resp_sim{t['seq']:016x}"
        assert r["server_model"] == r["model"] and r["sampling_issues"] is None
        assert 0 < r["ttfb_ns"] <= r["ttft_ns"] <= r["e2e_ns"]
    assert len(trace) >= len(records)
    summary = read_summary(report)
    assert summary["overall"]["estimated_token_requests"] == 0 and summary["overall"]["sampling_issues"] == {}


def _sessions(records: list[dict[str, Any]]) -> list[dict[int, dict[str, Any]]]:
    sessions: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        sessions[r["session_id"]][r["turn"]] = r
    return [s for s in sessions.values() if sorted(s) == [1, 2, 3]]


@pytest.mark.parametrize(("chain", "client", "processes"), CHAINS)
def test_sessions_chain_or_send_the_whole_history(runs, chain: str, client: str, processes: int) -> None:
    run = runs.run(f"chain-{chain}-{client}-{processes}")
    assert run.proc.returncode == 0, _tail(run)
    report = run.report
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    assert all(r["status"] == "ok" for r in records), [r["error_message"] for r in records][:3]
    if processes > 1:
        assert len({r["worker"] for r in records}) == processes  # merged on the master
    complete = _sessions(records)
    assert len(complete) >= 2
    trace = {t["request_id"]: t for t in run.trace or []}
    for turns in complete:
        for t in (2, 3):
            prev, cur = trace[turns[t - 1]["request_id"]], trace[turns[t]["request_id"]]
            reply = expected_text(SEED, prev["prompt"], 6)[len(expected_text(SEED, prev["prompt"], REASONING)):]
            assert cur["prompt"].startswith(prev["prompt"] + "\n" + reply + "\n")  # the history, whichever way
            assert cur["messages"] == prev["messages"] + 2
            assert turns[t]["input_tokens"] > turns[t - 1]["input_tokens"] + 6 - REASONING
    later = sum(1 for r in records if r["turn"] > 1)
    chained = get_json(f"{run.sim_url}/_sim/responses")["chained"]  # the run's own simulator: from 0
    if chain == "previous_id":  # every later turn named the earlier response (those cut by the stop too)
        assert later <= chained <= later + 4
    else:
        assert chained == 0
    assert read_summary(report)["workload"]["source"]["chain"] == chain
