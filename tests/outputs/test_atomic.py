"""Issue 54 item 6: the files written at the stop are whole or absent (outputs/atomic.py), never
cut where the disk filled. The writers run in a child process under a file-size limit
(``RLIMIT_FSIZE``: a write past it fails with EFBIG, as a full disk fails with ENOSPC)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_users.outputs.atomic import atomic_open, write_atomic

LIMIT = 4096

# Each writer of today's API, under the limit, into a directory holding a previous run's files;
# what each raised is printed as JSON.
CHILD = f"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, resource.RLIM_INFINITY))
from pathlib import Path
from llm_users.outputs.files import write_summary, write_timeseries
from llm_users.health.master_watch import write_unshipped
d = Path(sys.argv[1])
out = {{}}
def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except OSError as e:
        out[name] = [e.errno, e.filename]
attempt("summary", lambda: write_summary(d, {{"pad": "x" * 3 * {LIMIT}, "by_name": {{}}, "overall": {{}}}}))
attempt("timeseries", lambda: write_timeseries(d, [{{"t": i, "requests": i}} for i in range(2000)]))
out["unshipped"] = write_unshipped(d / "llm-unshipped-w1.jsonl", [{{"request_id": "r" * 100}}] * 100)
print(json.dumps(out))
"""


def test_a_file_past_the_limit_is_not_left_cut(tmp_path: Path) -> None:
    before = {"summary.json": b'{"previous": "run"}\n', "timeseries.csv": b"t\n0\n"}
    for name, data in before.items():
        (tmp_path / name).write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout)
    assert said["summary"] == [errno.EFBIG, str(tmp_path / "summary.json")]  # the file the user knows
    assert said["timeseries"] == [errno.EFBIG, str(tmp_path / "timeseries.csv")]
    assert said["unshipped"] == "File too large"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["summary.json", "timeseries.csv"], names  # no temporary file, no cut unshipped file
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data  # the previous run's whole file, untouched


def test_a_failure_inside_the_block_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    with pytest.raises(RuntimeError), atomic_open(target, "w") as f:
        f.write("<html>half")
        raise RuntimeError("the page's rendering failed")
    assert list(tmp_path.iterdir()) == []


def test_a_whole_write_replaces_and_keeps_the_usual_mode(tmp_path: Path) -> None:
    target = tmp_path / "summary.csv"
    target.write_text("old\n")
    assert write_atomic(target, "name,requests\n") == target
    assert target.read_text() == "name,requests\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not mkstemp's 0600


def test_only_whole_file_modes() -> None:
    with pytest.raises(ValueError, match="mode"), atomic_open("x", "a"):
        pass
