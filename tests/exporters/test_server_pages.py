"""The LLM server's /metrics read the same way for vLLM, SGLang, TGI and llama.cpp (exporters/
series.py), the queue-time quantiles from bucket deltas, and finding the page on --host
(exporters/discover.py) without any option.

The SGLang and llama.cpp pages are written with the names those servers use (SGLang's
srt/metrics/collector.py; llama.cpp's server, as in the xllamacpp build the real tier runs); the
simulator's page is the real thing (vLLM and TGI names).
"""

from __future__ import annotations

import io
import urllib.error
import urllib.request

import pytest

from exporters.discover import candidate, discover
from exporters.series import SERVER_SAMPLES, ServerSeries, bucket_quantile, delta_quantiles, parse


def sglang_page(queued: int, running: int, usage: float, prompt: float, gen: float, retracted: float,
                q_buckets: dict[str, float], q_sum: float) -> str:
    lab = 'model_name="m"'
    lines = [f"sglang:num_running_reqs{{{lab}}} {running}", f"sglang:num_queue_reqs{{{lab}}} {queued}",
             f"sglang:token_usage{{{lab}}} {usage}", f"sglang:prompt_tokens_total{{{lab}}} {prompt}",
             f"sglang:generation_tokens_total{{{lab}}} {gen}",
             f"sglang:num_retracted_requests_total{{{lab}}} {retracted}"]
    for le, n in q_buckets.items():
        lines.append(f'sglang:queue_time_seconds_bucket{{le="{le}",{lab}}} {n}')
    lines += [f"sglang:queue_time_seconds_sum{{{lab}}} {q_sum}",
              f"sglang:queue_time_seconds_count{{{lab}}} {q_buckets['+Inf']}"]
    return "# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n" + "\n".join(lines) + "\n"


def test_sglang_page_maps_onto_the_common_columns() -> None:
    s = ServerSeries()
    first = s.update(parse(sglang_page(0, 2, 0.25, 1000, 500, 0, {"0.1": 10, "0.5": 10, "1.0": 10, "+Inf": 10}, 0.2),
                           SERVER_SAMPLES), 10.0)
    assert s.dialect == "sglang"
    assert first == {"server_num_requests_running": 2, "server_num_requests_waiting": 0,
                     "server_kv_cache_usage_ratio": 0.25}
    # 2 s later: 100 more queue observations, 50 in (0.1, 0.5] and 50 in (0.5, 1.0]
    cols = s.update(parse(sglang_page(7, 8, 0.97, 3000, 1500, 4, {"0.1": 10, "0.5": 60, "1.0": 110, "+Inf": 110},
                                      60.2), SERVER_SAMPLES), 12.0)
    assert cols["server_num_requests_waiting"] == 7 and cols["server_kv_cache_usage_ratio"] == 0.97
    assert cols["server_prompt_tokens_per_s"] == pytest.approx(1000.0)
    assert cols["server_generation_tokens_per_s"] == pytest.approx(500.0)
    assert cols["server_preemptions_per_s"] == pytest.approx(2.0)
    assert cols["server_queue_time_mean_ms"] == pytest.approx(600.0)
    assert cols["server_queue_time_p50_ms"] == pytest.approx(500.0)  # the 50th of 100 ends the first bucket
    assert cols["server_queue_time_p99_ms"] == pytest.approx(500 + 500 * 49 / 50)


