"""A file's index entry from one read (engine/index_entry.py) is the entry libgit2's own add
makes: the same blob and mode, stat data a work-tree diff accepts as clean; what it declines
goes to libgit2; what it read answers a pre-image only while the file is as it was then."""
from __future__ import annotations

import os
import time

import pygit2
import pytest
from support.helpers import wait_for

from chronos_git.engine import durability, index_entry
from chronos_git.engine.index_entry import Seen, add_file

OLD_NS = 1_700_000_000 * 10**9       # a stamp well past the racy window


@pytest.fixture
def tree(tmp_path):
    """(work tree, a repository over it, its objects folder)."""
    wt = tmp_path / "wt"
    wt.mkdir()
    repo = pygit2.init_repository(str(wt))
    return wt, repo, os.path.join(repo.path, "objects")


def _write(wt, rel: str, data: bytes, mode: int = 0o644, old: bool = True) -> bytes:
    full = os.path.join(os.fsencode(str(wt)), os.fsencode(rel))
    with open(full, "wb") as fh:
        fh.write(data)
    os.chmod(full, mode)
    if old:
        os.utime(full, ns=(OLD_NS, OLD_NS))
    return full


def _settle(*paths) -> None:
    """Until no later change could share the files' stamps (their ctime is always new)."""
    def done():
        now = time.time_ns()
        return all(not durability.racy(os.fsdecode(p), st, now, st.st_ctime_ns)
                   for p in paths for st in [os.lstat(p)])
    wait_for(done, timeout=10)


FILES = [("a.txt", b"alpha\n", 0o644), ("run.sh", b"#!/bin/sh\necho hi\n", 0o755),
         ("private", b"secret\n", 0o600), ("group.txt", b"shared\n", 0o664), ("odd-x", b"x", 0o744),
         ("empty", b"", 0o644), ("bin.dat", bytes(range(256)) * 300, 0o644),
         (os.fsdecode(b"name-\xff.txt"), b"undecodable name\n", 0o644)]


def test_the_entry_is_libgit2s_and_a_diff_finds_the_tree_clean(tree):
    wt, repo, objects = tree
    seen = Seen()
    fulls = [_write(wt, rel, data, mode) for rel, data, mode in FILES]
    _settle(*fulls)
    for (rel, data, _), full in zip(FILES, fulls, strict=True):
        assert add_file(repo, repo.index, rel, full, objects, seen)
        assert seen.blob(rel, full) == str(pygit2.hash(data))
    ours = {e.path: (str(e.id), e.mode) for e in repo.index}
    repo.index.write()
    assert not list(repo.index.diff_to_workdir().deltas)        # stat data and ids agree
    theirs = pygit2.Repository(repo.path).index       # libgit2's own add of the same files
    theirs.clear()
    for rel, _, _ in FILES:
        theirs.add(rel)
    assert ours == {e.path: (str(e.id), e.mode) for e in theirs}
    for rel, data, _ in FILES:
        assert repo[ours[rel][0]].data == data                  # stored, readable


def test_a_change_after_the_entry_shows_in_the_diff_and_in_seen(tree):
    wt, repo, objects = tree
    seen = Seen()
    full = _write(wt, "f.txt", b"one\n")
    _settle(full)
    assert add_file(repo, repo.index, "f.txt", full, objects, seen)
    assert seen.blob("f.txt", full) == str(pygit2.hash(b"one\n"))
    repo.index.write()
    with open(full, "r+b") as fh:                # the same size, its mtime put back: ctime moves
        fh.write(b"two\n")
    os.utime(full, ns=(OLD_NS, OLD_NS))
    assert seen.blob("f.txt", full) is None
    assert [d.new_file.path for d in repo.index.diff_to_workdir().deltas] == ["f.txt"]


