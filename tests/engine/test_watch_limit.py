"""The inotify watch limit reached: a degraded mode that says so and still misses nothing.

The machine-wide sysctl cannot be lowered here (other tests run in parallel), so the watcher's
own cap (engine/watcher.py `CAP`, tests only) refuses watches as the kernel would (ENOSPC).
Every snapshot is compared with a full walk of the same files in an independent store.
"""
from __future__ import annotations

import re

import pytest

from chronos_git.engine import watcher as watcher_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store

pytestmark = pytest.mark.skipif(not watcher_mod.available(), reason="inotify not available")

CAP = 4          # the root and three directories get a watch; the rest is refused


def _tree(root, dirs: int = 6, depth: int = 3) -> None:
    for d in range(dirs):
        p = root / f"d{d}"
        for level in range(depth):
            p.mkdir(parents=True)
            (p / "f.txt").write_text(f"{d}-{level}\n")
            p = p / f"s{level}"


def reference_tree(ws, tmp_path) -> str:
    n = len(list(tmp_path.glob("ref-store-*")))
    store = Store(tmp_path / f"ref-store-{n}", EngineConfig())
    store._init_on_disk()
    return store.workspace(ws.root).snapshot(CheckpointMeta(description="reference"), commit=False).tree_id


@pytest.fixture
def capped(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    monkeypatch.setattr(watcher_mod, "CAP", CAP)
    store = Store.open(tmp_path / "store", EngineConfig())
    ws = store.workspace(root)
    assert ws.enable_watcher()
    ws.snapshot(CheckpointMeta(description="first"))
    yield ws, tmp_path
    ws._watcher.stop()


def _watched_and_not(ws):
    w = ws._watcher
    watched = sorted(w._wd.values())
    assert watched[0] == b"" and len(watched) == CAP
    unwatched = sorted(w._unwatched)
    return [d.decode() for d in watched if d], [d.decode() for d in unwatched]


def test_the_cap_makes_it_degraded_and_the_state_gives_the_sysctl(capped):
    ws, _ = capped
    st = ws.watcher_state()
    assert st["enabled"] and st["running"] and st["mode"] == "degraded: watch limit"
    assert st["watches"] == CAP
    assert st["unwatched_dirs"] == 6 * 3 - (CAP - 1)           # every directory has one: 18 in all
    assert st["unwatched"]                                     # a sample of the refused subtrees
    m = re.fullmatch(r"sudo sysctl fs\.inotify\.max_user_watches=(\d+)", st["fix"])
    assert m and int(m.group(1)) % 8192 == 0 and int(m.group(1)) == st["suggested"]
    assert int(m.group(1)) >= (st["max_user_watches"] or 0) + st["unwatched_dirs"]
    assert "/etc/sysctl.d/" in st["fix_permanent"] and f"={st['suggested']}" in st["fix_permanent"]


def test_writes_in_watched_and_unwatched_directories_both_reach_the_next_snapshot(capped):
    ws, tmp = capped
    watched, unwatched = _watched_and_not(ws)
    assert unwatched
    ws.snapshot(CheckpointMeta(description="settle"))         # the first take after start is untrusted
    deep = ws.root / unwatched[-1]
    (ws.root / watched[0] / "f.txt").write_text("watched edit\n")
    (deep / "f.txt").write_text("unwatched edit\n")
    (deep / "new.txt").write_text("unwatched new\n")
    (ws.root / unwatched[0] / "f.txt").unlink()
    res = ws.snapshot(CheckpointMeta(description="degraded"))
    assert res.report["scan"] == "watched"                     # not a full scan: the dirty set and a walk
    assert res.tree_id == reference_tree(ws, tmp)
    tree = ws.store.repo()[res.tree_id]
    assert tree[f"{unwatched[-1]}/new.txt"] and tree[f"{watched[0]}/f.txt"]


def test_a_directory_created_at_the_limit_is_walked_and_counted(capped):
    ws, tmp = capped
    watched, _ = _watched_and_not(ws)
    ws.snapshot(CheckpointMeta(description="settle"))
    before = ws.watcher_state()["unwatched_dirs"]
    new = ws.root / watched[0] / "fresh" / "inner"
    new.mkdir(parents=True)
    (new / "x.txt").write_text("x\n")
    assert ws.snapshot(CheckpointMeta(description="created")).tree_id == reference_tree(ws, tmp)
    (new / "x.txt").write_text("changed later\n")                # no watch there: only the walk sees it
    res = ws.snapshot(CheckpointMeta(description="again"))
    assert res.report["scan"] == "watched" and res.tree_id == reference_tree(ws, tmp)
    assert ws.watcher_state()["unwatched_dirs"] >= before + 1     # counted when refused: "fresh" at least


def test_degraded_is_never_unchanged(capped):
    """The fast path that skips a refresh when the watcher saw nothing must not run: it cannot
    see inside what it does not watch."""
    ws, tmp = capped
    _, unwatched = _watched_and_not(ws)
    ws.snapshot(CheckpointMeta(description="settle"))
    assert not ws._watcher.quiet()
    (ws.root / unwatched[0] / "f.txt").write_text("silent\n")
    res = ws.snapshot(CheckpointMeta(description="after"))
    assert res.report["scan"] != "unchanged" and res.created
    assert res.tree_id == reference_tree(ws, tmp)


def test_freed_watches_end_the_degraded_mode_without_losing_a_write(capped, monkeypatch):
    ws, tmp = capped
    _, unwatched = _watched_and_not(ws)
    ws.snapshot(CheckpointMeta(description="settle"))
    (ws.root / unwatched[0] / "f.txt").write_text("before the heal\n")
    ws._watcher._cap = None                                    # as if the sysctl were raised
    res = ws.snapshot(CheckpointMeta(description="heals"))     # its take heals, its walk still covers
    assert res.tree_id == reference_tree(ws, tmp)
    st = ws.watcher_state()
    assert st["mode"] == "watching" and st["unwatched_dirs"] == 0 and "fix" not in st
    (ws.root / unwatched[0] / "f.txt").write_text("after the heal\n")
    res = ws.snapshot(CheckpointMeta(description="watched now"))
    assert res.report["scan"] == "watched" and res.tree_id == reference_tree(ws, tmp)


def test_an_unwatched_subtree_removed_is_forgotten(capped):
    import shutil
    ws, tmp = capped
    _, unwatched = _watched_and_not(ws)
    ws.snapshot(CheckpointMeta(description="settle"))
    top = unwatched[0].split("/")[0]
    shutil.rmtree(ws.root / top)
    res = ws.snapshot(CheckpointMeta(description="removed"))
    assert res.tree_id == reference_tree(ws, tmp)
    assert not any(u == top or u.startswith(top + "/") for u in ws.watcher_state()["unwatched"])


def test_the_fix_rounds_up_with_headroom():
    fix = watcher_mod.limit_fix(in_use=60_000, missing=15_000, limit=65_536)
    assert fix["suggested"] == 106_496                         # (65536 + 15000) * 1.25 = 100670 -> 13 * 8192
    assert fix["fix"] == "sudo sysctl fs.inotify.max_user_watches=106496"
    assert fix["fix_permanent"].endswith("/etc/sysctl.d/60-chronos-git.conf")
