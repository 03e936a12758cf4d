"""The console table's last word (issue 28 item 4): tokens per request exact across a merge,
the total token throughput, percentiles from few samples marked, the table held until Locust's
own final table has printed."""

from __future__ import annotations

import json

from llm_users.health.verdict import first_answer_ms
from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs import console
from llm_users.outputs.console import (
    MIN_PERCENTILE_SAMPLES,
    few_samples,
    kinds_line,
    summary_table,
    token_line,
    tools_line,
)
from llm_users.outputs.final import FinalData
from tests.metrics.records import stats


def _stats(n: int, *, first: int = 0, out: int = 64, inp: int = 100, start: float = 0.0) -> StatsByName:
    s = StatsByName()
    for i in range(first, first + n):
        s.add(RequestRecord(f"r{i}", "/v1/chat/completions", "vllm", "m", start_time=start + i,
                            ttft_ns=40_000_000 + i, e2e_ns=1_000_000_000, itl_ns=[5_000_000] * 10,
                            input_tokens=inp + i % 3, output_tokens=out, tokens_source="usage"))
    return s


def test_summary_keys_tokens_per_request_and_total_throughput() -> None:
    ov = _stats(30).summary()["overall"]
    assert ov["output_tokens_per_request"] == {"p50": 64, "mean": 64.0, "count": 30}
    # input 100, 101, 102 repeating: ten each
    assert ov["input_tokens_per_request"] == {"p50": 101, "mean": 101.0, "count": 30}
    # 30 requests from t=0 to t=30: (30*64 + 30*101) tokens in 30 s
    assert abs(ov["total_tokens_per_s"] - 165.0) < 1e-9
    assert abs(ov["output_tokens_per_s"] - 64.0) < 1e-9


def test_summary_keys_merge_exactly_across_workers() -> None:
    one = _stats(40)
    w1, w2 = _stats(25, out=10), _stats(15, first=25, out=300)
    master = StatsByName()
    for w in (w1, w2):
        master.merge_wire(json.loads(json.dumps(w.to_wire())))
    ov, single = master.summary()["overall"], one.summary()["overall"]
    assert ov["input_tokens_per_request"] == single["input_tokens_per_request"]
    assert ov["output_tokens_per_request"] == {"p50": 10, "mean": (25 * 10 + 15 * 300) / 40, "count": 40}


def test_failed_and_warmup_requests_are_not_tokens_per_request() -> None:
    s = _stats(5)
    s.add(RequestRecord("w", "/v1/chat/completions", "vllm", "m", start_time=1, output_tokens=999, warmup=True))
    s.add(RequestRecord("f", "/v1/chat/completions", "vllm", "m", start_time=1, output_tokens=999, status="error",
                        error_category="server_error"))
    assert s.summary()["overall"]["output_tokens_per_request"] == {"p50": 64, "mean": 64.0, "count": 5}


def test_percentiles_from_few_samples_are_marked_with_a_legend() -> None:
    few = summary_table(_stats(MIN_PERCENTILE_SAMPLES - 1).summary())
    row = next(ln for ln in few.splitlines() if ln.startswith("Aggregated"))
    cells = row.split()
    assert cells[3:6] == ["40.0*", "40.0*", "40.0*"]  # TTFT p50, p90, p99 from 19 requests
    assert cells[6:8] == ["5.00", "5.00"]  # ITL from 190 gaps: not marked
    assert not cells[1].endswith("*") and not cells[-1].endswith("*")  # counts and rates never
    assert f"* fewer than {MIN_PERCENTILE_SAMPLES} samples" in few
    enough = summary_table(_stats(MIN_PERCENTILE_SAMPLES).summary())
    assert "*" not in enough


def test_few_samples_reads_the_metric_count() -> None:
    stats = {"ttft": {"count": 4, "p99": 1.0}, "e2e": {"count": 0, "p99": None}, "requests": 4}
    assert few_samples(stats, ("ttft", "p99")) and few_samples(stats, ("ttft", "p50"))
    assert not few_samples(stats, ("e2e", "p99"))  # nothing measured: printed as "-"
    assert not few_samples(stats, ("requests",))


