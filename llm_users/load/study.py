"""Load profiles and studies, the configuration side: the names the plugin and the
configuration use. The profiles themselves are in :mod:`.profiles` (open loop, stages, the SLO
sweep, trace replay), listed in order by :mod:`.registry`; :mod:`.wiring` attaches them to a run.

- :func:`add_arguments`: every profile's options (the plugin adds them to Locust's parser);
- :func:`parse_options`: ``opts -> StudyConfig``, every profile's parsed options, frozen, with
  the checks of options that exclude each other (one ConfigError line each).

Nothing here imports Locust, gevent or the users: the configuration can read it.
"""

from __future__ import annotations

from llm_users.load.profile import StudyConfig
from llm_users.load.registry import add_arguments, parse_options

__all__ = ["StudyConfig", "add_arguments", "parse_options"]
