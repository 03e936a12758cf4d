"""Issue 28 item 4: the LLM summary is the last table a headless run prints (after Locust's own
final table, on stdout and stderr as a terminal shows them), with exact tokens per request and
the total token throughput; SDK mode prints no per-request HTTP log line and names requests by
the one rule (``sdk:`` + raw mode's name).

The module's runs (issue 55) start together, a few at a time (tests/e2e/locust_pool.py), each
with stderr merged into stdout; simulators are shared by the runs that start them with the same
arguments (none of these tests reads a simulator's counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Scenario, params, pool_in
from tests.helpers import processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
LOCUST_TABLE = ("# reqs", "Response time percentiles", "Error report")


SUMMARY_SIM = ("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "20", "--seed", "3")
SDK_SIM = ("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8")
SUMMARY_CASES = [("local", True), ("processes", True), ("local", False)]
SDK_CASES = [
    ("claude.py", "sdk:/v1/messages"),
    ("gemini.py", "sdk:/v1beta/models/{model}:streamGenerateContent"),
]


def _summary(mode: str, only_summary: bool) -> str:
    return f"summary-{mode}-{only_summary}"


def _scenarios() -> dict[str, Scenario]:
    """Every run writes report.html, as a user's does (as before issue 55: the report's files come
    before the last word); stdout and stderr merged, as a terminal shows them."""
    common = {"env": KEYS, "merge_output": True}
    out: dict[str, Scenario] = {}
    for mode, only_summary in SUMMARY_CASES:
        extra: list[str | Callable[[], list[str]]] = []
        if mode == "processes":
            extra.append(lambda: processes_args(2))  # a free master port, taken when the run starts
        # without --only-summary: Locust's table every 2 s as well, then its final one
        out[_summary(mode, only_summary)] = Scenario(
            "vllm.py", (*extra, "--llm-html", "on", "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "5",
                        "--llm-input-tokens", "64"), sim=SUMMARY_SIM, only_summary=only_summary, **common)
    for locustfile, _ in SDK_CASES:
        # no warm-up: on a loaded machine an SDK user's first requests take 0.3 s and more, and 2 s held
        # only warm-up and cut ones (CI: "nothing measured")
        out[f"sdk-{locustfile}"] = Scenario(
            locustfile, ("--llm-html", "on", "-u", "2", "-r", "2", "-t", "3s", "--llm-client", "sdk",
                         "--llm-warmup", "0"), sim=SDK_SIM, loglevel="INFO", **common)
    return out


def _lines(pool: Pool, name: str) -> tuple[list[str], Path]:
    """The run's console (stdout and stderr merged) and its report dir; the run exited 0."""
    run = pool.run(name)
    assert run.proc.returncode == 0, f"{name}: exit {run.proc.returncode}: {' '.join(run.proc.args)}\n" \
                                     f"{run.proc.stdout[-3000:]}"
    return run.proc.stdout.splitlines(), run.report


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_only_summary_ends_with_the_llm_table_and_exact_token_keys": lambda: [
            _summary(p["mode"], p["only_summary"])
        ],
        "test_sdk_mode_is_quiet_and_named_by_the_raw_rule": lambda: [f"sdk-{p['locustfile']}"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every run the module's selected tests need, each once, three at a time."""
    yield from pool_in(request, tmp_path_factory.mktemp("console"), _scenarios(), _needs, parallel=3)


def _assert_llm_table_last(lines: list[str]) -> None:
    ours = [i for i, ln in enumerate(lines) if ln.startswith("LLM summary")]
    theirs = [i for i, ln in enumerate(lines) if any(t in ln for t in LOCUST_TABLE)]
    assert len(ours) == 1, "\n".join(lines[-60:])
    assert theirs and max(theirs) < ours[0], "\n".join(lines[-60:])  # Locust's final table, then ours


@pytest.mark.parametrize(("mode", "only_summary"), SUMMARY_CASES)
def test_only_summary_ends_with_the_llm_table_and_exact_token_keys(
    mode: str, only_summary: bool, runs
) -> None:
    lines, report = _lines(runs, _summary(mode, only_summary))
    _assert_llm_table_last(lines)
    ov = read_summary(report)["overall"]
    ok = [r for r in read_records(report) if r["status"] == "ok" and not r["warmup"]]
    assert ov["requests"] == len(ok) >= 10
    # the simulator answers exactly 20 tokens; the synthetic prompts are exactly 64 (server-counted)
    assert ov["output_tokens_per_request"] == {"p50": 20, "mean": 20.0, "count": len(ok)}
    assert ov["input_tokens_per_request"] == {"p50": 64, "mean": 64.0, "count": len(ok)}
    total = (ov["input_tokens"] + ov["output_tokens"]) / ov["duration_s"]
    assert ov["total_tokens_per_s"] == pytest.approx(total, rel=1e-9)
    assert ov["total_tokens_per_s"] == pytest.approx(ov["output_tokens_per_s"] * (64 + 20) / 20, rel=1e-9)
    tokens = next(ln for ln in lines if ln.startswith("tokens per request"))
    assert tokens.startswith("tokens per request: input p50 64, mean 64.0; output p50 20, mean 20.0;"), tokens


@pytest.mark.parametrize(("locustfile", "name"), SDK_CASES)
def test_sdk_mode_is_quiet_and_named_by_the_raw_rule(locustfile: str, name: str, runs) -> None:
    lines, report = _lines(runs, f"sdk-{locustfile}")
    assert not [ln for ln in lines if "HTTP Request:" in ln], [ln for ln in lines if "HTTP Request:" in ln][
        :3
    ]
    records = read_records(report)
    assert records and {r["client"] for r in records} == {"sdk"}
    model = records[0]["model"]
    assert {r["name"] for r in records} == {name.format(model=model)}
    raw = {n for n in read_summary(report)["by_name"]}
    assert raw == {name.format(model=model)}
    _assert_llm_table_last(lines)
