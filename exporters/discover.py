"""Find the LLM server's own /metrics from ``--host`` (``--llm-server-metrics`` auto, the default).

vLLM, SGLang, TGI and llama.cpp's server serve Prometheus text at ``/metrics`` on the host and
port they answer on; the page's metric prefix (``vllm:``, ``sglang:``, ``tgi_``, ``llamacpp:``)
says which it is (:data:`exporters.series.PREFIXES`). One GET at the test start decides:

- a page with a known prefix: it is scraped through the run, like a given URL;
- llama.cpp's server without ``--metrics`` answers 501 "...Start it with `--metrics`": said so,
  once, with what to do;
- anything else (404, no known series, no answer): one line, and the run goes on without.

``--llm-server-metrics off`` skips the probe; a URL skips discovery. Documented in
docs/prometheus.md ("The LLM server's /metrics").
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from .series import SERVER_SAMPLES, Samples, dialect, parse

Fetch = Callable[[str, float], str]
NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llamacpp": "llama.cpp"}


@dataclass(frozen=True)
class Found:
    url: str | None  # the page to scrape, None when none was found
    dialect: str | None
    note: str  # one line for the log and summary.json
    #: the page's samples as read and parsed (those the scraper reads): the run's first sample
    samples: Samples | None = field(default=None, repr=False)


def candidate(host: str | None) -> str | None:
    """``http://h:8000/v1`` -> ``http://h:8000/metrics`` (same scheme, host and port)."""
    if not host:
        return None
    parts = urlsplit(host.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def discover(host: str | None, fetch: Fetch, timeout: float = 3.0, pause: Callable[[], None] | None = None) -> Found:
    """One GET of the candidate page and what it says. Only the sample lines the scraper reads
    are parsed (in slices, ``pause()`` between them, as a scrape round): the whole page of the
    simulator (273 lines) held the loop 13.5 ms in one piece, beside the first requests."""
    url = candidate(host)
    if url is None:
        return Found(None, None, f"no /metrics looked for: --host {host!r} is no http(s) URL")
    try:
        text = fetch(url, timeout)
    except urllib.error.HTTPError as e:
        body = ""
        try:
            body = e.read().decode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - the body is only a hint
            pass
        if "--metrics" in body:
            return Found(None, "llamacpp", f"llama.cpp's server at {url} has its /metrics off: start llama-server "
                                           f"with --metrics to see its queue and batch beside the latency")
        return Found(None, None, f"no server metrics at {url} (HTTP {e.code}); give --llm-server-metrics URL if "
                                 f"they are served elsewhere")
    except Exception as e:  # refused, timeout: the run goes on without
        return Found(None, None, f"no server metrics at {url} ({type(e).__name__}: {e})")
    try:
        samples = parse(text, SERVER_SAMPLES, pause)
        d = dialect(samples)
    except ValueError as e:
        return Found(None, None, f"{url} is not Prometheus text ({e})")
    if d is None:
        return Found(None, None, f"{url} has no vLLM, SGLang, TGI or llama.cpp series")
    return Found(url, d, f"found {NAMES[d]}'s /metrics at {url}: scraped through the run", samples)
