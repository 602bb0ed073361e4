"""A long-lived host runs a workspace's first import and its consolidation in a child
process at low priority (engine/offload.py): the agent's thread shares no GIL with
them.  When no child can run, the work is done in-process as before; a child that dies
is reported and the next start completes the work; a child dies with its host."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from chronos_git.engine.workspace import Workspace
from chronos_git.cli import render
from chronos_git.engine import offload
from chronos_git.service import Chronos, snapshots
from chronos_git.settings import Settings
from support.helpers import held_by_another_thread, wait_for

pytestmark = pytest.mark.process          # the first import's child process is the point

FILES = snapshots.SMALL_TREE_ENTRIES + 200     # a tree big enough for a child


@pytest.fixture
def tree(tmp_path):
    ws = tmp_path / "ws"
    for d in range(10):
        (ws / f"d{d}").mkdir(parents=True)
        for f in range(FILES // 10):
            (ws / f"d{d}" / f"f{f}.txt").write_text(f"{d}/{f}\n")
    return ws


def _host(tmp_path) -> Chronos:
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.background = True
    svc.start()                      # as the plugin does before a turn's first checkpoint
    return svc


def _first(svc, tree) -> dict:
    assert svc.turn_checkpoint(str(tree)) == {"kind": "background"}
    ws = svc.core.store.workspace(tree)
    assert svc.snapshots.wait(ws, 120)
    return svc.health(str(tree)).wire()["workspace"]["background"]


def test_the_first_import_and_its_consolidation_run_in_a_child(tmp_path, tree, monkeypatch):
    def not_here(*a, **k):
        raise AssertionError("the bulk import ran in the host's process")
    monkeypatch.setattr(Workspace, "_bulk_import", not_here)
    svc = _host(tmp_path)
    with held_by_another_thread(svc.core.store.workspace(tree).lock):   # the child waits: health sees it run
        assert svc.turn_checkpoint(str(tree)) == {"kind": "background"}
        wait_for(lambda: "first snapshot running in a child process" in render.text(svc.health(str(tree))),
                 message=lambda: render.text(svc.health(str(tree))))
        assert "first snapshot running in a child process" in render.text(svc.health(str(tree)))
    state = _first(svc, tree)
    assert state.get("error") is None and state["runs_in"] == "a child process"
    assert state["progress"]["files_done"] == state["progress"]["files_total"] == FILES
    first = svc.log(str(tree), None).wire()["checkpoints"][-1]
    assert first["files"] == FILES
    assert svc.maintenance.wait_consolidated(120)
    cons = svc.health(str(tree)).wire()["consolidation"]
    assert cons["runs_in"] == "a child process" and cons.get("error") is None
    assert cons["pending_packs"] == 0 and cons["last"]["objects"] >= FILES
    # the host's next call sees the child's checkpoint and index: a stat walk, no re-import
    # the watcher was handed over before the child walked: no second walk of the tree
    (tree / "d0" / "f0.txt").write_text("changed\n")
    snap = svc.snapshot(str(tree), "after").wire()
    assert snap["created"] and snap["scan"] == "watched" and snap["files"] == FILES
    changed = svc.diff(str(tree), first["id"], snap["checkpoint"]).wire()["files"]
    assert [f["path"] for f in changed] == ["d0/f0.txt"]


def test_the_child_imports_nothing_from_the_agent_s_working_folder(tmp_path, tree, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    marker = tmp_path / "shadowed"
    for name in ("json", "signal", "pygit2"):
        (cwd / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    monkeypatch.chdir(cwd)
    monkeypatch.syspath_prepend(str(tmp_path / "not-a-folder"))
    monkeypatch.setattr(sys, "path", sys.path + [tmp_path / "a-path-object"])    # another plugin's doing
    svc = _host(tmp_path)
    state = _first(svc, tree)
    assert state.get("error") is None and state["runs_in"] == "a child process"
    assert not marker.exists()


@pytest.mark.parametrize("how", ["no interpreter", "interpreter unknown", "package does not load",
                                 "interpreter hangs"])
def test_without_a_child_the_first_import_runs_in_the_host(tmp_path, tree, monkeypatch, how):
    if how == "no interpreter":
        monkeypatch.setattr(offload.sys, "executable", str(tmp_path / "no-python"))
    elif how == "interpreter unknown":
        monkeypatch.setattr(offload.sys, "executable", None)
    elif how == "package does not load":
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.setattr(offload, "_PACKAGE_DIR", empty)
    else:                                   # a wrapper or a frozen host binary: never says ready
        stall = tmp_path / "stall"
        stall.write_text("#!/bin/sh\nexec sleep 60\n")
        stall.chmod(0o755)
        monkeypatch.setattr(offload.sys, "executable", str(stall))
        monkeypatch.setattr(offload, "READY_S", 1.0)
    svc = _host(tmp_path)
    state = _first(svc, tree)
    assert state.get("error") is None and state["runs_in"].startswith("this process: ")
    assert "first snapshot taken on a thread (this process: " in render.text(svc.health(str(tree)))
    assert svc.log(str(tree), None).wire()["checkpoints"][-1]["files"] == FILES
    assert svc.maintenance.wait_consolidated(120)
    assert svc.health(str(tree)).wire()["consolidation"]["runs_in"].startswith("this process: ")


def test_a_child_killed_mid_import_is_reported_and_the_next_import_completes(tmp_path, tree, monkeypatch):
    monkeypatch.setenv("CHRONOS_GIT_FAULT", "bulk_mid_pack")        # armed in the child only
    svc = _host(tmp_path)
    state = _first(svc, tree)
    assert state["runs_in"] == "a child process"
    assert "signal 9" in state["error"], state
    assert "the first snapshot failed: the background process ended with signal 9" in render.text(
        svc.health(str(tree)))
    assert svc.log(str(tree), None).wire()["checkpoints"] == []
    monkeypatch.delenv("CHRONOS_GIT_FAULT")
    state = _first(svc, tree)
    assert state.get("error") is None
    assert svc.log(str(tree), None).wire()["checkpoints"][-1]["files"] == FILES
    # the killed child's half-written temp pack is garbage only: the next compaction sweeps it
    packs = Path(svc.core.store_dir) / "objects" / "pack"
    temps = lambda: [p for p in os.listdir(packs) if not p.endswith((".pack", ".idx", ".rev", ".keep"))]  # noqa: E731
    assert all(p.startswith("tmp_pack_chronos_") for p in temps())
    svc.compact()
    assert temps() == []


def _children(store: Path) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"_chronos_git_offload" in a for a in argv) and any(os.fsencode(store) in a for a in argv):
            out.append(int(pid))
    return out


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])    # field 19


def _pgrp(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])     # field 5


def test_the_child_runs_at_low_priority_and_dies_with_its_host(tmp_path, tree):
    store = tmp_path / "store"
    ws = Chronos.get(store, Settings()).core.store.workspace(tree)
    with ws.lock():                     # the child waits for the workspace lock held here
        host = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import signal, time
            from chronos_git.service import Chronos
            from chronos_git.settings import Settings
            # an agent survives an interrupted turn (and says it had one)
            signal.signal(signal.SIGINT, lambda *a: print("interrupted", flush=True))
            svc = Chronos.get({str(store)!r}, Settings())
            svc.background = True
            svc.turn_checkpoint({str(tree)!r})
            print("started", flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert select.select([host.stdout], [], [], 60)[0], "the host's turn checkpoint waited"
            assert host.stdout.readline().strip() == "started"
            deadline = time.monotonic() + 30
            while not (kids := _children(store)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(kids) == 1, "no child process started"
            while _nice(kids[0]) != offload.BACKGROUND_NICE and time.monotonic() < deadline:
                time.sleep(0.05)                                # it sets it once it has started
            assert _nice(kids[0]) == offload.BACKGROUND_NICE
            os.killpg(host.pid, signal.SIGINT)                  # Ctrl-C in the agent's terminal
            assert host.stdout.readline().strip() == "interrupted"     # the host's group has it
            assert _pgrp(kids[0]) != host.pid, "the child is in the group a Ctrl-C reaches"
            assert not _gone(kids[0]), "a Ctrl-C meant for the agent killed the child"
            host.send_signal(signal.SIGKILL)
            host.wait(10)
            deadline = time.monotonic() + 10
            while not _gone(kids[0]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _gone(kids[0]), "the child outlived its host"
        finally:
            host.kill()
            host.wait()
            for pid in _children(store):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("asked", [False, True], ids=["agent pauses", "operator asks"])
def test_the_consolidation_waits_for_a_pause_in_the_agent_s_calls(tmp_path, tree, asked):
    """Its disk work would slow the agent's own (engine/consolidate.py: Quiet): the child
    waits while the journal's witness, which every protected call rewrites, is fresh,
    until the agent pauses or an operator asks for the lock it holds."""
    from chronos_git.engine.consolidate import QUIET_S, WAITING
    svc = _host(tmp_path)
    witness = svc.core.journal.witness_path
    before = witness.stat().st_mtime_ns
    svc.write_file(str(tree), "premise.txt", b"a protected call rewrites the witness\n")
    assert witness.stat().st_mtime_ns > before
    busy = threading.Event()
    busy.set()

    def agent():                                   # an agent calling several times a second
        while busy.is_set():
            os.utime(witness)
            time.sleep(0.05)
    t = threading.Thread(target=agent, daemon=True)
    t.start()
    try:
        _first(svc, tree)
        deadline = time.monotonic() + 60
        while ((svc.health(str(tree)).wire()["consolidation"] or {}).get("progress") or {}).get(
                "phase") != WAITING and time.monotonic() < deadline:
            time.sleep(0.05)
        # real time, on purpose: still waiting after longer than the child's quiet period (its
        # own QUIET_S: nothing the test sets reaches the child's process)
        time.sleep(1.5 * QUIET_S)
        cons = svc.health(str(tree)).wire()["consolidation"]
        assert cons["running"] and cons["pending_packs"] >= 1 and cons["progress"]["phase"] == WAITING
        assert "waiting for a pause in the agent's calls)" in render.text(svc.health(str(tree)))
        if asked:       # an operator's `consolidate` (or `compact`) asks for its lock: no waiting
            done = []
            op = threading.Thread(target=lambda: done.append(svc.consolidate()), daemon=True)
            op.start()
            op.join(120)
            assert done and busy.is_set(), "the operator waited for the agent's pause"
    finally:
        busy.clear()
        t.join()
    assert svc.maintenance.wait_consolidated(120)      # the agent paused (or it was asked): it goes on
    cons = svc.health(str(tree)).wire()["consolidation"]
    assert cons["pending_packs"] == 0 and cons.get("error") is None and cons["last"]["objects"] >= FILES
