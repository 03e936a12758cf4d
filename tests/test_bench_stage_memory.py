"""bench/stage_memory.py: what each finished stage keeps is its frozen block and little else.

The bench runs as its own process, as a user runs it: ``tracemalloc`` counts the whole process,
and run inside a shard after other files it read 13.35 kB a stage where the book keeps 7.3
(ci13): what earlier tests left running or set counted with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "stage_memory.py"


def test_a_finished_stage_keeps_about_its_frozen_block() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--first", "3", "--more", "6", "--records", "200", "--gaps", "50",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["stages_measured"] == 6 and out["frozen_block_kb"] is not None
    # before the freeze, 58 kB a stage of this shape (packed distributions and counters as objects)
    assert 0.5 * out["frozen_block_kb"] < out["kb_per_stage"] < out["frozen_block_kb"] + 3.0, out
    assert out["kb_per_stage"] < 15.0, out
