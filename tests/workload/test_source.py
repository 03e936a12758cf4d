"""workload/source.py: the request-source interface's defaults: a work item's own meta, a source
that needs no preparing, and a wrapped source that prepares through the one it wraps and keeps
its kind unless it names its own."""

from __future__ import annotations

from llm_users.workload.source import Lane, RequestSource, WorkItem, WrappedSource


class _Lane(Lane):
    def next(self) -> WorkItem:
        return WorkItem([{"role": "user", "content": "hi"}])


class _Measured(RequestSource):
    kind = "synthetic"

    def __init__(self) -> None:
        self.probes: list[object] = []

    def lane(self, index: int) -> Lane:
        return _Lane()

    def needs_prepare(self) -> bool:
        return True

    def prepare(self, probe) -> None:
        self.probes.append(probe)


class _Plain(WrappedSource):
    def lane(self, index: int) -> Lane:
        return self.inner.lane(index)


class _Named(WrappedSource):
    kind = "sessions"

    def lane(self, index: int) -> Lane:
        return self.inner.lane(index)


def test_a_work_items_defaults_and_its_own_meta() -> None:
    a, b = WorkItem([]), WorkItem([])
    a.meta["inputs"] = ("x",)
    assert b.meta == {} and b.images == () and b.max_tokens is None and not b.wants_reply and b.think_s == 0.0


def test_a_source_needs_no_preparing_and_says_its_kind() -> None:
    class Bare(RequestSource):
        def lane(self, index: int) -> Lane:
            return _Lane()

    bare = Bare()
    assert not bare.needs_prepare() and bare.describe() == {"kind": "source"}
    bare.prepare(object())  # a no-op hook
    lane = bare.lane(0)
    item = lane.next()
    assert lane.reply(item, "text") is None and lane.reply(item, None) is None  # optional


def test_a_wrapped_source_prepares_through_the_inner_and_keeps_its_kind() -> None:
    inner = _Measured()
    plain, named = _Plain(inner), _Named(inner)
    assert plain.kind == "synthetic" and plain.describe() == {"kind": "synthetic"}
    assert named.kind == "sessions" and _Plain(named).kind == "sessions"
    assert plain.needs_prepare() and _Named(_Plain(inner)).needs_prepare()
    probe = object()
    _Named(plain).prepare(probe)
    assert inner.probes == [probe]
    assert _Measured.kind == "synthetic" and RequestSource.kind == "source"  # no class changed
