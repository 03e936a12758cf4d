"""Shared harness for the protocol parser tests: fixtures on disk, whole/split/byte-wise feeding,
and a summary of events that tests compare exactly."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llm_users.protocols.base import Content, Event, Finish, ModelName, ServerError, Usage

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass
class Summary:
    text: str = ""
    reasoning: str = ""
    tool: str = ""  # tool-call arguments (Content(tool=True)), apart from the text
    chunks: int = 0  # token-bearing Content events (output, reasoning or tool call)
    usage: Usage | None = None  # the merged view: later fields replace earlier ones
    finishes: list[str] = field(default_factory=list)
    errors: list[ServerError] = field(default_factory=list)
    complete: bool = False
    models: list[str] = field(default_factory=list)  # ModelName events: at most one per stream


def merge_usage(old: Usage | None, new: Usage) -> Usage:
    if old is None:
        return new
    return Usage(
        input_tokens=new.input_tokens if new.input_tokens is not None else old.input_tokens,
        output_tokens=new.output_tokens if new.output_tokens is not None else old.output_tokens,
        reasoning_tokens=new.reasoning_tokens if new.reasoning_tokens is not None else old.reasoning_tokens,
        server=new.server if new.server is not None else old.server,
    )


def summarize(events: list[Event], complete: bool) -> Summary:
    s = Summary(complete=complete)
    for ev in events:
        if isinstance(ev, Content):
            assert ev.text, "a Content event must carry non-empty text"
            s.chunks += 1
            if ev.reasoning:
                s.reasoning += ev.text
            elif ev.tool:
                s.tool += ev.text
            else:
                s.text += ev.text
        elif isinstance(ev, Usage):
            s.usage = merge_usage(s.usage, ev)
        elif isinstance(ev, Finish):
            s.finishes.append(ev.reason)
        elif isinstance(ev, ServerError):
            s.errors.append(ev)
        elif isinstance(ev, ModelName):
            s.models.append(ev.name)
            assert len(s.models) == 1, "the model is reported once per stream"
        else:  # pragma: no cover
            raise AssertionError(f"unknown event {ev!r}")
    return s


def read_fixture(protocol: str, name: str) -> bytes:
    return (FIXTURES / protocol / name).read_bytes()


def parse_whole(factory: Callable[[], Any], data: bytes) -> tuple[list[Event], bool]:
    p = factory()
    events = p.feed(data) + p.close()
    return events, p.complete


def check_transcript(factory: Callable[[], Any], data: bytes) -> Summary:
    """Parse ``data`` whole, then cut at every byte position, then one byte at a time; every
    way must give the same events and the same ``complete``. Returns the summary."""
    events, complete = parse_whole(factory, data)
    for i in range(len(data) + 1):
        p = factory()
        got = p.feed(data[:i]) + p.feed(data[i:]) + p.close()
        assert got == events, f"cut at byte {i} changed the events"
        assert p.complete == complete, f"cut at byte {i} changed complete"
    p = factory()
    got = []
    for i in range(len(data)):
        got += p.feed(data[i : i + 1])
    got += p.close()
    assert got == events, "byte-at-a-time feeding changed the events"
    assert p.complete == complete
    p = factory()  # a piece per frame, as servers write (the parsers' per-chunk fast path)
    got = [e for piece in re.split(rb"(?<=\n\n)|(?<=\r\n\r\n)", data) if piece for e in p.feed(piece)] + p.close()
    assert got == events, "feeding a frame at a time changed the events"
    assert p.complete == complete
    return summarize(events, complete)


def check_truncated(factory: Callable[[], Any], data: bytes, terminator: bytes) -> None:
    """Every prefix that stops before the terminator's line leaves ``complete`` false."""
    end = data.index(terminator)
    assert end > 0
    for i in range(0, end + 1):
        p = factory()
        p.feed(data[:i])
        p.close()
        assert not p.complete, f"prefix of {i} bytes claimed complete"


class Harness:
    """What the tests get through the ``harness`` fixture (no imports from conftest needed)."""

    read = staticmethod(read_fixture)
    parse = staticmethod(parse_whole)
    summarize = staticmethod(summarize)
    check = staticmethod(check_transcript)
    check_truncated = staticmethod(check_truncated)


@pytest.fixture(scope="session")
def harness() -> Harness:
    return Harness()
