"""A file's index entry from one read (engine/index_entry.py) is the entry libgit2's own add
makes: the same blob and mode, stat data a work-tree diff accepts as clean; what it declines
goes to libgit2; what it read answers a pre-image only while the file is as it was then."""
from __future__ import annotations

import os

import pygit2
import pytest

from chronos_git.engine import index_entry
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


FILES = [("a.txt", b"alpha\n", 0o644), ("run.sh", b"#!/bin/sh\necho hi\n", 0o755),
         ("private", b"secret\n", 0o600), ("group.txt", b"shared\n", 0o664), ("odd-x", b"x", 0o744),
         ("empty", b"", 0o644), ("bin.dat", bytes(range(256)) * 300, 0o644),
         (os.fsdecode(b"name-\xff.txt"), b"undecodable name\n", 0o644)]


def test_the_entry_is_libgit2s_and_a_diff_finds_the_tree_clean(tree):
    wt, repo, objects = tree
    seen = Seen()
    for rel, data, mode in FILES:
        full = _write(wt, rel, data, mode)
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
    assert add_file(repo, repo.index, "f.txt", full, objects, seen)
    repo.index.write()
    with open(full, "r+b") as fh:                # the same size, its mtime put back: ctime moves
        fh.write(b"two\n")
    os.utime(full, ns=(OLD_NS, OLD_NS))
    assert seen.blob("f.txt", full) is None
    assert [d.new_file.path for d in repo.index.diff_to_workdir().deltas] == ["f.txt"]


def test_a_file_written_just_now_is_added_but_not_vouched_for(tree):
    """Racily clean: a change in the same clock tick could keep its stamps."""
    wt, repo, objects = tree
    seen = Seen()
    full = _write(wt, "new.txt", b"fresh\n", old=False)
    assert add_file(repo, repo.index, "new.txt", full, objects, seen)
    assert seen == {} and seen.blob("new.txt", full) is None
    assert str(repo.index["new.txt"].id) == str(pygit2.hash(b"fresh\n"))


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

