"""The import rules docs/architecture.md states, checked on the source (ast, not grep)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "llm_users"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved against the llm_users package."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_the_plugin_core_never_imports_the_exporters() -> None:
    offenders = [str(p) for p in PACKAGE.rglob("*.py") if any(m.split(".")[0] == "exporters"
                                                                for m in imported_modules(p))]
    assert offenders == []


def test_metrics_does_not_import_slo() -> None:
    mods = imported_modules(PACKAGE / "metrics.py")
    assert not any(m.startswith("llm_users.slo") for m in mods), mods
    assert "llm_users.metrics" in imported_modules(PACKAGE / "slo.py")  # the one direction


def test_py_typed_is_shipped() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_no_run_mode_strings_are_compared() -> None:
    """Roles are classes (run.py): nothing tests a mode string against master/worker/local."""
    roles = {"master", "worker", "local"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Constant) and s.value in roles for s in sides):
                    offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert offenders == []
