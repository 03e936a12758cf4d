"""The Anthropic and Gemini users against the LiteLLM gateway in front of llama.cpp (issue 27):
LiteLLM's own translation code writes these streams, quirks and all.

- Claude (``/v1/messages``): ``message_start`` says ``input_tokens: 0``, the real counts come
  only in ``message_delta``: the later counts win, nothing is flagged.
- Gemini (``:streamGenerateContent``): every ``usageMetadata`` count is 0 although text
  streams. The counts cannot be true, so they are not believed: each record is
  ``estimated`` / ``usage_implausible``, the chunk count stands in (exact here: llama.cpp
  streams one token a chunk), the console says so once, and TPOT and tokens/s exist.
"""

from __future__ import annotations

import pytest

from tests.helpers import read_records, read_summary
from tests.real.observe import Window, exit_code_for, held, launched, run_until
from tests.real.servers import LITELLM_KEY

pytestmark = pytest.mark.slow

MAX_TOKENS = 16
KEYS = {"ANTHROPIC_API_KEY": LITELLM_KEY, "GEMINI_API_KEY": LITELLM_KEY}


def run_through(litellm, llama, locustfile: str, client: str, tmp_path):
    """One run through the gateway, until the model has launched two generations: (proc, report, every record, the ok ones, gateway window)."""
    report = tmp_path / "r"
    gateway, backend = Window.open(litellm), Window.open(llama)
    # warm-up 0: each user's first request measured (a loaded CI machine takes 2-6 s for one)
    # stopped once the model has launched two generations (a race's request never reaches it): the stop
    # lets the requests in flight end
    proc = run_until(
        locustfile,
        "--host",
        litellm.url,
        "-u",
        "2",
        "-r",
        "2",
        "--stop-timeout",
        "60",
        "--llm-model",
        "gemma-3-270m",
        "--llm-max-tokens",
        str(MAX_TOKENS),
        "--llm-client",
        client,
        "--llm-preflight",
        "off",  # each generation the model runs is a record
        "--llm-warmup",
        "0",
        report=report,
        until=launched(llama, 2),
        env=KEYS,
    )
    log = gateway.log_text()
    # a failure says what the gateway and the model server logged meanwhile (a 500 or a reset from
    # LiteLLM is otherwise only its status line)
    logs = (
        "\n--- LiteLLM log in the run (errors):\n"
        + "\n".join(ln for ln in log.splitlines() if "rror" in ln or "xception" in ln)[-4000:]
        + f"\n--- llama.cpp log in the run:\n{backend.log_text()[-2000:]}"
    )
    records = read_records(report)
    ok = gateway.ok_but_races(records, logs)  # seen in CI: one request in 10-30, at a run's start
    assert proc.returncode == exit_code_for(records), proc.stderr[-3000:] + logs
    assert len(ok) >= 2, logs
    # each request reached the model once; the race's never did; one the gateway held to the stop may have
    backend.assert_ran(ok, held(records), MAX_TOKENS)
    for text in (proc.stdout, proc.stderr, (report / "requests.jsonl").read_text()):
        assert LITELLM_KEY not in text
    return proc, report, records, ok, gateway


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_claude_through_litellm(litellm, llama, client: str, tmp_path) -> None:
    proc, report, records, ok, gateway = run_through(litellm, llama, "claude.py", client, tmp_path)
    gateway.assert_answered("/v1/messages", records)
    assert all(r["tokens_source"] == "usage" and r["input_tokens_source"] == "usage" for r in ok)
    assert all(
        r["input_tokens"] > 0 and r["output_tokens"] == MAX_TOKENS or r["finish_reason"] == "end_turn"
        for r in ok
    )
    assert read_summary(report)["overall"]["estimated_token_requests"] == 0


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_gemini_through_litellm_zero_usage_is_not_believed(litellm, llama, client: str, tmp_path) -> None:
    proc, report, records, ok, gateway = run_through(litellm, llama, "gemini.py", client, tmp_path)
    gateway.assert_answered("/v1beta/models/gemma-3-270m", records)
    for r in ok:
        assert r["tokens_source"] == "estimated" and r["tokens_reason"] == "usage_implausible", r
        assert r["output_tokens"] == r["chunks"] > 0
        assert r["input_tokens_source"] == "estimated" and r["input_tokens"] > 0
        assert r["tpot_ns"] is not None
    ov = read_summary(report)["overall"]
    assert ov["estimated_token_requests"] == len([r for r in ok if not r["warmup"]])
    assert list(ov["estimated_token_reasons"]) == ["usage_implausible"]
    assert ov["output_tokens_per_s"] > 0 and ov["tpot"]["p50"] is not None
    said = [ln for ln in proc.stdout.splitlines() if "usage_implausible" in ln]
    assert len(said) == 1 and said[0].startswith("WARNING"), proc.stdout[-2000:]
