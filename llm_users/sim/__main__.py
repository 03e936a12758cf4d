"""``python -m llm_users.sim``: the same as the ``llm-sim`` command."""

import sys

from .cli import main

sys.exit(main())
