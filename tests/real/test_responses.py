"""``--llm-endpoint responses`` against the real servers (issue 30): llama.cpp's native
/v1/responses and LiteLLM's Responses bridge (``hosted_vllm/``: LiteLLM translates to chat).

- llama.cpp: full ``event:`` sequence without ``sequence_number``/``output_index``, ends with
  ``response.completed`` even at the maximum, its ``timings`` beside the response; refuses
  ``previous_response_id`` (HTTP 400), so sessions must send the whole history.
- LiteLLM's bridge: no ``event:`` lines, ids that change per event, ``[DONE]`` at the end;
  ``previous_response_id`` is accepted and silently ignored (no database to keep responses in):
  the turn is answered without its history.

Per run, as for the other dialects: every request succeeds, records == generations the model ran,
output tokens are the server's and add up to llama.cpp's counter.
"""

from __future__ import annotations

import json
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import read_records, read_summary, start_locust, wait_until
from tests.real.observe import Window, exit_code_for, held, launched, records_so_far, run_until
from tests.real.servers import LITELLM_KEY
from tests.real.test_llamacpp import MAX_TOKENS, prompt_tokens, run_against

pytestmark = pytest.mark.slow


def _check(records: list[dict[str, Any]], window: Window, stderr: str, cut: int = 0) -> None:
    """``records`` (the ok ones) against what llama.cpp ran; ``cut``: requests cut by the stop,
    which the model may have run or not."""
    assert len(records) >= 2, stderr[-2000:]  # warm-up 0: each of the 2 users' first request at least
    assert [r["error_message"] for r in records if r["status"] != "ok"] == []
    window.assert_ran(records, cut, MAX_TOKENS)
    assert all(r["tokens_source"] == "usage" and r["input_tokens_source"] == "usage" for r in records)
    for r in records:
        assert 0 < r["output_tokens"] <= MAX_TOKENS and r["server"]["response_id"].startswith("resp_")
        assert r["ttfb_ns"] <= r["ttft_ns"] <= r["e2e_ns"], r


