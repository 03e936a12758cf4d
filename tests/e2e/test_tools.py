"""Issue 30 item 2 in real locust processes against the simulator: ``--llm-tools`` and
``--llm-response-format`` in raw and SDK mode, every dialect that has them, and under
``--processes 2`` (the counts merged on the master). The simulator answers a request that carries
tools with a call of the first tool, its arguments streamed over the answer's 20 tokens
(Gemini and Ollama send a call whole: one chunk), and a JSON answer when asked for one.

Each scenario (a locustfile, a client mode, its options) runs once for the module, a few at a
time, on simulators shared by the scenarios that start them alike (tests/e2e/locust_pool.py);
the runs whose timing a test bounds (the tool call's arguments spread at the ITL pace) run alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": WEATHER}}]
TTFT_MS, ITL_MS, TOKENS = 30, 10, 20
SIM = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--output-tokens", str(TOKENS), "--seed", "5")
TOOL_SIM = (*SIM, "--gemini-tokens-per-chunk", "1")
#: A run of _run's: 2 users for 3 s, 20+ answers of ~0.22 s each.
RUN = ("-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10")

TOOL_CASES = [("vllm.py", TOKENS), ("claude.py", TOKENS), ("gemini.py", 1), ("ollama.py", 1)]
STRUCTURED_CASES = [
    ("vllm.py", "raw", ()),
    ("openai.py", "sdk", ()),
    ("claude.py", "sdk", ()),  # Anthropic: the forced json_answer tool
    ("gemini.py", "raw", ()),
    ("ollama.py", "sdk", ()),
    ("tgi.py", "raw", ()),  # parameters.grammar
    ("claude.py", "raw", ()),  # each dialect in both modes (TGI has no SDK binding)
    ("gemini.py", "sdk", ()),
    ("ollama.py", "raw", ()),
]
REFUSALS = [
    ("tgi.py", ("--llm-tools", "TOOLS"), "locust-llm: --llm-tools: TGI's native generate API takes no tools"),
    ("vllm.py", ("--llm-tools", "/nonexistent/tools.json"), "locust-llm: --llm-tools: cannot read"),
    ("vllm.py", ("--llm-response-format", "xml"), "locust-llm: --llm-response-format must be json or schema:FILE"),
]


def _tool_run(client: str, locustfile: str) -> str:
    return f"tools-{client}-{locustfile}"


def _structured_run(client: str, locustfile: str, extra: tuple[str, ...]) -> str:
    return f"structured-{client}-{locustfile}" + "".join(f"-{a}" for a in extra)


def _refusal_run(locustfile: str, args: tuple[str, ...], message: str) -> str:
    return f"refusal{REFUSALS.index((locustfile, args, message))}"


def _responses_runs(client: str) -> list[str]:
    return [f"responses-{client}-tools", f"responses-{client}-json"]


def _files(where: Path) -> tuple[Path, Path, Path]:
    tools = where / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    schema = where / "schema.json"
    schema.write_text(json.dumps(WEATHER))
    strict = where / "strict.json"  # the simulator fills the string with 20 words: never valid
    strict.write_text(json.dumps({"type": "object", "properties": {"city": {"type": "string", "maxLength": 5}},
                                  "required": ["city"]}))
    return tools, schema, strict


def _scenarios(where: Path) -> dict[str, Scenario]:
    tools, schema, strict = _files(where)
    out: dict[str, Scenario] = {}
    for client in ("raw", "sdk"):
        for locustfile, chunks in TOOL_CASES:  # the spread of a call's pieces is a timing bound: alone
            out[_tool_run(client, locustfile)] = Scenario(
                locustfile, (*RUN, "--llm-client", client, "--llm-tools", str(tools)), sim=TOOL_SIM, env=KEYS,
                alone=chunks > 1)
        for kind, option in (("tools", ("--llm-tools", str(tools))),
                             ("json", ("--llm-response-format", f"schema:{schema}"))):
            name = _responses_runs(client)[kind == "json"]
            out[name] = Scenario("vllm.py", (*RUN, "--llm-client", client, "--llm-endpoint", "responses", *option),
                                 sim=SIM, env=KEYS)
    for locustfile, client, extra in STRUCTURED_CASES:
        out[_structured_run(client, locustfile, extra)] = Scenario(
            locustfile, (*RUN, "--llm-client", client, "--llm-response-format", f"schema:{schema}", *extra),
            sim=SIM, env=KEYS)
    out["processes"] = Scenario("vllm.py", (
        lambda: processes_args(2), "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "10",
        "--llm-tools", str(tools), "--llm-response-format", f"schema:{strict}"), sim=SIM)
    for locustfile, args, message in REFUSALS:
        out[_refusal_run(locustfile, args, message)] = Scenario(
            locustfile, ("--host", "http://127.0.0.1:9", "-u", "1", "-t", "2s",
                         *(str(tools) if a == "TOOLS" else a for a in args)), report=False)
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_tool_calls_are_timed_as_output": lambda: [_tool_run(p["client"], p["locustfile"])],
        "test_structured_answers_are_checked": lambda: [_structured_run(p["client"], p["locustfile"], p["extra"])],
        "test_processes_merge_the_counts_and_the_console_says_them": lambda: ["processes"],
        "test_refusals_are_one_line": lambda: [_refusal_run(p["locustfile"], p["args"], p["message"])],
        "test_responses_api_tools_and_json": lambda: _responses_runs(p["client"]),
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every scenario of the module, each run once (when a test first needs it, or ahead)."""
    where = tmp_path_factory.mktemp("tools")
    yield from pool_in(request, where, _scenarios(where), _needs)


