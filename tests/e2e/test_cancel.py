"""Issue 30 item 4: client-side cancellation (--llm-cancel-after, --llm-cancel-rate) against the
simulator, raw and SDK mode, local and --processes 2.

A cancelled request is recorded with status ``cancelled`` and what was measured until the
cancel, counted in summary.json ``overall.cancelled`` and on the console, never a failure (not
in Locust's failures: its own Locust row ``<name> (cancelled)``), out of the latency
statistics; which requests are cancelled follows from --llm-seed; and the simulator saw each
one's connection close and ended it ``aborted`` within 100 ms of the client's cancel (the same
monotonic clock: ``perf_counter_ns`` in both processes)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from llm_users.client.cancel import chosen, parse_cancel
from tests.helpers import get_json, processes_args, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

SEED = "7"
NOTICE_NS = 100e6  # the simulator ends the request within 100 ms of the client's cancel


def _locust_rows(prefix: Path) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(Path(f"{prefix}.json").read_text())}


def _predicted(records: list[dict[str, Any]], after: str, rate: str, worker_of: Any = None) -> set[str]:
    """The request ids the seeded choice picks: each user's requests in the order sent."""
    plan = parse_cancel(after, rate)
    by_user: dict[tuple[Any, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_user[(r.get("worker"), r["user"])].append(r)
    picked = set()
    for (worker, user), recs in by_user.items():
        recs.sort(key=lambda r: r["t0_ns"])
        for index, r in enumerate(recs):
            if chosen(plan, SEED, worker_of(worker) if worker_of else 0, user, index) is not None:
                picked.add(r["request_id"])
    return picked


def _check_server_saw_each_cancel(sim_url: str, cancelled: list[dict[str, Any]]) -> list[float]:
    lags = []
    for r in cancelled:
        tr = get_json(f"{sim_url}/_sim/trace?request_id={r['request_id']}")
        assert tr["outcome"] == "aborted", tr
        lag = tr["end_ns"] - (r["t0_ns"] + r["e2e_ns"])
        assert -5e6 < lag < NOTICE_NS, f"the simulator ended it {lag / 1e6:.1f} ms after the cancel"
        lags.append(lag / 1e6)
    return lags


@pytest.mark.serial  # a cancel 300 ms in, timed: run alone (tests/sharding.py)
@pytest.mark.parametrize(("client", "after"), [("raw", "5tokens"), ("sdk", "5 tokens"), ("raw", "300ms"),
                                               ("sdk", "300ms")])
def test_cancelled_requests_are_recorded_counted_and_freed(client: str, after: str, shared_sim,
                                                          tmp_path) -> None:
    # 40 tokens 20 ms apart after a 100 ms TTFT: a whole answer takes ~0.9 s, a cancel at 5
    # tokens comes at ~180 ms, one at 300 ms after ~10 tokens; 3 s: 2 users send ~10 requests
    sim = shared_sim("--ttft-ms", "100", "--itl-ms", "20", "--output-tokens", "40")
    report, prefix = tmp_path / "r", tmp_path / "locust"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--llm-client", client,
                      "--llm-cancel-after", after, "--llm-cancel-rate", "0.5", "--llm-seed", SEED,
                      "--llm-warmup", "0", report=report, csv_prefix=prefix)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    cancelled = [r for r in records if r["status"] == "cancelled"]
    ok = [r for r in records if r["status"] == "ok"]
    assert len(cancelled) + len(ok) == len(records) and len(cancelled) >= 2 and len(ok) >= 2, \
        [r["status"] for r in records]
    # the seeded choice: exactly the requests the run's seed picks
    assert {r["request_id"] for r in cancelled} == _predicted(records, after, "0.5") & {r["request_id"]
                                                                                        for r in records}
    for r in cancelled:  # what was measured until the cancel is kept
        assert r["error_category"] == "cancelled" and r["client"] == client
        assert 90e6 < r["ttft_ns"] < 400e6 and r["output_tokens"] is None
        if after.endswith("ms"):
            # 300 ms from t0, never early; late by as long as the loop is held when it is due: a
            # collection pass before the heap's freeze once users hold (health/gctune.py) or the
            # first SDK call building the SDK's models (r45, r46 on CI's machine: due at 300 ms,
            # fired at 451 ms, the 3.4-s request of a 4-s run; 300.6-304 ms on a quiet one)
            # (SDK cancels at 291 and 294 ms: the timer moved to t0 after a new connection resumed
            # its first deadline, fixed by client/sdk.py's restarted(); the record and the
            # simulator's view of it below if it recurs)
            assert 295e6 < r["e2e_ns"] < 600e6, json.dumps(
                {"record": r, "sim": get_json(f"{sim.url}/_sim/trace?request_id={r['request_id']}")})
            assert 3 <= r["chunks"] < 40 and len(r["itl_ns"]) == r["chunks"] - 1
        else:
            assert r["chunks"] == 5 and len(r["itl_ns"]) == 4 and r["e2e_ns"] < 600e6
    assert all(r["chunks"] == 40 and r["output_tokens"] == 40 for r in ok)
    summary = read_summary(report)
    assert summary["setup"]["cancel"] == ("after 5 tokens" if "tokens" in after else "after 0.3s") + \
        ", 50% of requests"
    ov = summary["overall"]
    assert ov["cancelled"] == len(cancelled)
    assert ov["failures"] == 0 and ov["requests"] == len(ok) and ov["ttft"]["count"] == len(ok)
    assert ov["e2e"]["min"] > 800  # ms: the cancelled requests' short times stay out of the statistics
    assert f"cancelled: {len(cancelled)} requests were abandoned by the client" in proc.stdout
    # Locust's table: a row of their own, no failures anywhere
    rows = _locust_rows(prefix)
    name = cancelled[0]["name"]
    assert rows[name + " (cancelled)"]["num_requests"] == len(cancelled)
    assert sum(e["num_failures"] for e in rows.values()) == 0
    assert rows[name]["num_requests"] == len(ok)
    # the server saw each disconnect and freed the slot in time
    lags = _check_server_saw_each_cancel(sim.url, cancelled)
    print(f"{client} {after}: {len(cancelled)} cancelled, server end after the client's cancel: "
          f"max {max(lags):.1f} ms")
    assert get_json(sim.url + "/_sim/stats")["running"] == 0


def test_cancelled_requests_of_workers_reach_the_master_exactly(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "50", "--itl-ms", "20", "--output-tokens", "30")
    proc = run_locust("vllm.py", *processes_args(2),
                      "--host", sim.url, "-u", "4", "-r", "4", "-t", "4s", "--llm-cancel-after", "3tokens",
                      "--llm-cancel-rate", "0.5", "--llm-seed", SEED, "--llm-warmup", "0",
                      "--llm-prometheus-port", "0", report=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(tmp_path)
    cancelled = [r for r in records if r["status"] == "cancelled"]
    assert len({r["worker"] for r in cancelled}) == 2, "both workers cancelled requests"
    assert all(r["chunks"] == 3 for r in cancelled)
    ov = read_summary(tmp_path)["overall"]
    assert ov["cancelled"] == len(cancelled) >= 4
    assert ov["failures"] == 0 and ov["requests"] == sum(r["status"] == "ok" for r in records)
    _check_server_saw_each_cancel(sim.url, cancelled)


@pytest.mark.serial  # SDK requests ending within a 4 s run: run alone (tests/sharding.py)
@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_every_dialect_cancels_and_the_simulator_frees_the_slot(client: str, shared_sim, tmp_path) -> None:
    """Every backend's dialect, one run per mode (a User class per backend on one simulator)."""
    sim = shared_sim("--ttft-ms", "50", "--itl-ms", "20", "--output-tokens", "40")
    env = {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "x", "GEMINI_API_KEY": "x",
           "CANCEL_TEST_SDK": "1" if client == "sdk" else "0"}
    proc = run_locust("../tests/fixtures/cancel_every_dialect.py", "--host", sim.url, "-u", "12", "-r", "12",
                      "-t", "4s", "--llm-client", client, "--llm-cancel-after", "5tokens", "--llm-cancel-rate", "0.5",
                      "--llm-seed", SEED, "--llm-warmup", "0", report=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(tmp_path)
    assert [r["error_message"] for r in records if r["status"] not in ("ok", "cancelled", "interrupted")] == []
    backends = {"vllm", "openai", "ollama", "claude", "gemini"} | ({"tgi"} if client == "raw" else set())
    cancelled = [r for r in records if r["status"] == "cancelled"]
    assert {r["backend"] for r in cancelled} == backends
    assert {r["backend"] for r in records if r["status"] == "ok"} == backends
    assert all(r["chunks"] == 5 and r["client"] == client for r in cancelled)
    ov = read_summary(tmp_path)["overall"]
    assert ov["cancelled"] == len(cancelled) and ov["failures"] == 0
    for r in cancelled:
        tr = get_json(f"{sim.url}/_sim/trace?request_id={r['request_id']}")
        cancel_ns = r["t0_ns"] + r["e2e_ns"]
        if tr["outcome"] == "ok":  # the server had written the whole answer before the client got to
            assert tr["end_ns"] < cancel_ns, tr  # its 5th chunk (an SDK reading ahead, a loaded CI): nothing to free
        else:
            assert tr["outcome"] == "aborted" and tr["end_ns"] - cancel_ns < NOTICE_NS, (r["backend"], tr)
    assert get_json(sim.url + "/_sim/stats")["running"] == 0
