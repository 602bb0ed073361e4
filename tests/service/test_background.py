"""In a long-lived host the first snapshot runs in the background: calls are
never blocked on it beyond the budget, declared paths stay protected by their
pre-images in the journal, and `health` reports its state and progress."""
from __future__ import annotations

import os

import pytest

from chronos_git.engine import worktree
from chronos_git.service import Chronos, snapshots
from chronos_git.service.calls import Call, Declared, Outcome
from chronos_git.settings import Settings
from support.helpers import held_by_another_thread


@pytest.fixture
def big_ws(tmp_path, monkeypatch):
    """1,000 files standing for a big tree: its first snapshot goes to the background."""
    monkeypatch.setattr(snapshots, "SMALL_TREE_ENTRIES", 100)
    ws = tmp_path / "ws"
    for d in range(20):
        (ws / f"d{d}").mkdir(parents=True)
        for f in range(50):
            (ws / f"d{d}" / f"f{f}.txt").write_text(f"{d}/{f}\n")
    return ws


def test_calls_go_ahead_while_the_first_snapshot_runs(tmp_path, big_ws):
    svc = Chronos.get(tmp_path / "store", Settings(snapshot_budget_s=0.05))
    svc.background = True
    ws = svc.core.store.workspace(big_ws)
    target = big_ws / "d0" / "f0.txt"
    with held_by_another_thread(ws.lock):     # a busy workspace: the background import must wait
        t = svc.begin(Call(tool="write_file", args={"path": str(target), "content": "new\n"},
                           workspace=str(big_ws), declared=[Declared(str(target), b"new\n")]))
        assert t.snapshot["kind"] == "none" and t.snapshot["pending_baseline"] is True
        assert "pre-images in the journal" in t.snapshot["note"]
        started = [e for e in svc.journal_log(3).wire()["events"] if e["kind"] == "started"][0]
        assert started["declared"][0]["pre"] is not None          # the old content is kept
        assert started["snapshot"]["pending_baseline"] is True     # why it has no checkpoint
        state = svc.health(str(big_ws)).wire()["workspace"]["background"]
        assert state["kind"] == "baseline" and state["running"] is True
        target.write_text("new\n")
        svc.finish(t, Outcome(status="ok"))
        # a whole-workspace call waits at most the budget, then goes ahead without a checkpoint
        t2 = svc.begin(Call(tool="terminal", args={"command": "make"}, workspace=str(big_ws)))
        assert t2.snapshot["kind"] == "none" and "this call has no checkpoint" in t2.snapshot["note"]
        svc.finish(t2, Outcome(status="ok"))
    assert svc.snapshots.wait(ws, 60)
    state = svc.health(str(big_ws)).wire()["workspace"]["background"]
    assert state["running"] is False and state["error"] is None
    assert state["progress"]["files_done"] == state["progress"]["files_total"] == 1000
    t3 = svc.begin(Call(tool="terminal", args={"command": "make"}, workspace=str(big_ws)))
    assert t3.pre_checkpoint and t3.snapshot["kind"] in ("full", "manual")
    svc.finish(t3, Outcome(status="ok"))
    # the baseline is a real, complete checkpoint
    first = svc.log(str(big_ws), None).wire()["checkpoints"][-1]
    assert first["files"] == 1000


def test_a_small_tree_gets_its_first_checkpoint_with_the_first_call(tmp_path, monkeypatch):
    """A new workspace of a few files: its first call has checkpoints before and after it,
    however slow a child would be to start (on a busy machine it can take seconds)."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hello')\n")
    (ws / "README").write_text("hi\n")

    def no_child(*_a, **_k):
        raise AssertionError("a small tree's first snapshot started a background job")
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.background = True
    monkeypatch.setattr(svc.snapshots, "_start", no_child)
    target = ws / "feature.py"
    t = svc.begin(Call(tool="write_file", args={"path": str(target), "content": "x = 1\n"},
                       workspace=str(ws), declared=[Declared(str(target), b"x = 1\n")]))
    assert t.pre_checkpoint and t.snapshot["kind"] == "full"
    target.write_text("x = 1\n")
    rec = svc.finish(t, Outcome(status="ok"))
    assert rec.post_checkpoint and rec.post_checkpoint != t.pre_checkpoint
    # the turn checkpoint of a new small workspace is taken on the spot too
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("a\n")
    got = svc.snapshots.turn_checkpoint(str(other))
    assert got["checkpoint"] and got["created"]


def test_within_is_a_bound_on_entries_and_bytes(tmp_path):
    (tmp_path / "d").mkdir()
    for i in range(5):
        (tmp_path / "d" / f"f{i}").write_bytes(b"x" * 100)
    (tmp_path / ".git").mkdir()                 # the user's repository is not the tree
    (tmp_path / ".git" / "big").write_bytes(b"x" * 10_000)
    root = bytes(tmp_path)
    assert worktree.within(root, 6, 500)       # the folder and its five files
    assert not worktree.within(root, 5, 10_000)
    assert not worktree.within(root, 100, 499)
    # folders count too; a FIFO and a link loop are counted, never opened or followed
    many = tmp_path / "many"
    many.mkdir()
    for i in range(50):
        (many / f"e{i}").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "loop").symlink_to(tmp_path)
    assert worktree.within(root, 6 + 1 + 50 + 2, 1000)     # the link: its target's name
    assert not worktree.within(root, 6 + 1 + 50 + 1, 1000)
    # a nested repository is one entry, not entered
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    (tmp_path / "sub" / "big").write_bytes(b"x" * 10_000)
    assert worktree.within(root, 6 + 1 + 50 + 2 + 1, 1000)
