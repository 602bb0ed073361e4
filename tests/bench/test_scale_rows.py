"""bench/scale.py (issue 37's scale rows, P8S): wiring, the pool it edits, the targets and
the table rows, on a canned result.  No timings, no corpus."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import report, scale  # noqa: E402
from bench.figures import CorpusRun  # noqa: E402

RESULT = {
    "corpus": "mono-1m-lite-git", "failures": [],
    "P8S": {
        "P8a": {"chronos_p50_ms": 4000.0, "gitcli_p50_ms": 80000.0, "hermes_refused": "refused: too many",
                "ratio": 0.05, "tree": "git work tree", "files": 1_000_000},
        "P8b": {"declared_protected_ms": 120.0, "shell_protected_ms": 9000.0, "baseline_mb_s": 100.0,
                "baseline_files_s": 111_111, "baseline": {"runs_in": "a child process"}},
        "P8c": {"write_pre_p50_ms": 4.0, "write_pre_p95_ms": 20.0, "write_pre_n": 5,
                "dashboard": {"first_view_p50_ms": 300.0, "first_view_p95_ms": 400.0, "first_view_n": 3}},
        "P8d_rss": {"host_peak_rss_mb": 400.0, "children_peak_rss_mb": 1200.0},
        "P8d_store": {"chronos_bytes": 100, "gitcli_bytes": 100, "ratio": 1.0, "store_ratio": 1.0},
    },
}


def test_wired_into_the_corpus_run_and_the_worker():
    from bench.worker import ChronosHandler
    assert callable(CorpusRun.p8s)
    for op in ("op_scale_session", "op_scale_log", "op_scale_diff", "op_scale_dashboard"):
        assert hasattr(ChronosHandler, op)


def test_targets_judge_at_least_and_at_most():
    t = report.targets(RESULT)
    assert t["P8a first snapshot / git CLI"]["met"] is True
    assert t["P8b baseline rate"]["met"] is False and t["P8b baseline rate"]["at_least"]
    assert t["P8c write_file pre-call p95"]["met"] is False
    assert t["P8d peak RSS of the baseline child"]["met"] is False
    assert t["P8c log p50"]["met"] is None                   # not measured: n/a, not a miss
    assert not any(label.startswith(("P1 ", "P3 ")) for label in t)   # figures that did not run
    text = report.targets_text({**RESULT, "targets": t})
    assert "target >= " in text and "MISSED" in text


def test_rows_render():
    rows = scale.rows(RESULT)
    figs = [r[1] for r in rows]
    assert figs.count("P8a") == 1 and figs.count("P8b") == 3 and "P8d" in figs
    assert all(len(r) == len(report.HEADER) for r in rows)
    assert "refused" in rows[0][5]
    assert scale.rows({"corpus": "x", "P8S": {"error": "boom"}})[-1][2] == "ERROR: boom"


def test_pool_skips_git_big_files_and_links(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "a").mkdir()
    for i in range(5):
        (tmp_path / "a" / f"f{i}.txt").write_text("small\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * (scale.MAX_POOL_BYTES + 1))
    (tmp_path / "link").symlink_to("a/f0.txt")
    pool = scale._pool(tmp_path, 100, "seed")
    assert sorted(pool) == [f"a/f{i}.txt" for i in range(5)]
    assert scale._pool(tmp_path, 3, "seed") == scale._pool(tmp_path, 3, "seed")
