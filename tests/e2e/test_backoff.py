"""Issue 10 items 3 and 4: a misconfigured run backs off instead of flooding, says so, and its
verdict names the top failure; Locust's failure table has one row per kind of failure. Backing off
is checked in raw and SDK mode (``--llm-client sdk``: the openai SDK's connect errors and 401s).

Each run (a client mode, a fault, backing off on or off) is one scenario of the module's pool
(tests/e2e/locust_pool.py), run once, a few at a time, each against a simulator of its own: a test
reads that simulator's counts as its run's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import free_port, get_json, read_records, read_summary

pytestmark = pytest.mark.slow


CLIENTS = ["raw", "sdk"]
COMMON = ("-u", "2", "-r", "2", "--llm-model", "m", "--llm-prometheus-port", "0")

# Issue 33 item 5: a server that fails every request the same way (llama.cpp's empty 200 for an
# over-long streamed prompt, an in-stream error, a stream cut at one point, the same 5xx) is not
# flooded either.
# (fault kind, the simulator's extra arguments, the category the records carry)
REPEATED = [
    ("empty_200", [], "empty_response"),
    ("midstream_error", [], "server_error"),
    ("truncate", ["--fault-after", "2"], "stream_truncated"),  # always cut after chunk 2: the same point
    ("http_503", [], "http_503"),  # the same 5xx, the same message (llama.cpp's 503 while it loads)
]
REPEATED_CASES = [(*case, client) for case in REPEATED for client in CLIENTS]


def _dead_host() -> list[str]:
    return ["--host", f"http://127.0.0.1:{free_port()}"]  # nothing listens: taken when the run starts


def _dead(client: str, backoff: str) -> str:
    return f"dead-{client}-backoff_{backoff}"


def _failing(kind: str, client: str, backoff: str) -> str:
    return f"{kind}-{client}-backoff_{backoff}"


def _off(backoff: str) -> list[str]:
    return ["--llm-backoff", "off"] if backoff == "off" else []


# The raw floods (--llm-backoff off) of a dead host, an empty 200 and a 503 answer at once: thousands
# of requests in 2 s, still more than 5 times what backing off sends in 4 s (at most 16). An in-stream
# error and a cut stream come at the simulator's pace (~90 in 4 s), the SDK's flood of a dead host
# (hundreds) after its users' late start: those keep 4 s.
FLOOD_S = {"dead-raw": 2, "dead-sdk": 4, "empty_200": 2, "http_503": 2, "midstream_error": 4, "truncate": 4}


def _scenarios() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    # each its own simulator (the pool shares one between equal argument lists): a distinct trace limit
    n = iter(range(2000, 3000))
    for client in CLIENTS:
        for backoff in ("on", "off"):
            seconds = FLOOD_S[f"dead-{client}"] if backoff == "off" else 4
            args = (_dead_host, *COMMON, "-t", f"{seconds}s", "--llm-client", client, *_off(backoff))
            # --llm-preflight off: the load itself meets the dead host
            out[_dead(client, backoff)] = Scenario("vllm.py", (*args, "--llm-preflight", "off"), timeout=90)
        sim = ("--require-api-key", "the-right-key", "--output-tokens", "5", "--trace-limit", str(next(n)))
        args = (*COMMON, "-t", "4s", "--llm-client", client, "--llm-preflight", "off")
        out[f"401-{client}"] = Scenario("vllm.py", args, sim=sim, timeout=90)
    sim = ("--fault-rate", "1", "--fault-kinds", "malformed", "--output-tokens", "5", "--seed", "5")
    args = (*COMMON, "-t", "3s", "--loglevel", "INFO", "--llm-preflight", "off")  # INFO: the error report
    out["malformed"] = Scenario("vllm.py", args, sim=sim, timeout=90)
    for kind, sim_args, _, client in REPEATED_CASES:
        for backoff in ("on", "off") if client == "raw" else ("on",):
            # SDK users start 1-3 s later on a busy machine (the SDK's import): 2 s more to reach their waits
            seconds = FLOOD_S[kind] if backoff == "off" else 6 if client == "sdk" else 4
            args = (
                *COMMON,
                "-t",
                f"{seconds}s",
                "--llm-client",
                client,
                "--llm-preflight",
                "off",
                *_off(backoff),
            )
            sim = (
                "--fault-rate",
                "1",
                "--fault-kinds",
                kind,
                *sim_args,
                "--output-tokens",
                "5",
                "--seed",
                "7",
            )
            out[_failing(kind, client, backoff)] = Scenario(
                "vllm.py", args, sim=(*sim, "--trace-limit", str(next(n))), timeout=90
            )
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_a_dead_host_is_not_flooded_and_the_verdict_says_why": lambda: [
            _dead(p["client"], "on"),
            _dead(p["client"], "off"),
        ],
        "test_identical_401s_back_off": lambda: [f"401-{p['client']}"],
        "test_malformed_streams_are_one_row_in_locusts_failure_table": lambda: ["malformed"],
        "test_identical_failures_back_off": lambda: [
            _failing(p["kind"], p["client"], b) for b in (("on", "off") if p["client"] == "raw" else ("on",))
        ],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every scenario of the module, each run once (when a test first needs it, or ahead)."""
    yield from pool_in(request, tmp_path_factory.mktemp("backoff"), _scenarios(), _needs, parallel=3)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


