"""The first import's blobs packed by forked children (engine/packers.py): the same tree,
index and report as packing on threads; a child's failure fails the import with its
error and never hangs it; an injected crash in a child is the whole process's."""
from __future__ import annotations

import errno
import os
import random
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine import bulk, faults, packers
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store
from support.helpers import fifo_after_listing, git


def _tree(ws: Path) -> None:
    """Sizes on both sides of a stored block, duplicates, links, modes, a file over the cap."""
    rnd = random.Random(3)
    for i in range(120):
        d = ws / f"d{i % 7}" / f"s{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.bin").write_bytes(rnd.randbytes(rnd.choice([0, 1, 900, 0xFFFF, 0x10001, 200_000])))
    (ws / "dup-a.txt").write_text("same\n")
    (ws / "dup-b.txt").write_text("same\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "key.pem").write_text("k\n")
    os.chmod(ws / "key.pem", 0o600)
    (ws / "big.bin").write_bytes(b"B" * 600_000)
    os.symlink("run.sh", ws / "link")


def _import(ws: Path, store: Path, cap: int = 500_000) -> tuple[bulk.BulkResult, bytes]:
    repo = Store.open(store, EngineConfig()).workspace(ws)._open_repo()     # the workspace's handle
    res = bulk.import_tree(repo, bytes(ws), str(store / "import-index"), str(store / "objects" / "pack"),
                           cap=cap, use_git=False)
    return res, (store / "import-index").read_bytes()


@pytest.fixture
def forking(monkeypatch):
    """Children for any import (these tests are about the children, not `usable()`)."""
    calls = []
    real = packers.run

    def spy(*a, **kw):
        calls.append(a[1])
        return real(*a, **kw)
    monkeypatch.setattr(bulk, "FORK_MIN_BYTES", 0)
    monkeypatch.setattr(packers, "usable", lambda n: True)
    monkeypatch.setattr(packers, "run", spy)
    return calls


def test_children_pack_the_same_tree_index_and_report_as_threads(ws, tmp_path, forking, monkeypatch):
    _tree(ws)
    forked, index = _import(ws, tmp_path / "forked")
    assert forking == [2] or forking[0] >= 2                 # the children did the packing
    monkeypatch.setattr(packers, "usable", lambda n: False)
    threaded, index2 = _import(ws, tmp_path / "threaded")
    assert forking == forking[:1]                             # and here they did not
    assert forked.tree == threaded.tree and index == index2   # stat data included
    assert forked.report.skipped == threaded.report.skipped == [
        {"path": "big.bin", "reason": "too_large", "size": 600_000}]
    assert forked.report.perms == threaded.report.perms == {"key.pem": 0o600}
    assert (forked.entries, forked.bytes) == (threaded.entries, threaded.bytes)
    assert len(forked.packs) > len(threaded.packs)            # one per child, one for the trees
    assert git("--git-dir", tmp_path / "forked", "fsck", "--strict", check=False).returncode == 0
    repo = pygit2.Repository(str(tmp_path / "forked"))
    tree = repo[forked.tree]
    assert tree["run.sh"].filemode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    assert tree["link"].filemode == pygit2.GIT_FILEMODE_LINK and repo[tree["link"].id].data == b"run.sh"


def test_a_failing_child_fails_the_import_with_its_error_and_the_snapshot_falls_back(
        ws, store_dir, forking, monkeypatch):
    _tree(ws)
    monkeypatch.setattr(faults, "_ARMED", ("bulk_mid_pack", 1, "enospc"))   # inherited by the children
    with pytest.raises(OSError) as err:
        _import(ws, store_dir.parent / "direct")
    assert err.value.errno == errno.ENOSPC and "packing child" in str(err.value)
    res = Store.open(store_dir, EngineConfig(max_file_size_mb=0.5)).workspace(ws).snapshot(
        CheckpointMeta(description="first"))
    assert res.report["scan"] != "bulk"                       # the ordinary path took it instead
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0


def test_a_child_that_dies_fails_the_import_and_leaves_no_child(ws, tmp_path, forking, monkeypatch):
    _tree(ws)
    parent = os.getpid()
    real = bulk._read

    def die_in_a_child(root, e, report, cap=0):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)              # the OOM killer, say: not an injected fault
        return real(root, e, report, cap)
    monkeypatch.setattr(bulk, "_read", die_in_a_child)
    with pytest.raises(OSError, match="ended with signal 9"):
        _import(ws, tmp_path / "store")
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)                            # every child reaped


def test_a_child_that_hangs_is_killed_and_the_import_fails(ws, tmp_path, forking, monkeypatch):
    """A child stuck (a lock left held at the fork, a hung file system) does not hang the
    first snapshot: silent for STALL_S, it is killed and the import fails."""
    _tree(ws)
    parent = os.getpid()
    real = bulk._read

    def hang_in_a_child(root, e, report, cap=0):
        if os.getpid() != parent:
            threading.Event().wait()
        return real(root, e, report, cap)
    monkeypatch.setattr(bulk, "_read", hang_in_a_child)
    monkeypatch.setattr(packers, "STALL_S", 1.0)
    with pytest.raises(OSError, match="sent nothing for 1 s") as err:
        _import(ws, tmp_path / "store")
    assert err.value.errno == errno.ETIMEDOUT
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)                            # killed and reaped


