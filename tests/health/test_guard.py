"""Issue 54 item 6: the "nothing measured" line (health/guard.py) blames failures, not the run's
length, when the requests that ended all failed; HTTP 413 is named as the server's size limit
with the largest request's size."""

from __future__ import annotations

from llm_users.health.guard import Ended, nothing_measured
from llm_users.metrics import RequestRecord

MB_100 = 100 * 2**20


def _failed(i: int, status: int, size: int = 0, warmup: bool = True) -> RequestRecord:
    return RequestRecord(request_id=str(i), name="/v1/chat/completions", backend="vllm", model="m", start_time=1.0,
                         e2e_ns=1_900_000_000, status="error", error_category=f"http_{status}", http_status=status,
                         request_bytes=size, warmup=warmup)


def _ended(*recs: RequestRecord) -> Ended:
    ended = Ended()
    for r in recs:
        ended.add(r)
    return ended


def test_413s_in_the_warm_up_are_named_with_the_size_not_the_run_length() -> None:
    """Each user's first request (the warm-up) got 413 for a 100 MiB prompt; the run ended before
    a second one ended: the line blamed a run too short."""
    ended = _ended(_failed(0, 413, MB_100), _failed(1, 413, MB_100 - 5))
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 2}, ended,
                            {"requests_per_user": 1, "seconds": 0.0}, 512, 10.0)
    assert line is not None and "run longer" not in line and "(-t" not in line, line
    assert line.startswith("nothing measured: every request that ended failed (2, all in the warm-up or cool-down")
    assert "top category http_413: 2" in line
    assert "requests of up to 100.0 MiB (104857600 bytes) as too large (HTTP 413 Payload Too Large)" in line


def test_measured_413s_name_the_size_and_the_limit() -> None:
    ended = _ended(*(_failed(i, 413, 3 * 2**20 + i, warmup=False) for i in range(5)))
    line = nothing_measured({"successes": 0, "failures": 5, "failures_by_category": {"http_413": 5}}, ended, {},
                            512, 10.0)
    assert line == ("nothing measured: all 5 measured requests failed (top category http_413: 5); the server "
                    "refused requests of up to 3.0 MiB (3145732 bytes) as too large (HTTP 413 Payload Too Large): "
                    "its request-size limit (or a proxy's: nginx's client_max_body_size is 1 MiB by default) is below "
                    "them, not the run too short; shorten the prompts (--llm-dataset, --llm-input-tokens, "
                    "--llm-images) or raise the limit")


def test_a_413_of_unknown_size_and_other_warm_up_failures() -> None:
    unknown = nothing_measured({"successes": 0, "failures": 0}, _ended(_failed(0, 413)), {}, 16, 4.0)
    assert unknown is not None and "the server refused the requests as too large (HTTP 413" in unknown
    other = nothing_measured({"successes": 0, "failures": 0}, _ended(_failed(0, 500), _failed(1, 500)), {}, 16, 4.0)
    assert other == ("nothing measured: every request that ended failed (2, all in the warm-up or cool-down, which "
                     "the statistics leave out; top category http_500: 2); see the failure table")


def test_failed_warm_ups_are_named_not_the_run_length() -> None:
    """Issue 53 item 6: part of the warm-up failed, the rest succeeded, and nothing was measured:
    the line said only "run longer than N s", the failed warm-ups appearing nowhere."""
    ok = RequestRecord(request_id="ok", name="/v1/chat/completions", backend="vllm", model="m", start_time=1.0,
                       e2e_ns=1_000_000_000, warmup=True)
    ended = _ended(ok, _failed(1, 500), _failed(2, 500), _failed(3, 503))
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 2}, ended,
                            {"requests_per_user": 2, "seconds": 0.0}, 512, 10.0)
    assert line == ("nothing measured: the 4 requests that ended were warm-up and 3 of them failed (top category "
                    "http_500: 2; summary.json window.warmup.failed); the server failed part of the warm-up: find why "
                    "before running longer (-t)")
    # no warm-up failed: the run's length, as before
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 2}, _ended(ok),
                            {"requests_per_user": 2, "seconds": 0.0}, 512, 10.0)
    assert line is not None and "run longer than 3 s" in line, line
