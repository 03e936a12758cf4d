"""Records as a payload carries them (llm_users/metrics/record_wire.py): through Locust's real
rpc encoding, every field comes back, the records file's line is the same, a master of
another version reads what it knows."""

from __future__ import annotations

from array import array

import msgpack
import orjson
from locust.rpc.protocol import Message

from llm_users.metrics import RequestRecord, record_wire
from llm_users.metrics.by_arrival import record_by_second
from llm_users.outputs.records_file import RecordWriter


def full_record(i: int) -> RequestRecord:
    """A record with every kind of field set: nested dicts, a list, floats, booleans, None."""
    r = RequestRecord(request_id=f"r{i}", name="/v1/chat/completions", backend="vllm", model="m",
                      start_time=1_800_000_000.25 + i)
    r.t0_ns, r.ttfb_ns, r.ttft_ns, r.ttfo_ns, r.ttst_ns = 5, 90_000_000, 100_000_000, 100_000_000, 120_000_000
    r.itl_ns = [20_000_000 + k for k in range(40)]
    r.e2e_ns = r.ttft_ns + sum(r.itl_ns) + 1234
    r.chunks, r.output_chars, r.input_tokens, r.output_tokens = 41, 164, 300, 41
    r.tokens_source = r.input_tokens_source = "usage"
    r.finish_reason, r.http_status = "length", 200
    r.sampling_issues = ["eos_ignored"]
    r.server = {"queue_ms": 1.5, "nested": {"a": [1, 2]}}
    r.server_timings = {"prompt_ms": 12.25}
    r.reply = ["not", "shipped"]
    r.user, r.stage, r.backoff_s, r.tool_call, r.structured_valid = 3, 2, 0.5, True, False
    r.image_count, r.image_bytes = 1, 4096
    return r


def through_rpc(records: list[RequestRecord]) -> list[RequestRecord]:
    """Packed by a worker, carried by Locust's msgpack rpc, unpacked by a master."""
    msg = {"records": record_wire.pack(records), "record_fields": record_wire.FIELDS}
    data = Message.unserialize(Message("llm_data", msg, "w1").serialize()).data
    return record_wire.unpack(data["records"], data["record_fields"])


def test_every_field_comes_back_and_the_records_file_line_is_the_same(tmp_path) -> None:
    sent = [full_record(i) for i in range(3)]
    failed = full_record(3)
    failed.status, failed.error_category, failed.itl_ns, failed.ttft_ns = "error", "http_503", [], None
    sent.append(failed)
    got = through_rpc(sent)
    assert [type(r.itl_ns) for r in got] == [array] * 4 and got[3].itl_ns.tolist() == []
    as_json = lambda recs: [orjson.loads(orjson.dumps(r.to_dict())) for r in recs]  # noqa: E731 (lists arrive as tuples)
    assert as_json(got) == as_json(sent)
    assert [r.reply for r in got] == [None] * 4  # a session's text stays on its worker
    # the pieces by arrival second come as the worker computed them; a failure has none
    assert [type(r.pieces) for r in got] == [bytes] * 3 + [type(None)]  # packed, unpacked by each reader
    assert [list(record_by_second(r)) for r in got[:3]] == [record_by_second(r) for r in sent[:3]]
    assert len(record_by_second(sent[0])) >= 2  # the 40 gaps of 20 ms span seconds
    w, direct = RecordWriter(tmp_path / "merged"), RecordWriter(tmp_path / "direct")
    for r in got:
        w.write(r)
    for r in sent:
        r.reply = None
        direct.write(r)
    w.close()
    direct.close()
    merged_lines = (tmp_path / "merged" / "requests.jsonl").read_bytes()
    assert merged_lines == (tmp_path / "direct" / "requests.jsonl").read_bytes()
    assert orjson.loads(merged_lines.splitlines()[0])["sampling_issues"] == ["eos_ignored"]


def test_a_master_of_another_version_reads_the_columns_it_knows() -> None:
    """Rows from a worker with a column this master lacks and without one it has."""
    fields = [f for f in record_wire.FIELDS if f != "image_bytes"] + ["from_the_future"]
    rows = []
    for r in (full_record(0), full_record(1)):
        d = dict(zip(record_wire.FIELDS, (getattr(r, f) for f in record_wire.FIELDS), strict=True))
        d["itl_ns"] = b"".join(g.to_bytes(8, "little") for g in r.itl_ns)
        d["reply"] = d["pieces"] = None
        rows.append([d.get(f, "x") for f in fields])
    got = record_wire.unpack(msgpack.packb(rows), fields)
    assert [r.request_id for r in got] == ["r0", "r1"]
    assert got[0].image_bytes == 0 and got[0].image_count == 1  # the missing column: its default
    assert got[1].itl_ns.tolist() == full_record(1).itl_ns and got[1].server == {"queue_ms": 1.5, "nested": {"a": (1, 2)}}