def test_token_line_in_the_table() -> None:
    text = summary_table(_stats(30).summary())
    line = next(ln for ln in text.splitlines() if ln.startswith("tokens per request"))
    assert line == ("tokens per request: input p50 101, mean 101.0; output p50 64, mean 64.0; "
                    "throughput 64.0 output tok/s, 165 total (input+output) tok/s")
    assert token_line(StatsByName().summary()["overall"]) is None  # nothing succeeded: no line


def test_the_table_is_held_until_quit(capsys) -> None:
    table = console.ConsoleTable()
    final = FinalData(_stats(3).summary(), [], StatsByName())
    table.write(final, None)
    assert "LLM summary" in capsys.readouterr().out  # not held: printed at once (web UI)
    table.hold = True
    table.write(final, None)
    assert capsys.readouterr().out == ""
    table.flush(exit_code=0)
    assert capsys.readouterr().out.startswith("LLM summary")
    table.flush()
    assert capsys.readouterr().out == ""  # once


def test_hold_until_quit_prints_on_locusts_quit_event(capsys) -> None:
    from locust.event import Events

    events = Events()
    final = FinalData(_stats(3).summary(), [], StatsByName())
    try:
        console.hold_until_quit(events)
        console.CONSOLE.write(final, None)
        console.CONSOLE.say("locust-llm: report written to x/")
        assert capsys.readouterr().out == ""
        events.quit.fire(exit_code=0)  # Locust fires it right after its own final table
        out = capsys.readouterr().out
        assert out.startswith("LLM summary") and out.rstrip().endswith("report written to x/")
        console.CONSOLE.say("late")  # after quit: at once
        assert capsys.readouterr().out == "late\n"
    finally:
        console.CONSOLE.hold = False
        console.CONSOLE.pending.clear()


def test_a_connection_per_request_is_said_with_its_cost() -> None:
    """More than half the measured requests opened their own connection (the openai SDK's habit):
    the console says how many and what the connect cost, which no latency figure holds."""
    s = StatsByName()
    for i in range(4):
        s.add(RequestRecord(f"r{i}", "/v1/chat/completions", "vllm", "m", start_time=i, ttft_ns=40_000_000,
                            e2e_ns=1_000_000_000, itl_ns=[5_000_000], connect_ns=500_000 if i else 2_000_000))
    line = console.connect_line(s.total.summary())
    assert line is not None and "4 of 4 requests opened their own connection" in line, line
    assert "p50 0.50 ms" in line and "p99 2.00 ms" in line, line
    s.add(RequestRecord("r9", "/v1/chat/completions", "vllm", "m", start_time=9, ttft_ns=40_000_000,
                        e2e_ns=1_000_000_000, itl_ns=[5_000_000]))
    for j in range(4):  # reused connections: 4 of 9, not more than half
        s.add(RequestRecord(f"k{j}", "/v1/chat/completions", "vllm", "m", start_time=10 + j, ttft_ns=40_000_000,
                            e2e_ns=1_000_000_000, itl_ns=[5_000_000]))
    assert console.connect_line(s.total.summary()) is None


def test_requests_never_answered_are_named_apart_from_streams_cut_mid_answer() -> None:
    """Issue 54 item 3: at the stop, a request with no first byte yet is counted with its wait,
    exactly across a merge; one that had its first byte is a stream cut mid-answer."""
    workers = [StatsByName(), StatsByName()]
    for i, wait_ms in enumerate((1_500, 12_000, 800)):  # each sent and never answered until the stop
        workers[i % 2].add(RequestRecord(f"h{i}", "/v1/chat/completions", "vllm", "m", start_time=i,
                                         status="interrupted", e2e_ns=wait_ms * 1_000_000))
    workers[0].add(RequestRecord("c", "/v1/chat/completions", "vllm", "m", start_time=5, status="interrupted",
                                 ttfb_ns=30_000_000, ttft_ns=40_000_000, e2e_ns=2_000_000_000))
    merged = StatsByName()
    for w in workers:
        merged.merge_wire(w.to_wire())
    ov = merged.total.summary()
    assert ov["interrupted"] == 4 and ov["waiting_first_byte"]["count"] == 3
    assert ov["waiting_first_byte"]["max"] == 12_000 and ov["requests"] == 0 and ov["failures"] == 0
    lines = console.interrupted_lines(ov["interrupted"], ov["waiting_first_byte"])
    assert lines[0].startswith("interrupted: 4 requests were in flight when the run stopped (1 cut mid-answer, "
                               "3 still waiting for a first byte;")
    assert lines[1].startswith("WARNING: 3 requests never got a first byte: the server accepted them and had not "
                               "answered when the run stopped (waited p50 1.5 s, max 12.0 s)")
    assert console.interrupted_lines(1, {"count": 0}) == [
        "interrupted: 1 requests were in flight when the run stopped (1 cut mid-answer; kept in requests.jsonl "
        "with their TTFB/TTFT so far; not in these statistics)"]


