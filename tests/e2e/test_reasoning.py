"""Issue 30 item 3: TTFO and TTST end to end. Real locust processes against the simulator with
``--reasoning-tokens``: raw mode (OpenAI-compatible ``delta.reasoning``), SDK mode (Anthropic
``thinking_delta`` through the anthropic SDK), ``--processes 2`` (merged on the master, exactly),
and Ollama (no reasoning count of its own: estimated from the reasoning chunks). Issue 53 item 4:
reasoning counted but hidden or only summarised (``--reasoning-stream``), in every dialect that
can, raw and SDK: TPOT is the answer's pace, basis "answer"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.metrics import Distribution
from llm_users.sim.launcher import start_simulator
from tests.helpers import median, processes_args, read_records, read_summary, run_locust

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # reasoning gaps within 20 % of the simulator's ITL: run alone (tests/sharding.py)

R, N, ITL_MS, TTFT_MS = 6, 20, 5.0, 40.0  # 0.14-s answers: ~7 a second per user, 5 measured needed
SIM = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--output-tokens", str(N), "--reasoning-tokens", str(R),
       "--seed", "7")
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test"}


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    """One simulator for the module's runs (serial: one after another); Gemini's one token a
    chunk touches only the Gemini dialect (test_every_dialect_with_reasoning)."""
    s = start_simulator([*SIM, "--gemini-tokens-per-chunk", "1"])
    yield s
    s.stop()


def _measured(report: Path) -> list[dict]:
    records = [r for r in read_records(report) if r["status"] == "ok" and not r["warmup"]]
    assert len(records) >= 5, records[:1]
    return records


def _per_record(records: list[dict], source: str) -> None:
    for r in records:
        assert (r["chunks"], r["reasoning_chunks"], r["output_tokens"]) == (N, R, N), r
        assert (r["reasoning_tokens"], r["reasoning_tokens_source"], r["answer_tokens"]) == (R, source, N - R), r
        assert r["ttft_ns"] <= r["ttst_ns"] <= r["ttfo_ns"] <= r["e2e_ns"]  # chunks read together share a stamp
        assert r["ttst_ns"] - r["ttft_ns"] == r["itl_ns"][0]  # the same stamps
        assert r["ttfo_ns"] - r["ttft_ns"] == sum(r["itl_ns"][:R])
        assert r["tpot_basis"] == "all"  # streamed in full: every output token after the first
        assert r["tpot_ns"] == (r["e2e_ns"] - r["ttft_ns"]) / (N - 1)
    # TTFO - TTFT = R reasoning chunks x ITL: the simulator's chunk targets are absolute (no drift)
    gap_ms = median([(r["ttfo_ns"] - r["ttft_ns"]) / 1e6 for r in records])
    assert abs(gap_ms - R * ITL_MS) < 0.2 * R * ITL_MS, gap_ms
    assert abs(median([(r["ttst_ns"] - r["ttft_ns"]) / 1e6 for r in records]) - ITL_MS) < 0.4 * ITL_MS


def _summary_matches(report: Path, records: list[dict]) -> dict:
    """summary.json's ttfo/ttst and reasoning block equal what the records give (exactly, merged or not)."""
    ov = read_summary(report)["overall"]
    for key, field in (("ttfo", "ttfo_ns"), ("ttst", "ttst_ns")):
        d = Distribution()
        for r in records:
            d.add(r[field])
        assert ov[key] == d.summary_ms() | {"mean": ov[key]["mean"]}, key
        assert ov[key]["mean"] == pytest.approx(d.summary_ms()["mean"], rel=1e-9)
    reasoning, answer = Distribution(), Distribution()
    for r in records:
        reasoning.add_many(r["itl_ns"][: R - 1])
        answer.add_many(r["itl_ns"][R:])
    block = ov["reasoning"]
    n = len(records)
    assert (block["requests"], block["reasoning_tokens"], block["answer_tokens"]) == (n, n * R, n * (N - R))
    assert (block["reasoning_chunks"], block["answer_chunks"]) == (n * R, n * (N - R))
    for key, d in (("itl_reasoning", reasoning), ("itl_answer", answer)):
        for p in ("count", "p50", "p90", "p99", "min", "max"):
            assert block[key][p] == d.summary_ms()[p], (key, p)
    return ov


