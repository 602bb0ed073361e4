"""refs.move: git's lock-file compare-and-swap of a ref, as plain system calls."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from pygit2 import GitError

from chronos_git.engine import refs


@pytest.fixture
def repo(tmp_path):
    r = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    sig = pygit2.Signature("t", "t@localhost", 1, 0)
    tree = r.TreeBuilder().write()
    r.a = str(r.create_commit(None, sig, sig, "a", tree, []))
    r.b = str(r.create_commit(None, sig, sig, "b", tree, [pygit2.Oid(hex=r.a)]))
    r.references.create("refs/chronos/x", pygit2.Oid(hex=r.a))
    return r


def root(repo) -> Path:
    return Path(repo.path)


def test_a_move_is_what_git_reads_and_leaves_no_lock(repo):
    refs.move(repo, root(repo), "refs/chronos/x", repo.a, repo.b, durable=False)
    assert (root(repo) / "refs/chronos/x").read_text() == repo.b + "\n"
    assert str(pygit2.Repository(repo.path).references.get("refs/chronos/x").target) == repo.b
    out = subprocess.run(["git", f"--git-dir={repo.path}", "rev-parse", "refs/chronos/x"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == repo.b and not (root(repo) / "refs/chronos/x.lock").exists()


def test_a_ref_that_moved_is_not_moved_and_not_locked(repo):
    with pytest.raises(GitError, match="does not match"):
        refs.move(repo, root(repo), "refs/chronos/x", repo.b, repo.a, durable=False)
    assert (root(repo) / "refs/chronos/x").read_text() == repo.a + "\n"
    assert not (root(repo) / "refs/chronos/x.lock").exists()


def test_a_lock_another_writer_holds_is_left_to_it(repo):
    lock = root(repo) / "refs/chronos/x.lock"
    lock.write_text("theirs\n")
    with pytest.raises(GitError, match="failed to lock"):
        refs.move(repo, root(repo), "refs/chronos/x", repo.a, repo.b, durable=False)
    assert lock.read_text() == "theirs\n" and (root(repo) / "refs/chronos/x").read_text() == repo.a + "\n"


def test_a_packed_ref_is_moved_by_a_loose_file(repo):
    subprocess.run(["git", f"--git-dir={repo.path}", "pack-refs", "--all"], check=True)
    assert not (root(repo) / "refs/chronos/x").exists()
    with pytest.raises(GitError, match="does not match"):
        refs.move(repo, root(repo), "refs/chronos/x", repo.b, repo.a, durable=False)
    refs.move(repo, root(repo), "refs/chronos/x", repo.a, repo.b, durable=False)
    assert str(pygit2.Repository(repo.path).references.get("refs/chronos/x").target) == repo.b


def test_durable_moves_fsync_the_file_and_its_folder(repo, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    refs.move(repo, root(repo), "refs/chronos/x", repo.a, repo.b, durable=False)
    assert synced == []
    refs.move(repo, root(repo), "refs/chronos/x", repo.b, repo.a, durable=True)
    assert synced == [str(root(repo) / "refs/chronos/x.lock"), str(root(repo) / "refs/chronos")]


def test_a_failing_disk_leaves_the_ref_and_no_lock(repo, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        refs.move(repo, root(repo), "refs/chronos/x", repo.a, repo.b, durable=True)
    assert (root(repo) / "refs/chronos/x").read_text() == repo.a + "\n"
    assert not (root(repo) / "refs/chronos/x.lock").exists()
