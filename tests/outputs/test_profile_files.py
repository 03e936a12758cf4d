"""outputs/profile_files.py: the files the load profiles derive from the final summary (a stage
plan's stages.csv and pareto.csv) written beside summary.json, and none without a report
directory or without stages."""

from __future__ import annotations

from pathlib import Path

from llm_users.load.pareto import pareto_csv
from llm_users.load.stages import stages_csv
from llm_users.metrics import StatsByName
from llm_users.outputs.final import FinalData
from llm_users.outputs.profile_files import PROFILE_FILES

STAGES = [{"index": i, "users": u, "settle_s": 1.0, "measured_s": 10.0, "requests": 10 * u, "excluded": 1,
           "requests_per_s": float(u), "output_tokens_per_s": 30.0 * u, "ttft": {"p50": 20.0 + u, "p99": 40.0 + u}}
          for i, u in enumerate((2, 4))]


def _final(summary: dict) -> FinalData:
    return FinalData(summary, [], StatsByName())


def test_a_stage_plan_writes_its_stages_and_pareto_files(tmp_path: Path) -> None:
    PROFILE_FILES.write(_final({"stages": STAGES}), str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pareto.csv", "stages.csv"]
    stages = (tmp_path / "stages.csv").read_text()
    assert stages == stages_csv(STAGES) and stages.splitlines()[1].startswith("0,users,2,1,10,20,1,")
    assert (tmp_path / "pareto.csv").read_text() == pareto_csv(STAGES, "users")
    assert PROFILE_FILES.name == "profile_files"


def test_nothing_without_a_directory_or_without_stages(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    PROFILE_FILES.write(_final({"stages": STAGES}), None)
    PROFILE_FILES.write(_final({"overall": {"requests": 3}}), str(tmp_path))
    assert list(tmp_path.iterdir()) == []
