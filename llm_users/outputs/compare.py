"""``llm-compare DIR... [--out FILE.html] [--fail-on EXPR]``: compare report directories.

Reads only what runs wrote (summary.json, requests.jsonl), never a live run. The first
directory is the baseline; each other one is compared with it:

- first, the configuration diff (:mod:`.compare_config`): load, model, lengths, max tokens,
  workload, sampling, backend, server, SLOs, ... side by side. When a run differs from the
  baseline in load, model, lengths, max tokens, workload or sampling, its verdicts are "not
  comparable", ``--fail-on`` is not evaluated for it and the exit code is 3, unless
  ``--allow-config-diff`` (then the verdicts are given under a warning);
- a side-by-side table of every headline metric with the delta (absolute and percent);
- a verdict per latency metric from a bootstrap of the per-request values in requests.jsonl
  (measured requests only): the confidence interval (99% by default: six metrics are tested per
  pair, and a 95% interval would call about one pair in four different by chance) of the
  difference in p50 and p99 of TTFT, TPOT and E2E. A
  difference is called only when the interval excludes zero AND the point estimate moves more
  than ``--min-effect`` (default 2%), so noise between two equal runs is "no significant
  difference";
- ``--fail-on 'ttft.p50>+10%,e2e.p99>+200ms,output_tokens_per_s<-5%,failures>0'``: exit code 1
  when any rule holds for any compared run (a signed value is a change from the baseline, in %
  or in the metric's unit; an unsigned one is the run's own value);
- ``--out compare.html``: one self-contained page (tables, CDF overlays, per-turn and Pareto
  overlays where the runs have them).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from llm_users.outputs.compare_config import ConfigRow, blocking, config_rows, describe
from llm_users.outputs.compare_stats import (  # noqa: F401 - the names llm-compare has always offered
    DIRECTION,
    LATENCY_STATS,
    RECORD_METRICS,
    CompareError,
    Rule,
    Run,
    Verdict,
    bootstrap,
    headline,
    load_run,
    parse_rules,
    table,
    verdicts,
)

NOT_COMPARABLE = "not comparable"


def config_text(runs: list[Run], rows: list[ConfigRow]) -> list[str]:
    """The configuration diff, before any number: '!' a difference that blocks a verdict,
    '*' one that does not."""
    head = ["configuration", *[r.label for r in runs]]
    cells = [[("! " if row.critical and row.differs else "* " if row.differs else "  ") + row.key, *row.values]
             for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *cells, strict=True)]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    if any(row.differs for row in rows):
        out.append("(! differs and decides whether the runs are comparable; * differs)")
    return out


def refuse(results: list[list[Verdict]], rows: list[ConfigRow], allow: bool) -> list[list[Verdict]]:
    """Each compared run's verdicts, replaced by "not comparable" where its configuration
    differs from the baseline's in a critical row and ``allow`` is false."""
    if allow:
        return results
    out = []
    for i, vs in enumerate(results, 1):
        out.append([dataclasses.replace(v, verdict=NOT_COMPARABLE) if blocking(rows, i) and
                    v.verdict != "too few requests" else v for v in vs])
    return out


