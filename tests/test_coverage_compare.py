"""tests/coverage_compare.py: line sets compared across checkouts, a lost line named and failing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.coverage_compare import covered, lost, main, package_path


def _report(files: dict[str, list[int]], statements: int = 10) -> dict:
    return {"files": {p: {"executed_lines": lines, "summary": {"num_statements": statements}}
                      for p, lines in files.items()}}


def test_paths_compare_from_the_package_down() -> None:
    assert package_path("/tmp/a/llm_users/client/stream.py") == "llm_users/client/stream.py"
    assert package_path("llm_users/run.py") == "llm_users/run.py"
    assert package_path("/x/exporters/nvml.py") == "exporters/nvml.py"
    # the innermost package directory wins: a checkout inside a directory named like one
    assert package_path("/llm_users/clone/llm_users/run.py") == "llm_users/run.py"


def test_a_line_covered_only_before_is_lost_and_moves_are_not() -> None:
    before = covered(_report({"/old/llm_users/a.py": [1, 2, 3], "/old/llm_users/b.py": [5]}))
    after = covered(_report({"/new/llm_users/a.py": [1, 3, 4], "/new/llm_users/b.py": [5, 6]}))
    assert lost(before, after) == {"llm_users/a.py": [2]}
    assert lost(after, before) == {"llm_users/a.py": [4], "llm_users/b.py": [6]}
    assert lost(before, before) == {}


def test_the_command_prints_totals_and_fails_on_a_lost_line(tmp_path: Path, capsys) -> None:
    b, a = tmp_path / "b.json", tmp_path / "a.json"
    b.write_text(json.dumps(_report({"/o/llm_users/a.py": [1, 2]})))
    a.write_text(json.dumps(_report({"/n/llm_users/a.py": [1, 2, 3]})))
    assert main([str(b), str(a)]) == 0
    out = capsys.readouterr().out
    assert "before: 2 of 10 statements covered (20.00%)" in out and "after: 3 of 10" in out
    assert main([str(a), str(b)]) == 1
    assert "covered before, not after: llm_users/a.py: 3" in capsys.readouterr().out
