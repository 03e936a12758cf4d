"""Pareto frontiers of measured points."""

from __future__ import annotations

from llm_users.load.pareto import frontier, pareto_csv, per_user_tokens_s


def _p(i, rps, ttft99, tok_s=None, e2e_mean=None, out=None, ok=10):
    return {"index": i, "users": i, "requests": ok, "successes": ok, "requests_per_s": rps, "ttft": {"p99": ttft99},
            "tpot": {"p99": ttft99}, "e2e": {"p99": ttft99, "mean": e2e_mean}, "output_tokens_per_s": tok_s,
            "output_tokens": out}


def test_frontier_keeps_only_undominated_points() -> None:
    pts = [_p(0, 10, 50), _p(1, 20, 60), _p(2, 15, 70), _p(3, 30, 200), _p(4, 25, 300), _p(5, 30, 250)]
    assert frontier(pts, "ttft") == [0, 1, 3]  # 2 is beaten by 1, 4 and 5 by 3


def test_tokens_frontier_maximises_both() -> None:
    # per-user tokens/s = output tokens per request / mean E2E
    pts = [_p(0, 1, 1, tok_s=100, e2e_mean=1000, out=500), _p(1, 1, 1, tok_s=300, e2e_mean=2000, out=500),
           _p(2, 1, 1, tok_s=200, e2e_mean=4000, out=500)]
    assert per_user_tokens_s(pts[0]) == 50
    assert frontier(pts, "tokens") == [0, 1]


def test_csv_marks_frontier_points() -> None:
    pts = [_p(0, 10, 50), _p(1, 5, 80)]
    rows = pareto_csv(pts, "users").splitlines()
    assert rows[0].split(",")[:2] == ["index", "load"]
    head = rows[0].split(",")
    assert rows[1].split(",")[head.index("on_ttft_frontier")] == "1"
    assert rows[2].split(",")[head.index("on_ttft_frontier")] == "0"
