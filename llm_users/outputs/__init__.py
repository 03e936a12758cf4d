"""Every output of a run: the console table, summary.json/.csv, timeseries.csv, report.html, the
load profiles' files and the vLLM bench export, each one object in :mod:`.registry`'s ordered
list, written once at the stop from the final merged data (:class:`FinalData`) by
:func:`~llm_users.outputs.registry.write_outputs`; requests.jsonl is written as the run goes by
:class:`RecordWriter`. Nothing here reads the live run. Also llm-compare (:mod:`.compare`).
"""

from __future__ import annotations

from llm_users.outputs.files import SCHEMA
from llm_users.outputs.final import FinalData
from llm_users.outputs.records_file import RecordWriter

__all__ = ["SCHEMA", "FinalData", "RecordWriter"]