def test_raw_mode_openai_reasoning(sim, tmp_path) -> None:
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-u", "3", "-r", "3", "-t", "2s", "--stop-timeout", "10",
                      report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    assert {r["client"] for r in records} == {"raw"}
    _per_record(records, "usage")
    ov = _summary_matches(report, records)
    assert ov["reasoning"]["reasoning_tokens_estimated_requests"] == 0
    console = proc.stdout + proc.stderr
    assert "TTFO p50" in console and "TTST p50" in console and "reasoning: " in console
    html = (report / "report.html").read_text()
    assert "Reasoning and answer" in html and "TTFO p50" in html


def test_sdk_mode_anthropic(sim, tmp_path) -> None:
    report = tmp_path / "r"
    proc = run_locust("claude.py", "--host", sim.url, "-u", "3", "-r", "3", "-t", "2s", "--stop-timeout", "10",
                      "--llm-client", "sdk", report=report, env=KEYS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    assert {r["client"] for r in records} == {"sdk"}
    _per_record(records, "usage")  # the simulator's output_tokens_details.thinking_tokens
    _summary_matches(report, records)


def test_processes_2_merges_exactly(sim, tmp_path) -> None:
    """Raw mode: under --processes 2 the SDK's import in each worker took longer than a short run
    on a loaded 2-core machine (the same on main), and the merge is the same code either way."""
    report = tmp_path / "r"
    proc = run_locust("vllm.py", *processes_args(2),
                      "--host", sim.url, "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "10",
                      report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    assert len({r["worker"] for r in records}) == 2
    _per_record(records, "usage")
    _summary_matches(report, records)  # merged on the master from the workers' wire forms: exact


def test_ollama_reasoning_count_is_estimated(sim, tmp_path) -> None:
    report = tmp_path / "r"
    proc = run_locust("ollama.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "10",
                      report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    _per_record(records, "estimated")  # Ollama reports no reasoning count: one a reasoning chunk
    ov = _summary_matches(report, records)
    assert ov["reasoning"]["reasoning_tokens_estimated_requests"] == len(records)
    assert "estimated from reasoning chunks" in proc.stdout + proc.stderr


EVERY_DIALECT = '''
from locust import events
from llm_users import plugin
from llm_users.users import ClaudeUser, GeminiUser, OllamaUser, VLLMUser

plugin.register(events)

class Chat(VLLMUser):
    pass

class Responses(VLLMUser):
    endpoint = "responses"

class Claude(ClaudeUser):
    pass

class Gemini(GeminiUser):
    pass

class Ollama(OllamaUser):
    pass
'''


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_every_dialect_with_reasoning(client: str, sim, tmp_path) -> None:
    """Each dialect's reasoning shape (chat delta.reasoning, the Responses API's reasoning_text
    deltas, Anthropic thinking_delta, Gemini thought parts, Ollama thinking) gives the same TTFO,
    TTST and counts, raw and through each official SDK (TGI and /v1/completions have no reasoning
    field)."""
    locustfile = tmp_path / "every_dialect.py"
    locustfile.write_text(EVERY_DIALECT)
    report = tmp_path / "r"
    proc = run_locust(str(locustfile), "--host", sim.url, "-u", "5", "-r", "5", "-t", "3s", "--stop-timeout", "10",
                      "--llm-client", client, report=report,
                      env={**KEYS, "OPENAI_API_KEY": "sk-test", "GEMINI_API_KEY": "gm-test"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    by_backend: dict[str, list[dict]] = {}
    for r in records:
        by_backend.setdefault(f"{r['backend']} {r['name']}", []).append(r)
    assert {r["client"] for r in records} == {client}
    assert len(by_backend) == 5, sorted(by_backend)  # chat, responses, claude, gemini, ollama
    for key, recs in by_backend.items():
        _per_record(recs, "estimated" if key.startswith("ollama") else "usage")


HR, HN = 24, 36  # 24 reasoning tokens, a 12-token answer: hidden, TPOT over 35 tokens would be 11/35 of the pace
SUMMARY = HR // 4  # the simulator's summary: the reasoning's last quarter


@pytest.fixture(scope="module")
def hiding_sim() -> Iterator[Any]:
    """A simulator per --reasoning-stream mode, started when a test first asks for it."""
    sims: dict[str, Any] = {}

    def get(mode: str) -> Any:
        if mode not in sims:
            sims[mode] = start_simulator(["--ttft-ms", "20", "--itl-ms", str(ITL_MS), "--output-tokens", str(HN),
                                          "--reasoning-tokens", str(HR), "--reasoning-stream", mode,
                                          "--gemini-tokens-per-chunk", "1", "--seed", "7"])
        return sims[mode]
    yield get
    for s in sims.values():
        s.stop()


#: the dialects that can hide their reasoning, or only summarise it (chat completions have no
#: summary; Claude always streams at least a summary)
HIDERS = {"hidden": ("Chat", "Responses", "Gemini"), "summary": ("Responses", "Claude", "Gemini")}


@pytest.mark.parametrize("client", ["raw", "sdk"])
@pytest.mark.parametrize("mode", ["hidden", "summary"])
def test_hidden_reasoning_tpot_is_the_answers_pace(mode: str, client: str, hiding_sim, tmp_path) -> None:
    """OpenAI o-series chat and Responses, Gemini without includeThoughts (hidden), Claude's, the
    Responses API's and Gemini's summaries, in one run per mode and client: the server counts 24
    reasoning tokens and streams none (or 6 as a summary). TPOT counts the 12 answer tokens after
    the first streamed answer token, so it is the simulator's 5 ms a token, not (E2E - TTFT) / 35 =
    1.6 ms; requests.jsonl and summary.json say which basis every TPOT used."""
    locustfile = tmp_path / "every_dialect.py"
    locustfile.write_text(EVERY_DIALECT)  # only the classes named below run
    dialects = HIDERS[mode]
    report = tmp_path / "r"
    proc = run_locust(str(locustfile), *dialects, "--host", hiding_sim(mode).url, "-u", "3", "-r", "3",
                      "-t", "4s" if client == "sdk" else "3s",  # an SDK's import: a longer start
                      "--stop-timeout", "10", "--llm-client", client, report=report,
                      env={**KEYS, "OPENAI_API_KEY": "sk-test", "GEMINI_API_KEY": "gm-test"}, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _measured(report)
    shown = SUMMARY if mode == "summary" else 0
    assert {r["client"] for r in records} == {client}
    by_name: dict[str, list[dict]] = {}
    for r in records:
        by_name.setdefault(f"{r['backend']} {r['name']}", []).append(r)
        assert (r["output_tokens"], r["reasoning_tokens"], r["reasoning_tokens_source"]) == (HN, HR, "usage"), r
        assert (r["answer_tokens"], r["reasoning_chunks"], r["chunks"]) == (HN - HR, shown, HN - HR + shown), r
        assert r["tpot_basis"] == "answer", r
        assert r["tpot_ns"] == (r["e2e_ns"] - r["ttfo_ns"]) / (HN - HR - 1)  # the answer's gaps, from its first token
        assert r["ttfo_ns"] - r["ttft_ns"] == sum(r["itl_ns"][:shown])  # hidden: TTFO = TTFT
    assert len(by_name) == len(dialects), sorted(by_name)
    summary = read_summary(report)
    want_ttft = 20 + (HR - shown) * ITL_MS  # the hidden tokens' time is before the first streamed token
    for name, recs in by_name.items():
        assert len(recs) >= 3, (name, len(recs))
        ttft_ms = median([r["ttft_ns"] / 1e6 for r in recs])
        assert abs(ttft_ms - want_ttft) < 0.2 * want_ttft, (name, ttft_ms)
        tpot_ms = median([r["tpot_ns"] / 1e6 for r in recs])
        assert abs(tpot_ms - ITL_MS) < 0.2 * ITL_MS, (name, tpot_ms)  # over every output token: 11/35 x 5 ms = 1.6 ms
    assert sum(s["tpot_basis"]["answer"] for s in summary["by_name"].values()) == len(records)
    assert all(s["tpot_basis"]["all"] == 0 for s in summary["by_name"].values())
    ov, n = summary["overall"], len(records)
    assert ov["tpot_basis"] == {"all": 0, "answer": n} and ov["tpot"]["count"] == n
    assert abs(ov["tpot"]["p50"] - ITL_MS) < 0.2 * ITL_MS, ov["tpot"]
    block = ov["reasoning"]
    assert (block["reasoning_tokens"], block["answer_tokens"]) == (n * HR, n * (HN - HR))
    assert (block["requests"], block["reasoning_chunks"]) == ((n, n * shown) if shown else (0, 0))
    console = proc.stdout + proc.stderr
    assert f"TPOT counts the answer's tokens in {n} requests (reasoning hidden or summarised)" in console
    if not shown:
        assert f"counted {n * HR} reasoning tokens but streamed none of them" in console
