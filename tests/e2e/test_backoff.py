"""Issue 10 items 3 and 4: a misconfigured run backs off instead of flooding, says so, and its
verdict names the top failure; Locust's failure table has one row per kind of failure. Backing off
is checked in raw and SDK mode (``--llm-client sdk``: the openai SDK's connect errors and 401s)."""

from __future__ import annotations

import pytest

from tests.helpers import free_port, get_json, read_records, read_summary, run_locust

pytestmark = pytest.mark.slow


CLIENTS = ["raw", "sdk"]


def run_dead(tmp_path, client: str, *extra: str):
    report = tmp_path / ("r" + "".join(extra).replace("-", ""))
    proc = run_locust("vllm.py", "--host", f"http://127.0.0.1:{free_port()}", "-u", "2", "-r", "2", "-t", "4s",
                      "--llm-model", "m", "--llm-prometheus-port", "0", "--llm-client", client, *extra,
                      "--llm-preflight", "off",  # the load itself meets the dead host
                      report=report, timeout=90)
    assert {r["client"] for r in read_records(report)} == {client}
    return proc, report


@pytest.mark.parametrize("client", CLIENTS)
def test_a_dead_host_is_not_flooded_and_the_verdict_says_why(tmp_path, client) -> None:
    on, on_report = run_dead(tmp_path, client)
    off, off_report = run_dead(tmp_path, client, "--llm-backoff", "off")
    n_on, n_off = len(read_records(on_report)), len(read_records(off_report))
    # two users, 4 s (SDK 6 s): three quick failures each, then 0.5 + 1 + 2 s of waits: at most ~6 each
    assert 6 <= n_on <= 16, n_on
    assert n_off > 5 * n_on, (n_on, n_off)
    s = read_summary(on_report)
    assert s["backoff"]["enabled"] and s["backoff"]["waits"] >= 2 and s["backoff"]["wait_s"] >= 1.0
    assert s["self_check"]["failing"] and s["self_check"]["top_failure"] == "connect_error"
    assert "all requests failed" in on.stdout and "top category connect_error" in on.stdout
    assert "client healthy" not in on.stdout.split("all requests failed")[0]
    assert "backoff: users waited" in on.stdout
    off_s = read_summary(off_report)
    assert not off_s["backoff"]["enabled"] and off_s["backoff"]["waits"] == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_identical_401s_back_off(sim_factory, tmp_path, client) -> None:
    sim = sim_factory("--require-api-key", "the-right-key", "--output-tokens", "5")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "4s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--llm-client", client, "--llm-preflight", "off",
                      report=report, timeout=90)
    served = get_json(sim.url + "/_sim/stats")
    records = read_records(report)
    assert {r["client"] for r in records} == {client}
    assert len(records) <= 16, served
    assert read_summary(report)["self_check"]["top_failure"] == "http_401"
    assert "top category http_401" in proc.stdout


def test_malformed_streams_are_one_row_in_locusts_failure_table(sim_factory, tmp_path) -> None:
    sim = sim_factory("--fault-rate", "1", "--fault-kinds", "malformed", "--output-tokens", "5", "--seed", "5")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--loglevel", "INFO", "--llm-preflight", "off",
                      report=report, timeout=90)  # INFO: the error report
    failures = [r for r in read_records(report) if r["error_category"] == "malformed_stream"]
    assert len(failures) >= 5
    rows = [line for line in (proc.stdout + proc.stderr).splitlines() if "POST /v1/chat/completions: malformed_stream" in line]
    assert len(rows) == 1, rows  # Locust's error report: one row however many requests failed this way
    assert "'…'" in rows[0]
    # the full message, with its payload, is kept in requests.jsonl
    assert all("'…'" not in r["error_message"] and "chatcmpl-" in r["error_message"] for r in failures)


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


def run_failing(sim_factory, tmp_path, kind: str, sim_args: list[str], client: str, *extra: str):
    sim = sim_factory("--fault-rate", "1", "--fault-kinds", kind, *sim_args, "--output-tokens", "5", "--seed", "7")
    report = tmp_path / ("r" + "".join(extra).replace("-", ""))
    # SDK users start 1-3 s later on a busy machine (the SDK's import): 2 s more to reach their waits
    seconds = 6 if client == "sdk" else 4
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", f"{seconds}s", "--llm-model", "m",
                      "--llm-prometheus-port", "0", "--llm-client", client, "--llm-preflight", "off", *extra,
                      report=report, timeout=90)
    return proc, report, get_json(sim.url + "/_sim/stats")["started"]


@pytest.mark.parametrize(("kind", "sim_args", "category", "client"), REPEATED_CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in REPEATED_CASES])
def test_identical_failures_back_off(sim_factory, tmp_path, kind, sim_args, category, client) -> None:
    proc, report, started = run_failing(sim_factory, tmp_path, kind, sim_args, client)
    records = read_records(report)
    assert {r["client"] for r in records} == {client}
    # every request failed this way (one may be in flight at the stop: interrupted)
    assert {r["error_category"] for r in records if r["status"] != "interrupted"} == {category}, records[:2]
    # two users, 4 s (SDK 6 s): three quick failures each, then 0.5 + 1 + 2 s of waits: at most ~6 each
    assert 4 <= started <= 16, started
    assert len(records) == started
    s = read_summary(report)
    assert s["backoff"]["waits"] >= 4 and s["backoff"]["wait_s"] >= 3.0, s["backoff"]
    assert "backoff: users waited" in proc.stdout
    if client == "raw":  # the switch: --llm-backoff off is the old behaviour, a flood
        _, off_report, off_started = run_failing(sim_factory, tmp_path, kind, sim_args, client, "--llm-backoff", "off")
        assert off_started > 5 * started, (started, off_started)
        assert read_summary(off_report)["backoff"]["waits"] == 0
