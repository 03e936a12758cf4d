"""Line coverage before and after a change to the suite: ``python -m tests.coverage_compare
BEFORE.json AFTER.json`` (two ``coverage json`` reports, e.g. of ``make coverage`` on two commits,
or of the same test files before and after they were restructured).

Issue 55 asks that a faster suite check no less: a percentage can hold while lines move, so this
compares the sets. It prints each report's total, then every product line covered before and not
after (by file), and exits 1 if there is one. Paths are compared from the package down
(``llm_users/...``, ``exporters/...``), so two checkouts in different directories compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PACKAGES = ("llm_users", "exporters")


def package_path(path: str) -> str:
    """``path`` from its package's directory down (``/a/b/llm_users/x.py`` -> ``llm_users/x.py``)."""
    parts = Path(path).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in PACKAGES:
            return "/".join(parts[i:])
    return "/".join(parts)


def covered(report: dict) -> dict[str, set[int]]:
    """Each file's executed lines, keyed by its package path."""
    out: dict[str, set[int]] = {}
    for path, data in report.get("files", {}).items():
        out.setdefault(package_path(path), set()).update(data.get("executed_lines", ()))
    return out


def statements(report: dict) -> int:
    return sum(f["summary"]["num_statements"] for f in report.get("files", {}).values())


def lost(before: dict[str, set[int]], after: dict[str, set[int]]) -> dict[str, list[int]]:
    """Lines covered in ``before`` and not in ``after``, by file (files with none left out)."""
    out = {f: sorted(lines - after.get(f, set())) for f, lines in before.items()}
    return {f: lines for f, lines in sorted(out.items()) if lines}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.coverage_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    a = ap.parse_args(argv)
    reports = [json.loads(p.read_text()) for p in (a.before, a.after)]
    sets = [covered(r) for r in reports]
    for name, report, lines in zip(("before", "after"), reports, sets, strict=True):
        n = sum(len(v) for v in lines.values())
        total = statements(report)
        sys.stdout.write(f"{name}: {n} of {total} statements covered ({100 * n / max(total, 1):.2f}%)\n")
    gone = lost(*sets)
    for f, lines in gone.items():
        sys.stdout.write(f"covered before, not after: {f}: {', '.join(map(str, lines))}\n")
    sys.stdout.write(f"lines covered before and not after: {sum(len(v) for v in gone.values())}\n")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main())
