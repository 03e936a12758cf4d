"""``python -m llm_users.sim``: the same as the ``llm-sim`` command."""

import sys

from llm_users.sim.cli import main

sys.exit(main())
