"""Issue 30 item 2 in real locust processes against the simulator: ``--llm-tools`` and
``--llm-response-format`` in raw and SDK mode, every dialect that has them, and under
``--processes 2`` (the counts merged on the master). The simulator answers a request that carries
tools with a call of the first tool, its arguments streamed over the answer's 20 tokens
(Gemini and Ollama send a call whole: one chunk), and a JSON answer when asked for one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import processes_args, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": WEATHER}}]
TTFT_MS, ITL_MS, TOKENS = 30, 10, 20


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(WEATHER))
    strict = tmp_path / "strict.json"  # the simulator fills the string with 20 words: never valid
    strict.write_text(json.dumps({"type": "object", "properties": {"city": {"type": "string", "maxLength": 5}},
                                  "required": ["city"]}))
    return tools, schema, strict


def _run(sim, locustfile: str, report: Path, *args: str) -> list[dict]:
    proc = run_locust(locustfile, "--host", sim.url, "-u", "2", "-r", "2", "-t", "6s", "--stop-timeout", "10",
                      *args, report=report, env=KEYS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    assert len(records) >= 4 and all(r["status"] == "ok" for r in records), records[:1]
    return records


@pytest.mark.parametrize(("locustfile", "chunks"), [
    ("vllm.py", TOKENS), ("claude.py", TOKENS), ("gemini.py", 1), ("ollama.py", 1)])
@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_tool_calls_are_timed_as_output(locustfile: str, chunks: int, client: str, sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", TTFT_MS, "--itl-ms", ITL_MS, "--output-tokens", TOKENS, "--seed", "5",
                      "--gemini-tokens-per-chunk", "1")
    tools, _, _ = _files(tmp_path)
    report = tmp_path / "r"
    records = _run(sim, locustfile, report, "--llm-client", client, "--llm-tools", str(tools))
    for r in records:
        assert r["tool_call"] is True and r["structured_valid"] is None
        assert r["chunks"] == chunks, r  # the arguments' pieces are the token-bearing chunks
        assert r["output_tokens"] == TOKENS and r["tokens_source"] == "usage"
        assert r["ttft_ns"] >= TTFT_MS * 1e6 * 0.9
        assert len(r["itl_ns"]) == chunks - 1
        assert r["client"] == client
    if chunks > 1:  # the pieces are spread over the answer at the ITL pace, not sent at once (a client
        # starved on these shared cores reads a backlog in one go now and then: the median request's spread)
        spreads = sorted(sum(r["itl_ns"]) / 1e6 for r in records)
        assert spreads[len(spreads) // 2] >= (chunks - 1) * ITL_MS * 0.7, spreads
    ov = read_summary(report)["overall"]
    counted = [r for r in records if not r["warmup"]]
    assert ov["tool_calls"] == ov["requests"] == len(counted)
    assert ov["structured_valid"] == ov["structured_invalid"] == 0


@pytest.mark.parametrize(("locustfile", "client", "extra"), [
    ("vllm.py", "raw", ()),
    ("openai.py", "sdk", ()),
    ("claude.py", "sdk", ()),  # Anthropic: the forced json_answer tool
    ("gemini.py", "raw", ()),
    ("ollama.py", "sdk", ()),
    ("tgi.py", "raw", ()),  # parameters.grammar
    ("claude.py", "raw", ()),  # each dialect in both modes (TGI has no SDK binding)
    ("gemini.py", "sdk", ()),
    ("ollama.py", "raw", ()),
])
def test_structured_answers_are_checked(locustfile: str, client: str, extra: tuple[str, ...], sim_factory,
                                        tmp_path) -> None:
    sim = sim_factory("--ttft-ms", TTFT_MS, "--itl-ms", ITL_MS, "--output-tokens", TOKENS, "--seed", "5")
    _, schema, _ = _files(tmp_path)
    report = tmp_path / "r"
    records = _run(sim, locustfile, report, "--llm-client", client, "--llm-response-format", f"schema:{schema}",
                   *extra)
    assert all(r["structured_valid"] is True for r in records), records[:1]
    # one chunk per token (TGI: the answer ends on its own, with the special EOS token, no text)
    expected = {"gemini.py": None, "tgi.py": TOKENS - 1}.get(locustfile, TOKENS)
    assert all(r["chunks"] == expected or expected is None for r in records)
    assert all("reply" not in r for r in records)  # kept to judge the answer, never written
    ov = read_summary(report)["overall"]
    assert ov["structured_valid"] == ov["requests"] > 0 and ov["structured_invalid"] == 0
    assert ov["tool_calls"] == (ov["requests"] if locustfile == "claude.py" else 0)


def test_processes_merge_the_counts_and_the_console_says_them(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", TTFT_MS, "--itl-ms", ITL_MS, "--output-tokens", TOKENS, "--seed", "5")
    tools, _, strict = _files(tmp_path)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", *processes_args(2),
                      "--host", sim.url, "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "10",
                      "--llm-tools", str(tools), "--llm-response-format", f"schema:{strict}", report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] == "ok" and not r["warmup"]]
    assert len({r["worker"] for r in records}) == 2
    ov = read_summary(report)["overall"]
    assert ov["tool_calls"] == ov["requests"] == len(records) >= 8
    # the tool call is the answer; its arguments break the schema's maxLength: invalid
    assert ov["structured_invalid"] == len(records) and ov["structured_valid"] == 0
    line = next(ln for ln in proc.stderr.splitlines() + proc.stdout.splitlines() if ln.startswith("answers:"))
    assert line == (f"answers: {len(records)} of {len(records)} answers were tool calls; structured output: "
                    f"0 valid, {len(records)} invalid (0.0% valid)")


@pytest.mark.parametrize(("locustfile", "args", "message"), [
    ("tgi.py", ("--llm-tools", "TOOLS"), "locust-llm: --llm-tools: TGI's native generate API takes no tools"),
    ("vllm.py", ("--llm-tools", "/nonexistent/tools.json"), "locust-llm: --llm-tools: cannot read"),
    ("vllm.py", ("--llm-response-format", "xml"), "locust-llm: --llm-response-format must be json or schema:FILE"),
])
def test_refusals_are_one_line(locustfile: str, args: tuple[str, ...], message: str, tmp_path) -> None:
    tools, _, _ = _files(tmp_path)
    args = tuple(str(tools) if a == "TOOLS" else a for a in args)
    proc = run_locust(locustfile, "--host", "http://127.0.0.1:9", "-u", "1", "-t", "2s", *args)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "locust-llm:" in ln]
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_responses_api_tools_and_json(client: str, sim_factory, tmp_path) -> None:
    """The Responses API (--llm-endpoint responses): flat function tools, the call streamed as
    response.function_call_arguments.delta events (one per token, timed as output), and a JSON
    answer by text.format; raw and the openai SDK's Responses streaming alike."""
    sim = sim_factory("--ttft-ms", TTFT_MS, "--itl-ms", ITL_MS, "--output-tokens", TOKENS, "--seed", "5")
    tools, schema, _ = _files(tmp_path)
    calls = _run(sim, "vllm.py", tmp_path / "t", "--llm-client", client, "--llm-endpoint", "responses",
                 "--llm-tools", str(tools))
    for r in calls:
        assert r["tool_call"] is True and r["chunks"] == TOKENS and len(r["itl_ns"]) == TOKENS - 1, r
        assert r["output_tokens"] == TOKENS and r["ttft_ns"] >= TTFT_MS * 1e6 * 0.9
    ov = read_summary(tmp_path / "t")["overall"]
    assert ov["tool_calls"] == ov["requests"] > 0
    answers = _run(sim, "vllm.py", tmp_path / "j", "--llm-client", client, "--llm-endpoint", "responses",
                   "--llm-response-format", f"schema:{schema}")
    assert all(r["structured_valid"] is True and not r["tool_call"] and r["chunks"] == TOKENS for r in answers)
    ov = read_summary(tmp_path / "j")["overall"]
    assert ov["structured_valid"] == ov["requests"] > 0 and ov["structured_invalid"] == 0
