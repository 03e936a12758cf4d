"""What every output is handed at the stop, and what an output is.

:class:`FinalData` is the merged result of a run (master or local runner), built once when
the test stops; an output (:class:`Output`) is one object with a ``name`` and
``write(final, directory)`` (``directory`` is ``--llm-report``, None without it), listed in
:mod:`.registry`. Outputs read the final data only, never the live run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from llm_users.metrics import StatsByName


@dataclass(frozen=True, slots=True)
class FinalData:
    """The merged result of a run: its summary dict, per-second rows and statistics."""

    summary: dict[str, Any]
    timeline_rows: list[dict[str, Any]]
    stats: StatsByName


class Output(Protocol):
    """One output of a run, written once at the stop."""

    name: str

    def write(self, final: FinalData, directory: str | None) -> None:
        """Write (or print) this output; ``directory`` is the report directory, None without one."""


def apply_summary_hooks(hooks: list[Callable[[dict[str, Any]], None]], summary: dict[str, Any]) -> None:
    """Each summary hook adds its part to ``summary``; one that raises is one error line (with
    its traceback in the log) and the rest of the summary, and every output, still comes."""
    for hook in hooks:
        try:
            hook(summary)
        except Exception:
            logging.getLogger(__name__).exception(
                "locust-llm: a summary part failed (%s); the rest of the summary and the report go on",
                getattr(hook, "__qualname__", repr(hook)))
