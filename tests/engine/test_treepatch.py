"""Patched trees (engine/treepatch.py) are exactly the trees the index writes: checked on
every snapshot of a long random history of declared and watched changes, and against a
fresh full scan of the disk at the end."""
from __future__ import annotations

import os
import random
import shutil

import pygit2
import pytest

from chronos_git.engine import workspace as workspace_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store

ODD = os.fsdecode(b"odd-\xff.txt")


def _mutate(rng: random.Random, ws, i: int) -> list[str]:
    """One random change on disk; returns the workspace-relative paths it touched."""
    try:
        return _change(rng, ws, i)
    except OSError:                  # a name the history made a file or a directory: something else
        rel = f"u{i}.txt"
        with open(os.path.join(ws, rel), "w") as fh:
            fh.write(f"unique {i}\n")
        return [rel]


def _change(rng: random.Random, ws, i: int) -> list[str]:
    files = sorted(os.path.relpath(os.path.join(d, f), ws) for d, _, fs in os.walk(ws) for f in fs)
    op = rng.choice(["new", "new", "modify", "modify", "delete", "chmod", "link", "deep", "odd",
                     "file_to_dir", "dir_to_file"])
    if op == "modify" and files:
        rel = rng.choice(files)
        p = os.path.join(ws, rel)
        if not os.path.islink(p):
            with open(p, "a") as fh:
                fh.write(f"change {i}\n")
        return [rel]
    if op == "delete" and files:
        rel = rng.choice(files)
        os.unlink(os.path.join(ws, rel))
        return [rel]
    if op == "chmod" and files:
        rel = rng.choice(files)
        p = os.path.join(ws, rel)
        if not os.path.islink(p):
            os.chmod(p, os.stat(p).st_mode ^ 0o100)
        return [rel]
    if op == "link":
        rel = f"l{i}"
        os.symlink(f"target-{i}", os.path.join(ws, rel))
        return [rel]
    if op == "deep":
        rel = f"n{i}/a/b/c{i}.txt"
        os.makedirs(os.path.join(ws, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(ws, rel), "w") as fh:
            fh.write(f"deep {i}\n")
        if i % 2:
            os.chmod(os.path.join(ws, f"n{i}", "a"), 0o700)       # in the permission record
        return [rel]
    if op == "odd":
        rel = f"d{i % 3}/{ODD}"
        os.makedirs(os.path.join(ws, f"d{i % 3}"), exist_ok=True)
        with open(os.path.join(os.fsencode(ws), os.fsencode(rel)), "wb") as fh:
            fh.write(b"odd\n")
        return [rel]
    if op == "file_to_dir" and files:
        rel = rng.choice(files)
        p = os.path.join(ws, rel)
        os.unlink(p)
        os.makedirs(p)
        with open(os.path.join(p, "inner.txt"), "w") as fh:
            fh.write("inner\n")
        return [rel, rel + "/inner.txt"]
    if op == "dir_to_file":
        dirs = sorted(os.path.relpath(d, ws) for d, _, _ in os.walk(ws) if d != str(ws))
        if dirs:
            rel = rng.choice(dirs)
            gone = [os.path.relpath(os.path.join(d, f), ws) for d, _, fs in os.walk(os.path.join(ws, rel)) for f in fs]
            shutil.rmtree(os.path.join(ws, rel))
            with open(os.path.join(ws, rel), "w") as fh:
                fh.write("was a directory\n")
            return [rel] + gone
    rel = f"d{i % 4}/f{i}.txt"
    os.makedirs(os.path.join(ws, f"d{i % 4}"), exist_ok=True)
    with open(os.path.join(ws, rel), "w") as fh:
        fh.write(f"new {i}\n")
    if i % 3 == 0:
        os.chmod(os.path.join(ws, rel), 0o600)                   # as Hermes' write_file leaves them
    return [rel]


def _full_scan_tree(tmp_path, ws) -> str:
    store = Store.open(tmp_path / f"oracle-{os.urandom(4).hex()}", EngineConfig())
    return store.workspace(ws).snapshot(CheckpointMeta(description="oracle"), commit=False).tree_id


def _modes(checkpoint) -> dict:
    return checkpoint.meta.modes


def _full_scan_modes(tmp_path, ws) -> dict:
    """The permission record a fresh full scan of the disk makes."""
    store = Store.open(tmp_path / f"oracle-{os.urandom(4).hex()}", EngineConfig())
    w = store.workspace(ws)
    w.snapshot(CheckpointMeta(description="oracle"))
    return _modes(w.tip())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_declared_snapshots_patch_trees_the_index_agrees_with(tmp_path, ws, monkeypatch, seed):
    monkeypatch.setattr(workspace_mod, "PATCH_CHECK_EVERY", 1)          # check every single one
    store = Store.open(tmp_path / "store", EngineConfig())
    w = store.workspace(ws)
    w.snapshot(CheckpointMeta(description="base"))
    rng = random.Random(seed)
    for i in range(120):
        rels = _mutate(rng, str(ws), i)
        w.snapshot(CheckpointMeta(description=f"step {i}"), paths=[os.path.join(str(ws), r) for r in rels])
        assert w._patching, f"seed {seed} step {i}: a patched tree differed from the index's ({rels})"
    assert w._patches >= 60
    assert w.tip().tree_id == _full_scan_tree(tmp_path, ws)
    # the record, looked up only where each snapshot touched, is the one a full scan makes
    assert _modes(w.tip()) == _full_scan_modes(tmp_path, ws) and _modes(w.tip())


def test_watched_snapshots_patch_trees_too(tmp_path, ws, monkeypatch):
    monkeypatch.setattr(workspace_mod, "PATCH_CHECK_EVERY", 1)
    store = Store.open(tmp_path / "store", EngineConfig())
    w = store.workspace(ws)
    assert w.enable_watcher()
    w.snapshot(CheckpointMeta(description="base"), force_scan=True)
    rng = random.Random(11)
    modes = set()
    for i in range(60):
        _mutate(rng, str(ws), i)
        res = w.snapshot(CheckpointMeta(description=f"step {i}"))
        modes.add(res.report["scan"])
        assert w._patching, f"step {i}"
    assert "watched" in modes and w._patches >= 20
    assert w.tip().tree_id == _full_scan_tree(tmp_path, ws)
    assert _modes(w.tip()) == _full_scan_modes(tmp_path, ws) and _modes(w.tip())


def test_a_disagreement_turns_patching_off_and_the_index_wins(tmp_path, ws, monkeypatch):
    monkeypatch.setattr(workspace_mod, "PATCH_CHECK_EVERY", 1)
    store = Store.open(tmp_path / "store", EngineConfig())
    w = store.workspace(ws)
    w.snapshot(CheckpointMeta(description="base"))
    empty = pygit2.Repository(str(tmp_path / "store")).TreeBuilder().write()
    monkeypatch.setattr(workspace_mod, "patched_tree", lambda *a: empty)    # a wrong answer
    (ws / "a.txt").write_text("changed\n")
    res = w.snapshot(CheckpointMeta(description="x"), paths=[str(ws / "a.txt")])
    assert not w._patching and res.tree_id != str(empty)
    assert res.tree_id == _full_scan_tree(tmp_path, ws)


def test_a_declared_snapshot_that_changes_nothing_is_the_tip_without_building_a_tree(tmp_path, ws, monkeypatch):
    """The usual pre-call checkpoint of a file call: its path is as the previous checkpoint has
    it, or absent.  A change the index sees (content, the exec bit, a directory's entries
    removed) still makes a checkpoint."""
    store = Store.open(tmp_path / "store", EngineConfig())
    w = store.workspace(ws)
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    base = w.snapshot(CheckpointMeta(description="base"))

    def no_build(*a, **k):
        raise AssertionError("a tree was built for a snapshot that changes nothing")
    monkeypatch.setattr(workspace_mod, "patched_tree", no_build)
    for rel in ("b.txt", "new.txt", "sub/a.txt", "sub"):
        res = w.snapshot(CheckpointMeta(description=f"pre {rel}"), paths=[str(ws / rel)])
        assert not res.created and res.checkpoint.id == base.checkpoint.id, rel
    monkeypatch.undo()
    os.chmod(ws / "b.txt", 0o755)
    res = w.snapshot(CheckpointMeta(description="exec"), paths=[str(ws / "b.txt")])
    assert res.created and res.tree_id == _full_scan_tree(tmp_path, ws)
    shutil.rmtree(ws / "sub")
    res = w.snapshot(CheckpointMeta(description="gone"), paths=[str(ws / "sub")])
    assert res.created and "sub" not in w.store.repo()[res.tree_id]
    assert res.tree_id == _full_scan_tree(tmp_path, ws)


def test_patched_trees_keep_gits_order_of_directories_among_similar_names(tmp_path, ws, monkeypatch):
    """A directory sorts as if its name ended in "/": between "a.txt" ('.' < '/') and "a0"
    ('0' > '/').  Every patched tree is checked against the index's own."""
    monkeypatch.setattr(workspace_mod, "PATCH_CHECK_EVERY", 1)
    for name in ("a.txt", "a0", "a-b", "a b", "ab", "a~"):
        (ws / name).write_text(f"{name}\n")
    (ws / "a").mkdir()
    (ws / "a" / "in.txt").write_text("in\n")
    (ws / "a.d").mkdir()
    (ws / "a.d" / "x").write_text("x\n")
    store = Store.open(tmp_path / "store", EngineConfig())
    w = store.workspace(ws)
    w.snapshot(CheckpointMeta(description="base"))
    steps = [("a/in.txt", "changed\n"), ("a.txt", "changed\n"), ("a/new.txt", "new\n"),
             ("a0", "changed\n"), ("a.d/x", "changed\n"), ("a.d/y", "new\n"), ("a/", None)]
    for rel, content in steps:
        if content is None:
            shutil.rmtree(ws / rel)
        else:
            (ws / rel).write_text(content)
        w.snapshot(CheckpointMeta(description=rel), paths=[str(ws / rel.rstrip("/"))])
        assert w._patching, f"a patched tree differed from the index's after {rel}"
    assert w._patches >= 6
    assert w.tip().tree_id == _full_scan_tree(tmp_path, ws)
