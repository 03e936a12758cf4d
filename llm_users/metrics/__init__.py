"""Per-request records and the exact, mergeable statistics built from them. No I/O.

A :class:`RequestRecord` (``record``) holds everything measured for one LLM request, in integer
nanoseconds from ``time.perf_counter_ns()``. :class:`Stats` (``stats``) pools records into HDR
histograms (``distribution``: microsecond resolution, 3 significant digits) whose serialized form
merges exactly across processes, plus exact sums, minima and maxima; ``checks`` says what a
finished record shows about the server (implausible usage, SLOs, sampling not honoured).
Metric definitions are in docs/metrics.md.
"""

from llm_users.metrics.checks import (
    SAMPLING_HINTS,
    SLO_METRICS,
    TOKEN_REASONS,
    check_usage,
    prompt_tokens_guess,
    sampling_issues,
    slo_results,
)
from llm_users.metrics.distribution import (
    PERCENTILES,
    BucketCounts,
    Distribution,
    acyclic,
    bucket_counts,
    bucket_floor_us,
    fold_in_this_process,
    new_histogram,
)
from llm_users.metrics.record import FIRST_TOKEN_METRICS, LATENCY_METRICS, RequestRecord
from llm_users.metrics.stats import Stats, StatsByName

__all__ = ["FIRST_TOKEN_METRICS", "LATENCY_METRICS", "PERCENTILES", "SAMPLING_HINTS", "SLO_METRICS", "TOKEN_REASONS", "BucketCounts",
           "Distribution", "RequestRecord", "Stats", "StatsByName", "acyclic", "bucket_counts", "bucket_floor_us",
           "check_usage", "fold_in_this_process", "new_histogram", "prompt_tokens_guess", "sampling_issues", "slo_results"]
