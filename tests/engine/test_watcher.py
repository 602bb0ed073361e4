"""The inotify dirty set must never make a snapshot miss a change.

Every test compares the tree of a watcher-assisted snapshot with the tree a
full walk of the same workspace produces in an independent store: same
content, same tree id.  No timing assertions.
"""
from __future__ import annotations

import os
import random
import shutil
import stat

import pytest

from chronos_git.engine import watcher as watcher_mod
from chronos_git.engine import workspace as workspace_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store

pytestmark = pytest.mark.skipif(not watcher_mod.available(), reason="inotify not available")


@pytest.fixture
def watched(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    for d in range(5):
        (root / f"d{d}").mkdir()
        for f in range(10):
            (root / f"d{d}" / f"f{f}.txt").write_text(f"{d}-{f}\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    store = Store.open(tmp_path / "store", EngineConfig())
    ws = store.workspace(root)
    assert ws.enable_watcher()
    first = ws.snapshot(CheckpointMeta(description="first"))
    assert first.report["scan"] in ("bulk", "scan")          # the first one is never trusted
    yield ws, tmp_path
    ws._watcher.stop()


def reference_tree(ws, tmp_path) -> str:
    """A full walk of the same files in a store that has never seen them."""
    n = len(list(tmp_path.glob("ref-store-*")))
    store = Store(tmp_path / f"ref-store-{n}", EngineConfig())
    store._init_on_disk()
    ref = store.workspace(ws.root)
    return ref.snapshot(CheckpointMeta(description="reference"), commit=False).tree_id


def watched_snapshot(ws):
    res = ws.snapshot(CheckpointMeta(description="watched"))
    return res


def test_edits_creates_deletes_and_modes_are_seen(watched):
    ws, tmp = watched
    root = ws.root
    (root / "d0" / "f0.txt").write_text("changed\n")
    (root / "d1" / "f1.txt").unlink()
    (root / "new" / "deep" / "er").mkdir(parents=True)
    (root / "new" / "deep" / "er" / "x.txt").write_text("x\n")
    (root / "new" / "y.txt").write_text("y\n")
    os.chmod(root / "d2" / "f2.txt", 0o755)
    os.symlink("d0/f0.txt", root / "link")
    (root / "ignored.log").write_text("never captured\n")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_a_chmod_of_a_directory_or_the_root_is_its_own_path(watched):
    """inotify names the watched directory itself with an empty name: that is the directory's
    path, never "d0/" (whose walk gave "d0//f0.txt" and records like "d0//"), and for the
    workspace root nothing of the tree."""
    ws, tmp = watched
    root = ws.root
    os.chmod(root / "d0", 0o700)
    os.chmod(root, 0o700)
    (root / "d1" / "f1.txt").write_text("changed\n")
    assert not ws._watcher.quiet()                     # drains the kernel queue
    dirty = set(ws._watcher._dirty)
    assert "d0" in dirty and not any(p.endswith("/") or p == "" for p in dirty), dirty
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)
    assert ws.tip().meta.modes == {"700": ["d0/"]}


def test_new_directory_filled_before_its_watch_exists(watched):
    ws, tmp = watched
    root = ws.root
    # mkdir -p plus files in one go: the files may be created before the watcher
    # adds a watch on the new directory; reporting the directory whole covers them
    for i in range(30):
        p = root / "burst" / f"s{i % 3}" / f"t{i}"
        p.mkdir(parents=True, exist_ok=True)
        (p / "file.txt").write_text(str(i))
    res = watched_snapshot(ws)
    assert res.tree_id == reference_tree(ws, tmp)
    # and later changes inside those directories are watched too
    (root / "burst" / "s1" / "t4" / "file.txt").write_text("later\n")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_rename_storm(watched):
    ws, tmp = watched
    root = ws.root
    rnd = random.Random(7)
    for i in range(200):
        files = sorted(p for p in root.glob("d?/*") if p.is_file())
        src = rnd.choice(files)
        dst = root / f"d{rnd.randrange(5)}" / f"r{i}.txt"
        src.rename(dst)
    (root / "d3").rename(root / "d3-moved")                  # a directory move
    (root / "d3-moved" / "after-move.txt").write_text("after\n")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "scan"                        # a moved directory forces a walk
    assert res.tree_id == reference_tree(ws, tmp)
    (root / "d3-moved" / "edited-after-the-walk.txt").write_text("seen by the new watches\n")
    (root / "d4" / "z.txt").write_text("watched again\n")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_editor_atomic_saves(watched):
    ws, tmp = watched
    root = ws.root
    target = root / "d0" / "f5.txt"
    # write-temp-then-rename (most editors, Hermes' write_file)
    tmpf = root / "d0" / ".f5.txt.swp"
    tmpf.write_text("saved by an editor\n")
    os.replace(tmpf, target)
    # vim-style backup: rename the original away, write a new file, delete the backup
    t2 = root / "d1" / "f3.txt"
    os.rename(t2, root / "d1" / "f3.txt~")
    t2.write_text("vim wrote me\n")
    os.unlink(root / "d1" / "f3.txt~")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_overflow_falls_back_to_a_full_walk(watched):
    ws, tmp = watched
    root = ws.root
    w = ws._watcher
    # hold the watcher so the kernel queue (max_queued_events) overflows
    limit = int(open("/proc/sys/fs/inotify/max_queued_events").read())
    (root / "storm").mkdir()
    watched_snapshot(ws)                                       # storm/ is watched from here on
    with w._lock:
        for i in range(limit + 500):
            (root / "storm" / f"f{i}.txt").write_text("x")    # distinct names: not coalesced
        (root / "d4" / "changed-during-the-storm.txt").write_text("x\n")
    res = watched_snapshot(ws)
    assert w.stats["overflows"] >= 1
    assert res.report["scan"] == "scan"
    assert res.tree_id == reference_tree(ws, tmp)


def test_gitignore_change_forces_a_walk(watched):
    ws, tmp = watched
    root = ws.root
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("obj\n")
    (root / ".gitignore").write_text("*.log\n")                 # build/ is no longer ignored
    res = watched_snapshot(ws)
    assert res.report["scan"] == "scan"
    assert res.tree_id == reference_tree(ws, tmp)
    (root / "build" / "out2.o").write_text("obj2\n")            # the new directory is watched now
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_changes_between_turns_are_caught_by_the_forced_walk(watched):
    ws, tmp = watched
    root = ws.root
    (root / "d2" / "f7.txt").write_text("edited by the user between turns\n")
    ws._watcher.take()               # simulate a blind spot: the watcher lost that event
    blind = watched_snapshot(ws)
    assert blind.report["scan"] in ("watched", "unchanged")   # nothing seen: the newest checkpoint
    assert blind.tree_id != reference_tree(ws, tmp)             # the blind spot is real...
    turn = ws.snapshot(CheckpointMeta(description="turn start"), force_scan=True)
    assert turn.report["scan"] == "scan"
    assert turn.tree_id == reference_tree(ws, tmp)              # ...and the turn-start walk closes it


def test_randomised_operations_match_a_full_walk(watched):
    ws, tmp = watched
    root = ws.root
    rnd = random.Random(1234)
    for round_ in range(12):
        for _ in range(25):
            files = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
            dirs = [p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()]
            op = rnd.choice(["write", "create", "delete", "rename", "mkdir", "rmdir", "chmod", "symlink"])
            try:
                if op == "write" and files:
                    rnd.choice(files).write_text(f"r{round_} {rnd.random()}\n")
                elif op == "create" and dirs:
                    (rnd.choice(dirs) / f"c{rnd.randrange(10**6)}.txt").write_text("new\n")
                elif op == "delete" and files:
                    rnd.choice(files).unlink()
                elif op == "rename" and files and dirs:
                    rnd.choice(files).rename(rnd.choice(dirs) / f"m{rnd.randrange(10**6)}.txt")
                elif op == "mkdir" and dirs:
                    (rnd.choice(dirs) / f"n{rnd.randrange(10**6)}").mkdir()
                elif op == "rmdir" and dirs:
                    victim = rnd.choice(dirs)
                    if victim != root:
                        shutil.rmtree(victim)
                elif op == "chmod" and files:
                    f = rnd.choice(files)
                    os.chmod(f, os.stat(f).st_mode ^ stat.S_IXUSR)
                elif op == "symlink" and dirs:
                    os.symlink("nowhere", rnd.choice(dirs) / f"l{rnd.randrange(10**6)}")
            except (FileNotFoundError, FileExistsError, NotADirectoryError):
                pass
        res = watched_snapshot(ws)
        assert res.tree_id == reference_tree(ws, tmp), f"round {round_} ({res.report['scan']})"


def test_an_unchanged_workspace_is_not_walked_again_but_every_change_is_seen(watched):
    """The newest checkpoint stands for the workspace only while the watcher has seen
    nothing since the refresh that committed it: any write, chmod, delete or new directory,
    or a declared snapshot in between, means a real refresh again."""
    ws, tmp = watched
    root = ws.root
    settled = watched_snapshot(ws)
    assert settled.report["scan"] in ("watched", "unchanged")   # the first import settled it already
    again = watched_snapshot(ws)
    assert again.report["scan"] == "unchanged" and not again.created
    assert again.checkpoint.id == settled.checkpoint.id
    declared = ws.snapshot(CheckpointMeta(description="declared"), paths=[str(root / "d0" / "f0.txt")])
    assert declared.report["scan"] == "unchanged" and declared.report["kind"] == "declared"
    assert declared.checkpoint.id == settled.checkpoint.id

    changes = [lambda: (root / "d0" / "f0.txt").write_text("edited\n"),
               lambda: os.chmod(root / "d1" / "f1.txt", 0o755),
               lambda: (root / "d2" / "f2.txt").unlink(),
               lambda: (root / "fresh" / "sub").mkdir(parents=True),
               lambda: (root / "fresh" / "sub" / "z.txt").write_text("z\n"),
               lambda: os.symlink("d0/f0.txt", root / "alias")]
    for i, change in enumerate(changes):
        change()
        res = watched_snapshot(ws)
        assert res.report["scan"] != "unchanged", f"change {i}"
        assert res.tree_id == reference_tree(ws, tmp), f"change {i}"
        assert watched_snapshot(ws).report["scan"] == "unchanged"

    # a declared snapshot commits its own path only: the rest is not vouched for afterwards
    (root / "d3" / "f3.txt").write_text("declared write\n")
    (root / "d4" / "f4.txt").write_text("undeclared write\n")
    ws.snapshot(CheckpointMeta(description="declared"), paths=[str(root / "d3" / "f3.txt")])
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched" and res.tree_id == reference_tree(ws, tmp)


def test_an_untrusted_watcher_never_vouches_for_an_unchanged_workspace(watched):
    ws, tmp = watched
    watched_snapshot(ws)
    ws._watcher.untrust("test: queue overflow")
    (ws.root / "d0" / "f0.txt").write_text("during the overflow\n")
    res = watched_snapshot(ws)
    assert res.report["scan"] == "scan" and res.tree_id == reference_tree(ws, tmp)


def test_a_compaction_between_watched_snapshots_loses_no_change(watched):
    """Watched refreshes live in the in-memory stat cache; a compaction makes the process
    reopen its handles, dropping that cache: the next snapshot must not build on the stale
    file (it would put back what the first period changed)."""
    from chronos_git.engine import compaction
    ws, tmp = watched
    root = ws.root
    watched_snapshot(ws)
    (root / "d0" / "f0.txt").write_text("changed in the first period\n")
    first = watched_snapshot(ws)
    assert first.report["scan"] == "watched"          # the cache file does not have it yet
    compaction.compact(ws.store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    (root / "d1" / "f1.txt").write_text("changed in the second period\n")
    second = watched_snapshot(ws)
    assert second.tree_id == reference_tree(ws, tmp)


def test_a_watched_refresh_cut_short_by_its_budget_loses_no_change(watched):
    """The dirty set is taken when a refresh starts: one that runs out of budget before it
    reaches every path must leave the next snapshot to walk."""
    import time
    ws, tmp = watched
    root = ws.root
    watched_snapshot(ws)
    for i in range(5):
        (root / f"d{i}" / f"f{i}.txt").write_text(f"edit {i}\n")
    cut = ws.snapshot(CheckpointMeta(description="cut short"), deadline=time.monotonic() - 1)
    assert cut.partial
    res = watched_snapshot(ws)
    assert res.tree_id == reference_tree(ws, tmp)


def test_a_declared_snapshot_covers_what_the_watcher_saw_of_its_own_paths(watched, monkeypatch):
    """A file call's post-checkpoint reads its declared paths after the watcher saw them
    change: the next snapshot need not read them again, and when they were all that changed
    since a whole checkpoint it is the newest checkpoint (no refresh at all)."""
    ws, tmp = watched
    root = ws.root
    watched_snapshot(ws)
    (root / "d0" / "new.txt").write_text("written by a file tool\n")
    ws.snapshot(CheckpointMeta(description="declared"), paths=[str(root / "d0" / "new.txt")])
    res = watched_snapshot(ws)
    assert res.report["scan"] == "unchanged" and res.tree_id == reference_tree(ws, tmp)

    # another path changed too: not vouched for, and only it is refreshed
    (root / "d1" / "f1.txt").write_text("declared\n")
    (root / "d2" / "f2.txt").write_text("undeclared\n")
    ws.snapshot(CheckpointMeta(description="declared"), paths=[str(root / "d1" / "f1.txt")])
    refreshed = []
    real = workspace_mod.update_paths

    def spy(repo, index, scanner, rels, **kw):
        refreshed.extend(rels)
        return real(repo, index, scanner, rels, **kw)

    monkeypatch.setattr(workspace_mod, "update_paths", spy)
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched" and refreshed == ["d2/f2.txt"]
    assert res.tree_id == reference_tree(ws, tmp)


def test_a_change_while_a_declared_snapshot_reads_its_path_is_not_covered(watched, monkeypatch):
    """The path is written again after the declared refresh read it (its event comes after
    the refresh's mark): it stays dirty, and the next snapshot records the newer content."""
    ws, tmp = watched
    root = ws.root
    target = root / "d3" / "f3.txt"
    watched_snapshot(ws)
    target.write_text("first write\n")
    real = workspace_mod.update_paths

    def read_then_changed(repo, index, scanner, rels, **kw):
        real(repo, index, scanner, rels, **kw)
        target.write_text("second write, after the read\n")

    monkeypatch.setattr(workspace_mod, "update_paths", read_then_changed)
    declared = ws.snapshot(CheckpointMeta(description="declared"), paths=[str(target)])
    monkeypatch.setattr(workspace_mod, "update_paths", real)
    assert ws.repo()[declared.tree_id]["d3/f3.txt"].data == b"first write\n"
    res = watched_snapshot(ws)
    assert res.report["scan"] == "watched"
    assert res.tree_id == reference_tree(ws, tmp)


def test_randomised_file_calls_and_shell_calls_match_a_full_walk(watched):
    """Declared snapshots (file calls: before and after) interleaved with undeclared
    changes and watched snapshots (shell calls), as a Hermes session makes them."""
    ws, tmp = watched
    root = ws.root
    rnd = random.Random(77)
    for step in range(60):
        files = sorted(p for p in root.rglob("*.txt") if ".git" not in p.parts)
        if rnd.random() < 0.6:                       # a file call: pre, write, post
            target = rnd.choice(files) if files and rnd.random() < 0.5 else \
                root / f"d{rnd.randrange(5)}" / f"w{step}.txt"
            if not target.parent.exists():
                target.parent.mkdir(parents=True)
            ws.snapshot(CheckpointMeta(description="before"), paths=[str(target)])
            target.write_text(f"file call {step}\n")
            if rnd.random() < 0.3:
                os.chmod(target, 0o600)
            ws.snapshot(CheckpointMeta(description="after"), paths=[str(target)])
            if rnd.random() < 0.2 and files:         # something else changed meanwhile
                rnd.choice(files).write_text(f"aside {step}\n")
        else:                                        # a shell call: watched before and after
            watched_snapshot(ws)
            for _ in range(rnd.randrange(1, 4)):
                if files and rnd.random() < 0.5:
                    victim = rnd.choice(files)
                    if victim.exists():
                        victim.unlink() if rnd.random() < 0.3 else victim.write_text(f"shell {step}\n")
                else:
                    (root / f"d{rnd.randrange(5)}" / f"s{step}-{rnd.randrange(99)}.txt").write_text("s\n")
            res = watched_snapshot(ws)
            assert res.tree_id == reference_tree(ws, tmp), f"step {step} ({res.report['scan']})"
    res = watched_snapshot(ws)
    assert res.tree_id == reference_tree(ws, tmp)


def test_a_diff_then_a_declared_snapshot_loses_no_change(watched):
    """A diff refreshes the stat cache (taking the watcher's dirty set) without a checkpoint;
    a declared snapshot then aligns the cache to the newest checkpoint, dropping what the diff
    refreshed: the next snapshot must walk to find it again (found by review: it was lost)."""
    from chronos_git.engine import diff as diff_mod
    ws, tmp = watched
    root = ws.root
    watched_snapshot(ws)
    (root / "d0" / "f0.txt").write_text("changed by a shell command\n")
    diff_mod.working_tree(ws)
    (root / "d1" / "f1.txt").write_text("declared write\n")
    ws.snapshot(CheckpointMeta(description="declared"), paths=[str(root / "d1" / "f1.txt")])
    res = watched_snapshot(ws)
    assert res.report["scan"] == "scan"
    assert ws.repo()[res.tree_id]["d0/f0.txt"].data == b"changed by a shell command\n"
    assert res.tree_id == reference_tree(ws, tmp)
