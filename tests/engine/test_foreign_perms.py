"""Issue 33, finding 4: a foreign checkpoint's permission record is masked by the umask.

The trial: a fetched checkpoint whose record said 0666 / 0777 restored world-writable files
and folders under a 022 umask.  A checkpoint off this workspace's chain (fetched, or off every
chain here) is someone else's say: its bits go through the process umask, and set-id and
sticky bits are never restored, whoever made the record.  The workspace's own checkpoints
keep their record as written (and a script its exec bit).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from chronos_git.engine import perms, restore as restore_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store


@pytest.fixture
def store(store_dir):
    return Store.open(store_dir, EngineConfig())


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def wide(root: Path) -> Path:
    """A folder whose files and directories hold bits no umask 022 would give."""
    root.mkdir()
    (root / "open.txt").write_text("anyone may write\n")
    (root / "shared").mkdir()
    (root / "shared" / "inside.txt").write_text("inside\n")
    (root / "sticky").mkdir()
    (root / "sticky" / "t.txt").write_text("t\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "private.txt").write_text("mine\n")
    for rel, bits in (("open.txt", 0o666), ("shared", 0o777), ("sticky", 0o1777), ("run.sh", 0o4755),
                      ("private.txt", 0o600)):
        os.chmod(root / rel, bits)
    return root


def test_a_foreign_record_is_masked_by_the_umask_and_never_set_id(store, tmp_path, umask_022):
    src = wide(tmp_path / "src")
    cp = store.workspace(src).snapshot(CheckpointMeta(description="wide")).checkpoint
    assert perms.expand(cp.meta.modes) == {"open.txt": 0o666, "shared/": 0o777, "sticky/": 0o1777,
                                           "run.sh": 0o4755, "private.txt": 0o600}
    store.repo().references.delete(store.workspace(src).ref)      # off every chain here: as if fetched
    dest = tmp_path / "dest"
    restore_mod.restore(store.workspace(dest), cp.id)
    got = {rel: mode(dest / rel) for rel in ("open.txt", "shared", "sticky", "run.sh", "private.txt",
                                             "shared/inside.txt")}
    assert got == {"open.txt": 0o644, "shared": 0o755, "sticky": 0o755, "run.sh": 0o755,
                   "private.txt": 0o600, "shared/inside.txt": 0o644}


def test_a_foreign_record_follows_a_stricter_umask_and_keeps_the_exec_bit(store, tmp_path):
    src = wide(tmp_path / "src")
    cp = store.workspace(src).snapshot(CheckpointMeta(description="wide")).checkpoint
    store.repo().references.delete(store.workspace(src).ref)
    dest = tmp_path / "dest"
    old = os.umask(0o077)
    try:
        restore_mod.restore(store.workspace(dest), cp.id)
    finally:
        os.umask(old)
    assert (mode(dest / "open.txt"), mode(dest / "shared"), mode(dest / "run.sh")) == (0o600, 0o700, 0o700)


def test_the_workspaces_own_record_is_applied_as_written_never_set_id(store, tmp_path, umask_022):
    src = wide(tmp_path / "src")
    w = store.workspace(src)
    cp = w.snapshot(CheckpointMeta(description="wide")).checkpoint
    for rel in ("open.txt", "run.sh", "shared/inside.txt"):
        (src / rel).unlink()
    os.rmdir(src / "shared")
    restore_mod.restore(w, cp.id)
    assert (mode(src / "open.txt"), mode(src / "shared"), mode(src / "run.sh")) == (0o666, 0o777, 0o755)


def test_a_fetched_checkpoints_record_is_masked(tmp_path, umask_022):
    """The trial's path: pushed by one host, fetched by another, restored into a new folder."""
    from support.helpers import run_cli

    def cli(host: str, *args):
        r = run_cli(tmp_path / host / "store", *args, "--json", env={"CHRONOS_GIT_HOST_ID": host})
        assert r.rc == 0, r.stdout + r.stderr
        return r.json

    src = wide(tmp_path / "alpha-ws")
    remote = str(tmp_path / "shared.git")
    cli("alpha", "snapshot", "--workspace", src)
    cli("alpha", "remote", "add", "shared", remote, "--snapshots")
    cli("alpha", "push", "shared")
    cli("gamma", "remote", "add", "shared", remote)
    (host,) = cli("gamma", "fetch", "shared")["hosts"]
    (w,) = host["workspaces"]
    dest = tmp_path / "restored"
    cli("gamma", "restore", w["latest"], "--workspace", dest)
    assert (dest / "open.txt").read_text() == "anyone may write\n"
    assert (mode(dest / "open.txt"), mode(dest / "shared"), mode(dest / "sticky"), mode(dest / "run.sh"),
            mode(dest / "private.txt")) == (0o644, 0o755, 0o755, 0o755, 0o600)
