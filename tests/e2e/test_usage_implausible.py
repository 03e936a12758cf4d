"""Issue 27 item 3: usage that cannot be true is not believed, in every dialect, raw and SDK.

The simulator's ``--usage-zero`` reports 0 tokens in every usage field, as LiteLLM's Gemini
bridge does, while the text streams. Every record must then say ``estimated`` with the reason
``usage_implausible``, use the chunk count (the simulator's truth, from its trace) and a
prompt estimate, summary.json must count them with the reason, the console must say it once,
and the figures (TPOT, tokens/s) must exist.

Each scenario runs once for the module, a few at a time; the runs with the quirk share one
simulator, whose trace keeps the truth of each (tests/e2e/locust_pool.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.protocols.backend import all_backends
from tests.e2e.locust_pool import Pool, Scenario, params, pool_in
from tests.helpers import processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
CASES = [(b.docs.locustfile, client) for b in all_backends().values() if b.docs and b.routes[0].kind == "chat"
         for client in ("raw", "sdk") if client == "raw" or b.sdk_module]
SIM = ("--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "24")
#: The quirk's simulator, shared by every CASES run: its trace keeps every record of theirs (the
#: default ring, 2000, holds ~20 runs' worth; each run's is read once it has ended: a margin).
ZERO_SIM = (*SIM, "--usage-zero", "both", "--gemini-tokens-per-chunk", "1", "--trace-limit", "100000")


def _zero_run(locustfile: str, client: str) -> str:
    return f"zero-{client}-{locustfile}"


def _scenarios() -> dict[str, Scenario]:
    out = {_zero_run(locustfile, client): Scenario(
        locustfile, ("-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10", "--llm-client", client),
        sim=ZERO_SIM, env=KEYS, trace=True) for locustfile, client in CASES}
    out["true-usage"] = Scenario("gemini.py", ("--llm-html", "on", "-u", "2", "-r", "2", "-t", "2s",
                                               "--stop-timeout", "10"), sim=SIM, env=KEYS)
    # Locust's forked workers dial --master-port: one of our own (processes_args)
    out["processes"] = Scenario("vllm.py", ("--llm-html", "on", lambda: processes_args(2), "-u", "4", "-r", "4",
                                            "-t", "4s", "--stop-timeout", "10"), sim=(*SIM, "--usage-zero", "output"))
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_zero_usage_is_estimated_and_said": lambda: [_zero_run(p["locustfile"], p["client"])],
        "test_true_usage_is_believed": lambda: ["true-usage"],
        "test_zero_usage_is_counted_once_across_processes": lambda: ["processes"],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every scenario of the module, each run once (when a test first needs it, or ahead)."""
    yield from pool_in(request, tmp_path_factory.mktemp("usage"), _scenarios(), _needs)


@pytest.mark.parametrize(("locustfile", "client"), CASES)
def test_zero_usage_is_estimated_and_said(locustfile: str, client: str, runs: Pool) -> None:
    run = runs.run(_zero_run(locustfile, client))
    proc, report = run.proc, run.report
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len(records) >= 4 and all(r["status"] == "ok" for r in records), records[:1]
    trace = {t["request_id"]: t for t in run.trace or []}
    for r in records:
        assert r["tokens_source"] == "estimated" and r["tokens_reason"] == "usage_implausible", r
        assert r["output_tokens"] == r["chunks"]
        assert 23 <= r["chunks"] <= 24  # TGI's last token (a special one) carries no text
        if client == "raw":  # the simulator's truth (SDK requests carry no id of ours on every route)
            assert trace[r["request_id"]]["output_tokens"] == 24
        assert r["input_tokens_source"] == "estimated" and r["input_tokens"] > 0
        assert r["tpot_ns"] is not None
        assert not r["sampling_issues"]  # a 0 the server said is not "stopped short"
    summary = read_summary(report)
    ov = summary["overall"]
    measured = [r for r in records if not r["warmup"]]
    assert ov["estimated_token_requests"] == len(measured)
    assert ov["estimated_token_reasons"]["usage_implausible"]["requests"] == len(measured)
    assert ov["output_tokens"] == sum(r["chunks"] for r in measured) and ov["output_tokens_per_s"] > 0
    said = [ln for ln in proc.stdout.splitlines() if "usage_implausible" in ln]
    assert len(said) == 1, proc.stdout[-2000:]


def test_true_usage_is_believed(runs: Pool) -> None:
    """The same run without the quirk: every count is the server's, nothing said."""
    run = runs.run("true-usage")
    proc, report = run.proc, run.report
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert records and all(r["tokens_source"] == "usage" and r["tokens_reason"] is None for r in records)
    assert read_summary(report)["overall"]["estimated_token_reasons"] == {}
    assert "usage_implausible" not in proc.stdout
    assert "are estimates" not in (report / "report.html").read_text()


def test_zero_usage_is_counted_once_across_processes(runs: Pool) -> None:
    """``--processes 2``: each worker flags its records, the master merges the reasons exactly
    and says it once."""
    run = runs.run("processes")
    proc, report = run.proc, run.report
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len({r["worker"] for r in records}) == 2
    assert all(r["tokens_reason"] == "usage_implausible" and r["input_tokens_source"] == "usage" for r in records)
    ov = read_summary(report)["overall"]
    measured = [r for r in records if not r["warmup"] and r["status"] == "ok"]
    assert ov["estimated_token_reasons"]["usage_implausible"]["requests"] == len(measured)
    assert len([ln for ln in proc.stdout.splitlines() if "usage_implausible" in ln]) == 1
    page = (report / "report.html").read_text()
    assert f"Token counts of {len(measured)} requests are estimates (usage_implausible)" in page
