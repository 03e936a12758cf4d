"""A dataset as a request source: each lane walks the items in order from its own offset."""

from __future__ import annotations

from typing import Any

from llm_users.workload.datasets import Dataset
from llm_users.workload.source import Lane, RequestSource, WorkItem


class DatasetSource(RequestSource):
    kind = "dataset"

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def lane(self, index: int) -> Lane:
        return DatasetLane(self.dataset, index)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.dataset.describe()}


class DatasetLane(Lane):
    def __init__(self, dataset: Dataset, start: int) -> None:
        self.items = dataset.items
        self.sharegpt = dataset.format == "sharegpt"
        self.i = start % len(self.items)

    def next(self) -> WorkItem:
        item = self.items[self.i]
        self.i = (self.i + 1) % len(self.items)
        meta = {"followups": item.followups} if self.sharegpt else {}
        return WorkItem(item.first(), max_tokens=item.max_tokens, meta=meta, images=item.images)
