"""exporters/discover.py: finding the LLM server's /metrics page on --host (llama.cpp without
``--metrics`` named, the simulator found without any option), parsing only what the scraper reads."""

from __future__ import annotations

import io
import urllib.error
import urllib.request

from exporters.discover import candidate, discover
from exporters.series import SERVER_SAMPLES
from tests.exporters.llama_page import LLAMA


def fetcher(status: int, body: str):
    def fetch(url: str, timeout: float) -> str:
        fetch.urls.append(url)
        if status != 200:
            raise urllib.error.HTTPError(url, status, "x", {}, io.BytesIO(body.encode()))  # type: ignore[arg-type]
        return body

    fetch.urls = []
    return fetch


def test_discovery_names_the_server_or_says_why_not() -> None:
    assert candidate("http://h:8000/v1") == "http://h:8000/metrics"
    assert candidate("https://api.example.com") == "https://api.example.com/metrics"
    assert candidate(None) is None and candidate("h:80") is None

    f = fetcher(200, LLAMA.format(prompt=1, gen=1, running=0, deferred=0))
    found = discover("http://127.0.0.1:8080/v1", f)
    assert (found.url, found.dialect) == ("http://127.0.0.1:8080/metrics", "llamacpp")
    assert f.urls == ["http://127.0.0.1:8080/metrics"] and "llama.cpp" in found.note

    # llama.cpp's server without --metrics: its own 501 text
    off = discover("http://127.0.0.1:8080", fetcher(501, '{"error":{"code":501,"message":"This server does not '
                                                         'support metrics endpoint. Start it with `--metrics`"}}'))
    assert off.url is None and off.dialect == "llamacpp" and "start llama-server with --metrics" in off.note

    missing = discover("http://127.0.0.1:9", fetcher(404, "not found"))
    assert missing.url is None and missing.dialect is None and "HTTP 404" in missing.note
    other = discover("http://h", fetcher(200, "process_cpu_seconds_total 1\n"))
    assert other.url is None and "no vLLM, SGLang, TGI or llama.cpp series" in other.note

    def refused(url: str, timeout: float) -> str:
        raise ConnectionRefusedError("refused")

    assert discover("http://h", refused).url is None


def test_discovery_parses_only_what_the_scraper_reads_in_slices() -> None:
    """Discovery runs beside the first requests: only the lines the scraper reads are parsed,
    with the loop's ready sockets served between slices (the simulator's whole page held the
    loop 13.5 ms in one piece on a slow VM, issue 34 item 1); a page of nothing else still says so."""
    pauses: list[int] = []
    noise = "".join(f'process_open_fds{{n="{i}"}} {i}\n' for i in range(450))
    page = noise + LLAMA.format(prompt=1, gen=1, running=0, deferred=0)
    found = discover("http://llama:8080/v1", lambda url, timeout: page, pause=lambda: pauses.append(1))
    assert (found.url, found.dialect) == ("http://llama:8080/metrics", "llamacpp")
    assert found.samples is not None and set(found.samples) <= SERVER_SAMPLES
    assert "process_open_fds" not in found.samples and found.samples["llamacpp:requests_deferred"] == [({}, 0.0)]
    assert len(pauses) >= 3  # before the parse, and twice over the 450 lines nobody reads
    from exporters.scrape import Scraper

    scraper = Scraper([], None, 1.0, lambda t, v: None, fetch=lambda url, timeout: page,
                      pause=lambda: pauses.append(1))
    before = len(pauses)
    scraper.set_server(found.url, samples=found.samples, now=100.0)  # the page as discovery parsed it: not again
    assert len(pauses) == before and next(t for t in scraper.targets if t.kind == "server").scrapes == 1
    other = discover("http://h", lambda url, timeout: noise, pause=lambda: pauses.append(1))
    assert other.url is None and "no vLLM, SGLang, TGI or llama.cpp series" in other.note


def test_discovery_finds_the_simulator(sim_factory) -> None:
    from exporters.scrape import PageClient

    sim = sim_factory("--seed", "1")
    found = discover(sim.url, PageClient())
    assert (found.url, found.dialect) == (sim.url + "/metrics", "vllm")
    with urllib.request.urlopen(found.url, timeout=5) as r:
        assert b"vllm:request_queue_time_seconds_bucket" in r.read()
