"""The ``profile_files`` output: the files the load profiles derive from the final summary
(stages.csv, pareto.csv, a profile of your own's), written beside summary.json at the stop
(:meth:`~llm_users.load.profile.LoadProfile.files`), each whole or absent
(:mod:`llm_users.outputs.atomic`)."""

from __future__ import annotations

from pathlib import Path

from llm_users.load.registry import files
from llm_users.outputs.atomic import write_atomic
from llm_users.outputs.final import FinalData


class ProfileFiles:
    name = "profile_files"

    def write(self, final: FinalData, directory: str | None) -> None:
        if not directory:
            return
        for name, text in files(final.summary).items():
            write_atomic(Path(directory) / name, text)


PROFILE_FILES = ProfileFiles()
