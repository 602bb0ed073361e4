"""What a per-call snapshot costs on a tree of tens of thousands of folders: every directory
watched, the watch limit reached (degraded: the unwatched subtrees walked), and a full scan.

    .venv/bin/python -m chronos_git.scripts.measure_watch_limit [--dirs 30000] [--calls 15]

The limit is the watcher's test cap (engine/watcher.py CAP), so the machine's sysctl is left
alone.  Each call writes one file in an unwatched folder (degraded) or any folder, then takes
a whole-workspace snapshot; the median of `--calls` is printed.  Not a test: no assertion."""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from chronos_git.engine import watcher as watcher_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store


def build(root: Path, dirs: int, per: int = 1000) -> list[Path]:
    out = []
    for i in range(dirs):
        d = root / f"top{i // per:03d}" / f"d{i % per:04d}"
        d.mkdir(parents=True)
        (d / "a.txt").write_text(f"{i}\n")
        (d / "b.py").write_text(f"x = {i}\n")
        out.append(d)
    return out


def run(tmp: Path, dirs: list[Path], cap: int | None, calls: int, force_scan: bool = False) -> tuple[float, dict]:
    watcher_mod.CAP = cap
    store = Store.open(tmp / f"store-{cap}-{force_scan}", EngineConfig())
    ws = store.workspace(tmp / "ws")
    if not force_scan:
        ws.enable_watcher()
    ws.snapshot(CheckpointMeta(description="first"))
    ws.snapshot(CheckpointMeta(description="settle"))
    st = ws.watcher_state()
    unwatched = sorted(ws._watcher._unwatched) if ws._watcher else []
    times, kinds = [], set()
    for n in range(calls):
        target = (tmp / "ws" / unwatched[n % len(unwatched)].decode()) if unwatched else dirs[n * 997 % len(dirs)]
        (target / "a.txt").write_text(f"call {n}\n")
        t0 = time.perf_counter()
        res = ws.snapshot(CheckpointMeta(description=f"call {n}"), force_scan=force_scan)
        times.append(time.perf_counter() - t0)
        kinds.add(res.report["scan"])
    if ws._watcher:
        ws._watcher.stop()
    return statistics.median(times), {"scan": sorted(kinds), "watches": st.get("watches"),
                                      "unwatched_dirs": st.get("unwatched_dirs"), "walks": len(unwatched)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", type=int, default=30_000)
    ap.add_argument("--calls", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        dirs = build(tmp / "ws", a.dirs)
        total = a.dirs + a.dirs // 1000 + 1
        print(f"{total} folders, {2 * a.dirs} files; median of {a.calls} per-call snapshots")
        for label, cap, force in (("watching (no limit)", None, False),
                                  ("degraded, 10% not watched", int(total * 0.9), False),
                                  ("degraded, 50% not watched", total // 2, False),
                                  ("degraded, only the root watched", 1, False),
                                  ("full scan (no watcher)", None, True)):
            med, info = run(tmp, dirs, cap, a.calls, force)
            print(f"  {label:34s} {med * 1000:8.1f} ms  {info}")


if __name__ == "__main__":
    main()
