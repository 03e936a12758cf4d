"""distributed.py: shipping and merging without messages (the e2e tests use real processes)."""

from __future__ import annotations

import time

from llm_users.distributed import Collector, Shipper
from llm_users.metrics import RequestRecord, StatsByName


def rec(i: int) -> RequestRecord:
    return RequestRecord(f"r{i}", "/x", "vllm", "m", start_time=float(i), ttft_ns=1_000_000 * (i + 1),
                         e2e_ns=50_000_000, itl_ns=[2_000_000, 3_000_000], output_tokens=3, tokens_source="usage")


def test_payloads_merge_to_the_same_stats_as_direct() -> None:
    shippers = [Shipper("w1"), Shipper("w2")]
    direct = StatsByName()
    c = Collector()
    for i in range(40):
        shippers[i % 2].add(rec(i))
        direct.add(rec(i))
        if i % 7 == 0:
            c.receive(shippers[i % 2].payload())
    for s in shippers:
        c.receive(s.payload(final=True))
    assert c.stats.summary() == direct.summary()
    assert c.records == 40 and not c.lost_workers()
    assert {w.worker for w in c.workers.values()} == {"w1", "w2"}


def test_a_payload_delivered_twice_counts_once() -> None:
    s = Shipper("w1")
    s.add(rec(1))
    s.add(rec(2))
    p = s.payload()
    c = Collector()
    c.receive(p)
    c.receive(p)
    assert c.records == 2 and c.duplicates == 2
    assert c.stats.total.requests == 2


def test_lost_worker_window() -> None:
    c = Collector()
    s = Shipper("w9")
    s.add(rec(1))
    c.receive({**s.payload(), "in_flight": 3}, now=100.0)  # its users had 3 requests in flight then
    c.mark_lost("w9", now=104.5)
    lost = c.lost_workers(stop_time=110.0)
    assert lost == [{"worker": "w9", "last_report": 100.0, "lost_at": 104.5, "records_received": 1,
                     "in_flight_at_last_report": 3, "window_at_risk_s": 4.5, "window_at_risk": [100.0, 104.5]}]
    assert c.pending(["w9"]) == ["w9"]
    workers = c.workers_summary(110.0, loss_allowed=False)
    assert workers["unrecorded_requests_at_least"] == 3 and workers["loss_allowed"] is False


def test_a_worker_that_came_back_and_was_lost_at_the_stop_is_at_risk_from_its_last_payload() -> None:
    """Marked missing (a partition), its queued payloads arrived when it healed, then its final
    data never came: the window runs from its last payload to the ask for final data, not 0 s
    (the mark before it came back ended a window that began after it)."""
    c = Collector()
    s = Shipper("w9")
    s.add(rec(1))
    c.receive(s.payload(), now=100.0)
    c.mark_lost("w9", now=110.0)  # missed heartbeats
    s.add(rec(2))
    c.receive(s.payload(), now=113.0)  # the partition healed: the queued payload arrives
    c.stopping(["w9"], now=115.0)
    lost = c.lost_workers(stop_time=120.0)
    assert [(w["window_at_risk"], w["records_received"]) for w in lost] == [([113.0, 115.0], 2)]
    c.mark_lost("w9", now=114.0)  # missing again before the stop: its window ends there
    assert c.lost_workers(stop_time=120.0)[0]["window_at_risk"] == [113.0, 114.0]


def test_a_worker_silent_at_the_stop_is_at_risk_until_the_ask_for_final_data() -> None:
    """Not marked missing during the run (the master waits 10 s for heartbeats): its window
    ends when the master asked for final data, not when the wait for it gave up."""
    c = Collector()
    s = Shipper("w9")
    s.add(rec(1))
    c.receive(s.payload(), now=100.0)
    c.stopping(["w9", "w8"], now=106.0)
    c.stopping(["w9"], now=107.0)  # a second caller: the first ask counts
    c.mark_lost("w9", now=112.0)  # missed heartbeats noticed during the wait
    lost = {w["worker"]: w for w in c.lost_workers(stop_time=115.0)}
    assert lost["w9"]["window_at_risk"] == [100.0, 106.0] and lost["w9"]["window_at_risk_s"] == 6.0
    assert lost["w8"]["records_received"] == 0 and lost["w8"]["window_at_risk"] == [106.0, 106.0]


