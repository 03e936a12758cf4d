"""Issue 28 item 4: the LLM summary is the last table a headless run prints (after Locust's own
final table, on stdout and stderr as a terminal shows them), with exact tokens per request and
the total token throughput; SDK mode prints no per-request HTTP log line and names requests by
the one rule (``sdk:`` + raw mode's name).

The module's runs (issue 55) start together, a few at a time (:class:`Runs`), each with stderr
merged into stdout in a file of its own; simulators are shared by the runs that start them with
the same arguments (none of these tests reads a simulator's counts).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.e2e.locust_pool import params, wanted
from tests.helpers import LOCUST, NO_HTML, ROOT, processes_args, read_records, read_summary
from tests.real.servers import die_with_parent

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
LOCUST_TABLE = ("# reqs", "Response time percentiles", "Error report")
TIMEOUT_S = 120


@dataclass(frozen=True)
class Spec:
    """A headless run of ``locustfile`` with ``args`` (a callable gives its arguments at start),
    ``--host`` of the simulator started with ``sim``, its report in the run's dir. ``html``: with
    report.html, as a user's run writes it."""

    locustfile: str
    args: tuple[str | Callable[[], list[str]], ...]
    sim: tuple[str, ...]
    loglevel: str = "WARNING"
    html: bool = True  # every run, as before issue 55: the report's files come before the last word


@dataclass
class Ended:
    lines: list[str]  # stdout and stderr merged, in the order a terminal shows them
    report: Path


class Runs:
    """Runs the module's specs, each once, ``parallel`` at a time (no threads: the pytest
    process may be gevent-patched); ``result(name)`` starts it first if it has not started."""

    def __init__(self, specs: dict[str, Spec], base: Path, wanted: list[str], parallel: int = 3) -> None:
        self.specs, self.base, self.parallel = specs, base, parallel
        self.pending = [n for n in wanted if n in specs]
        self.live: dict[str, tuple[subprocess.Popen[bytes], list[str], Path, float, Any]] = {}
        self.done: dict[str, Ended | BaseException] = {}
        self.sims: dict[tuple[str, ...], SimProcess] = {}

    def result(self, name: str) -> Ended:
        while name not in self.done:
            self._fill(first=name)
            self._reap()
            if name not in self.done:
                time.sleep(0.1)
        self._fill()  # the next ones run while the test checks this one
        got = self.done[name]
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        for popen, _, _, _, out in self.live.values():
            if popen.poll() is None:
                popen.kill()
                popen.wait()
            out.close()
        self.live.clear()
        for sim in self.sims.values():
            sim.stop()
        self.sims.clear()

    def _fill(self, first: str | None = None) -> None:
        order = ([first] if first is not None else []) + [n for n in self.pending if n != first]
        for name in order:
            if len(self.live) >= self.parallel:
                return
            if name in self.live or name in self.done:
                continue
            if name in self.pending:
                self.pending.remove(name)
            try:
                self._start(name)
            except Exception as e:  # noqa: BLE001 - kept for the test that asks for this run
                self.done[name] = e

    def _start(self, name: str) -> None:
        sc = self.specs[name]
        if sc.sim not in self.sims:
            self.sims[sc.sim] = start_simulator(list(sc.sim))
        where = self.base / name
        where.mkdir(parents=True, exist_ok=True)
        args = [a for arg in sc.args for a in ([arg] if isinstance(arg, str) else arg())]
        cmd = [
            LOCUST,
            "-f",
            str(ROOT / "locustfiles" / sc.locustfile),
            "--headless",
            "--loglevel",
            sc.loglevel,
            *args,
            "--host",
            self.sims[sc.sim].url,
            "--llm-report",
            str(where / "r"),
        ]
        env = (
            {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
            | KEYS
            | ({} if sc.html else NO_HTML)
        )
        out = (where / "console.txt").open("wb")
        popen = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
        self.live[name] = (popen, cmd, where, time.monotonic(), out)

    def _reap(self) -> None:
        for name, (popen, cmd, where, started, out) in list(self.live.items()):
            if popen.poll() is None and time.monotonic() - started <= TIMEOUT_S:
                continue
            if popen.poll() is None:
                popen.kill()
                popen.wait()
            out.close()
            del self.live[name]
            text = (where / "console.txt").read_text(errors="replace")
            if popen.returncode != 0:  # a run killed at TIMEOUT_S: -9
                self.done[name] = AssertionError(
                    f"{name}: exit {popen.returncode}: {' '.join(cmd)}\n{text[-3000:]}"
                )
            else:
                self.done[name] = Ended(text.splitlines(), where / "r")


SUMMARY_SIM = ("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "20", "--seed", "3")
SDK_SIM = ("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8")
SUMMARY_CASES = [("local", True), ("processes", True), ("local", False)]
SDK_CASES = [
    ("claude.py", "sdk:/v1/messages"),
    ("gemini.py", "sdk:/v1beta/models/{model}:streamGenerateContent"),
]


def _summary(mode: str, only_summary: bool) -> str:
    return f"summary-{mode}-{only_summary}"


def _specs() -> dict[str, Spec]:
    out: dict[str, Spec] = {}
    for mode, only_summary in SUMMARY_CASES:
        extra: list[str | Callable[[], list[str]]] = []
        if mode == "processes":
            extra.append(lambda: processes_args(2))  # a free master port, taken when the run starts
        if only_summary:
            extra.append("--only-summary")  # without: Locust's table every 2 s as well, then its final one
        out[_summary(mode, only_summary)] = Spec(
            "vllm.py",
            (*extra, "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "5", "--llm-input-tokens", "64"),
            SUMMARY_SIM,
        )
    for locustfile, _ in SDK_CASES:
        # no warm-up: on a loaded machine an SDK user's first requests take 0.3 s and more, and 2 s held
        # only warm-up and cut ones (CI: "nothing measured")
        out[f"sdk-{locustfile}"] = Spec(
            locustfile,
            ("-u", "2", "-r", "2", "-t", "3s", "--llm-client", "sdk", "--llm-warmup", "0", "--only-summary"),
            SDK_SIM,
            loglevel="INFO",
        )
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_only_summary_ends_with_the_llm_table_and_exact_token_keys": lambda: [
            _summary(p["mode"], p["only_summary"])
        ],
        "test_sdk_mode_is_quiet_and_named_by_the_raw_rule": lambda: [f"sdk-{p['locustfile']}"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every run the module's selected tests need, each once, three at a time."""
    pool = Runs(_specs(), tmp_path_factory.mktemp("console"), wanted(request, _needs))
    try:
        yield pool
    finally:
        pool.close()


def _assert_llm_table_last(lines: list[str]) -> None:
    ours = [i for i, ln in enumerate(lines) if ln.startswith("LLM summary")]
    theirs = [i for i, ln in enumerate(lines) if any(t in ln for t in LOCUST_TABLE)]
    assert len(ours) == 1, "\n".join(lines[-60:])
    assert theirs and max(theirs) < ours[0], "\n".join(lines[-60:])  # Locust's final table, then ours


@pytest.mark.parametrize(("mode", "only_summary"), SUMMARY_CASES)
def test_only_summary_ends_with_the_llm_table_and_exact_token_keys(
    mode: str, only_summary: bool, runs
) -> None:
    run = runs.result(_summary(mode, only_summary))
    lines, report = run.lines, run.report
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
    run = runs.result(f"sdk-{locustfile}")
    lines, report = run.lines, run.report
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
