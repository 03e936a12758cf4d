"""``llm-options``: every ``--llm-*`` option with its help, default and group, and which ones
the web UI's start form holds.

``locust -f locustfiles/vllm.py --help`` cannot list them: Locust prints its help before it
imports a locustfile, so the options a locustfile's plugin adds are not there yet. This
command builds Locust's parser with the plugin's options on it, as a run does
(:func:`llm_users.options.add_arguments`, the load profiles' :func:`llm_users.load.study.add_arguments`),
and prints the plugin's groups alone.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

WEB = "[web form]"


def llm_parser() -> Any:
    """Locust's parser with every ``--llm-*`` option on it."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options
    from llm_users.load import study

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    study.add_arguments(parser)
    return parser


def llm_groups(parser: Any) -> list[Any]:
    """The parser's groups that hold ``--llm-*`` options, in their order."""
    return [g for g in parser._action_groups
            if any(o.startswith("--llm-") for a in g._group_actions for o in a.option_strings)]


def render(parser: Any, width: int = 100) -> str:
    """The groups as ``--help`` prints them, each web-form option marked :data:`WEB`."""
    from llm_users.webui.form import web_fields

    web = web_fields()
    formatter = argparse.HelpFormatter("locust", max_help_position=36, width=width)
    formatter.add_text("The --llm-* options of locust-llm (each also LOCUST_LLM_<NAME> in the environment). "
                       f"{WEB}: the web UI's start form holds it (docs/options.md, 'The web UI and API keys').")
    for group in llm_groups(parser):
        actions = []
        for a in group._group_actions:
            copy = argparse.Action(a.option_strings, a.dest, nargs=a.nargs, metavar=a.metavar,
                                   help=(a.help or "") + (f" {WEB}" if a.dest in web else ""))
            actions.append(copy)
        formatter.start_section(group.title)
        formatter.add_text(group.description)
        formatter.add_arguments(actions)
        formatter.end_section()
    return formatter.format_help()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llm-options", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    sys.stdout.write(render(llm_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
