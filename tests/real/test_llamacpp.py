"""Every locustfile that speaks a dialect llama.cpp's own server serves, raw and SDK mode,
against it (issue 27): the records must match what the server says it did.

Per run: every request succeeds; records == generations the server ran (its log); output
tokens are the server's usage and add up to its ``tokens_predicted_total``; TTFT is after TTFB
and not shorter than the server's own prefill time (``timings.prompt_ms``, where the stream
carries it); the sampling checks stay quiet when the server honours the request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import read_records, read_summary, run_locust
from tests.real.conftest import SLOTS
from tests.real.observe import Window, any_records, launched, run_until

pytestmark = pytest.mark.slow

MAX_TOKENS = 16
KEYS = {"OPENAI_API_KEY": "sk-real-tier-unused", "ANTHROPIC_API_KEY": "sk-ant-real-tier-unused"}

CASES = [
    ("vllm.py", "chat", "raw"),
    ("vllm.py", "chat", "sdk"),
    ("vllm.py", "completions", "raw"),
    ("vllm.py", "completions", "sdk"),
    ("openai.py", "chat", "raw"),
    ("openai.py", "chat", "sdk"),
    ("openai.py", "completions", "raw"),
    ("openai.py", "completions", "sdk"),
    ("claude.py", None, "raw"),
    ("claude.py", None, "sdk"),
]


def prompt_tokens(r: dict) -> int:
    """The whole prompt: Anthropic's ``input_tokens`` leave out the cached part, counted apart."""
    return r["input_tokens"] + (r["server"] or {}).get("cache_read_input_tokens", 0)


def run_against(
    server,
    locustfile: str,
    tmp_path,
    *args: str,
    users: int = 2,
    seconds: int = 6,
    until: Callable[[Path], object] | None = None,
    launches: int | None = None,
):
    """A run of ``users`` users against ``server``: for ``seconds`` (``-t``), or, with ``until``,
    until that holds, or, with ``launches``, until the server has launched that many generations
    (:func:`run_until`: the stop lets the requests in flight end, so the records are the same kind;
    the seconds a fixed ``-t`` spent generating what no assertion reads are saved)."""
    report = tmp_path / "r"
    window = Window.open(server)
    if launches is not None:
        until = launched(server, launches)
    common = (
        "--host",
        server.url,
        "-u",
        str(users),
        "-r",
        str(users),
        "--stop-timeout",
        "60",
        "--llm-model",
        "gemma-3-270m",
        "--llm-preflight",
        "off",  # every generation the server counts is a record
        # each user's first request measured: a loaded CI machine's CPU model takes 2-6 s
        # a request, so a 6-s run may hold only one a user
        "--llm-warmup",
        "0",
        *args,
    )
    if until is None:
        proc = run_locust(locustfile, "-t", f"{seconds}s", *common, report=report, env=KEYS, timeout=180)
    else:
        proc = run_until(locustfile, *common, report=report, until=until, env=KEYS)
    return proc, report, window