def test_the_web_forms_slos_are_taken_before_the_first_record_only() -> None:
    """Issue 28: SLOs typed into the start form apply from the run's first test: the master's
    collector takes them while it has counted nothing, a worker's shipper takes the master's
    for its next payload, and the merged goodput then counts every SLO."""
    slos = {"ttft": 10_000_000.0}  # 10 ms: records 0..9 (TTFT 1..10 ms) meet it
    worker = Shipper("w1")  # started without --llm-slo
    c = Collector()
    assert worker.use_slos(slos) and c.use_slos(slos)
    for i in range(20):
        worker.add(rec(i))
    c.receive(worker.payload(final=True))
    slo = c.stats.summary()["overall"]["slo"]
    assert slo["limits_ms"] == {"ttft": 10.0} and slo["good_requests"] == 10
    assert not c.use_slos({"ttft": 5_000_000.0}), "counted records keep the SLOs they were counted with"
    assert c.stats.summary()["overall"]["slo"]["limits_ms"] == {"ttft": 10.0}


def test_the_merge_reports_its_lag_and_cpu_per_record() -> None:

    s = Shipper("w1")
    for i in range(3):
        s.add(rec(i))
    p = s.payload()
    p["sent_at"] = time.time() - 0.25  # a quarter second on the way
    c = Collector()
    assert c.merge_state()["payloads"] == 0 and c.merge_state()["lag_p50_s"] is None
    c.receive(p)
    since_sent = time.time() - p["sent_at"]  # the most its lag can be: it was merged before this
    c.receive(p)  # delivered twice: merged once, its lag noted once
    s.add(rec(4))
    c.receive(s.payload(final=True))
    m = c.merge_state()
    assert m["payloads"] == 2 and m["records"] == 4
    assert 0.25 <= m["lag_max_s"] <= round(since_sent, 4) + 1e-4, (m, since_sent)  # that payload's lag: 4 decimals
    assert m["lag_p50_s"] <= m["lag_p99_s"] == m["lag_max_s"]
    assert 0 <= m["cpu_s"] < 1.0 and abs(m["cpu_us_per_record"] * 4e-6 - m["cpu_s"]) <= 5e-5  # cpu_s: 4 decimals
    summary: dict = {"workers": {"reported": ["w1"]}}
    c.add_merge_state(summary)
    assert summary["workers"]["reported"] == ["w1"] and summary["workers"]["merge"]["records"] == 4


def test_a_record_dict_with_a_key_that_is_no_field_still_decodes() -> None:
    d = rec(3).to_dict()
    assert RequestRecord.from_dict(d) == rec(3)
    assert RequestRecord.from_dict({**d, "from_a_newer_version": 1}) == rec(3)
    assert "tpot_ns" in d and RequestRecord.from_dict(d).tpot_ns == d["tpot_ns"]


def test_payloads_out_of_order_count_once_and_the_seen_set_stays_small() -> None:
    """The master keeps, per worker, the highest sequence number below which it has every
    payload and the few above it: constant memory however long the run (issue 33's soak)."""
    s = Shipper("w1")
    payloads = []
    for i in range(50):
        s.add(rec(i))
        payloads.append(s.payload())
    c = Collector()
    for p in payloads[2:10] + payloads[:2] + payloads[5:20] + payloads[10:]:  # late, then twice
        c.receive(p)
    assert c.records == 50 and c.duplicates == 5 + 10 and c.duplicate_payloads == 15
    seqs = c._seqs["w1"]
    assert seqs.upto == 50 and not seqs.above
    assert c.merge_lags.count == 50  # a lag per payload merged, none for the ones delivered twice


