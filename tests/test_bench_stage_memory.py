"""bench/stage_memory.py: what each finished stage keeps is its frozen block and little else."""

from __future__ import annotations

from bench.stage_memory import measure


def test_a_finished_stage_keeps_about_its_frozen_block() -> None:
    out = measure(first=3, more=6, records=200, gaps=50)
    assert out["stages_measured"] == 6 and out["frozen_block_kb"] is not None
    # before the freeze, 58 kB a stage of this shape (packed distributions and counters as objects)
    assert 0.5 * out["frozen_block_kb"] < out["kb_per_stage"] < out["frozen_block_kb"] + 3.0, out
    assert out["kb_per_stage"] < 15.0, out
