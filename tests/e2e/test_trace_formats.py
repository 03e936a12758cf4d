"""Issue 29 item 7: the trace formats users have, replayed by a real locust process against the
simulator (one token per word, ``--template-tokens 7`` per chat message, measured and subtracted
by the client): a Mooncake, a BurstGPT and an Azure sample (tests/fixtures/traces/) each send
every request in the trace (window) once, at its time after the speed-up (the schedule to the
microsecond, the sends within 5 ms), with its exact input length as the server counts it and its
output length; Mooncake's shared hash ids reach the server as identical prefix text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.load.trace_replay import BLOCK_TOKENS, read_trace
from llm_users.sim.launcher import start_simulator
from tests.helpers import get_json, read_records, read_summary, run_locust

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"
TEMPLATE = 7

pytestmark = pytest.mark.serial  # send lag within 5 ms: run alone (tests/sharding.py)


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    s = start_simulator(["--ttft-ms", "5", "--itl-ms", "1", "--template-tokens", str(TEMPLATE), "--seed", "3",
                         "--trace-prompts", "--prefix-cache-block", str(BLOCK_TOKENS)])
    yield s
    s.stop()


@pytest.mark.parametrize(("name", "args", "fmt", "window", "speedup"), [
    ("mooncake_trace.jsonl", ("--llm-trace-format", "mooncake"), "mooncake", None, 1.0),
    ("BurstGPT_1.csv", ("--llm-trace-speedup", "10"), "burstgpt", None, 10.0),
    ("AzureLLMInferenceTrace_conv.csv", ("--llm-trace-window", "1:5", "--llm-trace-speedup", "2"), "azure",
     (1.0, 5.0), 2.0),
])
def test_sample_replays_on_time_with_exact_lengths(sim, tmp_path, name, args, fmt, window, speedup) -> None:
    path = str(TRACES / name)
    _, rows, skipped = read_trace(path, fmt, window)
    get_json(sim.url + "/_sim/trace", method="DELETE")
    report = tmp_path / "r"
    span = rows[-1].offset_s / speedup
    proc = run_locust("vllm.py", "--host", sim.url, "-t", f"{int(span) + 2}s", "--stop-timeout", "5",
                      "--llm-prometheus-port", "0", "--llm-warmup", "0", "--llm-trace", path, *args, report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # rows at the same time (BurstGPT's whole seconds) in one order on both sides
    recs = sorted(read_records(report), key=lambda r: (r["scheduled_ns"], r["target_input_tokens"],
                                                       r["target_output_tokens"]))
    rows.sort(key=lambda r: (r.offset_s, r.input_tokens, r.output_tokens))
    assert len(recs) == len(rows) and all(r["status"] == "ok" for r in recs), [r["status"] for r in recs]
    server = {t["request_id"]: t for t in get_json(sim.url + "/_sim/trace")}
    first = recs[0]["scheduled_ns"]
    lags = []
    for rec, row in zip(recs, rows, strict=True):
        due_s = (row.offset_s - rows[0].offset_s) / speedup  # from the first request (a window's starts later)
        assert (rec["scheduled_ns"] - first) / 1e9 == pytest.approx(due_s, abs=2e-6)  # the trace's time
        lags.append((rec["t0_ns"] - first) / 1e9 - due_s)
        # exact lengths on the tokenizer path: as the client and the server count them
        assert rec["input_tokens"] == server[rec["request_id"]]["input_tokens"] == row.input_tokens, rec
        assert rec["output_tokens"] == rec["target_output_tokens"] == row.output_tokens
    lags.sort()
    # sent at the trace's time: never early; the median send lag under 5 ms (issue 29). Prompts are
    # built ahead of their due times (openloop.REPLAY_AHEAD), so rows due at once (a BurstGPT second)
    # go back to back: 0.9-1.5 ms median, 3.4 ms max with eight other sessions on this machine's two
    # cores; built in the loop instead, the median was 2-7 ms and the first rows 270-370 ms late.
    assert lags[0] >= -1e-4 and lags[len(lags) // 2] < 0.005, lags
    summary = read_summary(report)
    err = summary["workload"]["input_tokens_error"]  # the same check as for synthetic prompts
    assert err["exact_share"] == 1.0 and err["abs_tokens"]["p99"] == 0 and err["requests"] == len(rows)
    a = summary["arrivals"]
    assert a["trace_format"] == fmt and a["trace_requests"] == len(rows) == a["sent"]
    assert a["trace_skipped"] == skipped and a["trace_prompts"]["method"] == "tokenizer"
    assert a["trace_prompts"]["overhead_tokens"] == TEMPLATE
    if fmt == "mooncake":  # equal hash ids: identical prefix text at the server, and its cache says so
        words = {r["request_id"]: server[r["request_id"]]["prompt"].split() for r in recs}
        seen: dict[tuple[int, ...], list[str]] = {}
        shared = 0
        for rec, row in zip(recs, rows, strict=True):
            for k in range(1, len(row.hash_ids) + 1):
                if (k * BLOCK_TOKENS + TEMPLATE) > row.input_tokens:
                    break
                head = words[rec["request_id"]][:k * BLOCK_TOKENS]
                key = row.hash_ids[:k]
                if key in seen:
                    assert head == seen[key]
                    shared += 1
                seen.setdefault(key, head)
        assert shared >= 5
        assert sum(1 for r in recs if (r.get("server") or {}).get("cached_tokens", 0) >= BLOCK_TOKENS) >= 5
