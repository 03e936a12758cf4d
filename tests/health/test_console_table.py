"""console_table.py: Locust's periodic table, the same lines, with ready sockets served between."""

from __future__ import annotations

import logging

import gevent
import gevent.socket
import locust.stats as locust_stats
import pytest
from locust.stats import RequestStats

from llm_users.health import console_table


class Lines(logging.Handler):
    """Every line the stats logger emits, and the reads of a socket in between."""

    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    def emit(self, record: logging.LogRecord) -> None:
        self.order.append(record.getMessage())


@pytest.fixture
def captured():
    order: list[str] = []
    h = Lines(order)
    log = locust_stats.console_logger
    level, propagate = log.level, log.propagate
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    stats = RequestStats()
    for ms in (120.0, 80.0, 95.5):
        stats.log_request("POST", "/v1/chat/completions", ms, 1024)
    stats.log_error("POST", "/v1/chat/completions", "HTTP 503")
    try:
        yield order, stats
    finally:
        log.removeHandler(h)
        log.setLevel(level)
        log.propagate = propagate
        console_table.uninstall()


def test_the_periodic_table_prints_locusts_lines(captured) -> None:
    order, stats = captured
    locust_stats.print_stats(stats)  # Locust's own
    theirs = list(order)
    order.clear()
    assert console_table.install()
    assert locust_stats.print_stats is console_table.print_stats
    assert console_table.install()  # idempotent: Locust's printer is still the one kept
    locust_stats.print_stats(stats)
    assert order == theirs
    assert len(theirs) == 6 and theirs[-1] == "" and "/v1/chat/completions" in theirs[2]
    console_table.uninstall()
    assert locust_stats.print_stats is not console_table.print_stats


def test_a_socket_ready_during_the_table_is_read_before_its_end(captured) -> None:
    """Locust's printer logs all its lines in one go: a socket that became ready meanwhile waits
    for the last. Ours serves it before the next line."""
    order, stats = captured
    a, b = gevent.socket.socketpair()

    def reader() -> None:
        a.recv(1)
        order.append("<read>")

    class Trigger(logging.Handler):  # the bytes arrive while the first line is being written
        def emit(self, record: logging.LogRecord) -> None:
            if len(order) == 1:
                b.send(b"x")

    trig = Trigger()
    locust_stats.console_logger.addHandler(trig)
    try:
        for printer in ("locust", "ours"):
            order.clear()
            if printer == "ours":
                console_table.install()
            g = gevent.spawn(reader)
            gevent.sleep(0.01)  # the reader waits on its socket
            locust_stats.print_stats(stats)
            g.join(timeout=1)
            where = order.index("<read>")
            if printer == "locust":
                assert where == len(order) - 1, order  # after the whole table
            else:
                assert where == 1, order  # right after the first line (the header)
    finally:
        locust_stats.console_logger.removeHandler(trig)
        a.close()
        b.close()


def test_the_table_at_exit_is_printed_in_one_piece(captured) -> None:
    """current=False (the final table) is Locust's own printer: nothing runs between its lines."""
    order, stats = captured
    console_table.install()
    ran: list[int] = []
    g = gevent.spawn(lambda: ran.append(len(order)))
    locust_stats.print_stats(stats, current=False)
    n = len(order)
    g.join(timeout=1)
    assert ran == [n] and n == 6 and order[-1] == ""
