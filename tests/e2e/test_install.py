"""Issue 12: a non-editable ``pip install .`` into a fresh venv carries the shipped datasets, and
``locust -f locustfiles/vllm.py --headless -u 4 -t 10s`` runs from another directory with it.

Offline and fast: the fresh venv sees the test venv's site-packages (the dependencies) through
a ``.pth`` path line, which does not run the editable install's finder, and the project is
built with ``--no-build-isolation --no-deps --no-index``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow


def test_pip_install_then_run_from_elsewhere(tmp_path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # the venv's own (older) setuptools would shadow the test venv's for the build
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], capture_output=True, timeout=120)
    build = tmp_path / "src"  # build from a copy: pip builds in-tree
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], check=True,
                           capture_output=True, text=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            dst = build / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    proc = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                           str(build)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([py, "-c", "from importlib import resources; import llm_users.webui.tab as t; print(t.__file__); print(t.SCRIPT); print(t.ECHARTS); "
                           "print(resources.files('llm_users.data') / 'prompts' / 'short.json')"],
                           cwd=elsewhere, check=True, capture_output=True, text=True).stdout.split()
    assert all(w.startswith(site) for w in where), where  # the installed copy, not the worktree
    assert Path(where[2]).stat().st_size > 500_000, where  # the web UI's charting library is installed too
    report = tmp_path / "r"
    proc = subprocess.run([py, "-m", "locust", "-f", str(ROOT / "locustfiles" / "vllm.py"), "--headless",
                           "-u", "4", "-t", "10s", "--only-summary", "--llm-report", str(report),
                           "--llm-sim-args", "--ttft-ms 20 --itl-ms 2 --output-tokens 32"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((report / "summary.json").read_text())
    assert summary["overall"]["failures"] == 0
    assert summary["overall"]["requests"] >= 20
    assert summary["workload"]["source"]["path"] == "package:llm_users/data/prompts/short.json"
