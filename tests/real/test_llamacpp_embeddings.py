"""Embeddings against a real server (issue 31 item 2): llama.cpp's own server in embedding mode
(the Gemma model, mean pooling) serves ``/v1/embeddings``; the vLLM embeddings User, raw and SDK
mode, must read every answer, count the inputs and take the server's token counts, and synthetic
exact lengths must land on the server's own count through the embeddings route."""

from __future__ import annotations

import pytest

from tests.helpers import read_records, read_summary
from tests.real.observe import ok_records, run_until

pytestmark = pytest.mark.slow

BATCH, TOKENS = 3, 16
DIM = 640  # Gemma 3 270M's hidden size: the pooled vector's length


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_embeddings_user_against_llamacpp(llama_embeddings, client: str, tmp_path) -> None:
    report = tmp_path / "r"
    # a batch takes 0.3-1.8 s on two busy cores (CI's 5-s runs ended only each user's warm-up
    # request; 10-s runs ended 3 on an AVX2-only core beside other shards): every request
    # measured, and the run stopped once 4 answers are in (the stop lets those in flight end)
    proc = run_until(
        "embeddings.py",
        "--host",
        llama_embeddings.url,
        "-u",
        "2",
        "-r",
        "2",
        "--llm-warmup",
        "0",
        "--stop-timeout",
        "30",
        "--llm-batch-size",
        str(BATCH),
        "--llm-input-tokens",
        str(TOKENS),
        "--llm-client",
        client,
        "--llm-prometheus-port",
        "0",
        report=report,
        until=ok_records(4),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_records(report) if r["status"] != "interrupted"]
    assert len(records) >= 4 and [r["error_message"] for r in records if r["status"] != "ok"] == []
    assert all(
        (r["kind"], r["inputs"], r["vector_dim"], r["client"]) == ("embed", BATCH, DIM, client)
        for r in records
    )
    assert all(r["ttft_ns"] is None and r["e2e_ns"] >= r["ttfb_ns"] > 0 for r in records)
    # the server's own count of every batch: the synthetic target exactly (template-free route)
    assert all(r["input_tokens_source"] == "usage" for r in records)
    assert {r["input_tokens"] for r in records} == {BATCH * TOKENS}, [r["input_tokens"] for r in records][:8]
    ov = read_summary(report)["overall"]
    measured = [r for r in records if not r["warmup"]]
    assert ov["request_kinds"] == {"embed": len(measured)} and ov["inputs"] == BATCH * len(measured)
    assert ov["input_tokens_per_s"] == pytest.approx(BATCH * TOKENS * ov["requests_per_s"])
