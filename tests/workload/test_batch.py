"""workload/batch.py: the batch lane of the embeddings and rerank routes (``--llm-batch-size`` items
per request, their texts in ``meta["inputs"]``)."""

from __future__ import annotations

from llm_users.workload.batch import BatchLane, batch_inputs
from llm_users.workload.source import Lane, WorkItem


class _Count(Lane):
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> WorkItem:
        self.n += 1
        return WorkItem([{"role": "user", "content": f"text {self.n}"}], target_input_tokens=2, prefix_id=self.n)


def test_batch_lane_takes_n_items_per_request() -> None:
    lane = BatchLane(_Count(), 3)
    first, second = lane.next(), lane.next()
    assert batch_inputs(first) == ("text 1", "text 2", "text 3") and batch_inputs(second)[0] == "text 4"
    assert first.target_input_tokens == 6 and first.prefix_id == 1
    assert batch_inputs(WorkItem([])) == () and batch_inputs(None) == ()
