"""``llm-options`` (llm_users/outputs/option_list.py): the command the README names lists every
--llm-* option a run has, with its help and group, the web form's marked (issue 53 item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llm_users.outputs.option_list import WEB, llm_groups, llm_parser
from llm_users.webui.form import web_fields

COMMAND = str(Path(sys.executable).parent / "llm-options")


def test_the_command_lists_every_llm_option_and_marks_the_web_forms() -> None:
    proc = subprocess.run([COMMAND], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    parser = llm_parser()
    flags = [o for g in llm_groups(parser) for a in g._group_actions for o in a.option_strings]
    assert len(flags) >= 60 and all(f.startswith("--llm-") for f in flags)
    text = proc.stdout
    for flag in flags:
        assert f"  {flag} " in text or f"  {flag}\n" in text, flag
    blocks = {}  # each option's block of help text, up to the next option
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  --llm-"):
            flag = line.split()[0]
            rest = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("  --") or not nxt.startswith("    "):
                    break
                rest.append(nxt)
            blocks[flag] = " ".join(" ".join([line, *rest]).split())  # wrapped lines joined
    for flag, block in blocks.items():
        dest = flag[2:].replace("-", "_")
        assert (WEB in block) == (dest in web_fields()), (flag, block)
    assert "--llm-api-key-env" in blocks and WEB not in blocks["--llm-api-key-env"]
    assert {g.title for g in llm_groups(parser)} >= {"locust-llm", "locust-llm studies"}


def test_every_option_help_formats() -> None:
    """A help text argparse cannot format ('5%' unescaped) broke --help as a whole."""
    from llm_users.outputs.option_list import render

    assert "--llm-sweep-tolerance" in render(llm_parser())
