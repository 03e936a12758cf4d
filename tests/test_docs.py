"""Every path and module the user docs name exists (issue 53 item 11: docs that drift).

The README, docs/*.md and docs/decisions/*.md are checked; docs/results/ is dated history and
names what existed then. A path is a relative Markdown link, or a backticked repository path
(``llm_users/...``, ``bench/x.py``, ``docs/x.md`` ...); a module is a backticked dotted name under
``llm_users`` or ``exporters`` (``llm_users.health.verdict``, a module's attribute allowed after it).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "decisions").glob("*.md")])
TOP = ("llm_users/", "exporters/", "locustfiles/", "bench/", "docs/", "docker/", "tests/", ".ci/")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`\s]+)`")
MODULE = re.compile(r"^(llm_users|exporters)(\.[a-z_][a-z0-9_]*)+$")


def named_paths(text: str, doc: Path) -> set[Path]:
    """The repository paths ``text`` names: relative links (from ``doc``'s folder) and
    backticked paths from the root (a glob or a placeholder is not a path)."""
    out = {(doc.parent / m).resolve() for m in LINK.findall(text) if "://" not in m and ":" not in m.split("/")[0]}
    for m in CODE.findall(text):
        m = m.rstrip(".,:;")
        if m.startswith(TOP) and not re.search(r"[*<>{}$]|\.\.\.", m):
            out.add((ROOT / m.split(":", 1)[0]).resolve())
    return out


def module_exists(dotted: str) -> bool:
    """``dotted`` is a module or package of the repository, or a name one of them defines."""
    parts = dotted.split(".")
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
        return True
    owner = ROOT.joinpath(*parts[:-1])
    source = owner.with_suffix(".py") if owner.with_suffix(".py").is_file() else owner / "__init__.py"
    return source.is_file() and re.search(rf"\b{re.escape(parts[-1])}\b", source.read_text()) is not None


def exists(path: Path) -> bool:
    """On disk, a name in a Python file (``tests/real/observe.run_until``), or an output the
    repository ignores (``bench/results/``, written when a bench runs)."""
    if path.exists():
        return True
    stem, _, attr = path.name.partition(".")
    source = path.with_name(stem + ".py")
    if attr and source.is_file():
        return re.search(rf"\b{re.escape(attr)}\b", source.read_text()) is not None
    return subprocess.run(["git", "check-ignore", "-q", str(path / "x")], cwd=ROOT).returncode == 0


def named_modules(text: str) -> set[str]:
    return {m for m in CODE.findall(text) if MODULE.match(m)}


def test_the_checker_finds_what_is_missing(tmp_path) -> None:
    doc = ROOT / "docs" / "x.md"
    text = "see [gone](nothing/here.md), `llm_users/health/failstop.py` and `llm_users.health.failstop`"
    assert ROOT / "docs" / "nothing" / "here.md" in named_paths(text, doc)
    assert ROOT / "llm_users" / "health" / "failstop.py" in named_paths(text, doc)
    assert not module_exists("llm_users.health.failstop")
    assert module_exists("llm_users.health.verdict") and module_exists("llm_users.health.verdict.machine_busy")
    assert not module_exists("llm_users.health.verdict.no_such_name")
    assert exists(ROOT / "tests" / "real" / "observe.run_until") and not exists(ROOT / "tests" / "real" / "observe.nope")
    assert named_paths("`docs/*.md`, `llm_users/<name>.py`, [web](https://x.org/a), ![i](data:image/png)", doc) == set()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_module_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = sorted(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                     for p in named_paths(text, doc) if not exists(p))
    missing += sorted(m for m in named_modules(text) if not module_exists(m))
    assert not missing, f"{doc.relative_to(ROOT)} names what is not in the repository: {missing}"
