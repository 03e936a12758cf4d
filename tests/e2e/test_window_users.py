"""Issue 53 item 1: the card's own command does not run the load it names.

``locust -f locustfiles/vllm.py --headless -u 64 -t 30s`` ramps at Locust's default ``-r 1`` and
reached 30 users, while the report's plan said "64 users" and neither the console nor
summary.json said what ran in the measured window. A run that never reaches its target says the
users that ran (summary.json ``window.users``, the console, report.html, ``--llm-export
vllm-bench``'s ``max_concurrency``) and one WARNING line; ``--llm-warmup ramp`` measures only at
the plateau, once every user runs.

Each run is one scenario of the module's pool (tests/e2e/locust_pool.py), against the embedded
simulator, as the README's command runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Scenario, pool_in
from tests.helpers import read_summary

pytestmark = pytest.mark.slow

COMMON = ("--llm-output-tokens", "8", "--llm-prometheus-port", "0")


def _scenarios(base: Path) -> dict[str, Scenario]:
    return {
        # Locust starts 1 user a second: 8 users need 8 s, the run has 5
        "short": Scenario("vllm.py", ("-u", "8", "-r", "1", "-t", "5s", "--llm-html", "on", "--llm-export",
                                      "vllm-bench", str(base / "short-bench.json"), *COMMON), timeout=90),
        # 2 users at once, 4 after 1 s; the requests started before then are warm-up
        "plateau": Scenario("vllm.py", ("-u", "4", "-r", "2", "-t", "6s", "--llm-warmup", "ramp", *COMMON),
                            timeout=90),
    }


def _needs(item: Any) -> list[str]:
    return {
        "test_a_run_that_never_reached_its_target_says_the_users_that_ran": ["short"],
        "test_warmup_ramp_measures_only_at_the_plateau": ["plateau"],
    }[item.originalname]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    base = tmp_path_factory.mktemp("window-users")
    yield from pool_in(request, base, _scenarios(base), _needs, parallel=2)


def _users_text(users: dict[str, Any]) -> str:
    lo, hi = users["min"], users["max"]
    return f"{hi} users" if lo == hi else f"{lo}-{hi} users"


def test_a_run_that_never_reached_its_target_says_the_users_that_ran(runs) -> None:
    run = runs.run("short")
    assert run.proc.returncode == 0, run.tail()
    summary = read_summary(run.report)
    window = summary["window"]
    users = window["users"]
    assert users["target"] == 8 and users["reached"] is False and users["spawn_rate"] == 1, users
    assert 1 <= users["min"] <= users["max"] < 8, users
    assert users["ramp_s"] is None and users["ramp_share"] == 1.0, users
    assert {k: window["warmup"][k] for k in ("requests_per_user", "seconds", "ramp")} == {
        "requests_per_user": 1, "seconds": 0.0, "ramp": False}  # the default kept
    assert summary["setup"]["load_plan"]["users"] == 8  # what was asked stays said

    out = run.proc.stdout
    assert f"measured window: {window['measured_s']:.1f} s at {_users_text(users)}; warm-up excluded: " in out, run.tail()
    warning = [ln for ln in out.splitlines() if ln.startswith("WARNING: the load never reached its target")]
    assert len(warning) == 1, run.tail()
    assert warning[0].startswith(f"WARNING: the load never reached its target: {users['max']} of 8 users in the "
                                 "measured window (-r 1 needs 8 s; the run had "), warning
    assert warning[0].endswith("): the whole window was ramp; raise -r or -t"), warning

    page = (run.report / "report.html").read_text()
    assert (f"(measured at {_users_text(users)}; the target of 8 users was never reached (raise -r or -t))"
            in page)
    bench = json.loads((run.report.parent.parent / "short-bench.json").read_text())
    assert bench["max_concurrency"] == users["max"]


def test_warmup_ramp_measures_only_at_the_plateau(runs) -> None:
    run = runs.run("plateau")
    assert run.proc.returncode == 0, run.tail()
    summary = read_summary(run.report)
    window = summary["window"]
    users = window["users"]
    assert (users["min"], users["max"], users["target"], users["reached"]) == (4, 4, 4, True), users
    assert users["ramp_s"] is not None and users["ramp_share"] == 0.0, users
    assert {k: window["warmup"][k] for k in ("requests_per_user", "seconds", "ramp")} == {
        "requests_per_user": 0, "seconds": 0.0, "ramp": True}

    records = [json.loads(ln) for ln in (run.report / "requests.jsonl").read_text().splitlines() if ln.strip()]
    ramp_end = window["test_start"] + users["ramp_s"]
    warm = [r for r in records if r["warmup"] and r["status"] not in ("interrupted", "cancelled")]
    measured = [r for r in records if not r["warmup"] and r["status"] == "ok"]
    assert warm and summary["overall"]["excluded_warmup"] == len(warm), run.tail()  # the first 2 users' ramp
    assert measured and len(measured) == summary["overall"]["successes"]
    assert min(r["start_time"] for r in measured) >= ramp_end - 0.01  # the clocks are one process's

    out = run.proc.stdout
    assert (f"measured window: {window['measured_s']:.1f} s at 4 users; warm-up excluded: {len(warm)} requests "
            "(started before the spawn completed)") in out, run.tail()
    assert "never reached its target" not in out and "note: the ramp" not in out
