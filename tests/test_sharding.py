"""tests/sharding.py: files dealt to shards by their seconds, the real tier kept whole, the
serial tests' files found without collecting the suite."""

from __future__ import annotations

from pathlib import Path

from tests.sharding import deal, group_of, serial_args


def test_groups_are_files_and_the_real_tier_is_one() -> None:
    assert group_of("tests/e2e/test_a.py::test_x[raw]") == "tests/e2e/test_a.py"
    assert group_of("tests/real/test_llamacpp.py::test_y") == group_of("tests/real/test_litellm.py::t") == "tests/real"


def test_longest_first_to_the_least_loaded_shard() -> None:
    groups = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 40.0, "e": 10.0}
    where = deal(groups, 2)
    load = [sum(s for g, s in groups.items() if where[g] == k) for k in range(2)]
    assert where == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1} and load == [140.0, 120.0]
    assert deal(groups, 2) == where  # every shard process computes the same deal
    assert set(deal(groups, 3).values()) == {0, 1, 2}


def test_serial_args_keep_options_and_name_only_marked_files(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("import pytest\npytestmark = pytest.mark.serial\n")
    (tmp_path / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_c.py").write_text("@pytest.mark.serial\ndef test_c():\n    pass\n")
    assert serial_args([str(tmp_path), "-k", "x"]) == [str(tmp_path / "sub" / "test_c.py"),
                                                       str(tmp_path / "test_a.py"), "-k", "x"]
