"""The command prefixes that set the scheduling priority of a process the bench starts."""

from __future__ import annotations


def priority_prefix(priority: str) -> list[str]:
    """Command prefix for a priority. On a shared machine other jobs would otherwise take the
    cores and delay the reads being measured: ``rt`` (SCHED_FIFO 1, needs root) lets them run
    only in the cores' idle time; ``nice`` (-10) only weighs the scheduler; ``normal`` (or
    anything else) leaves it."""
    if priority == "rt":
        return ["chrt", "-f", "1"]
    if priority == "nice":
        return ["nice", "-n", "-10"]
    return []