@pytest.mark.parametrize(("locustfile", "endpoint", "client"), CASES)
def test_locustfile_against_llamacpp(
    llama, locustfile: str, endpoint: str | None, client: str, tmp_path
) -> None:
    extra = ["--llm-endpoint", endpoint] if endpoint else []
    # two answers are all the checks need: stopped once the server has launched each user's first
    # request (the stop lets both end), so no user sends a second
    proc, report, window = run_against(
        llama,
        locustfile,
        tmp_path,
        "--llm-max-tokens",
        str(MAX_TOKENS),
        "--llm-client",
        client,
        *extra,
        launches=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(report)
    assert len(records) >= 2, proc.stderr[-2000:]  # each user's first request at least
    assert [r["error_message"] for r in records if r["status"] != "ok"] == []
    # records == generations the server ran; our token counts are its counts
    assert window.generations() == len(records)
    assert all(r["tokens_source"] == "usage" and r["input_tokens_source"] == "usage" for r in records)
    assert sum(r["output_tokens"] for r in records) == window.delta("tokens_predicted_total")
    assert sum(prompt_tokens(r) for r in records) == (
        window.delta("prompt_tokens_total") + window.delta("prompt_tokens_cached_total")
    )
    for r in records:
        assert 0 < r["output_tokens"] <= MAX_TOKENS
        assert r["ttfb_ns"] <= r["ttft_ns"] <= r["e2e_ns"], r
        timings = (r["server"] or {}).get("timings")
        if timings:  # the server's own prefill: our TTFT includes it
            assert r["ttft_ns"] / 1e6 >= timings["prompt_ms"] * 0.98, (r["ttft_ns"], timings)
    if locustfile == "vllm.py":  # max_tokens and ignore_eos: exactly the maximum, every time
        assert {r["output_tokens"] for r in records} == {MAX_TOKENS}
        if client == "raw" and endpoint == "chat":
            assert all((r["server"] or {}).get("timings") for r in records)  # llama.cpp's timings are kept
    summary = read_summary(report)
    assert summary["overall"]["sampling_issues"] == {}, summary["overall"]["sampling_issues"]
    assert summary["overall"]["estimated_token_requests"] == 0
    assert "gemma-3-270m" in {r["server_model"] for r in records} | {r["model"] for r in records}


@pytest.mark.parametrize(
    ("locustfile", "client"),
    [("vllm.py", "raw"), ("vllm.py", "sdk"), ("claude.py", "raw"), ("claude.py", "sdk")],
)
def test_prompt_over_the_context_is_http_400_before_any_event(
    llama, locustfile: str, client: str, tmp_path
) -> None:
    """llama.cpp answers an over-long streamed prompt with an immediate HTTP 400 JSON
    (``exceed_context_size_error``), on /v1/messages too: a categorized failure with no TTFT,
    never a crash, each request sent once."""
    prompts = tmp_path / "long.jsonl"
    prompts.write_text('{"prompt": "%s"}\n' % ("word " * 3000))
    proc, report, window = run_against(
        llama,
        locustfile,
        tmp_path,
        "--llm-dataset",
        str(prompts),
        "--llm-max-tokens",
        "8",
        "--llm-client",
        client,
        users=1,
        until=any_records(1),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]  # every request failed
    records = read_records(report)
    assert records and all(r["status"] == "error" and r["error_category"] == "http_400" for r in records)
    assert all(r["ttft_ns"] is None and r["chunks"] == 0 for r in records)
    assert any("context" in (r["error_message"] or "") for r in records), records[0]["error_message"]
    assert window.log_text().count("exceeds the available context size") == len(records)  # each sent once


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_context_filled_mid_generation_ends_with_finish_length(llama, client: str, tmp_path) -> None:
    """A prompt that leaves the slot a few hundred tokens: the server stops when the context is
    full, HTTP 200 and ``finish_reason: length``: a success with the server's (short) count."""
    prompts = tmp_path / "fill.jsonl"
    # 980 tokens with the chat template (measured on /tokenize: 850 for 420 words' pairs, 2 a pair):
    # the slot's 1024 fill after some 44 generated tokens, where 420 pairs took 174 (seconds of decode)
    prompts.write_text('{"prompt": "%s"}\n' % ("lorem ipsum " * 485))
    proc, report, window = run_against(
        llama,
        "vllm.py",
        tmp_path,
        "--llm-dataset",
        str(prompts),
        "--llm-max-tokens",
        "512",
        "--llm-client",
        client,
        users=1,
        launches=1,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    done = [r for r in read_records(report) if r["status"] == "ok"]
    assert done, proc.stderr[-2000:]
    for r in done:
        assert r["finish_reason"] == "length" and r["tokens_source"] == "usage"
        assert 0 < r["output_tokens"] < 512
        assert r["input_tokens"] + r["output_tokens"] <= 1024 + 1
    assert sum(r["output_tokens"] for r in done) <= window.delta("tokens_predicted_total")


@pytest.mark.serial  # the self-check reads the client's loop lag: beside the shards on 2 cores it was 236 ms (CI r76)
def test_more_users_than_slots_queue_in_the_server_and_the_client_is_not_blamed(llama, tmp_path) -> None:
    """Twice as many users as slots: half the requests wait for a slot. llama.cpp sends the
    response head only when a slot takes the request, so the wait shows in TTFB and TTFT alike
    (TTFT - TTFB stays the prefill). The self-check must not call the client saturated:
    a server's queue is not the client's delay. Alone (the serial lane): three shards and
    llama.cpp's threads on 2 cores did delay the client's loop (p99 236 ms), and then the
    self-check rightly said so."""
    users = 2 * SLOTS
    # -t 3 s: every user (spawned within 1 s, no spread) has sent its first request, and the first half
    # is still generating (24 tokens on 4 slots: some 4 s), so no user sends a second; the stop lets
    # all 8 first requests end (--stop-timeout)
    proc, report, window = run_against(
        llama,
        "vllm.py",
        tmp_path,
        "--llm-max-tokens",
        "24",
        "--llm-spawn-spread",
        "off",
        users=users,
        seconds=3,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] == "ok"]
    assert len(records) >= users
    first = sorted(records, key=lambda r: r["start_time"])[:users]  # the first request of every user
    ttft = sorted(r["ttft_ns"] / 1e6 for r in first)
    e2e_fast = sorted(r["e2e_ns"] / 1e6 for r in first)[0]
    # the second half waited for a first-half request to finish: about one whole generation more
    assert ttft[SLOTS] > ttft[SLOTS - 1] + 0.5 * e2e_fast, ttft
    for r in first:
        assert r["ttft_ns"] - r["ttfb_ns"] < 0.5 * (ttft[-1] * 1e6), r  # the queueing is before the head
    text = proc.stdout + proc.stderr
    assert "client saturated" not in text, text[-3000:]
    assert window.generations() == len(read_records(report))


def _decoding_slots(url: str, tokens: int = 3) -> int:
    """Slots of llama.cpp's server that are streaming: processing, ``tokens`` or more decoded."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/slots", timeout=5) as r:
            slots = json.loads(r.read())
    except OSError:
        return 0
    return sum(
        1
        for s in slots
        if s.get("is_processing") and any(t.get("n_decoded", 0) >= tokens for t in s.get("next_token") or [])
    )


KILL_CLIENTS = ("raw", "sdk")
KILL_USERS = 2  # a run's users; the two runs share one server, a slot a user


@pytest.fixture(scope="module")
def killed_mid_stream(real_logs, tmp_path_factory) -> dict[str, dict]:
    """One llama.cpp server of its own, SIGKILLed while a raw run and an SDK run (two users each, at
    the same time, a slot a user) stream from it: each run's records and exit, judged per client by
    the test below. Nothing here compares a run with the server's counters, so the two runs sharing
    the server (and its one kill) leave each run's records what a run alone would make."""
    import subprocess
    import time

    from tests.helpers import start_locust
    from tests.real.servers import start_llama

    tmp = tmp_path_factory.mktemp("killed")
    server = start_llama(real_logs, slots=KILL_USERS * len(KILL_CLIENTS), ctx_per_slot=512)
    runs: dict[str, tuple[subprocess.Popen, Path, Path]] = {}
    try:
        for client in KILL_CLIENTS:
            report, log = tmp / client, tmp / f"{client}.log"
            # -t: the kill comes 2-4 s into the run (every stream decoding); a late one (a loaded machine)
            # still finds the 300-token streams going, through the stop (--stop-timeout)
            args = [
                "--headless",
                "--only-summary",
                "--host",
                server.url,
                "-u",
                str(KILL_USERS),
                "-r",
                str(KILL_USERS),
                "-t",
                "6s",
                "--stop-timeout",
                "30",
                "--llm-max-tokens",
                "300",
                "--llm-warmup",
                "0",
                "--llm-client",
                client,
                "--llm-report",
                str(report),
                "--llm-preflight",
                "off",
            ]  # the first slot launched is a user's stream
            runs[client] = (start_locust(args, log, loglevel="WARNING"), report, log)
        # every user's stream producing tokens (8 or more), as the server's /slots says: on a busy machine the
        # second request or a prompt's evaluation can take seconds (a fixed 2 s sleep killed one before its first)
        streams = KILL_USERS * len(KILL_CLIENTS)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _decoding_slots(server.url, tokens=8) < streams:
            time.sleep(0.1)
        all_decoding = time.monotonic() < deadline
        time.sleep(0.3)  # the chunks have reached the users, not only the socket
        killed_at = time.time()
        server.kill()
        for proc, _, _ in runs.values():
            proc.wait(120)
    finally:
        for proc, _, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.stop()
    return {
        client: {
            "all_decoding": all_decoding,
            "killed_at": killed_at,
            "returncode": proc.returncode,
            "records": read_records(report),
            "output": log.read_text(errors="replace"),  # stdout and stderr
        }
        for client, (proc, report, log) in runs.items()
    }


@pytest.mark.parametrize("client", KILL_CLIENTS)
def test_server_killed_mid_stream_is_connection_reset_then_connect_error(
    killed_mid_stream, client: str
) -> None:
    """SIGKILL of the server while users stream: the streams in flight end as
    ``connection_reset`` (kept, never resent), the requests after it fail fast as
    ``connect_error``; nothing crashes and the run ends on its own."""
    run = killed_mid_stream[client]
    killed_at, records, err = run["killed_at"], run["records"], run["output"]
    assert run["all_decoding"], "llama.cpp's /slots never showed every user's stream decoding within 60 s"
    seen = [
        {k: r[k] for k in ("status", "error_category", "ttft_ns", "chunks", "error_message", "start_time")}
        for r in records
    ]
    # the streams in flight at the kill (started before it, not finished): each a connection_reset,
    # mid-stream ones among them; a stream that ended just before the kill is ok and its user's
    # next request, sent before or after the kill, is a reset or a connect_error
    inflight = [r for r in records if r["start_time"] < killed_at and r["status"] != "ok"]
    assert inflight and all(r["error_category"] == "connection_reset" for r in inflight), seen
    assert any(r["ttft_ns"] is not None and r["chunks"] > 0 for r in inflight), seen  # mid-stream
    assert all(
        r["start_time"] + r["e2e_ns"] / 1e9 < killed_at + 0.05 for r in records if r["status"] == "ok"
    ), seen
    later = [r["error_category"] for r in records if r["start_time"] >= killed_at]
    assert set(later) <= {"connection_reset", "connect_error"}, seen
    assert run["returncode"] == 1, err[-2000:]
    assert "Traceback" not in err, err[-3000:]


def test_a_server_that_cannot_start_fails_loudly_with_its_log(tmp_path) -> None:
    """The tier never skips: a server that dies before it is ready is a RuntimeError that
    quotes its log (what the fixtures raise, failing every test that needs it)."""
    import sys

    from tests.real.servers import ServerProcess, _spawn, wait_ready

    log = tmp_path / "dead.log"
    code = "import sys; print('model file not found', flush=True); sys.exit(3)"
    dead = ServerProcess(
        "llama.cpp", _spawn("llama.cpp", [sys.executable, "-c", code], log), "http://127.0.0.1:9", log
    )
    with pytest.raises(RuntimeError, match=r"(?s)exited with 3 before it was ready.*model file not found"):
        wait_ready(dead, "/health", timeout=20)


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_the_preflight_passes_on_a_real_server_with_one_generation(llama, client: str, tmp_path) -> None:
    """Issue 29: the preflight's one-token request goes through the run's own path (raw or SDK)
    to llama.cpp and passes; the server runs exactly one generation more than the records."""
    report = tmp_path / "r"
    window = Window.open(llama)
    # stopped once the server has launched the preflight's generation and the user's first
    proc = run_until(
        "vllm.py",
        "--host",
        llama.url,
        "-u",
        "1",
        "-r",
        "1",
        "--stop-timeout",
        "60",
        "--llm-model",
        "gemma-3-270m",
        "--llm-max-tokens",
        "8",
        "--llm-client",
        client,
        "--llm-warmup",
        "0",
        report=report,
        until=launched(llama, 2),
        env=KEYS,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "locust-llm: the preflight" not in proc.stderr
    records = read_records(report)
    assert records and all(r["status"] == "ok" for r in records)
    assert window.generations() == len(records) + 1


def test_the_preflight_stops_a_locustfile_the_real_server_does_not_speak(llama, tmp_path) -> None:
    """Issue 29: TGI's route on llama.cpp's server is a 404: one line naming the wrong
    locustfile, exit 1 before any load (no generation)."""
    window = Window.open(llama)
    proc = run_locust("tgi.py", "--host", llama.url, "-u", "1", "-r", "1", "-t", "20s", timeout=60)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "locust-llm" in ln]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(lines) == 1 and "wrong locustfile for this server" in lines[0] and "tgi.py" in lines[0], lines
    assert window.generations() == 0
