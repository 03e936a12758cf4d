"""backoff.py: when a user waits, how long, and what resets it."""

from __future__ import annotations

import pytest

from llm_users.client.backoff import AFTER, BASE_S, MAX_S, Backoff, backoff_kind
from llm_users.metrics import RequestRecord


def rec(status: str = "error", category: str | None = "connect_error", http: int | None = None, *, chunks: int = 0,
        code: int | str | None = None, message: str | None = None) -> RequestRecord:
    return RequestRecord("r", "/x", "vllm", "m", status=status, error_category=category, http_status=http,
                         chunks=chunks, error_code=code, error_message=message)


def test_waits_from_the_third_failure_doubling_to_the_cap() -> None:
    b = Backoff()
    waits = [b.after(rec()) for _ in range(AFTER + 6)]
    assert waits[: AFTER - 1] == [0.0] * (AFTER - 1)
    assert waits[AFTER - 1:] == [BASE_S, 2 * BASE_S, 4 * BASE_S, 8 * BASE_S, MAX_S, MAX_S, MAX_S]
    assert MAX_S == 8 * BASE_S * 2  # the cap bounds the wait


@pytest.mark.parametrize(("reset", "why"), [
    (rec("ok", None), "a success"),
    (rec("error", "http_401", 401), "a different kind"),
    (rec("error", "server_error", 200), "a failure of another kind (an in-stream error)"),
    (rec("error", "connection_reset"), "a failure that never counts"),
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
    assert backoff_kind(rec(category="http_503", http=503)) == "http_503:"
    assert backoff_kind(rec(category="connection_reset")) is None
    assert backoff_kind(rec(category="read_timeout")) is None
    assert backoff_kind(rec("ok", None)) is None


# issue 33 item 5: every failure that repeats identically backs off; (first, same, different)
REPEATS = {
    "empty 200": (rec(category="empty_response", http=200), rec(category="empty_response", http=200),
                  rec(category="stream_truncated", http=200, chunks=0)),
    "in-stream error": (rec(category="server_error", http=200, code=500, message="boom"),
                        rec(category="server_error", http=200, code=500, message="boom"),
                        rec(category="server_error", http=200, code=500, message="another")),
    "overloaded": (rec(category="server_overloaded", http=200, code="overloaded_error", message="busy"),
                   rec(category="server_overloaded", http=200, code="overloaded_error", message="busy"),
                   rec(category="server_overloaded", http=200, code=529, message="busy")),
    "identical 5xx": (rec(category="http_503", http=503, message="Loading model"),
                      rec(category="http_503", http=503, message="Loading model"),
                      rec(category="http_503", http=503, message="upstream connect error")),
    "truncated at one point": (rec(category="stream_truncated", http=200, chunks=7),
                               rec(category="stream_truncated", http=200, chunks=7),
                               rec(category="stream_truncated", http=200, chunks=8)),
}


@pytest.mark.parametrize("kind", list(REPEATS))
def test_every_identical_repeat_backs_off_bounded(kind: str) -> None:
    first, same, _ = REPEATS[kind]
    b = Backoff()
    waits = [b.after(first)] + [b.after(same) for _ in range(AFTER + 6)]
    assert waits[: AFTER - 1] == [0.0] * (AFTER - 1)
    assert waits[AFTER - 1:AFTER + 3] == [BASE_S, 2 * BASE_S, 4 * BASE_S, 8 * BASE_S]
    assert max(waits) == MAX_S and waits[-1] == MAX_S  # bounded
    assert all(Backoff(enabled=False).after(same) == 0.0 for _ in range(AFTER + 2))  # --llm-backoff off


@pytest.mark.parametrize("kind", list(REPEATS))
def test_a_repeat_that_differs_is_not_the_same_failure(kind: str) -> None:
    first, _, different = REPEATS[kind]
    assert backoff_kind(first) is not None and backoff_kind(first) != backoff_kind(different)
    b = Backoff()
    waits = [b.after(r) for r in (first, first, different, first, different, first)]
    assert waits == [0.0] * 6


def test_retry_after_is_seconds_or_an_http_date() -> None:
    from llm_users.client.backoff import retry_after_seconds

    assert retry_after_seconds("5") == 5.0 and retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0  # past: at once
    for bad in (None, "", "soon", "-3", "1.5e9x", "Wed, 99 Foo 2015"):
        assert retry_after_seconds(bad) is None, bad


def test_a_429_or_503_retry_after_is_honoured_at_once_and_bounded() -> None:
    from llm_users.client.backoff import RETRY_AFTER_MAX_S

    b = Backoff()
    asked = RequestRecord("r", "/v1/chat/completions", "vllm", "m", status="error", http_status=429,
                          error_category="http_429", retry_after_s=5.0)
    assert b.after(asked) == 5.0  # the first one: the server said how long
    hour = RequestRecord("r", "/v1/chat/completions", "vllm", "m", status="error", http_status=503,
                         error_category="http_503", retry_after_s=3600.0)
    assert b.after(hour) == RETRY_AFTER_MAX_S
    other = RequestRecord("r", "/v1/chat/completions", "vllm", "m", status="error", http_status=400,
                          error_category="http_400", retry_after_s=5.0)
    assert Backoff().after(other) == 0.0  # Retry-After means something on 429 and 503 only
    assert Backoff(enabled=False).after(asked) == 0.0
