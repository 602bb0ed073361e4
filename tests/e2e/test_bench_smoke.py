"""Smoke test of the benchmark harness (bench/): it runs end to end and reports
every figure with numeric chronos fields.

No timing thresholds: numbers from a CI machine say nothing about chronos-git,
only that the harness and the code paths it drives still work (the bench
itself fails when a measured chronos call did not have its effect).
"""
from __future__ import annotations

import json
import numbers
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _num(row: dict, key: str) -> float:
    v = row.get(key)
    assert isinstance(v, numbers.Real) and not isinstance(v, bool), f"{key} = {v!r} in {sorted(row)}"
    return v


@pytest.mark.slow
def test_bench_quick_synthetic_1k(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--corpus", "synthetic-1k",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    doc = json.loads(out.read_text())

    assert doc["corpus"] == "synthetic-1k"
    assert doc["failures"] == []
    for key in ("cpu_model", "cores", "ram_gib", "kernel", "python", "pygit2", "libgit2", "git"):
        assert key in doc["machine"]
    assert "bench" in doc["command"]

    for fig in ("P1", "P2", "P3", "P4", "P5", "P6"):
        row = doc[fig]
        assert "error" not in row, f"{fig}: {row.get('error')}"
        _num(row, "chronos_p50_ms")
        _num(row, "chronos_p95_ms")
        assert _num(row, "chronos_p95_ms") >= _num(row, "chronos_p50_ms")
        _num(row, "gitcli_p50_ms")
        assert "ratio" in row
    for fig in ("P1", "P2", "P3", "P5", "P6"):
        _num(doc[fig], "chronos_peak_rss_mb")

    p4 = doc["P4"]
    for sub in ("append_10", "append_large", "admission_10", "admission_large"):
        _num(p4[sub], "chronos_p50_ms")
        _num(p4[sub], "gitcli_p50_ms")
    assert p4["events_large"] > p4["events_small"]

    for sub in ("one_file", "ten_files"):
        _num(doc["P5"][sub], "chronos_p50_ms")
    _num(doc["P6"], "chronos_bytes")
    _num(doc["P6"], "gitcli_bytes")
    assert doc["P3"]["chronos_files"] == doc["P3"]["gitcli_files"]
    _num(doc["P3"], "chronos_consolidate_ms")              # the first import's consolidation ran
    assert doc["P3"]["chronos_store_bytes"] <= doc["P3"]["chronos_store_bytes_fast"]

    p7 = doc["P7"]                                          # store growth against git gc, sampled
    assert "error" not in p7 and len(p7["samples"]) >= 2 and _num(p7, "ratio") > 0
    _num(doc["P6"]["incremental"], "chronos_ms")

    p0 = doc["P0"]                                          # real hermes chat, plugin vs bare
    assert "error" not in p0, p0.get("error")
    for tool in ("write_file", "terminal"):
        _num(p0[tool], "plugin_p50_ms")
        _num(p0[tool], "bare_p50_ms")
        _num(p0[tool], "added_p50_ms")
    assert p0["journal_checked"] >= 2 * p0["calls_per_session"]
