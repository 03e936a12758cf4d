"""Finished records as a worker's payload carries them to the master: one msgpack ``bin`` of rows.

A row is a record's fields in declaration order (:data:`FIELDS`; the names travel with the
batch, so a master of another version still reads what it knows), with its ITL gaps packed as
little-endian int64 bytes (:func:`~llm_users.metrics.record.pack_gaps`), its tokens and gaps by
arrival second computed by the worker (``pieces``, :func:`~llm_users.metrics.by_arrival.record_by_second`,
packed the same way: :func:`~llm_users.metrics.by_arrival.pack_pieces`) and ``reply`` left out.
The master neither builds hundreds of integers per record nor splits a record into seconds
(issue 34: the master's merge).

Why rows in a ``bin`` of their own, decoded apart with tuples: as maps inside Locust's rpc
message (``Message.unserialize``: lists, and an ``object_hook`` call per map), a payload of 40
records of 512 gaps took the master 38 µs a record to decode, most of it the cyclic garbage
collector walking the lists it had just built (10.6 µs with the collector off); as rows of
tuples (``use_list=False``: tuples of plain values the collector soon stops tracking) 5 µs,
and a row makes its record positionally, with no dict in between (docs/benchmarks.md, "merge").
Lists inside a record (``sampling_issues``) arrive as tuples: the same JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import msgpack

from llm_users.metrics.by_arrival import pack_pieces, record_by_second
from llm_users.metrics.record import RequestRecord, pack_gaps, unpack_gaps

#: Every field of a record, in declaration order: a row's columns.
FIELDS: tuple[str, ...] = tuple(RequestRecord.__dataclass_fields__)
_VALUES = attrgetter(*FIELDS)
_ITL = FIELDS.index("itl_ns")
_REPLY = FIELDS.index("reply")
_PIECES = FIELDS.index("pieces")


def pack(records: Iterable[RequestRecord]) -> bytes:
    """The rows of ``records``, msgpack-encoded: a payload's ``records``."""
    rows = []
    for rec in records:
        row = list(_VALUES(rec))
        row[_ITL] = pack_gaps(rec.itl_ns)
        row[_REPLY] = None  # kept for a session's next turn, never shipped
        row[_PIECES] = pack_pieces(record_by_second(rec)) if rec.ok else None  # a failure: its end only
        rows.append(row)
    return msgpack.packb(rows, use_bin_type=True)


def unpack(data: bytes, fields: Sequence[str]) -> list[RequestRecord]:
    """:func:`pack`'s rows, whose columns are ``fields``, as records (their gaps an ``array("q")``).
    Columns this version does not know are left out; fields it has that the sender lacks take
    their defaults."""
    rows = msgpack.unpackb(data, use_list=False, raw=False)
    make = RequestRecord if tuple(fields) == FIELDS else _by_name(fields)
    out = []
    for row in rows:
        rec = make(*row)
        rec.itl_ns = unpack_gaps(rec.itl_ns)  # pack() always packs them
        out.append(rec)
    return out


def _by_name(fields: Sequence[str]) -> Any:
    """A maker of records from rows whose columns differ from :data:`FIELDS` (another version)."""
    known = set(FIELDS)
    keep = [(i, f) for i, f in enumerate(fields) if f in known]

    def make(*row: Any) -> RequestRecord:
        return RequestRecord(**{f: row[i] for i, f in keep})
    return make
