"""Issue 29 items 2 and 3, the pure parts: what a failed preflight says (fatal or not, the fix it
names, never a key's value), when the fail-stop fires, and the nothing-measured hint."""

from __future__ import annotations

import pytest

from llm_users.errors import (
    ConnectError,
    EmptyResponse,
    HTTPStatusError,
    ProtocolError,
    ReadTimeout,
    ServerOverloaded,
    StreamTruncated,
)
from llm_users.health.guard import Ended, FailWatch, nothing_measured
from llm_users.health.preflight import Target, explain, explain_probe

T = Target(user="VLLM", locustfile="vllm.py", backend="vllm", endpoint="chat", endpoints=("chat", "completions"),
           request="POST /v1/chat/completions", host="http://gpu:8000", key_names="VLLM_KEY", key_set=False)


@pytest.mark.parametrize(("exc", "fatal", "words"), [
    (ConnectError("cannot connect to gpu:8000: Connection refused"), True, ["could not connect", "--host"]),
    (HTTPStatusError("HTTP 401: no", status=401), True, ["401 (unauthorized)", "VLLM_KEY", "--llm-api-key-env"]),
    (HTTPStatusError("HTTP 403: no", status=403), True, ["403 (forbidden)", "VLLM_KEY"]),
    (HTTPStatusError("HTTP 404: Not Found", status=404), True,
     ["404 (no such route)", "wrong locustfile", "vllm.py", "--llm-endpoint (chat, completions; now chat)",
      "--host"]),
    (HTTPStatusError("HTTP 405", status=405), True, ["405 (no such route)"]),
    (HTTPStatusError("HTTP 400: model 'x' does not exist", status=400), True,
     ["answered 400", "does not exist", "--llm-model"]),
    (ProtocolError("b'<html>' is not JSON"), True, ["not a vllm stream", "wrong locustfile", "--llm-endpoint"]),
    (EmptyResponse("no event"), True, ["not a vllm stream"]),
    (HTTPStatusError("HTTP 429", status=429), False, ["429", "going on"]),
    (HTTPStatusError("HTTP 500", status=500), False, ["500", "going on", "busy or warming up"]),
    (HTTPStatusError("HTTP 503", status=503), False, ["503"]),
    (ServerOverloaded("overloaded"), False, ["server_overloaded"]),
    (ReadTimeout("no bytes for 60 s"), False, ["read_timeout"]),
    (StreamTruncated("ended early"), False, ["stream_truncated"]),
])
def test_each_failure_is_fatal_or_transient_and_names_its_fix(exc, fatal: bool, words: list[str]) -> None:
    finding = explain(exc, T)
    assert finding.fatal is fatal, finding
    for w in words:
        assert w in finding.message, (w, finding.message)
    assert "\n" not in finding.message
    assert "POST /v1/chat/completions at http://gpu:8000" in finding.message


def test_a_refused_key_names_its_variable_never_its_value() -> None:
    from dataclasses import replace

    finding = explain(HTTPStatusError("HTTP 401", status=401), replace(T, key_set=True))
    assert finding.fatal and "the key in VLLM_KEY was refused" in finding.message
    unnamed = explain(HTTPStatusError("HTTP 401", status=401), replace(T, key_names="(none named)"))
    assert "--llm-api-key-env NAME" in unnamed.message and "(none named)" not in unnamed.message


def test_the_model_probe_names_itself() -> None:
    finding = explain_probe(HTTPStatusError("HTTP 404", status=404), T)
    assert finding.fatal and finding.message.startswith("the model probe (GET /v1/models at http://gpu:8000")
    assert "OpenAI-compatible" in finding.message and "--llm-model" in finding.message
    refused = explain_probe(ConnectError("refused"), T)
    assert refused.fatal and "GET /v1/models" in refused.message and "--host" in refused.message


