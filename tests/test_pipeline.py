"""pipeline.py: every record reaches every sink once, in stage order, shared by local, worker and master."""

from __future__ import annotations

import pytest

from llm_users.distributed import Collector, Shipper
from llm_users.metrics import RequestRecord
from llm_users.pipeline import STAGES, RecordPipeline


def _rec(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", name="chat", backend="vllm", model="m", ttft_ns=1_000_000 + i,
                         e2e_ns=5_000_000, t0_ns=1, start_time=1000.0 + i, chunks=3, output_tokens=3)


def test_stages_run_in_order_whatever_order_sinks_were_added() -> None:
    seen: list[str] = []
    p = RecordPipeline()
    for stage in reversed(STAGES):
        p.add(stage, lambda rec, stage=stage: seen.append(stage))
    p.keep(_rec(0))
    assert seen == list(STAGES)
    seen.clear()
    p.keep(_rec(1), after="timeline")
    assert seen == list(STAGES[STAGES.index("timeline") + 1:])
    seen.clear()
    p.keep_all([_rec(2), _rec(3)], after="timeline")  # a payload's records: each through every stage in turn
    assert seen == list(STAGES[STAGES.index("timeline") + 1:]) * 2
    with pytest.raises(ValueError, match="unknown record stage 'stats'"):
        p.add("stats", print)


def test_local_and_master_collectors_count_each_record_once() -> None:
    local = Collector()
    seen_local: list[str] = []
    local.observers.append(lambda r: seen_local.append(r.request_id))
    for i in range(5):
        local.add_record(_rec(i))
    assert local.stats.summary()["overall"]["requests"] == 5 and local.records == 5
    assert seen_local == [f"r{i}" for i in range(5)]

    shipper = Shipper("w1")
    for i in range(5):
        shipper.add(_rec(i))
    payload = shipper.payload(final=True)
    from llm_users.metrics import record_wire
    shipped = record_wire.unpack(payload["records"], payload["record_fields"])
    assert payload["record_count"] == 5 and {r.worker for r in shipped} == {"w1"}
    master = Collector()
    seen_master: list[str] = []
    master.observers.append(lambda r: seen_master.append(r.request_id))
    master.receive(payload)
    # the statistics came in wire form: the statistics stage is skipped, nothing counted twice
    assert master.stats.summary()["overall"]["requests"] == 5 and master.records == 5
    assert seen_master == [f"r{i}" for i in range(5)]
    assert master.stats.summary()["overall"]["ttft"] == local.stats.summary()["overall"]["ttft"]