def test_a_file_written_just_now_is_added_but_not_vouched_for(tree):
    """Racily clean: a change in the same clock tick could keep its stamps.  A file whose
    mtime was put back (a copy that keeps it) is as new: its ctime is."""
    wt, repo, objects = tree
    seen = Seen()
    full = _write(wt, "new.txt", b"fresh\n", old=False)
    copied = _write(wt, "copied.txt", b"mtime kept\n")
    assert add_file(repo, repo.index, "new.txt", full, objects, seen)
    assert add_file(repo, repo.index, "copied.txt", copied, objects, seen)
    assert seen == {} and seen.blob("new.txt", full) is None
    assert str(repo.index["new.txt"].id) == str(pygit2.hash(b"fresh\n"))
    assert str(repo.index["copied.txt"].id) == str(pygit2.hash(b"mtime kept\n"))


def test_a_time_past_2038_goes_to_libgit2_and_the_scan_still_works(tmp_path):
    """An index entry's seconds are 32-bit signed as pygit2 declares them."""
    from chronos_git.engine.checkpoint import CheckpointMeta
    from chronos_git.engine.store import Store
    wt = tmp_path / "ws"
    wt.mkdir()
    full = _write(wt, "future.txt", b"2040\n")
    w = Store.open(tmp_path / "store").workspace(wt)
    w.snapshot(CheckpointMeta(description="first"))
    _write(wt, "future.txt", b"2040, edited\n")
    os.utime(full, ns=(2_200_000_000 * 10**9,) * 2)
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert not add_file(repo, pygit2.Index(), "future.txt", full, str(tmp_path / "store" / "objects"))
    w.snapshot(CheckpointMeta(description="declared"), paths=[os.fsdecode(full)])
    assert repo[repo[w.tip().tree_id]["future.txt"].id].data == b"2040, edited\n"


def test_it_declines_what_libgit2_should_add(tree, monkeypatch):
    wt, repo, objects = tree
    root = os.fsencode(str(wt))
    os.symlink("a.txt", wt / "link")
    os.mkfifo(wt / "fifo")
    (wt / "dir").mkdir()
    assert not add_file(repo, repo.index, "link", root + b"/link", objects)
    assert not add_file(repo, repo.index, "fifo", root + b"/fifo", objects)     # never opened
    assert not add_file(repo, repo.index, "dir", root + b"/dir", objects)
    assert not add_file(repo, repo.index, "gone", root + b"/gone", objects)
    big = _write(wt, "big", b"x" * 100)
    monkeypatch.setattr(index_entry, "MAX_BYTES", 99)
    assert not add_file(repo, repo.index, "big", big, objects)
    early = _write(wt, "early", b"1960\n")
    os.utime(early, ns=(-10 * 365 * 86400 * 10**9,) * 2)          # before 1970: the index cannot hold it
    monkeypatch.setattr(index_entry, "MAX_BYTES", 8 << 20)
    assert not add_file(repo, repo.index, "early", early, objects)
    assert len(repo.index) == 0


def test_a_file_changed_between_its_stat_and_its_read_is_left_to_libgit2(tree, monkeypatch):
    wt, repo, objects = tree
    full = _write(wt, "moving", b"before\n")
    real_open = os.open

    def open_after_a_write(path, flags, *a):
        if path == full:
            with open(full, "ab") as fh:
                fh.write(b"appended meanwhile\n")
        return real_open(path, flags, *a)
    monkeypatch.setattr(index_entry.os, "open", open_after_a_write)
    seen = Seen()
    assert not add_file(repo, repo.index, "moving", full, objects, seen)
    assert seen == {} and len(repo.index) == 0


def test_a_blob_the_store_holds_is_not_written_again(tree):
    wt, repo, objects = tree
    data = b"already here\n"
    oid = str(repo.create_blob(data))
    loose_file = os.path.join(objects, oid[:2], oid[2:])
    before = os.stat(loose_file).st_ino
    full = _write(wt, "same.txt", data)
    assert add_file(repo, repo.index, "same.txt", full, objects)
    assert os.stat(loose_file).st_ino == before
    assert sorted(os.listdir(os.path.dirname(loose_file))) == [oid[2:]]
    assert not [n for n in os.listdir(objects) if n.startswith("tmp")]