def render_text(runs: list[Run], results: list[list[Verdict]], confidence: float = 0.99,
                config: list[ConfigRow] | None = None, allow_config_diff: bool = False) -> str:
    out = [f"baseline: {runs[0].path}"]
    if config:
        out += config_text(runs, config)
        for i, run in enumerate(runs[1:], 1):
            if blocking(config, i):
                out.append((f"WARNING: {run.label} was not configured as {runs[0].label} ({describe(config, i)}): the "
                            "verdicts below are given because of --allow-config-diff, but a difference may come "
                            "from the configuration, not the server")
                           if allow_config_diff else
                           (f"NOT COMPARABLE: {run.label} was not configured as {runs[0].label} "
                            f"({describe(config, i)}): no verdict is given, as a difference would come from the "
                            "configuration as much as from the server (--allow-config-diff shows them anyway)"))
        out.append("")
    head = ["metric"] + [r.label for r in runs] + [f"Δ {r.label}" for r in runs[1:]]
    rows = table(runs)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    out += [line(head), "-" * (sum(widths) + 2 * len(widths))]
    out += [line(r) for r in rows]
    for run, vs in zip(runs[1:], results, strict=True):
        out.append("")
        out.append(f"{run.label} vs {runs[0].label} (bootstrap {confidence:.0%} CI of the difference, ms):")
        for v in vs:
            if v.verdict == "too few requests":
                need = max(10, math.ceil(5 / (1 - float(v.metric.split(".p")[1]) / 100)))
                out.append(f"  {v.metric:<10} too few requests (a verdict needs {need} per run)")
                continue
            rel = f" ({v.rel * 100:+.1f}%)" if v.rel is not None else ""
            out.append(f"  {v.metric:<10} {v.delta_ms:+.3f}{rel}  CI [{v.low:+.3f}, {v.high:+.3f}]  {v.verdict}")
        if any(v.verdict == NOT_COMPARABLE for v in vs):
            out.append("  not comparable: the configurations differ (see above)")
        elif all(v.verdict in ("no significant difference", "too few requests") for v in vs):
            out.append("  no significant difference")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llm-compare", description="Compare locust-llm report directories: the first "
                                "is the baseline.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="report directories (--llm-report)")
    p.add_argument("--out", metavar="FILE.html", help="write a self-contained HTML page")
    p.add_argument("--fail-on", metavar="EXPR", help="comma-separated rules, e.g. 'ttft.p50>+10%%,failures>0': "
                   "exit 1 when any holds for any run")
    p.add_argument("--min-effect", type=float, default=2.0, metavar="PCT",
                   help="smallest change (percent) called a difference (default 2)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--confidence", type=float, default=99.0, metavar="PCT",
                   help="confidence level of the intervals (default 99)")
    p.add_argument("--allow-config-diff", action="store_true",
                   help="give verdicts (under a warning) between runs configured differently in load, model, "
                   "lengths, max tokens, workload or sampling; without it they are 'not comparable' (exit 3)")
    args = p.parse_args(argv)
    try:
        if len(args.dirs) < 2:
            raise CompareError("give at least two report directories (the first is the baseline)")
        rules = parse_rules(args.fail_on)
        runs = [load_run(d) for d in args.dirs]
        _unique_labels(runs)
        if not 50 <= args.confidence < 100:
            raise CompareError(f"--confidence must be in [50, 100), got {args.confidence}")
        conf = args.confidence / 100
        rows = config_rows([r.summary for r in runs])
        refused = [] if args.allow_config_diff else [f"{r.label} (differs in {', '.join(blocking(rows, i))})"
                                                     for i, r in enumerate(runs[1:], 1) if blocking(rows, i)]
        results = [verdicts(runs[0], r, args.resamples, args.min_effect / 100, args.seed, conf) for r in runs[1:]]
        results = refuse(results, rows, args.allow_config_diff)
        print(render_text(runs, results, conf, rows, args.allow_config_diff))
        failed = []
        for r in runs[1:]:
            if any(x.startswith(f"{r.label} (") for x in refused):
                continue
            for rule in rules:
                hit, why = rule.check(runs[0].metrics, r.metrics)
                if hit:
                    failed.append(f"{r.label}: {why}")
        if args.out:
            from llm_users.outputs.compare_html import write_page  # matplotlib: the 'report' extra

            write_page(args.out, runs, results, failed, rules, rows, args.allow_config_diff)
            print(f"llm-compare: page written to {args.out}")
    except CompareError as e:
        print(f"llm-compare: {e}", file=sys.stderr)
        return 2
    if failed:
        for f in failed:
            print(f"llm-compare: FAIL {f}", file=sys.stderr)
        return 1
    if refused:
        print(f"llm-compare: not comparable with the baseline's configuration: {'; '.join(refused)}; no verdict"
              + (", --fail-on not evaluated" if rules else "") + " (--allow-config-diff gives them)",
              file=sys.stderr)
        return 3
    if rules:
        print(f"llm-compare: every --fail-on rule passed ({len(rules)})")
    return 0


def _unique_labels(runs: list[Run]) -> None:
    seen: dict[str, int] = {}
    for r in runs:
        if r.label in seen:
            seen[r.label] += 1
            r.label = f"{r.label}#{seen[r.label]}"
        else:
            seen[r.label] = 1


if __name__ == "__main__":
    sys.exit(main())
