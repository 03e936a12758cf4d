"""Batches for the embeddings and rerank routes: ``--llm-batch-size`` workload items per request.

:class:`BatchLane` wraps a sender's lane: each ``next()`` takes N items from it (synthetic exact
lengths or dataset rows, whatever the workload is) and returns one :class:`WorkItem` whose
``meta["inputs"]`` holds their texts (each item's messages as one text,
:func:`~llm_users.protocols.embed.message_text`); its target input tokens are the sum of the
items' targets when every item has one. Replies are not handed back (a batch is not a turn).
"""

from __future__ import annotations

from llm_users.protocols.embed import message_text
from llm_users.workload.source import Lane, WorkItem


class BatchLane(Lane):
    def __init__(self, inner: Lane, size: int) -> None:
        self.inner = inner
        self.size = size

    def next(self) -> WorkItem:
        items = [self.inner.next() for _ in range(self.size)]
        targets = [it.target_input_tokens for it in items]
        return WorkItem(
            messages=items[0].messages,
            target_input_tokens=sum(t for t in targets if t is not None) if None not in targets else None,
            prefix_id=items[0].prefix_id,
            meta={"inputs": tuple(message_text(it.messages) for it in items)},
        )


def batch_inputs(item: WorkItem | None) -> tuple[str, ...]:
    """The texts a batch item carries (empty for a plain item)."""
    if item is None:
        return ()
    inputs = item.meta.get("inputs")
    return tuple(inputs) if inputs else ()