def _started(run: Run) -> int:
    assert run.sim_url is not None
    return get_json(run.sim_url + "/_sim/stats")["started"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_dead_host_is_not_flooded_and_the_verdict_says_why(runs, client) -> None:
    on, off = runs.run(_dead(client, "on")), runs.run(_dead(client, "off"))
    for run in (on, off):
        assert {r["client"] for r in read_records(run.report)} == {client}, _tail(run)
    n_on, n_off = len(read_records(on.report)), len(read_records(off.report))
    # two users, 4 s (SDK 6 s): three quick failures each, then 0.5 + 1 + 2 s of waits: at most ~6 each
    assert 6 <= n_on <= 16, (n_on, _tail(on))
    assert n_off > 5 * n_on, (n_on, n_off)
    s = read_summary(on.report)
    assert s["backoff"]["enabled"] and s["backoff"]["waits"] >= 2 and s["backoff"]["wait_s"] >= 1.0
    assert s["self_check"]["failing"] and s["self_check"]["top_failure"] == "connect_error"
    assert "all requests failed" in on.proc.stdout and "top category connect_error" in on.proc.stdout
    assert "client healthy" not in on.proc.stdout.split("all requests failed")[0]
    assert "backoff: users waited" in on.proc.stdout
    off_s = read_summary(off.report)
    assert not off_s["backoff"]["enabled"] and off_s["backoff"]["waits"] == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_identical_401s_back_off(runs, client) -> None:
    run = runs.run(f"401-{client}")
    assert run.sim_url is not None
    served = get_json(run.sim_url + "/_sim/stats")
    records = read_records(run.report)
    assert {r["client"] for r in records} == {client}, _tail(run)
    assert len(records) <= 16, served
    assert read_summary(run.report)["self_check"]["top_failure"] == "http_401", _tail(run)
    assert "top category http_401" in run.proc.stdout


def test_malformed_streams_are_one_row_in_locusts_failure_table(runs) -> None:
    run = runs.run("malformed")
    proc = run.proc
    failures = [r for r in read_records(run.report) if r["error_category"] == "malformed_stream"]
    assert len(failures) >= 5, _tail(run)
    rows = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "POST /v1/chat/completions: malformed_stream" in line
    ]
    assert len(rows) == 1, rows  # Locust's error report: one row however many requests failed this way
    assert "'…'" in rows[0]
    # the full message, with its payload, is kept in requests.jsonl
    assert all("'…'" not in r["error_message"] and "chatcmpl-" in r["error_message"] for r in failures)


@pytest.mark.parametrize(
    ("kind", "sim_args", "category", "client"), REPEATED_CASES, ids=[f"{c[0]}-{c[3]}" for c in REPEATED_CASES]
)
def test_identical_failures_back_off(runs, kind, sim_args, category, client) -> None:
    run = runs.run(_failing(kind, client, "on"))
    started = _started(run)
    records = read_records(run.report)
    assert {r["client"] for r in records} == {client}, _tail(run)
    # every request failed this way (one may be in flight at the stop: interrupted)
    assert {r["error_category"] for r in records if r["status"] != "interrupted"} == {category}, records[:2]
    # two users, 4 s (SDK 6 s): three quick failures each, then 0.5 + 1 + 2 s of waits: at most ~6 each
    assert 4 <= started <= 16, started
    assert len(records) == started
    s = read_summary(run.report)
    assert s["backoff"]["waits"] >= 4 and s["backoff"]["wait_s"] >= 3.0, s["backoff"]
    assert "backoff: users waited" in run.proc.stdout
    if client == "raw":  # the switch: --llm-backoff off is the old behaviour, a flood
        off = runs.run(_failing(kind, client, "off"))
        off_started = _started(off)
        assert off_started > 5 * started, (started, off_started)
        assert read_summary(off.report)["backoff"]["waits"] == 0
