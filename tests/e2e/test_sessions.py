"""Issue 12: multi-turn sessions on every backend (raw client, and the official SDKs where SDK
mode exists), in real locust processes against a simulator that keeps every prompt in its
trace (``--trace-prompts``). Each turn must carry the whole history: every earlier user
message and every earlier reply, exactly as the simulator produced it.

Each scenario (a locustfile, a client mode, its options) runs once for the module, a few at a
time (tests/e2e/locust_pool.py), each against a simulator of its own: a test reads that
simulator's whole trace as its run's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.protocols.backend import all_backends
from llm_users.sim.text import expected_text
from tests.e2e.locust_pool import Pool, Scenario, params, pool_in
from tests.helpers import get_json, processes_args, read_records, read_summary, wait_until

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_API_KEY": "sk-ant-test-key",
        "GEMINI_API_KEY": "gm-test-key"}
SEED = 11
_SHIPPED = [b for b in all_backends().values() if b.docs and b.routes[0].kind == "chat"]  # TEI: no conversations
CASES = [(b.docs.locustfile, "raw") for b in _SHIPPED] + [  # SDK mode: OpenAI's SDK is vLLM's (its case covers it)
    (b.docs.locustfile, "sdk") for b in _SHIPPED if b.sdk_module and b.name != "openai"]
SIM = ("--ttft-ms", "5", "--itl-ms", "1", "--seed", str(SEED), "--trace-prompts")


def _own_sim(n: int) -> tuple[str, ...]:
    """SIM for one scenario alone: the pool shares a simulator between scenarios started with the same
    arguments, so each gets a trace limit of its own (the default 2000, plus n: a run sends a few hundred)."""
    return (*SIM, "--trace-limit", str(2000 + n))


def _session_run(locustfile: str, client: str) -> str:
    return f"sessions-{client}-{locustfile}"


def _scenarios() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for n, (locustfile, client) in enumerate(CASES):
        duration = "5s" if client == "sdk" else "2s"  # an SDK's import and client take a second or more
        out[_session_run(locustfile, client)] = Scenario(locustfile, (
            "--llm-html", "on", "-u", "2", "-r", "2", "-t", duration, "--stop-timeout", "10", "--llm-turns", "4",
            "--llm-max-tokens", "6", "--llm-dataset", "conversations", "--llm-client", client),
            sim=_own_sim(n), env=KEYS)
    # Locust's forked workers dial --master-port: one of our own (processes_args), taken at start
    out["distributed"] = Scenario("vllm.py", (
        lambda: processes_args(2), "-u", "4", "-r", "4", "-t", "4s", "--stop-timeout", "10", "--llm-turns", "4",
        "--llm-input-tokens", "40", "--llm-output-tokens", "5", "--llm-price", "in=1,out=2"), sim=_own_sim(len(CASES)))
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_four_turn_sessions_send_the_whole_history": lambda: [_session_run(p["locustfile"], p["client"])],
        "test_distributed_sessions_synthetic_turns_and_cost": lambda: ["distributed"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every scenario of the module, each run once (when a test first needs it, or ahead)."""
    yield from pool_in(request, tmp_path_factory.mktemp("sessions"), _scenarios(), _needs)


def _chains(trace: list[dict[str, Any]], chat: bool) -> int:
    """How many distinct turn-4 prompts extend a turn-3 prompt, which extends a turn-2 prompt,
    which extends a turn-1 prompt: each the earlier prompt + the simulator's reply to it + more."""
    unique = {t["prompt"]: t for t in trace}  # sessions of one conversation repeat exactly
    replies = {p: expected_text(SEED, p, t["output_tokens"]) for p, t in unique.items()}

    def extends(t: dict[str, Any], p: dict[str, Any]) -> bool:
        reply = replies[p["prompt"]]
        if chat:  # chat routes: history as messages, the reply as its own content
            return t["prompt"].startswith(p["prompt"] + "\n" + reply + "\n") and t["messages"] == p["messages"] + 2
        # TGI generate: one flattened prompt holding the earlier turns and replies
        return reply.strip() in t["prompt"] and all(w in t["prompt"] for w in p["prompt"].split()[-3:])

    def parent(t: dict[str, Any]) -> dict[str, Any] | None:
        found = [p for p in unique.values() if len(p["prompt"]) < len(t["prompt"]) and extends(t, p)]
        return max(found, key=lambda p: len(p["prompt"])) if found else None  # the nearest one

    complete = 0
    for t in unique.values():
        depth, node = 1, t
        while (node := parent(node)) is not None:
            depth += 1
        complete += depth >= 4
    return complete