def test_fail_watch_fires_after_its_limit_of_failures_only() -> None:
    w = FailWatch(10.0)
    for t in range(0, 10):
        w.record(False, "connect_error", float(t))
        assert not w.due(float(t))
    w.record(False, "http_500", 10.0)
    assert w.due(10.0)
    assert "every request failed for 10 s (11 failures, top category connect_error: 10)" in w.line()
    w.record(True, None, 10.5)  # one success resets it
    assert not w.due(11.0) and not w.due(25.0)


def test_fail_watch_ignores_one_old_failure_among_long_requests() -> None:
    w = FailWatch(10.0)
    w.record(False, "read_timeout", 0.0)  # then nothing ends for a while: long requests still streaming
    assert not w.due(10.0) and not w.due(30.0)
    w.record(False, "read_timeout", 30.0)
    assert w.due(30.0)  # failures keep coming and nothing succeeded since the first


def test_fail_watch_on_a_master_allows_for_the_shipping_lag() -> None:
    w = FailWatch(2.0, lag_s=3.0)
    w.record(False, "http_500", 0.0)
    w.record(False, "http_500", 3.0)
    assert w.due(6.5)  # the last batch arrived 3.5 s ago: within lag + 1


def test_nothing_measured_hint_from_warm_up_requests() -> None:
    ended = Ended()
    ended.ok, ended.ok_e2e_s = 2, 10.0
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 2}, ended,
                            {"requests_per_user": 1, "seconds": 0.0}, 512, 8.0)
    assert line is not None and line.startswith("nothing measured: no request succeeded in the measured window")
    assert "the 2 requests that ended were warm-up" in line and "2 were cut by the stop" in line
    assert "about 5.0 s (E2E)" in line and "run longer than 10 s" in line
    assert "--llm-max-tokens, now 512" in line and "--llm-warmup 0" in line


def test_nothing_measured_hint_from_a_ramp_that_never_completed() -> None:
    """--llm-warmup ramp (issue 53 item 1): every request started before all users ran."""
    ended = Ended()
    ended.ok, ended.ok_e2e_s = 6, 3.0
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 1}, ended,
                            {"requests_per_user": 0, "seconds": 0.0, "ramp": True}, 512, 5.0)
    assert line == ("nothing measured: the 6 requests that ended were warm-up (--llm-warmup ramp: they started "
                    "before all users ran), 1 were cut by the stop; raise -r so the users all start well before the "
                    "end, run longer (-t), or give --llm-warmup N or a time")


def test_nothing_measured_hint_when_no_request_was_sent() -> None:
    """Not one record (none ended, none cut): the start-up took the run (a prompt calibration
    behind a gateway with no /tokenize took 10 s of an 8-s run), not a request longer than it."""
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 0}, Ended(), {}, 8, 8.0)
    assert line is not None and line.startswith("nothing measured: no request was sent in the run of 8 s: ")
    assert "calibration prompts" in line and "run longer (-t)" in line and "cut by the stop" not in line


def test_nothing_measured_hint_when_no_request_ended() -> None:
    ended = Ended()
    ended.longest_cut_s = 2.94
    ended.records = 2
    line = nothing_measured({"successes": 0, "failures": 0, "interrupted": 2}, ended, {}, 2000, 3.0)
    assert line == ("nothing measured: no request ended within the run of 3 s (2 cut by the stop after up to "
                    "2.9 s: each takes longer): run longer than one request (-t well above its E2E), or lower the "
                    "output length (--llm-max-tokens, now 2000)")


def test_all_failed_and_a_measured_run() -> None:
    failed = nothing_measured({"successes": 0, "failures": 7, "failures_by_category": {"http_500": 5, "reset": 2}},
                              Ended(), {}, 16, 4.0)
    assert failed == "nothing measured: all 7 measured requests failed (top category http_500: 5); see the failure table"
    assert nothing_measured({"successes": 1, "failures": 7}, Ended(), {}, 16, 4.0) is None
