"""health/locust_costs.py: Locust's per-second dicts keep the seconds Locust reads; its spawn handler's
parser defaults are built once."""

from __future__ import annotations

from types import SimpleNamespace

from locust.stats import RequestStats

from llm_users.health.locust_costs import HISTORY_KEPT, KEEP_S, cache_default_args, trim_per_second


def test_old_seconds_go_and_current_rps_stays() -> None:
    stats = RequestStats()
    t0 = 1_700_000_000
    entry = stats.get("/v1/chat/completions", "POST")
    for e in (entry, stats.total):  # as a master's merge of worker reports leaves them: 600 s
        for s in range(t0, t0 + 600):
            e.num_reqs_per_sec[s] = 3
            e.num_fail_per_sec[s] = 1
    stats.total.start_time, stats.total.last_request_timestamp = t0, t0 + 600  # RequestStats reads these
    rps, fails = entry.current_rps, entry.current_fail_per_sec
    env = SimpleNamespace(stats=stats, web_ui=None)
    dropped = trim_per_second(env, now=t0 + 600, html_report=True)
    assert dropped == 2 * 2 * (600 - KEEP_S)  # two entries, two dicts each
    for e in (entry, stats.total):
        assert min(e.num_reqs_per_sec) == t0 + 600 - KEEP_S and len(e.num_reqs_per_sec) == KEEP_S
        assert min(e.num_fail_per_sec) == t0 + 600 - KEEP_S
    assert (entry.current_rps, entry.current_fail_per_sec) == (rps, fails) == (3.0, 1.0)
    assert trim_per_second(env, now=t0 + 600, html_report=True) == 0


def test_locusts_chart_history_is_kept_only_where_something_reads_it() -> None:
    """A point every 5 s, about 1 kB: 0.73 MB an hour on a master, read by Locust's web UI and
    its --html report only."""
    def history_after(web_ui: object, html: str | None) -> int:
        stats = RequestStats()
        stats.history.extend({"time": i} for i in range(700))
        env = SimpleNamespace(stats=stats, web_ui=web_ui)
        trim_per_second(env, now=1_700_000_000, html_report=bool(html))
        assert stats.history[-1] == {"time": 699}
        return len(stats.history)

    assert history_after(None, None) == HISTORY_KEPT  # headless, no --html: nobody reads it
    assert history_after(None, "report.html") == 700
    assert history_after(object(), None) == 700


def test_the_spawn_handlers_defaults_are_built_once() -> None:
    """Locust's worker calls default_args_dict() once per option of every spawn message; after
    cache_default_args() the answer is the same dict, a copy each time, without a new parser."""
    import time

    from locust import argument_parser

    original = argument_parser.default_args_dict
    try:
        t = time.perf_counter()
        expected = original()
        once = time.perf_counter() - t
        assert cache_default_args() and not cache_default_args()  # wraps once
        first = argument_parser.default_args_dict()
        t = time.perf_counter()
        for _ in range(115):  # one spawn message with this project's options
            again = argument_parser.default_args_dict()
        cached = (time.perf_counter() - t) / 115
        assert first == again == expected and again is not first
        again["host"] = "changed"
        assert argument_parser.default_args_dict()["host"] == expected["host"]
        assert cached < once / 20, (cached, once)
    finally:
        argument_parser.default_args_dict = original


def test_the_master_waits_longer_for_a_silent_worker() -> None:
    """Locust's master marks a worker missing after 3 missed heartbeats and stops the test once
    every worker is; tune_locust gives the master WORKER_SILENCE_S, a worker nothing of it."""
    from locust import runners
    from locust.env import Environment

    from llm_users.health.locust_costs import WORKER_SILENCE_S, tune_locust

    before = runners.HEARTBEAT_LIVENESS
    try:
        tune_locust(Environment(user_classes=[]).create_local_runner())
        assert runners.HEARTBEAT_LIVENESS == before == 3
        master = Environment(user_classes=[]).create_master_runner("127.0.0.1", 0)
        tune_locust(master)
        assert runners.HEARTBEAT_LIVENESS == WORKER_SILENCE_S == 10
        master.quit()
    finally:
        runners.HEARTBEAT_LIVENESS = before