@pytest.mark.parametrize(("locustfile", "client"), CASES)
def test_four_turn_sessions_send_the_whole_history(runs: Pool, locustfile: str, client: str) -> None:
    run = runs.run(_session_run(locustfile, client))
    proc, report = run.proc, run.report
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert all(r["status"] == "ok" for r in records), records[:2]
    sessions: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        sessions[r["session_id"]][r["turn"]] = r
    complete = [s for s in sessions.values() if sorted(s) == [1, 2, 3, 4]]
    assert complete, {k: sorted(v) for k, v in sessions.items()}
    for turns in complete:
        assert [turns[t]["input_tokens"] for t in (1, 2, 3, 4)] == sorted({turns[t]["input_tokens"] for t in (1, 2, 3, 4)})
    trace = get_json(run.sim_url + "/_sim/trace")  # this run's simulator: its trace is this run's alone
    assert all(t["prompt"] for t in trace)
    assert _chains(trace, chat=locustfile != "tgi.py") >= len({c[4]["input_tokens"] for c in complete})
    if client == "raw":  # the raw client tags requests: each record's own prompt is checked too
        by_id = {t["request_id"]: t for t in trace}
        for turns in complete:
            for t in (2, 3, 4):
                prev, cur = by_id[turns[t - 1]["request_id"]], by_id[turns[t]["request_id"]]
                assert expected_text(SEED, prev["prompt"], prev["output_tokens"]).strip() in cur["prompt"]
    by_turn = read_summary(report)["by_turn"]
    assert [b["turn"] for b in by_turn] == [1, 2, 3, 4]
    assert by_turn[3]["input_tokens_mean"] > by_turn[0]["input_tokens_mean"]
    assert all(b["ttft"]["p50"] is not None for b in by_turn[1:])
    page = (report / "report.html").read_text()
    assert "Sessions: latency by turn" in page and "Latency by session turn" in page  # table and chart


def test_distributed_sessions_synthetic_turns_and_cost(runs: Pool) -> None:
    """Master + 2 worker processes: synthetic 4-turn sessions, merged by_turn, cost to the cent."""
    run = runs.run("distributed")
    proc, report, sim_url = run.proc, run.report, run.sim_url  # the simulator is this run's alone
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len({r["worker"] for r in records}) == 2 and all(r["status"] == "ok" for r in records)
    ids = {r["request_id"] for r in records}

    # the simulator files a request in its trace when its handler ends, which can come just after
    # the client read the last byte (CI saw one request of a finished run missing)
    def finished() -> dict[str, Any] | None:
        got = {t["request_id"]: t for t in get_json(sim_url + "/_sim/trace")}
        return got if ids <= got.keys() else None

    trace = wait_until(finished, timeout=10)
    assert trace, f"requests missing from the simulator's trace: {ids - set(t['request_id'] for t in get_json(sim_url + '/_sim/trace'))}"
    sessions: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        sessions[r["session_id"]][r["turn"]] = r
    complete = [s for s in sessions.values() if sorted(s) == [1, 2, 3, 4]]
    assert complete
    for turns in complete:
        assert turns[1]["input_tokens"] == turns[1]["target_input_tokens"] == 40  # exact on each worker
        for t in (2, 3, 4):
            prev, cur = trace[turns[t - 1]["request_id"]], trace[turns[t]["request_id"]]
            reply = expected_text(SEED, prev["prompt"], prev["output_tokens"])
            assert cur["prompt"].startswith(prev["prompt"] + "\n" + reply + "\n")
    summary = read_summary(report)
    by_turn = summary["by_turn"]
    measured = [r for r in records if not r["warmup"]]
    assert [b["turn"] for b in by_turn] == [1, 2, 3, 4]
    assert sum(b["requests"] for b in by_turn) == len(measured)
    by_hand = sum(r["input_tokens"] for r in measured) / 1e6 + sum(r["output_tokens"] for r in measured) * 2 / 1e6
    assert round(summary["cost"]["total"], 2) == round(by_hand, 2)
    assert summary["cost"]["total"] == pytest.approx(by_hand, rel=1e-12)
