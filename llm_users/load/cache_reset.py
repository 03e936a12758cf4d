"""The server's prefix cache, reset between the points of a study (``--llm-reset-cache on|off``).

Repeated or successive points against a server with automatic prefix caching flatter the later
ones: their prompts (shared prefixes, a trace's blocks, a repeat's same texts) find the cache
warm. Where the server has a route that empties it, the run calls it before each new stage,
sweep point or repeat (``StageBook.begin``, every stage after the first):

- vLLM: ``POST /reset_prefix_cache`` (served when vLLM runs with ``VLLM_SERVER_DEV_MODE=1``);
- SGLang: ``POST /flush_cache`` (refused with 400 while requests are running).

Neither server has a route that tells whether it exists without calling it, so :func:`detect`
calls them in that order at the test's start (before the load: a reset then is harmless, the
first point starts cold like the others) and keeps the first that answers 2xx. Calls are
plain HTTP with a short timeout (``urllib``; cooperative in a Locust process, which gevent
has patched); a reset that fails is one warning line and counted, never an error of the run.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: (name in summary.json, path), in the order :func:`detect` tries them
ROUTES: tuple[tuple[str, str], ...] = (("vllm /reset_prefix_cache", "/reset_prefix_cache"),
                                      ("sglang /flush_cache", "/flush_cache"))
TIMEOUT_S = 3.0


def server_root(host: str) -> str:
    """``scheme://host:port`` of a Locust host (the routes are at the server's root, not under /v1)."""
    parts = urlsplit(host if "://" in host else "http://" + host)
    return f"{parts.scheme}://{parts.netloc}"


def post(url: str, timeout: float = TIMEOUT_S, headers: dict[str, str] | None = None) -> tuple[int | None, str]:
    """(HTTP status or None, what went wrong) of one empty POST."""
    req = urllib.request.Request(url, data=b"", method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read(4096)
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, f"HTTP {e.code}"
    except (OSError, ValueError) as e:  # refused, timed out, bad URL
        return None, str(getattr(e, "reason", None) or e)


@dataclass
class CacheReset:
    """One run's resets: the route found, how many calls succeeded and failed."""

    host: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = TIMEOUT_S
    method: str | None = None
    path: str | None = None
    count: int = 0  # resets between points (the one at the start not included)
    failed: int = 0
    at_start: bool = False
    tried: list[str] = field(default_factory=list)
    _warned: bool = False

    def detect(self) -> str | None:
        """Call each route until one answers 2xx (that call is the start's reset)."""
        root = server_root(self.host)
        self.tried = []
        for name, path in ROUTES:
            status, why = post(root + path, self.timeout, self.headers)
            self.tried.append(f"{path}: {why or status}")
            if status is not None and 200 <= status < 300:
                self.method, self.path, self.at_start = name, path, True
                return name
        return None

    def reset(self) -> bool:
        """Reset once (a boundary between points); a failure is one warning line (the first)."""
        if self.path is None:
            return False
        status, why = post(server_root(self.host) + self.path, self.timeout, self.headers)
        if status is not None and 200 <= status < 300:
            self.count += 1
            return True
        self.failed += 1
        if not self._warned:
            self._warned = True
            log.warning("locust-llm: prefix-cache reset (%s) failed: %s; the next point may find the cache warm "
                        "(further failures counted in summary.json cache_reset.failed)", self.method, why)
        return False

    def summary(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "count": self.count, "failed": self.failed,
                             "at_start": self.at_start}
        if self.method is None:
            d["tried"] = self.tried
        return d


def console_line(block: dict[str, Any] | None) -> str | None:
    """The line under the summary table: which reset was used, or that none was found."""
    if not block:
        return None
    if block.get("method") is None:
        if block.get("off"):
            return None
        return ("Prefix cache: no reset route answered (tried POST /reset_prefix_cache, /flush_cache); later points "
                "may find the server's cache warm (--llm-reset-cache off to skip the probe)")
    failed = f", {block['failed']} failed" if block.get("failed") else ""
    return (f"Prefix cache: reset by POST {block['method'].split(' ', 1)[1]} ({block['method'].split(' ')[0]}) "
            f"at the start and between points: {block['count']} times{failed}")
