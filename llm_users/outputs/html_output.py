"""The ``html`` output: report.html (:mod:`.html_report`). matplotlib is the optional ``report``
extra, so the page's modules are imported only here, when it is written; without matplotlib
one line says the page was skipped.
"""

from __future__ import annotations

from llm_users.outputs.final import FinalData


class HtmlReport:
    name = "html"

    def write(self, final: FinalData, directory: str | None) -> None:
        if not directory:
            return
        try:
            from llm_users.outputs.html_report import write_html
        except ImportError as e:  # matplotlib is the optional 'report' extra
            print(f"locust-llm: report.html skipped ({e}); pip install 'locust-llm[report]'", flush=True)
        else:
            write_html(directory, final.summary, final.timeline_rows, final.stats)


HTML = HtmlReport()
