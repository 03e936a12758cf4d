"""Locust's periodic console table, printed in pieces the event loop serves sockets between.

Headless Locust prints its request table every 2 s (``locust.stats.stats_printer``). Each line
goes through two logging handlers (a stream write, and the web UI's ``LogReader``, which
formats a timestamp): 30-260 us a line, cold, on the VMs measured, plus 50-280 us to build
the table. That was 0.25-1.6 ms with the hub held every 2 s, and a first token that arrived
meanwhile waited it out: at 60 streams it was the largest TTFT error of a window (issue 14).

:func:`install` replaces ``locust.stats.print_stats`` (which the printer looks up at every
call) with one that logs the same lines through the same logger, with
:func:`~llm_users.health.idle.serve_ready_io` before each. The table at exit (``current=False``)
is Locust's own, in one piece, so nothing else prints into its middle.
"""

from __future__ import annotations

from typing import Any

import locust.stats as locust_stats

from llm_users.health.idle import serve_ready_io

_locust_print_stats: Any = None


def print_stats(stats: Any, current: bool = True) -> None:
    """``locust.stats.print_stats``, line by line with ready sockets served in between."""
    if not current:
        _locust_print_stats(stats, current)
        return
    lines = locust_stats.get_stats_summary(stats, current)
    lines.append("")
    for line in lines:
        serve_ready_io()
        locust_stats.console_logger.info(line)


def install() -> bool:
    """Print Locust's periodic table with :func:`print_stats` (idempotent); False, and
    Locust's printer kept, where this Locust lacks the functions it builds on."""
    global _locust_print_stats
    current = getattr(locust_stats, "print_stats", None)
    if current is print_stats:
        return True
    if not callable(current) or not callable(getattr(locust_stats, "get_stats_summary", None)) \
            or getattr(locust_stats, "console_logger", None) is None:
        return False
    _locust_print_stats = current
    locust_stats.print_stats = print_stats
    return True


def uninstall() -> None:
    """Locust's own printer again."""
    global _locust_print_stats
    if _locust_print_stats is not None and locust_stats.print_stats is print_stats:
        locust_stats.print_stats = _locust_print_stats
    _locust_print_stats = None