def test_a_lost_worker_is_said_with_what_it_took_and_the_exit_code() -> None:
    lost = {"worker": "w1", "window_at_risk_s": 1.74, "in_flight_at_last_report": 3}
    assert console.lost_worker_lines({"lost": [lost], "loss_allowed": False}) == [
        "WARNING: worker w1 was lost: 3 requests it had in flight at its last report have no record; up to 1.7 s "
        "of its data may be missing",
        "exit 1: a worker was lost, so these figures miss part of the load (--llm-allow-worker-loss accepts such "
        "a run)"]
    assert console.lost_worker_lines({"lost": [{**lost, "in_flight_at_last_report": 0}], "loss_allowed": True}) == [
        "WARNING: worker w1 was lost: up to 1.7 s of its data may be missing"]
    assert console.lost_worker_lines({"lost": []}) == []


def test_requests_jsonl_is_named_only_when_it_is_written() -> None:
    """Issue 53 item 10: "kept in requests.jsonl" was printed by a run without --llm-report."""
    assert "requests.jsonl" not in console.interrupted_lines(2, {}, kept=False)[0]
    assert "kept in requests.jsonl" in console.interrupted_lines(2, {}, kept=True)[0]


def test_console_line() -> None:
    assert tools_line({"tool_calls": 0, "structured_valid": 0, "structured_invalid": 0}) is None
    assert tools_line({"tool_calls": 3, "successes": 4}) == "answers: 3 of 4 answers were tool calls"
    assert tools_line({"structured_valid": 3, "structured_invalid": 1}) == \
        "answers: structured output: 3 valid, 1 invalid (75.0% valid)"


def test_console_line_and_self_check_reference() -> None:
    summary = stats().summary()
    ov = summary["overall"]
    line = kinds_line(ov)
    assert line is not None and line.startswith("embeddings/rerank (embed 101, rerank 10 requests): ")
    assert f"{ov['inputs_per_s']:.1f} inputs/s" in line and "E2E p50" in line
    assert line in summary_table(summary)
    assert first_answer_ms(ov) == (ov["e2e"]["p50"], ov["e2e"]["p99"])  # no TTFT: judged against E2E
    chat = {"ttft": {"p50": 5.0, "p99": 9.0}, "e2e": {"p50": 50.0}, "request_kinds": {}}
    assert first_answer_ms(chat) == (5.0, 9.0)


def test_the_measured_window_says_its_users_and_a_target_never_reached() -> None:
    """Issue 53 item 1: `-u 8 -r 1 -t 5s` printed no figure for the users that ran."""
    summary = _stats(30).summary()
    users = {"min": 3, "max": 5, "target": 8, "reached": False, "ramp_s": None, "ramp_share": 1.0, "spawn_rate": 1}
    summary["window"] = {"test_start": 0.0, "test_stop": 5.0, "measured_start": 1.4, "measured_end": 5.0,
                         "measured_s": 3.6, "warmup": {"requests_per_user": 1, "seconds": 0.0}, "users": users}
    lines = summary_table(summary).splitlines()
    assert "measured window: 3.6 s at 3-5 users; warm-up excluded: 0 requests (first 1 per user)" in lines
    assert ("WARNING: the load never reached its target: 5 of 8 users in the measured window (-r 1 needs 8 s; "
            "the run had 5 s): the whole window was ramp; raise -r or -t") in lines
    summary["window"]["users"] = {**users, "min": 8, "max": 8, "reached": True, "ramp_s": 0.5, "ramp_share": 0.0}
    summary["window"]["warmup"] = {"requests_per_user": 0, "seconds": 0.0, "ramp": True}
    text = summary_table(summary)
    assert "measured window: 3.6 s at 8 users; warm-up excluded: 0 requests (started before the spawn completed)" in text
    assert "never reached" not in text


