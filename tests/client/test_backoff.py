"""backoff.py: when a user waits, how long, and what resets it."""

from __future__ import annotations

import pytest

from llm_users.client.backoff import AFTER, BASE_S, MAX_S, Backoff, backoff_kind
from llm_users.metrics import RequestRecord


def rec(status: str = "error", category: str | None = "connect_error", http: int | None = None) -> RequestRecord:
    return RequestRecord("r", "/x", "vllm", "m", status=status, error_category=category, http_status=http)


def test_waits_from_the_third_failure_doubling_to_the_cap() -> None:
    b = Backoff()
    waits = [b.after(rec()) for _ in range(AFTER + 6)]
    assert waits[: AFTER - 1] == [0.0] * (AFTER - 1)
    assert waits[AFTER - 1:] == [BASE_S, 2 * BASE_S, 4 * BASE_S, 8 * BASE_S, MAX_S, MAX_S, MAX_S]
    assert MAX_S == 8 * BASE_S * 2  # the cap bounds the wait


@pytest.mark.parametrize(("reset", "why"), [
    (rec("ok", None), "a success"),
    (rec("error", "http_401", 401), "a different kind"),
    (rec("error", "server_error", 200), "a failure that is not a connect error or a 4xx"),
])
def test_any_other_outcome_resets(reset: RequestRecord, why: str) -> None:
    b = Backoff()
    for _ in range(AFTER + 2):
        b.after(rec())
    b.after(reset)
    assert b.after(rec()) == 0.0, why


def test_identical_4xx_count_and_different_statuses_do_not() -> None:
    b = Backoff()
    assert [b.after(rec(category="http_401", http=401)) for _ in range(AFTER)][-1] == BASE_S
    b = Backoff()
    assert [b.after(rec(category=f"http_{s}", http=s)) for s in (401, 403, 404, 401, 403)] == [0.0] * 5


def test_off_never_waits_and_kinds() -> None:
    b = Backoff(enabled=False)
    assert all(b.after(rec()) == 0.0 for _ in range(10))
    assert backoff_kind(rec(category="connect_timeout")) == "connect"
    assert backoff_kind(rec(category="http_429", http=429)) == "http_429"
    assert backoff_kind(rec(category="http_503", http=503)) is None
    assert backoff_kind(rec("ok", None)) is None