@pytest.mark.parametrize(
    ("locustfile", "client"), [("vllm.py", "raw"), ("vllm.py", "sdk"), ("openai.py", "raw")]
)
def test_llamacpp_native_responses(llama, locustfile: str, client: str, tmp_path) -> None:
    proc, report, window = run_against(
        llama,
        locustfile,
        tmp_path,
        "--llm-endpoint",
        "responses",
        "--llm-max-tokens",
        str(MAX_TOKENS),
        "--llm-client",
        client,
        launches=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    _check(records, window, proc.stderr)
    assert sum(prompt_tokens(r) for r in records) == (
        window.delta("prompt_tokens_total") + window.delta("prompt_tokens_cached_total")
    )
    for r in records:
        assert r["finish_reason"] == "completed"  # llama.cpp: completed, never incomplete, at the maximum
        timings = r["server"]["timings"]  # the server's own prefill: our TTFT includes it
        assert timings["predicted_n"] == r["output_tokens"]
        assert r["ttft_ns"] / 1e6 >= timings["prompt_ms"] * 0.98, (r["ttft_ns"], timings)
    if locustfile == "vllm.py":  # ignore_eos honoured on /v1/responses too: exactly the maximum
        assert {r["output_tokens"] for r in records} == {MAX_TOKENS}
    assert read_summary(report)["overall"]["sampling_issues"] == {}


def _turns(records: list[dict[str, Any]]) -> list[dict[int, dict[str, Any]]]:
    sessions: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        sessions[r["session_id"]][r["turn"]] = r
    return list(sessions.values())


def _has_turn(report: Path, turn: int) -> bool:
    """Whether an ok record of ``turn`` is in ``report``'s records file (whole lines only: the
    run is still writing it)."""
    path = report / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    return any(
        (r := json.loads(ln)).get("turn") == turn and r.get("status") == "ok"
        for ln in lines
        if ln.endswith("\n")
    )


def _later_turn(report: Path) -> bool:
    """A record of a second or later turn written (a run condition)."""
    return any((r.get("turn") or 0) > 1 for r in records_so_far(report))


def test_llamacpp_sessions_whole_history_and_no_previous_response_id(llama, tmp_path) -> None:
    """Whole history: each turn's prompt holds the last one and its reply. previous_id: llama.cpp
    answers the chained turn with HTTP 400 naming previous_response_id, every time."""
    args = ("--llm-endpoint", "responses", "--llm-max-tokens", "8", "--llm-turns", "3", "--llm-warmup", "0")
    # two users' first three launches hold a second turn (a user's turns go one after another): stopped
    # then, the requests in flight end
    proc, report, _ = run_against(
        llama, "vllm.py", tmp_path / "full", *args, "--llm-responses-chain", "full", launches=3
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    assert all(r["status"] == "ok" for r in records), [r["error_message"] for r in records][:3]
    done = [s for s in _turns(records) if 2 in s]
    assert done
    for s in done:
        assert s[2]["input_tokens"] >= s[1]["input_tokens"] + s[1]["output_tokens"]
    proc, report, _ = run_against(
        llama, "vllm.py", tmp_path / "chain", *args, "--llm-responses-chain", "previous_id", until=_later_turn
    )
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    later = [r for r in records if r["turn"] > 1]
    assert later and all(r["status"] == "ok" for r in records if r["turn"] == 1)
    for r in later:
        assert r["error_category"] == "http_400" and "previous_response_id" in r["error_message"], r


def test_litellm_bridge(litellm, llama, tmp_path) -> None:
    """Raw and SDK mode through LiteLLM's translation; then a chained session: LiteLLM takes
    previous_response_id and answers without the history (the turn's prompt is its own message;
    fixed-size synthetic messages, as the default dataset's next prompt may be longer than a turn and
    its reply together)."""
    # LiteLLM's first Responses request loads its bridge (seconds on 2 busy cores): not in a window
    warm = httpx.post(
        litellm.url + "/v1/responses",
        headers={"Authorization": f"Bearer {LITELLM_KEY}"},
        timeout=120,
        json={"model": "gemma-3-270m-bridge", "input": "Hi", "max_output_tokens": 2, "stream": True},
    )
    assert warm.status_code == 200 and "response.completed" in warm.text, warm.text[:500]
    for client in ("raw", "sdk"):
        report = tmp_path / client
        backend = Window.open(llama)
        gateway = Window.open(litellm)
        # stopped once the model has launched two generations (a race's request never reaches it)
        proc = run_until(
            "vllm.py",
            "--host",
            litellm.url,
            "-u",
            "2",
            "-r",
            "2",
            "--stop-timeout",
            "60",
            "--llm-model",
            "gemma-3-270m-bridge",
            "--llm-endpoint",
            "responses",
            "--llm-max-tokens",
            str(MAX_TOKENS),
            "--llm-client",
            client,
            "--llm-api-key-env",
            "LITELLM_TEST_KEY",
            "--llm-preflight",
            "off",
            "--llm-warmup",
            "0",
            report=report,
            until=launched(llama, 2),
            env={"LITELLM_TEST_KEY": LITELLM_KEY},
        )
        records = read_records(report)
        ok = gateway.ok_but_races(records)  # the gateway's keep-alive race with llama.cpp (seen in CI)
        assert proc.returncode == exit_code_for(records), proc.stderr[-3000:]
        _check(ok, backend, proc.stderr, held(records))
        gateway.assert_answered("/v1/responses", records)  # a cut one (begun 4 ms before the stop) may not
        assert all(r["finish_reason"] == "completed" and r["reasoning_tokens"] == 0 for r in ok)
        for text in (proc.stdout, proc.stderr, (report / "requests.jsonl").read_text()):
            assert LITELLM_KEY not in text
    report = tmp_path / "chain"
    gateway = Window.open(litellm)
    # --llm-input-tokens with no /tokenize behind the gateway: two calibration requests of ~190
    # and ~570 words first (10 s of prefill on an AVX2-only core at 13 ms a token; 17.6 s on CI's
    # machine, where a 20-s run then held one request a user), then the turns. The run lasts until
    # a second turn is recorded, then stops on SIGTERM (which keeps every record): no wall-clock
    # guess of how slow the machine is.
    log = tmp_path / "chain.log"
    proc = start_locust(
        [
            "--headless",
            "--only-summary",
            "--host",
            litellm.url,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "170s",
            "--stop-timeout",
            "60",
            "--llm-model",
            "gemma-3-270m-bridge",
            "--llm-endpoint",
            "responses",
            "--llm-max-tokens",
            "8",
            "--llm-input-tokens",
            "32",
            "--llm-turns",
            "3",
            "--llm-responses-chain",
            "previous_id",
            "--llm-api-key-env",
            "LITELLM_TEST_KEY",
            "--llm-preflight",
            "off",
            "--llm-warmup",
            "0",
            "--llm-prometheus-port",
            "0",
            "--llm-report",
            str(report),
        ],
        log,
        loglevel="WARNING",
        env={"LITELLM_TEST_KEY": LITELLM_KEY},
    )
    try:
        second = wait_until(lambda: _has_turn(report, 2), timeout=150, step=0.5)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(120)
    finally:
        proc.kill()
    assert second, log.read_text()[-3000:]
    every = [r for r in read_records(report) if r["status"] != "interrupted"]
    records = gateway.ok_but_races(every)
    assert rc == exit_code_for(every), log.read_text()[-3000:]
    chained = [s for s in _turns(records) if 2 in s]
    assert chained
    # Each user message is ~32 tokens of words (turn 1: 32 with the chat template's tokens). With its
    # history turn 2 would be turn 1, its reply and a new message; without it, the new message and the
    # template alone (seen: 32 + 8 -> 41, the template adding what turn 1's calibration took in).
    for s in chained:
        assert s[1]["input_tokens"] == pytest.approx(32, abs=4), s[1]
        assert s[2]["input_tokens"] <= 32 + 16, s[2]
        assert s[2]["input_tokens"] < s[1]["input_tokens"] + s[1]["output_tokens"] + 16, s
