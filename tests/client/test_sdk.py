"""SDK mode's HTTP logging is quiet by default (issue 28 item 4): the SDKs' per-request INFO
loggers go to WARNING, unless the run logs at DEBUG or the user set their level. A cancel timer
moved to the request's real t0 runs its whole length from there."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from time import perf_counter_ns

import gevent
import pytest
from gevent import Timeout

from llm_users.client.sdk import CHATTY_LOGGERS, quiet_http_logs, restarted
from llm_users.errors import Cancelled


@pytest.fixture
def loggers() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.level, {n: logging.getLogger(n).level for n in CHATTY_LOGGERS}
    yield
    root.setLevel(saved[0])
    for n, level in saved[1].items():
        logging.getLogger(n).setLevel(level)


def test_quiet_at_info(loggers: None) -> None:
    logging.getLogger().setLevel(logging.INFO)
    for n in CHATTY_LOGGERS:
        logging.getLogger(n).setLevel(logging.NOTSET)
    assert quiet_http_logs() == list(CHATTY_LOGGERS)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)


def test_debug_run_and_users_own_level_are_kept(loggers: None) -> None:
    for n in CHATTY_LOGGERS:
        logging.getLogger(n).setLevel(logging.NOTSET)
    logging.getLogger().setLevel(logging.DEBUG)  # --loglevel DEBUG: the user wants every line
    assert quiet_http_logs() == []
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("httpx2").setLevel(logging.INFO)  # e.g. ANTHROPIC_LOG=info
    assert "httpx2" not in quiet_http_logs()
    assert logging.getLogger("httpx2").isEnabledFor(logging.INFO)


def test_a_restarted_cancel_timer_runs_its_whole_length_from_the_restart() -> None:
    """SDK mode starts the cancel timer before the SDK call and moves it to t0 once httpx begins
    to write (after any connect). gevent's cancel() then start() resumed the time that was left
    (libev's stop keeps it): a 300-ms cancel fired 294 ms after t0 when the connect took 6 ms
    (tests/e2e/test_cancel.py, three-lane serial runs). The bound is a lower one: a busy machine
    fires a timer late, never early."""
    gone = Cancelled("the client cancelled the request 200 ms after it was sent")
    timer = Timeout(0.2, gone)
    timer.start()
    gevent.sleep(0.08)  # the SDK's build and a connect, before the first byte
    t0 = perf_counter_ns()
    fresh = restarted(timer)
    try:
        with pytest.raises(Cancelled) as raised:
            gevent.sleep(1.0)
        assert perf_counter_ns() - t0 >= 200e6
        assert raised.value is gone and not timer.pending
    finally:
        fresh.close()