LLAMA = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
llamacpp:tokens_predicted_total {gen}
llamacpp:prompt_seconds_total 1.5
llamacpp:tokens_predicted_seconds_total 3.2
llamacpp:n_decode_total 400
llamacpp:n_busy_slots_per_decode 1.8
llamacpp:prompt_tokens_seconds 850.2
llamacpp:predicted_tokens_seconds 120.5
llamacpp:requests_processing {running}
llamacpp:requests_deferred {deferred}
llamacpp:n_tokens_max 512
"""


def test_llamacpp_page_maps_running_deferred_and_token_rates() -> None:
    s = ServerSeries()
    s.update(parse(LLAMA.format(prompt=100, gen=200, running=1, deferred=0), SERVER_SAMPLES), 0.0)
    assert s.dialect == "llamacpp"
    cols = s.update(parse(LLAMA.format(prompt=300, gen=600, running=4, deferred=3), SERVER_SAMPLES), 4.0)
    assert cols == {"server_num_requests_running": 4, "server_num_requests_waiting": 3,
                    "server_prompt_tokens_per_s": 50.0, "server_generation_tokens_per_s": 100.0}


def test_no_rate_over_a_few_milliseconds() -> None:
    s = ServerSeries()
    s.update(parse(LLAMA.format(prompt=100, gen=200, running=1, deferred=0), SERVER_SAMPLES), 0.0)
    # the last pull at the stop, 50 ms after the one before: no 2000 tokens/s burst
    short = s.update(parse(LLAMA.format(prompt=100, gen=300, running=1, deferred=0), SERVER_SAMPLES), 0.05)
    assert "server_generation_tokens_per_s" not in short and short["server_num_requests_running"] == 1
    later = s.update(parse(LLAMA.format(prompt=100, gen=400, running=1, deferred=0), SERVER_SAMPLES), 1.0)
    assert later["server_generation_tokens_per_s"] == pytest.approx(200.0)  # the rise over the whole second


def test_bucket_quantiles() -> None:
    cum = [(0.1, 0.0), (0.5, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert bucket_quantile(0.5, cum) == pytest.approx(0.5)
    assert bucket_quantile(0.25, cum) == pytest.approx(0.3)
    assert bucket_quantile(0.5, [(1.0, 0.0), (float("inf"), 4.0)]) == 1.0  # in +Inf: the last finite bound
    assert bucket_quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None
    prev = {0.1: 5.0, 1.0: 5.0, float("inf"): 5.0}
    assert delta_quantiles(prev, prev) is None  # nothing observed in the interval
    assert delta_quantiles({0.1: 5.0, 1.0: 15.0, float("inf"): 15.0}, prev) == pytest.approx((0.55, 0.991))
    assert delta_quantiles({0.1: 1.0, 1.0: 1.0, float("inf"): 1.0}, prev) is None  # counter reset
    assert delta_quantiles(prev, None) is None


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


def test_a_page_found_mid_round_joins_the_next_round() -> None:
    from exporters.scrape import Scraper

    rows: list[dict[str, float]] = []
    page = LLAMA.format(prompt=1, gen=1, running=2, deferred=1)

    def fetch(url: str, timeout: float) -> str:
        if "sidecar" in url:
            scraper.set_server("http://llama:8080/metrics")  # discovery finishing during a round
            return "gpu_utilization_ratio{gpu=\"0\"} 0.5\n"
        return page

    scraper = Scraper(["sidecar:9835"], None, 1.0, lambda t, v: rows.append(v), fetch=fetch)
    first = scraper.scrape_once(100.0)
    assert first == {"gpu_0_utilization_ratio": 0.5}
    second = scraper.scrape_once(101.0)
    assert second["server_num_requests_running"] == 2 and second["server_num_requests_waiting"] == 1
    assert scraper.sections(None, None, 0)["server"]["dialect"] == "llamacpp"


def test_the_page_discovery_read_is_the_first_sample_at_once() -> None:
    """The seconds before the next round have the server's figures: discovery's own read is
    ingested when the page is found (a 3 s first stage had one second of them, not two)."""
    from exporters.scrape import Scraper

    seconds: dict[int, dict[str, float]] = {}
    page = LLAMA.format(prompt=1, gen=1, running=3, deferred=2)
    found = discover("http://llama:8080/v1", lambda url, timeout: page)
    assert found.url == "http://llama:8080/metrics" and found.samples["llamacpp:requests_processing"] == [({}, 3.0)]

    scraper = Scraper(["sidecar:9835"], None, 1.0, lambda t, v: seconds.setdefault(int(t), {}).update(v),
                      fetch=lambda url, timeout: "gpu_utilization_ratio{gpu=\"0\"} 0.5\n" if "sidecar" in url else page)
    scraper.scrape_once(100.1)
    scraper.set_server(found.url, samples=found.samples, now=100.4)
    assert seconds[100]["server_num_requests_running"] == 3 and seconds[100]["server_num_requests_waiting"] == 2
    assert seconds[100]["gpu_0_utilization_ratio"] == 0.5  # the round's columns of that second are kept
    server = next(t for t in scraper.targets if t.kind == "server")
    assert server.scrapes == 1 and server.errors == 0
    scraper.scrape_once(101.1)
    assert seconds[101]["server_num_requests_running"] == 3 and server.scrapes == 2
