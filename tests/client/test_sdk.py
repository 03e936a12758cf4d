"""SDK mode's HTTP logging is quiet by default (issue 28 item 4): the SDKs' per-request INFO
loggers go to WARNING, unless the run logs at DEBUG or the user set their level."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from llm_users.client.sdk import CHATTY_LOGGERS, quiet_http_logs


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
