"""The import rules docs/architecture.md states (the rooms and their rules), checked on the source (ast, not grep)."""

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
    mods = set().union(*(imported_modules(p) for p in (PACKAGE / "metrics").glob("*.py")))
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


# -- the import graph, function-level imports included (issue 26) --------------------------------

def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The llm_users module an import name lands in (``a.b.C`` -> ``a.b``), None outside."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the llm_users modules it imports anywhere in its body (not its parent packages)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = set()
        for mod in imported_modules(path):
            hit = _resolve(mod) if mod.split(".")[0] == "llm_users" else None
            if hit and hit != name and not name.startswith(f"{hit}."):  # a parent package is no edge
                targets.add(hit)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "llm_users.client.sdk" in graph["llm_users.users"]  # imported inside a method
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_protocols_import_no_gevent_locust_or_sockets() -> None:
    banned = ("gevent", "locust", "socket", "httptools", "geventhttpclient")
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p) if m.split(".")[0] in banned)
                 for p in (PACKAGE / "protocols").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_configuration_reads_parsed_options() -> None:
    """Options are parsed once (llm_users/options.py); everything else is handed its configuration."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "parsed_options"
                    or isinstance(node, ast.Constant) and node.value == "parsed_options"):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert offenders == []


def test_no_module_over_450_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {k: n for k, n in sizes.items() if n > 450} == {}


def test_at_most_15_modules_at_the_top_of_llm_users() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 15, top
