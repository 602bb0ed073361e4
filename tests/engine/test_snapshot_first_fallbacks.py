"""A workspace's first checkpoint when things go wrong: a bulk import whose index libgit2
does not vouch for (the walk that replaces it must commit every file), and a declared
snapshot with no checkpoint yet, which becomes a whole refresh and takes the watcher's
change list, failing or running out of budget (the next snapshot must walk).  Every tree is
compared with a fresh store's full scan of the same files, as in test_snapshot_differential."""
from __future__ import annotations

import os
import time

import pytest

from chronos_git.engine import scan as scan_mod, watcher as watcher_mod, workspace as workspace_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store

from .test_snapshot_differential import _oracle


def _files(root) -> set[str]:
    out = set()
    for d, _dirs, fs in os.walk(root):
        out |= {os.path.relpath(os.path.join(d, f), root) for f in fs}
    return out


def _tree_files(repo, tree, prefix: str = "") -> set[str]:
    out = set()
    for e in tree:
        if e.type_str == "tree":
            out |= _tree_files(repo, repo[e.id], prefix + e.name + "/")
        else:
            out.add(prefix + e.name)
    return out


def _workspace(tmp_path, files: int = 40):
    root = tmp_path / "ws"
    for d in range(4):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(files // 4):
            (root / f"d{d}" / f"f{f}.txt").write_text(f"{d}-{f}\n")
    (root / "top.txt").write_text("top\n")
    store = Store.open(tmp_path / "store", EngineConfig())
    return root, store, store.workspace(root)


@pytest.mark.parametrize("watch", [False, True], ids=["no-watcher", "watcher"])
def test_a_bulk_import_libgit2_disowns_falls_back_to_a_full_walk(tmp_path, monkeypatch, watch):
    """The import's index in place, then its check fails: the fallback walk's index (not a
    handle reopened on the index file the check just deleted) makes the first checkpoint."""
    root, store, ws = _workspace(tmp_path)
    if watch and not (watcher_mod.available() and ws.enable_watcher()):
        pytest.skip("inotify not available")
    real_run = workspace_mod.first_import.run
    ran = []

    def disowned(*a, **kw):
        res = real_run(*a, **kw)
        assert res is not None
        ran.append(res.tree)
        res.tree = "0" * 40            # what libgit2 computes from the index is not this
        return res

    monkeypatch.setattr(workspace_mod.first_import, "run", disowned)
    try:
        res = ws.snapshot(CheckpointMeta(description="first"))
        assert ran, "the bulk import did not run"
        assert res.report["scan"] == "scan" and not res.partial and res.checkpoint is not None
        repo = ws.repo()
        assert _tree_files(repo, repo[res.checkpoint.tree_id]) == _files(root)
        assert res.tree_id == _oracle(tmp_path, root)
        assert res.report["files"] == len(_files(root))
        monkeypatch.undo()
        (root / "d0" / "f0.txt").write_text("changed\n")
        (root / "new.txt").write_text("new\n")
        again = ws.snapshot(CheckpointMeta(description="second"))
        assert again.tree_id == _oracle(tmp_path, root)
    finally:
        if ws._watcher is not None:
            ws._watcher.stop()


@pytest.mark.skipif(not watcher_mod.available(), reason="inotify not available")
@pytest.mark.parametrize("how", ["budget", "raises"])
def test_a_declared_first_snapshot_that_took_the_watch_and_did_not_finish(tmp_path, monkeypatch, how):
    """No checkpoint yet: a declared snapshot refreshes the whole workspace and takes the
    watcher's list.  When it runs out of budget or fails midway the watcher must not vouch
    for the next snapshot: every file, and every change since, is in the next checkpoint."""
    root, store, ws = _workspace(tmp_path)
    assert ws.enable_watcher()
    try:
        declared = [str(root / "top.txt")]
        if how == "budget":
            res = ws.snapshot(CheckpointMeta(description="declared"), paths=declared,
                              deadline=time.monotonic() - 1)
            assert res.partial and res.report["scan"] == "scan"
        else:
            real_visit, seen = scan_mod.Scanner.visit, []

            def visit(self, rel):
                seen.append(rel)
                if len(seen) > 5:
                    raise RuntimeError("a failure midway through the walk")
                return real_visit(self, rel)

            monkeypatch.setattr(scan_mod.Scanner, "visit", visit)
            with pytest.raises(RuntimeError):
                ws.snapshot(CheckpointMeta(description="declared"), paths=declared,
                            deadline=time.monotonic() + 600)
            monkeypatch.undo()
            assert not ws.has_checkpoint()
        vouched = ws._watcher.trusted
        (root / "d1" / "f1.txt").write_text("changed after\n")
        (root / "later.txt").write_text("later\n")
        os.unlink(root / "d2" / "f2.txt")
        later = ws.snapshot(CheckpointMeta(description="watched"))
        assert not later.partial
        assert later.tree_id == _oracle(tmp_path, root), (later.report["scan"], later.report["files"])
        assert not vouched, "the watcher still vouched after losing its list"
    finally:
        ws._watcher.stop()