def test_a_report_from_a_child_is_merged_once(ws, tmp_path, forking, monkeypatch):
    """Skips found by the children (a file that became a FIFO after the listing) reach the
    import's report."""
    _tree(ws)
    fifo_after_listing(monkeypatch, ws / "dup-a.txt")
    res, _ = _import(ws, tmp_path / "store")
    assert [s for s in res.report.skipped if s["path"] == "dup-a.txt"] == [
        {"path": "dup-a.txt", "reason": "special_file: fifo"}]


@pytest.mark.process
def test_an_injected_crash_in_a_child_kills_the_import_process(ws, store_dir):
    """What the wind tunnel's `bulk_mid_pack` simulates is the machine going down: the
    process importing dies with the child, leaving a temp pack the next compaction sweeps."""
    _tree(ws)
    code = ("import sys; from chronos_git.engine import bulk, packers; bulk.FORK_MIN_BYTES = 0;"
            "packers.usable = lambda n: True;"
            "from chronos_git.service import Chronos; from chronos_git.settings import Settings;"
            "Chronos.get(sys.argv[1], Settings()).snapshot(sys.argv[2], 'first')")
    env = dict(os.environ, CHRONOS_GIT_FAULT="bulk_mid_pack")
    proc = subprocess.run([sys.executable, "-c", code, str(store_dir), str(ws)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    svc = Chronos.get(store_dir, Settings())
    packs = store_dir / "objects" / "pack"
    assert any(p.startswith("tmp_pack_chronos_") for p in os.listdir(packs))
    svc.snapshot(str(ws), "again")
    assert svc.log(str(ws), None).wire()["checkpoints"]
    svc.compact()
    assert not any(p.startswith("tmp_pack_chronos_") for p in os.listdir(packs))


def test_no_children_beside_a_thread_that_is_not_ours_or_on_one_core():
    stop = threading.Event()
    host = threading.Thread(target=stop.wait, name="host-http-client", daemon=True)
    host.start()
    try:
        assert not packers.usable(2)                         # it could hold a lock the child needs
    finally:
        stop.set()
        host.join()
    assert not packers.usable(1)


def test_small_imports_stay_on_threads(ws, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(packers, "run", lambda *a, **kw: calls.append(a) or [])
    monkeypatch.setattr(packers, "usable", lambda n: True)
    _tree(ws)                                                 # a few MB: below one pack's worth
    res, _ = _import(ws, tmp_path / "store")
    assert calls == [] and res.entries > 100


def test_a_report_sent_by_a_child_round_trips():
    """The frames a child sends are read back whole, however the pipe splits them."""
    r, w = os.pipe()
    big = ("chunk", 3, [(0, b"\x01" * 20, 0o100644, None, 5)] * 5000, [{"path": "x", "reason": "y"}], {"k": 0o600})
    packers._send(w, big)
    packers._send(w, ("done", ["pack-1"]))
    os.close(w)
    kid = packers._Child(0, r)
    got = []
    while data := os.read(r, 777):
        got += list(kid.frames(data))
    os.close(r)
    assert got == [big, ("done", ["pack-1"])]


def _index_stats(index: bytes) -> dict[bytes, tuple]:
    """path -> (ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size) of a v2 index."""
    count, pos, out = struct.unpack(">I", index[8:12])[0], 12, {}
    for _ in range(count):
        fields = struct.unpack(">10I", index[pos:pos + 40])
        n = struct.unpack(">H", index[pos + 60:pos + 62])[0] & 0xFFF
        out[index[pos + 62:pos + 62 + n]] = fields
        pos += (62 + n + 8) // 8 * 8
    return out


def test_the_imported_index_holds_each_file_s_stat_as_git_writes_it(ws, tmp_path):
    """The stat data is what makes the next snapshot a stat-only walk: every entry's fields
    are the file's own, and git's refresh of that index (which rewrites any entry whose stat
    differs) finds nothing to change.  An mtime of .999999999 s keeps its second."""
    _tree(ws)
    os.utime(ws / "run.sh", ns=(1_700_000_000_999_999_999, 1_700_000_000_999_999_999))
    res, index = _import(ws, tmp_path / "store")
    stats = _index_stats(index)
    assert len(stats) == res.entries
    for path, (cs, cns, ms, mns, dev, ino, mode, uid, gid, size) in stats.items():
        st = os.lstat(bytes(ws) + b"/" + path)
        assert (cs * 10**9 + cns, ms * 10**9 + mns, ino, uid, gid, size) == (
            st.st_ctime_ns, st.st_mtime_ns, st.st_ino & 0xFFFFFFFF, st.st_uid, st.st_gid, st.st_size), path
        assert dev == st.st_dev & 0xFFFFFFFF
    assert stats[b"run.sh"][2:4] == (1_700_000_000, 999_999_999)
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "store" / "import-index")}
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "--work-tree", str(ws),
                    "update-index", "-q", "--refresh"], env=env, check=True)
    assert _index_stats((tmp_path / "store" / "import-index").read_bytes()) == stats