def _records(run: Run) -> list[dict]:
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    records = [r for r in read_records(run.report) if r["status"] != "interrupted"]
    assert len(records) >= 4 and all(r["status"] == "ok" for r in records), records[:1]
    return records


@pytest.mark.parametrize(("locustfile", "chunks"), TOOL_CASES)
@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_tool_calls_are_timed_as_output(locustfile: str, chunks: int, client: str, runs: Pool) -> None:
    run = runs.run(_tool_run(client, locustfile))
    records = _records(run)
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
    ov = read_summary(run.report)["overall"]
    counted = [r for r in records if not r["warmup"]]
    assert ov["tool_calls"] == ov["requests"] == len(counted)
    assert ov["structured_valid"] == ov["structured_invalid"] == 0


@pytest.mark.parametrize(("locustfile", "client", "extra"), STRUCTURED_CASES)
def test_structured_answers_are_checked(locustfile: str, client: str, extra: tuple[str, ...], runs: Pool) -> None:
    run = runs.run(_structured_run(client, locustfile, extra))
    records = _records(run)
    assert all(r["structured_valid"] is True for r in records), records[:1]
    # one chunk per token (TGI: the answer ends on its own, with the special EOS token, no text)
    expected = {"gemini.py": None, "tgi.py": TOKENS - 1}.get(locustfile, TOKENS)
    assert all(r["chunks"] == expected or expected is None for r in records)
    assert all("reply" not in r for r in records)  # kept to judge the answer, never written
    ov = read_summary(run.report)["overall"]
    assert ov["structured_valid"] == ov["requests"] > 0 and ov["structured_invalid"] == 0
    assert ov["tool_calls"] == (ov["requests"] if locustfile == "claude.py" else 0)


def test_processes_merge_the_counts_and_the_console_says_them(runs: Pool) -> None:
    run = runs.run("processes")
    proc = run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(run.report) if r["status"] == "ok" and not r["warmup"]]
    assert len({r["worker"] for r in records}) == 2
    ov = read_summary(run.report)["overall"]
    assert ov["tool_calls"] == ov["requests"] == len(records) >= 8
    # the tool call is the answer; its arguments break the schema's maxLength: invalid
    assert ov["structured_invalid"] == len(records) and ov["structured_valid"] == 0
    line = next(ln for ln in proc.stderr.splitlines() + proc.stdout.splitlines() if ln.startswith("answers:"))
    assert line == (f"answers: {len(records)} of {len(records)} answers were tool calls; structured output: "
                    f"0 valid, {len(records)} invalid (0.0% valid)")


@pytest.mark.parametrize(("locustfile", "args", "message"), REFUSALS)
def test_refusals_are_one_line(locustfile: str, args: tuple[str, ...], message: str, runs: Pool) -> None:
    proc = runs.run(_refusal_run(locustfile, args, message)).proc
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "locust-llm:" in ln]
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_responses_api_tools_and_json(client: str, runs: Pool) -> None:
    """The Responses API (--llm-endpoint responses): flat function tools, the call streamed as
    response.function_call_arguments.delta events (one per token, timed as output), and a JSON
    answer by text.format; raw and the openai SDK's Responses streaming alike."""
    tools_run, json_run = (runs.run(name) for name in _responses_runs(client))
    calls = _records(tools_run)
    for r in calls:
        assert r["tool_call"] is True and r["chunks"] == TOKENS and len(r["itl_ns"]) == TOKENS - 1, r
        assert r["output_tokens"] == TOKENS and r["ttft_ns"] >= TTFT_MS * 1e6 * 0.9
    ov = read_summary(tools_run.report)["overall"]
    assert ov["tool_calls"] == ov["requests"] > 0
    answers = _records(json_run)
    assert all(r["structured_valid"] is True and not r["tool_call"] and r["chunks"] == TOKENS for r in answers)
    ov = read_summary(json_run.report)["overall"]
    assert ov["structured_valid"] == ov["requests"] > 0 and ov["structured_invalid"] == 0
