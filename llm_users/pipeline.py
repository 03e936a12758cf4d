"""The record pipeline: the ordered sinks every finished request's record passes through, once.

Local, worker and master runs share it. A run's records enter at one place (a local run's
``llm_response`` listener, a worker's, or the master's merge of worker payloads) and each sink
of each stage, in :data:`STAGES` order, keeps the record:

- ``statistics``: the exact statistics (and the live view's), deferred to a quiet event loop
  (:class:`~llm_users.health.idle.IdleQueue`); records that arrive with their statistics in
  wire form (the master's merge of a worker payload) enter after this stage;
- ``counts``: labels, records kept, back-off waits;
- ``timeline``: the per-second series;
- ``observers``: what load profiles, the workload summary and the cost meter watch;
- ``live``: the web UI's live counters;
- ``records_file``: requests.jsonl, last, so it writes what every sink before it saw;
- ``ship``: a worker's buffer for the master.

Adding a consumer of records is one ``pipeline.add(stage, sink)``; nothing else fans out.
"""

from __future__ import annotations

from collections.abc import Callable

from llm_users.metrics import RequestRecord

Sink = Callable[[RequestRecord], None]

STAGES = ("statistics", "counts", "timeline", "observers", "live", "records_file", "ship")


class RecordPipeline:
    """Ordered stages of sinks; :meth:`keep` gives a record to each sink once, in order."""

    __slots__ = ("_stages",)

    def __init__(self) -> None:
        self._stages: dict[str, list[Sink]] = {name: [] for name in STAGES}

    def add(self, stage: str, sink: Sink) -> None:
        self.stage(stage).append(sink)

    def stage(self, name: str) -> list[Sink]:
        """A stage's sinks (the list itself: appending to it adds a sink)."""
        try:
            return self._stages[name]
        except KeyError:
            raise ValueError(f"unknown record stage {name!r}: one of {', '.join(STAGES)}") from None

    def sinks(self, after: str | None = None) -> list[Sink]:
        """Every sink in stage order; ``after``: only those of the stages after that one."""
        names = STAGES if after is None else STAGES[STAGES.index(after) + 1:]
        return [sink for name in names for sink in self._stages[name]]

    def keep(self, rec: RequestRecord, after: str | None = None) -> None:
        """Every sink keeps ``rec``, in order; ``after``: only the stages after that one."""
        for sink in self.sinks(after):
            sink(rec)

    def keep_all(self, records: list[RequestRecord], after: str | None = None) -> None:
        """:meth:`keep` of each record in turn (the master's merge of a payload: its sinks
        looked up once, not once a record)."""
        sinks = self.sinks(after)
        for rec in records:
            for sink in sinks:
                sink(rec)
