"""outputs/compare_config.py: which runs llm-compare calls comparable."""

from __future__ import annotations

from llm_users.metrics import RequestRecord, StatsByName


def embed(i: int, *, inputs: int = 4, tokens: int = 256, e2e_ms: float = 50.0, kind: str = "embed",
          ok: bool = True) -> RequestRecord:
    r = RequestRecord(f"r{i}", "/v1/embeddings" if kind == "embed" else "/v1/rerank", "vllm", "m",
                      start_time=1000.0 + i * 0.1, t0_ns=1, ttfb_ns=int(e2e_ms * 1e6), e2e_ns=int(e2e_ms * 1e6),
                      input_tokens=tokens, input_tokens_source="usage", status="ok" if ok else "error")
    r.kind, r.inputs = kind, inputs
    if not ok:
        r.error_category = "wrong_result_count"
    return r


def stats() -> StatsByName:
    s = StatsByName()
    for i in range(100):  # 10 s: 100 embed requests of 4 inputs, 256 tokens each; 10 rerank of 8
        s.add(embed(i, e2e_ms=40 + i % 10))
    for i in range(10):
        s.add(embed(i * 10, inputs=8, tokens=100, kind="rerank"))
    s.add(embed(5, ok=False))
    return s


def test_llm_compare_calls_runs_of_other_batch_sizes_not_comparable() -> None:
    from llm_users.outputs.compare_config import blocking, config_rows

    def summary(batch: str) -> dict:
        return {**stats().summary(), "config": {"llm_batch_size": batch, "llm_dataset": "short"}}

    assert blocking(config_rows([summary("4"), summary("8")]), 1) == ["workload"]
    assert blocking(config_rows([summary("4"), summary("4")]), 1) == []