def _counts(line: str) -> tuple[int, int, list[int]]:
    """``requests: M measured here; Locust's table counts T = M + a warm-up + b ...`` -> (M, T, [M, a, b])."""
    import re

    m = re.match(r"requests: (\d+) measured here; Locust's table counts (\d+) = ([\d +a-z-]+) \(", line)
    assert m, line
    return int(m[1]), int(m[2]), [int(n) for n in re.findall(r"\d+", m[3])]


def test_the_table_says_why_locusts_count_differs() -> None:
    """Issue 53 item 10: two request counts (Locust's and ours) with nothing saying why. Locust's
    table counts every record a user fired ``request`` for: all but the interrupted ones."""
    s = _stats(6)
    name = "/v1/chat/completions"
    for i, kw in enumerate([{"warmup": True}] * 3 + [{"cooldown": True}, {"status": "cancelled"},
                                                     {"status": "interrupted"}, {"status": "interrupted"}]):
        s.add(RequestRecord(f"x{i}", name, "vllm", "m", start_time=1, **kw))
    summary = s.summary()
    line = console.counts_line(summary)
    assert line == ("requests: 6 measured here; Locust's table counts 11 = 6 + 3 warm-up + 1 cool-down + 1 cancelled "
                    "(it counts every request that ended; these statistics leave those out); the 2 interrupted are "
                    "in neither")
    measured, total, parts = _counts(line)
    assert measured == summary["overall"]["requests"] and total == sum(parts) == 6 + 3 + 1 + 1  # 7 fired, 2 did not
    assert line in summary_table(summary).splitlines()
    assert console.counts_line(_stats(4).summary()) is None  # nothing excluded: the counts agree


def test_a_reset_of_locusts_statistics_claims_no_total_for_its_table() -> None:
    summary = _stats(4).summary()
    summary["overall"]["excluded_warmup"] = 2
    summary["config"] = {"reset_stats": True}
    assert console.counts_line(summary) == (
        "requests: 4 measured here (2 warm-up excluded); Locust's table counts only those that ended after its "
        "statistics were reset (as the spawn completed: --reset-stats), measured or not")
    summary["config"] = {}
    summary["window"] = {"locust_stats_reset": 12.0}
    assert "reset (from the web UI)" in (console.counts_line(summary) or "")


def test_watch_resets_notes_the_web_uis_reset_in_this_tests_summary() -> None:
    from types import SimpleNamespace

    from locust.event import Events

    events, run = Events(), SimpleNamespace(summary_hooks=[])
    console.watch_resets(SimpleNamespace(events=events), run)
    summary: dict = {"window": {}}
    run.summary_hooks[0](summary)
    assert summary == {"window": {}}
    events.reset_stats.fire()
    run.summary_hooks[0](summary)
    assert summary["window"]["locust_stats_reset"] > 0
    events.test_start.fire(environment=None)  # a new test: Locust's table starts again with it
    fresh: dict = {"window": {}}
    run.summary_hooks[0](fresh)
    assert fresh == {"window": {}}


def test_a_trace_replays_measured_window_says_no_row_was_warm_up() -> None:
    """Issue 53 item 10: in a trace replay the default warm-up is none (load/ramp.py
    warmup_per_user), and the measured-window line says why; an explicit --llm-warmup N is stated as such."""
    summary = _stats(30).summary()
    summary["window"] = {"measured_s": 3.6, "warmup": {"requests_per_user": 0, "seconds": 0.0}}
    lag = {"p50": 1.0, "p99": 2.0}
    summary["arrivals"] = {"trace": "t.jsonl", "trace_requests": 30, "trace_speedup": 1, "rate": None,
                           "achieved_rps": 6.0, "schedule_lag": lag, "ttft_from_schedule": lag,
                           "e2e_from_schedule": lag, "cap_reached": False, "client_behind": False, "verdict": "on time"}
    assert ("measured window: 3.6 s; warm-up excluded: 0 requests (none: a trace replay measures every row it "
            "sends; --llm-warmup N excludes each user's first N)") in summary_table(summary).splitlines()
    summary["window"]["warmup"]["requests_per_user"] = 2
    assert "warm-up excluded: 0 requests (first 2 per user)" in summary_table(summary)
    assert console.warmup_text({"requests_per_user": 0}) == "first 0 per user"  # no trace: as it was
