"""The outputs of a run, in one explicit ordered list (never import order), and
:func:`write_outputs`, the one way files are written at the end of a run: once, at the stop,
from the final merged data (:class:`~llm_users.outputs.final.FinalData`). Summary routes (the
web UI's ``/llm/summary.json``) only read.

In order: the vLLM bench export (``--llm-export``; its line comes before the table), the console
table, summary.json/.csv, timeseries.csv, report.html, the load profiles' files. In a headless
run the console table (and the "report written" line) is printed after Locust's own final
table, at Locust's ``quit`` (:func:`~llm_users.outputs.console.hold_until_quit`). requests.jsonl
is the exception by design: :class:`~llm_users.outputs.files.RecordWriter` appends each record
as the run goes, so a crash keeps every record so far.

An output of your own is one object with a ``name`` and ``write(final, directory)``; register it
from the locustfile::

    from llm_users.outputs import registry
    registry.register(MyOutput())   # a second one of the same name is a no-op
"""

from __future__ import annotations

from collections.abc import Collection

from llm_users.outputs.console import CONSOLE
from llm_users.outputs.export import VLLM_BENCH
from llm_users.outputs.files import SUMMARY, TIMESERIES
from llm_users.outputs.final import FinalData, Output
from llm_users.outputs.html_output import HTML
from llm_users.outputs.profile_files import PROFILE_FILES

OUTPUTS: list[Output] = [VLLM_BENCH, CONSOLE, SUMMARY, TIMESERIES, HTML, PROFILE_FILES]


def register(output: Output, *, before: str | None = None) -> Output:
    """Add an output (an object, or a class made with no arguments) at the end of the list, or
    before the one named ``before``. One whose name is listed already is not added again."""
    out = output() if isinstance(output, type) else output
    if not getattr(out, "name", None) or not callable(getattr(out, "write", None)):
        raise ValueError(f"{out!r}: an output needs a name and write(final, directory)")
    for known in OUTPUTS:
        if known.name == out.name:
            return known
    names = [k.name for k in OUTPUTS]
    OUTPUTS.insert(names.index(before) if before in names else len(OUTPUTS), out)
    return out


def outputs() -> list[Output]:
    """The outputs, in order."""
    return list(OUTPUTS)


def write_outputs(final: FinalData, report_dir: str | None, skip: Collection[str] = ()) -> str | None:
    """Every output, in order (the console table always; with a report directory, every file),
    but those named in ``skip`` (``--llm-html off``: ``html``).

    A file that cannot be written (disk full, directory gone: ``OSError``) stops the files, not
    the run: one ``locust-llm:`` line naming the file and the error, the outputs after it still
    run without the directory (the console table is printed), and the line is returned (the
    run then exits non-zero); None when everything was written."""
    failed: str | None = None
    for out in outputs():
        if out.name in skip:
            continue
        try:
            out.write(final, None if failed else report_dir)
        except OSError as e:
            where = e.filename or f"{report_dir}/ (the {out.name} output)"
            failed = f"locust-llm: cannot write {where} ({e.strerror or e}); the files after it were not written"
            CONSOLE.say(failed)
    if report_dir and failed is None:
        CONSOLE.say(f"locust-llm: report written to {report_dir}/")  # after the table, held or not
    return failed
