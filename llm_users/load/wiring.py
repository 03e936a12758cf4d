"""The load profiles attached to one node's run (the run side of :mod:`.study`).

:func:`attach` hands every registered profile, in the registry's order, the
:class:`~llm_users.load.profile.Study` of this node: the environment, the run and its role
(``run.merges``, ``run.generates_load``), the parsed configuration, and the LLM User classes an
open-loop scheduler sends through. What must see merged statistics attaches where the run
merges (master or local runner); the scheduler runs where the run generates load.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from llm_users.load.profile import Study, StudyConfig
from llm_users.load.registry import profiles
from llm_users.settings import is_llm_user


def llm_user_classes(environment: Any) -> list[type]:
    """The locustfile's LLM User classes (those an open-loop arrival is sent through)."""
    return [c for c in (environment.user_classes or []) if is_llm_user(c)]


def attach(environment: Any, run: Any, config: StudyConfig,
           fresh: Callable[[], StudyConfig] | None = None) -> Study:
    """Attach every profile to ``run`` (ConfigError when the options do not fit its role);
    ``fresh`` reads the configuration again at each test start (the web form, a worker's
    options from the master)."""
    return Study(environment, run, config, partial(llm_user_classes, environment), fresh).attach(profiles())
