"""workload/dataset_source.py: a dataset as a request source: each lane walks the items in order
from its own offset, wrapping around; an item's max tokens and images go with it, and a ShareGPT
conversation's later user turns ride in ``meta["followups"]``."""

from __future__ import annotations

from llm_users.protocols.images import Image
from llm_users.workload.dataset_source import DatasetSource
from llm_users.workload.datasets import Dataset, Item


def _item(text: str, **kw) -> Item:
    return Item(({"role": "user", "content": text},), **kw)


def _dataset(fmt: str, *items: Item) -> Dataset:
    return Dataset("mine", "/data/mine.jsonl", "ab" * 32, fmt, tuple(items))


def _texts(lane, n: int) -> list[str]:
    return [lane.next().messages[-1]["content"] for _ in range(n)]


def test_each_lane_walks_the_items_from_its_own_offset() -> None:
    source = DatasetSource(_dataset("jsonl", _item("a"), _item("b"), _item("c")))
    assert _texts(source.lane(0), 4) == ["a", "b", "c", "a"]
    assert _texts(source.lane(1), 3) == ["b", "c", "a"]
    assert _texts(source.lane(5), 2) == ["c", "a"]  # the offset wraps too
    assert source.kind == "dataset"


def test_an_item_carries_its_max_tokens_and_images_and_a_fresh_copy_of_its_messages() -> None:
    png = Image("image/png", "AAAA", 8, 8)
    ds = _dataset("jsonl", _item("look", max_tokens=32, images=(png,)), _item("plain"))
    lane = DatasetSource(ds).lane(0)
    first = lane.next()
    assert (first.max_tokens, first.images, first.meta) == (32, (png,), {})
    first.messages[0]["content"] = "changed"  # a sender's own copy
    second = lane.next()
    assert (second.max_tokens, second.images) == (None, ())
    assert lane.next().messages == [{"role": "user", "content": "look"}]


def test_sharegpt_followups_ride_in_meta() -> None:
    ds = _dataset("sharegpt", _item("hi", followups=("and then?", "thanks")), _item("solo"))
    lane = DatasetSource(ds).lane(0)
    assert lane.next().meta == {"followups": ("and then?", "thanks")}
    assert lane.next().meta == {"followups": ()}  # one user turn: a session of it ends there


def test_describe_is_the_datasets() -> None:
    ds = _dataset("jsonl", _item("a"), _item("b"))
    assert DatasetSource(ds).describe() == {"kind": "dataset", "name": "mine", "path": "/data/mine.jsonl",
                                            "sha256": "ab" * 32, "format": "jsonl", "items": 2, "skipped": 0}