def test_gaps_travel_packed_and_the_master_writes_them_as_numbers_one_write_a_payload(tmp_path, monkeypatch) -> None:
    """A payload's records carry their ITL gaps as int64 bytes through Locust's real msgpack
    rpc; the master's requests.jsonl has them back as the same integers, written in one system
    call a payload, and the timeline counts them."""
    import os

    import orjson
    from locust.rpc.protocol import Message

    from llm_users.outputs.records_file import RecordWriter

    sh = Shipper("w1")
    sent = []
    for i in range(5):
        r = rec(i)
        r.itl_ns = [1_000_000 + 7 * i + k for k in range(300)] if i != 2 else []  # one without gaps
        sent.append(r.to_dict())
        sh.add(r)
    wire = Message("llm_data", sh.payload(final=True), "w1").serialize()
    payload = Message.unserialize(wire).data
    import msgpack

    from llm_users.metrics.record_wire import FIELDS
    assert type(payload["records"]) is bytes and payload["record_count"] == 5  # one bin: rows, decoded apart
    assert tuple(payload["record_fields"]) == FIELDS
    rows = msgpack.unpackb(payload["records"])
    itl, pieces, reply = FIELDS.index("itl_ns"), FIELDS.index("pieces"), FIELDS.index("reply")
    assert [type(row[itl]) for row in rows] == [bytes] * 5 and [row[reply] for row in rows] == [None] * 5
    assert len(rows[0][itl]) == 300 * 8 and rows[2][itl] == b""
    # the pieces by arrival second come computed by the worker, and are by_second's
    from llm_users.metrics.by_arrival import record_by_second, unpack_pieces
    assert [list(unpack_pieces(row[pieces])) for row in rows] == [record_by_second(rec_i) for rec_i in
                                                                  (RequestRecord.from_dict(d) for d in sent)]
    writes = []
    real_write = os.write

    def counted(fd: int, data: bytes) -> int:
        writes.append(data.count(b"\n"))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    c = Collector(writer=RecordWriter(tmp_path))
    c.receive(payload)
    monkeypatch.undo()
    c.writer.close()
    lines = [orjson.loads(x) for x in (tmp_path / "requests.jsonl").read_bytes().splitlines()]
    assert [d["itl_ns"] for d in lines] == [d["itl_ns"] for d in sent]
    assert lines == [{**d, "worker": "w1"} for d in sent]
    assert writes == [5] and c.writer.written == 5
    local = Collector()  # the same records kept in one process: the same per-second rows
    for d in sent:
        local.add_record(RequestRecord.from_dict(d))
    rows = c.timeline.rows()
    assert rows == local.timeline.rows()
    itl = [row["itl_p50_ms"] for row in rows if row["itl_p50_ms"] is not None]
    assert itl and all(1.0 <= v <= 1.31 for v in itl) and sum(row["output_tokens_per_s"] for row in rows) == 15


def test_packed_gaps_round_trip_and_a_torn_pack_is_an_error() -> None:
    import pytest

    from llm_users.metrics.record import pack_gaps, unpack_gaps

    gaps = [0, 1, 2**40, 20_000_000, 2**63 - 1]
    packed = pack_gaps(gaps)
    assert packed[:8] == b"\0" * 8 and packed[8:16] == b"\1" + b"\0" * 7  # little-endian int64
    assert unpack_gaps(packed).tolist() == gaps
    with pytest.raises(ValueError, match="17 bytes"):
        unpack_gaps(packed[:17])
    d = rec(1).to_dict()
    merged = RequestRecord.from_dict({**d, "itl_ns": pack_gaps(d["itl_ns"])})
    assert merged.to_dict() == d and type(merged.to_dict()["itl_ns"]) is list


def record(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", name="n", backend="b", model="m", start_time=float(i))


def test_shipper_keeps_records_until_the_master_confirms() -> None:
    s = Shipper("w1")
    for i in range(3):
        s.add(record(i))
    p1 = s.payload()
    s.add(record(3))
    p2 = s.payload()
    s.add(record(4))  # not shipped yet
    assert [d["request_id"] for d in s.unconfirmed_records()] == ["r0", "r1", "r2", "r3", "r4"]
    s.confirm(p1["seq"])
    assert s.confirmed == 3
    assert [d["request_id"] for d in s.unconfirmed_records()] == ["r3", "r4"]
    s.confirm(p1["seq"])  # twice: counted once
    s.confirm(p2["seq"])
    assert s.confirmed == 4
    assert [d["request_id"] for d in s.unconfirmed_records()] == ["r4"]
