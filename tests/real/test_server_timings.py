"""The server's own timings against llama.cpp's server (issue 32): its final chunk's ``timings``
(``prompt_ms``, ``predicted_ms``) are read for every request, raw and SDK mode, and the breakdown
(TTFT = client and network + prefill, the queue unknown: llama.cpp does not report it) is in
summary.json, the console and the report; the stream's own id is kept as the join key."""

from __future__ import annotations

import pytest

from tests.helpers import read_records, read_summary
from tests.real.observe import launched, run_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_llamacpp_timings_for_every_request_and_the_breakdown(llama, client: str, tmp_path) -> None:
    report = tmp_path / "r"
    # stopped once the server has launched each user's first request (the stop lets both end)
    proc = run_until(
        "vllm.py",
        "--llm-html",
        "on",
        "--host",
        llama.url,
        "-u",
        "2",
        "-r",
        "2",
        "--stop-timeout",
        "60",
        "--llm-model",
        "gemma-3-270m",
        "--llm-max-tokens",
        "16",
        "--llm-client",
        client,
        "--llm-preflight",
        "off",
        "--llm-warmup",
        "0",
        report=report,
        until=launched(llama, 2),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] == "ok"]
    assert len(records) >= 2  # a CPU model on a loaded machine: 2-6 s a request, one a user at least
    for r in records:
        st, t = r["server_timings"], r["server"]["timings"]
        assert st["source"] == "llama.cpp" and st["queue_ns"] is None, st
        assert st["prefill_ns"] == round(t["prompt_ms"] * 1e6) and st["decode_ns"] == round(
            t["predicted_ms"] * 1e6
        )
        # our TTFT holds the server's prefill; the rest is client, network (and the unreported queue)
        assert 0 <= r["ttft_ns"] - st["prefill_ns"] < 2e9, (r["ttft_ns"], st)
        assert r["server_request_id"].startswith("chatcmpl-") and r["server_request_id"] != r["request_id"]
    b = read_summary(report)["overall"]["breakdown"]
    measured = [r for r in records if not r["warmup"] and not r["cooldown"]]
    assert b["source"] == "llama.cpp" and b["requests"] == len(measured)
    assert b["unknown"] == ["queue", "server_total"]  # llama.cpp says nothing of its queue
    assert b["flagged"] == 0
    assert b["client_network_ttft"]["p50"] >= 0 and b["prefill"]["p50"] > 0 and b["decode"]["p50"] > 0
    assert "server timings (llama.cpp" in proc.stdout
    assert "Where the latency goes" in (report / "report.html").read_text()
