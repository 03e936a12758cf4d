"""bench/paced_server.py: the OpenAI SDK reads its streams, each chunk in its own segment at its
own time (spread) or on the step grid shared by every stream (lockstep)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def start(shape: str, tokens: int = 12, itl_ms: float = 20.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "paced_server.py"), "--shape", shape,
                             "--ttft-ms", "30", "--itl-ms", f"{itl_ms:g}", "--tokens", str(tokens)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving on" in line, line
    proc.url = line.split("serving on", 1)[1].split()[0]  # type: ignore[attr-defined]
    return proc


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    proc = start(request.param)
    yield proc
    proc.kill()
    proc.wait(10)


def stream(url: str) -> tuple[list[float], list[str], object]:
    """Arrival times (perf_counter, s) of the content chunks and when the request went; their
    text; the usage."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    t0 = time.perf_counter()
    times, texts, usage = [], [], None
    for ch in client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "hi"}],
                                             stream=True, stream_options={"include_usage": True}):
        if ch.choices and ch.choices[0].delta.content:
            times.append(time.perf_counter())
            texts.append(ch.choices[0].delta.content)
        if ch.usage:
            usage = ch.usage
    return [t0, *times], texts, usage


@pytest.mark.serial  # a TTFT of 30 ms and gaps of 20 ms read within bounds: timing-bound
@pytest.mark.parametrize("server", ["spread"], indirect=True)
def test_spread_stream_is_read_by_the_sdk_at_its_pace(server) -> None:
    stream(server.url)  # the SDK's first call builds its lazy parts (CI r71: a 230 ms TTFT on a loaded machine)
    (t0, *times), texts, usage = stream(server.url)
    times = [t - t0 for t in times]
    assert len(texts) == 12 and texts[0] == "tok" and set(texts[1:]) == {" tok"}
    assert usage is not None and usage.completion_tokens == 12
    assert 0.025 <= times[0] <= 0.2, times[0]  # TTFT 30 ms
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert 0.015 <= sorted(gaps)[len(gaps) // 2] <= 0.03, gaps  # ITL 20 ms
    stats = json.load(urllib.request.urlopen(server.url + "/_stats", timeout=10))
    assert stats["requests"] == 2 and stats["chunks"] == 24, stats  # the warm-up's and this one's
    models = json.load(urllib.request.urlopen(server.url + "/v1/models", timeout=10))
    assert models["data"][0]["id"] == "sim-model"


@pytest.mark.serial  # two reading threads' arrival times to 2 ms: a loaded machine skews them by tens of ms
@pytest.mark.parametrize("server", ["lockstep"], indirect=True)
def test_lockstep_streams_share_the_step_grid(server) -> None:
    """Two streams started 7 ms apart still get their chunks at the same steps: their arrival
    times, taken from one clock, differ by far less than the 7 ms between their starts."""
    import openai  # noqa: F401  (imported before the threads: neither stream waits on the other's import)

    def one(delay: float) -> list[float]:
        time.sleep(delay)
        return stream(server.url)[0]

    for _ in range(3):  # the set-up: two requests sent apart (a slow machine once sent both 0.5 ms apart)
        with ThreadPoolExecutor(2) as pool:
            (sent_a, *a), (sent_b, *b) = pool.map(one, (0.0, 0.007))
        if abs(sent_b - sent_a) > 0.004:
            break
    assert abs(sent_b - sent_a) > 0.004, (sent_a, sent_b)  # the requests went apart
    # the first chunks may fall one step apart; from then on each of a's chunks has one of b's near it
    near = [min(abs(x - y) for y in b) for x in a[2:]]
    assert sorted(near)[len(near) // 2] < 0.002, near
