"""Loose objects written beside their final name must be the objects libgit2 and git write."""
from __future__ import annotations

import subprocess

import pygit2
import pytest

from chronos_git.engine import loose
from chronos_git.engine.checkpoint import signature
from chronos_git.journal_refs import carried


@pytest.fixture
def repo(tmp_path):
    return pygit2.init_repository(str(tmp_path / "r"), bare=True)


def objects(repo):
    from pathlib import Path
    return Path(repo.path) / "objects"


NAMES = ["state.json", "post-0000", "pre-0000", "a-b", "a.b", "a_b", "Z", "z", "é", "e\u0301", "a b", "~"]


def test_blobs_trees_and_commits_are_the_ones_libgit2_writes(repo):
    blobs = {}
    for i, name in enumerate(NAMES):
        data = f"{name} {i}\n".encode() * (i + 1)
        oid = loose.blob(objects(repo), data)
        assert oid == str(pygit2.hash(data)) and repo[oid].data == data
        blobs[name] = oid
    tree, raw = loose.write(objects(repo), pygit2.GIT_OBJECT_TREE, loose.flat_tree(blobs))
    tb = repo.TreeBuilder()
    for name, oid in blobs.items():
        tb.insert(name, pygit2.Oid(hex=oid), pygit2.GIT_FILEMODE_BLOB)
    assert tree == str(tb.write())
    assert carried.decode(tree, carried.encode(raw)) == raw          # the bytes hash to the name
    for sig in (signature(1796197339.5), pygit2.Signature("n", "e@x", 100, -330)):
        for parents, msg in (([], "first\n\nKey: v\n{\"a\":1}"), ([tree], "ünïcode ✓")):
            parents = [str(p) for p in parents if p != tree] or []
            body = loose.commit_data(tree, parents, sig, msg)
            cid = loose.write(objects(repo), pygit2.GIT_OBJECT_COMMIT, body)[0]
            assert cid == str(repo.create_commit(None, sig, sig, msg, pygit2.Oid(hex=tree),
                                                 [pygit2.Oid(hex=p) for p in parents]))
    # git itself reads them and finds nothing wrong, and no temp file is left behind
    out = subprocess.run(["git", "--git-dir", repo.path, "fsck", "--strict", "--no-dangling"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert not [p for p in objects(repo).rglob("*tmp*")]


def test_prepared_objects_are_stored_uncompressed_up_to_a_size_and_read_by_git(repo):
    import zlib
    small = b'{"state": 1}' * 10
    large = bytes(range(256)) * (loose.STORED_MAX // 256 + 1)
    for data in (small, large):
        oid, raw = loose.prepare(pygit2.GIT_OBJECT_BLOB, data)
        assert oid == str(pygit2.hash(data))
        framed = b"blob %d\0" % len(data) + data
        assert zlib.decompress(raw) == framed
        # stored blocks (no compression) for an event's small objects, deflated above STORED_MAX
        assert (len(raw) > len(framed)) == (data is small)
        assert carried.decode(oid, carried.encode(raw)) == raw
        loose.put(objects(repo), oid, raw)
        assert repo[oid].data == data
        shown = subprocess.run(["git", "--git-dir", repo.path, "cat-file", "blob", oid], capture_output=True)
        assert shown.returncode == 0 and shown.stdout == data
    out = subprocess.run(["git", "--git-dir", repo.path, "fsck", "--strict", "--no-dangling"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_an_object_the_repository_holds_is_not_written_again(repo, tmp_path):
    oid = str(repo.create_blob(b"packed already\n"))
    repo.references.create("refs/tags/keep", pygit2.Oid(hex=oid))
    subprocess.run(["git", "--git-dir", repo.path, "repack", "-adq"], check=True)
    path = objects(repo) / oid[:2] / oid[2:]
    assert not path.exists()
    assert loose.write(objects(repo), pygit2.GIT_OBJECT_BLOB, b"packed already\n", repo=repo) == (oid, None)
    assert not path.exists()
    again, raw = loose.write(objects(repo), pygit2.GIT_OBJECT_BLOB, b"new\n", repo=repo)
    assert raw is not None and (objects(repo) / again[:2] / again[2:]).read_bytes() == raw


def test_a_staged_blob_is_left_for_the_journal_to_write_and_reads_back_as_git_wrote_it(repo, tmp_path):
    """A file call's post-image: deflated, as git writes it, up to what the journal carries;
    written at once above that; nothing for a blob the store holds."""
    import zlib
    small, mid, big = b"small\n" * 100, bytes(range(256)) * 200, b"big\n" * 20_000
    assert len(small) < len(mid) < carried.MAX_BLOB < len(big)
    made = {}
    for data in (small, mid, big):
        oid, raw = loose.staged_blob(objects(repo), data, repo=repo, most=carried.MAX_BLOB)
        assert oid == str(pygit2.hash(data))
        made[data] = (oid, raw)
    for data in (small, mid):
        oid, raw = made[data]
        assert not (objects(repo) / oid[:2] / oid[2:]).exists()       # the journal writes it
        assert zlib.decompress(raw) == b"blob %d\0" % len(data) + data
        loose.put(objects(repo), oid, raw)
        assert repo[oid].data == data
    assert len(made[small][1]) < len(small) // 10 and len(made[mid][1]) < len(mid) // 2   # deflated
    oid, raw = made[big]
    assert raw is None and repo[oid].data == big                               # written here
    assert loose.staged_blob(objects(repo), small, repo=repo, most=carried.MAX_BLOB) == (made[small][0], None)


@pytest.mark.fsync
def test_objects_are_fsynced_inside_a_fsync_scope_like_libgit2s(repo, monkeypatch):
    """durable_snapshots opens a fsync scope: then the object file and its directory are
    fsynced; outside one nothing is (the journal's witness carries what it needs)."""
    import os

    from chronos_git.engine import durability
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    loose.blob(objects(repo), b"not durable\n")
    assert synced == []
    with durability.fsync_scope():
        loose.blob(objects(repo), b"durable\n")
    assert len(synced) == 2


def test_an_object_file_already_there_is_never_replaced(repo):
    """It may be durable already: a new, unsynced file under its name could come back empty
    after a power cut."""
    oid = loose.blob(objects(repo), b"once\n")
    path = objects(repo) / oid[:2] / oid[2:]
    before = path.stat()
    assert loose.blob(objects(repo), b"once\n") == oid
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_recent_writes_are_kept_per_store_for_the_journal_to_carry(tmp_path):
    """The loose bytes of the last objects written are kept (the journal carries a file call's
    images right after), per objects folder: another store that lacks the object gets nothing."""
    a = pygit2.init_repository(str(tmp_path / "a"), bare=True)
    b = pygit2.init_repository(str(tmp_path / "b"), bare=True)
    oid = loose.blob(tmp_path / "a" / "objects", b"image\n" * 100)
    packed = (tmp_path / "a" / "objects" / oid[:2] / oid[2:]).read_bytes()
    assert loose.recent(tmp_path / "a" / "objects", oid) == (600, packed)
    assert loose.recent(tmp_path / "b" / "objects", oid) is None
    got, settle = carried.carry(a, [oid])
    assert carried.decode(oid, got[oid]) == packed and settle == []
    with pytest.raises(KeyError):
        carried.carry(b, [oid])                          # missing there: the append fails as before
    for i in range(loose._RECENT):
        loose.blob(tmp_path / "a" / "objects", b"%d" % i)
    assert loose.recent(tmp_path / "a" / "objects", oid) is None      # bounded: the oldest go


def test_a_miss_lists_the_pack_folder_only_when_it_changed(repo, tmp_path, monkeypatch):
    """`oid in odb` re-lists the packs on every miss; `held` does so only when the pack folder
    moved since this handle last listed it, and still finds a pack written meanwhile."""
    import os
    import time
    from types import SimpleNamespace

    from chronos_git.engine import durability
    from tests.support.helpers import wait_for
    pack_dir = objects(repo) / "pack"
    pack_dir.mkdir(exist_ok=True)
    refreshed = []

    class Counted:                      # the handle, its backends' refreshes counted
        def __init__(self, real):
            self.real = real

        @property
        def odb(self):
            return SimpleNamespace(backends=[SimpleNamespace(
                exists=b.exists, refresh=lambda b=b: (refreshed.append(1), b.refresh())[1])
                for b in self.real.odb.backends])
    handle = Counted(repo)
    wait_for(lambda: not durability.racy(str(pack_dir), pack_dir.stat(), time.time_ns()), timeout=10)
    missing = str(pygit2.hash(b"nowhere\n"))
    assert not loose.held(handle, missing, objects(repo))
    listed = len(refreshed)
    assert listed and not loose.held(handle, missing, objects(repo)) and len(refreshed) == listed
    # another handle packs a blob: the folder moves, so this handle lists it again and finds it
    other = pygit2.Repository(repo.path)
    oid = str(other.create_blob(b"packed elsewhere\n"))
    other.references.create("refs/tags/keep", pygit2.Oid(hex=oid))
    subprocess.run(["git", "--git-dir", repo.path, "repack", "-adq"], check=True)
    assert not os.path.exists(objects(repo) / oid[:2] / oid[2:])
    # a post-image (almost always new): not listed for; a miss only writes a loose copy
    assert not loose.held(handle, oid, objects(repo), relist=False) and len(refreshed) == listed
    assert loose.held(handle, oid, objects(repo)) and len(refreshed) > listed
    assert loose.write(objects(repo), pygit2.GIT_OBJECT_BLOB, b"packed elsewhere\n", repo=repo) == (oid, None)


def test_a_commit_this_process_wrote_is_not_inflated_again_until_its_file_changes(repo, monkeypatch):
    """A chain's tip is written by one call and checked by the next (engine/chain.py): the
    writer vouches for it.  A file put in its place, or edited in place with its size and
    mtime put back (only its ctime moves), is judged again."""
    import os
    import zlib

    from chronos_git.engine import powercut
    body = loose.commit_data(str(pygit2.hash(b"")), [], signature(1796197339.5), "tip\n")
    oid, raw = loose.write(objects(repo), pygit2.GIT_OBJECT_COMMIT, body)
    path = str(objects(repo) / oid[:2] / oid[2:])
    judged = []
    real = powercut._whole
    monkeypatch.setattr(powercut, "_whole", lambda p: (judged.append(p), real(p))[1])
    assert powercut.loose_object_ok(path) and judged == []
    # torn in place: the same length, the mtime put back
    before = os.stat(path)
    torn = zlib.compress(b"commit 1\0x")[:-4]
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.write(torn.ljust(len(raw), b"\0"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    assert not powercut.loose_object_ok(path) and len(judged) == 1
    # a blob is not vouched for (only commits are read again and again): checked once
    blob, _ = loose.write(objects(repo), pygit2.GIT_OBJECT_BLOB, b"a blob\n")
    assert powercut.loose_object_ok(str(objects(repo) / blob[:2] / blob[2:])) and len(judged) == 2
