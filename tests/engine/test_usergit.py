"""A first snapshot of a git work tree: what the user's index vouches for is taken without
reading, their packs are linked, their `.git` is left byte-identical, and the store stays
whole after the user's repository is deleted or garbage-collected."""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
from types import SimpleNamespace

import pygit2
import pytest

from chronos_git.engine import adopt, consolidate, usergit
from chronos_git.engine.import_index import packed_stat
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import git, tree_fingerprint

ODD = b"odd-\xff\xfe.txt"            # not UTF-8: any bytes Linux allows


def backdate(root, seconds: float = 2) -> None:
    """Every file and link below `root` (its `.git` aside) `seconds` older: an index git writes
    next is newer than each of them whatever the clock's tick, so none is racily clean
    (usergit.Known.vouch) - without sleeping until the clock moves on."""
    for dirpath, dirs, files in os.walk(os.fsencode(root)):
        dirs[:] = [d for d in dirs if d != b".git"]
        for name in files:
            if name != b".git":
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)), follow_symlinks=False)


def make_repo(root, n=60):
    root.mkdir()
    git("init", "-q", cwd=root)
    for i in range(n):
        d = root / f"d{i % 5}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" + "x" * i)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    os.symlink("d0/f0.txt", root / "link")
    with open(os.path.join(os.fsencode(root), ODD), "wb") as fh:
        fh.write(b"odd name\n")
    backdate(root)                          # older than the index `git add` writes
    git("add", "-A", cwd=root)
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "init", cwd=root)
    git("gc", "-q", cwd=root)
    return root


def first(store, ws, **settings):
    svc = Chronos.get(store, Settings(**settings))
    svc.start()
    res = svc.snapshot(str(ws), "first")
    return svc, res, svc.core.store.workspace(str(ws))


def blobs(repo: pygit2.Repository, tree, prefix=b"") -> dict[bytes, bytes]:
    out = {}
    for e in tree:
        name = prefix + os.fsencode(e.name)
        if e.type_str == "tree":
            out.update(blobs(repo, repo[e.id], name + b"/"))
        else:
            out[name] = repo[e.id].data
    return out


def test_seeded_first_snapshot_equals_a_hashed_one_and_leaves_git_untouched(tmp_path):
    ws = make_repo(tmp_path / "ws")
    (ws / "d1" / "f1.txt").write_text("changed after the commit\n")     # differs from the index
    (ws / "new.txt").write_text("untracked\n")
    before = tree_fingerprint(ws / ".git")
    svc, res, w = first(tmp_path / "a", ws)
    assert w.last_seed["seeded_files"] == 60 + 3 - 1 and w.last_seed["linked_packs"] == 1
    assert tree_fingerprint(ws / ".git") == before          # contents, names, modes: nothing new
    Chronos.forget_instances()
    _, plain, w2 = first(tmp_path / "b", ws, seed_from_git=False)
    assert w2.last_seed["seeded_files"] == 0 and w2.last_seed["note"] == "off"
    assert res.tree == plain.tree                      # byte for byte what hashing gives
    repo = pygit2.Repository(str(tmp_path / "a"))
    got = blobs(repo, repo[res.tree])
    assert got[b"d1/f1.txt"] == b"changed after the commit\n" and got[ODD] == b"odd name\n"
    assert got[b"link"] == b"d0/f0.txt"


def test_store_self_contained_after_rm_rf_git_and_after_consolidation(tmp_path):
    ws = make_repo(tmp_path / "ws")
    (ws / "notes.txt").write_text("untracked\n")             # read from disk: a loose object of ours
    svc, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["adopted"] and w.last_seed["changed_files"] == 1
    shutil.rmtree(ws / ".git")
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)
    (ws / "d2" / "f2.txt").write_text("ruined\n")
    svc.restore(str(ws), res.checkpoint, paths=["d2/f2.txt"], actor="test")
    assert (ws / "d2" / "f2.txt").read_text() == "file 2\n" + "x" * 2
    pending = consolidate.pending(svc.core.store)
    assert len(pending) == 1                                  # the user's linked pack
    out = svc.consolidate()
    assert out.adopted == 1 and not consolidate.pending(svc.core.store)   # a fresh clone's pack is kept
    left = {p.rsplit(".", 1)[0] for p in os.listdir(tmp_path / "store" / "objects" / "pack")}
    assert len(left & set(pending)) == 1
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree])[b"d3/f3.txt"] == b"file 3\nxxx"
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict"], check=True,
                   capture_output=True)


def test_user_history_rewrite_and_gc_prune_leave_the_store_whole(tmp_path):
    ws = make_repo(tmp_path / "ws")
    svc, res, _ = first(tmp_path / "store", ws)
    for i in range(0, 60, 2):
        (ws / f"d{i % 5}" / f"f{i}.txt").write_text(f"rewritten {i}\n")
    git("add", "-A", cwd=ws)
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-q", "--amend", "-m", "rewritten", cwd=ws)
    git("reflog", "expire", "--expire=now", "--all", cwd=ws)
    git("gc", "-q", "--prune=now", cwd=ws)
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree])[b"d0/f0.txt"] == b"file 0\n"
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)


@pytest.mark.parametrize("how", ["attributes", "autocrlf", "info_attributes"])
def test_content_conversion_means_hash_everything(tmp_path, how):
    ws = make_repo(tmp_path / "ws")
    if how == "attributes":
        (ws / ".gitattributes").write_text("*.c diff=cpp\n*.txt text eol=crlf\n")
        git("add", ".gitattributes", cwd=ws)
    elif how == "autocrlf":
        git("config", "core.autocrlf", "input", cwd=ws)
    else:
        (ws / ".git" / "info" / "attributes").write_text("*.txt filter=lfs\n")
    _, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["seeded_files"] == 0 and w.last_seed["linked_packs"] == 0
    assert "convert" in w.last_seed["note"] or "line endings" in w.last_seed["note"]
    Chronos.forget_instances()
    _, plain, _ = first(tmp_path / "plain", ws, seed_from_git=False)
    assert res.tree == plain.tree


def test_harmless_attributes_still_seed(tmp_path):
    ws = tmp_path / "ws"
    make_repo(ws)
    (ws / ".gitattributes").write_text("*.c diff=cpp\n*.bin -text binary\n# text eol=crlf\n")
    git("add", ".gitattributes", cwd=ws)
    _, _, w = first(tmp_path / "store", ws)
    assert w.last_seed["seeded_files"] > 60


def test_index_version_4_is_read_and_a_split_index_is_refused(tmp_path):
    ws = make_repo(tmp_path / "ws")
    git("update-index", "--index-version", "4", cwd=ws)
    known = usergit.read_known(os.fsencode(ws))
    assert ODD in known.entries and b"d4/f59.txt" in known.entries and len(known.entries) == 63
    git("update-index", "--index-version", "2", cwd=ws)
    git("update-index", "--split-index", cwd=ws)
    with pytest.raises(usergit.Unusable, match="required"):
        usergit.read_known(os.fsencode(ws))
    _, _, w = first(tmp_path / "store", ws)
    assert w.last_seed["seeded_files"] == 0 and "required" in w.last_seed["note"]


def _libgit2_entries(ws) -> dict[bytes, tuple[bytes, int]]:
    index = pygit2.Index(str(ws / ".git" / "index"))
    return {os.fsencode(e.path): (e.id.raw, e.mode) for e in index}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_parse_reads_what_libgit2_reads_long_names_included(tmp_path, version):
    """A path is as long as the entry's flags say, found by its NUL only past 0xFFF bytes;
    every version reads to the entries libgit2 reads (an intent-to-add entry, which needs
    version 3's extended flags, is left out as odd).  libgit2 1.8 refuses a version-4 index
    with a name that long, so that version goes without one."""
    ws = make_repo(tmp_path / "ws")
    blob = git("hash-object", "-w", "d0/f0.txt", cwd=ws).stdout.strip()
    long_name = "/".join(["n" * 200] * 21) + "/leaf.txt"           # 4,229 bytes: past the flags' 0xFFF
    if version < 4:
        git("update-index", "--add", "--cacheinfo", f"100644,{blob},{long_name}", cwd=ws)
    if version >= 3:
        (ws / "later.txt").write_text("later\n")
        git("add", "-N", "later.txt", cwd=ws)
    git("update-index", "--index-version", str(version), cwd=ws)
    data = (ws / ".git" / "index").read_bytes()
    assert struct.unpack_from(">I", data, 4)[0] == version
    entries, _trees, odd = usergit.parse_index(data)
    assert (long_name.encode() in entries) is (version < 4)
    expected = {p: v for p, v in _libgit2_entries(ws).items() if p != b"later.txt"}
    assert {p: (sha, mode) for p, (sha, mode, _size, _st) in entries.items()} == expected
    st = os.lstat(os.path.join(os.fsencode(ws), b"d4", b"f59.txt"))
    _sha, _mode, size, held = entries[b"d4/f59.txt"]
    assert size == st.st_size and held[:16] == packed_stat(st)[:16]       # its times as git stored them
    assert (odd == {b"later.txt": "intent-to-add"}) is (version >= 3)


def test_damaged_or_hostile_indexes_are_refused(tmp_path):
    ws = make_repo(tmp_path / "ws")
    data = (ws / ".git" / "index").read_bytes()
    with pytest.raises(usergit.Unusable, match="checksum"):
        usergit.parse_index(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    for bad in (b"", b"DIRC", data[:-25] + data[-20:], b"DIRC" + struct.pack(">II", 9, 1) + b"\0" * 40):
        with pytest.raises(usergit.Unusable):
            usergit.parse_index(bad)
    # an entry count far beyond the data (checksum recomputed so only the structure is wrong)
    import hashlib
    body = data[:8] + struct.pack(">I", 10**6) + data[12:-20]
    with pytest.raises(usergit.Unusable):
        usergit.parse_index(body + hashlib.sha1(body).digest())
    # the first entry's name said longer or shorter than it is (its NUL is where it ends)
    flags = struct.unpack_from(">H", data, 12 + 60)[0]
    for told in (flags + 1, flags - 1):
        body = data[:12 + 60] + struct.pack(">H", told) + data[12 + 62:-20]
        with pytest.raises(usergit.Unusable, match="malformed"):
            usergit.parse_index(body + hashlib.sha1(body).digest())


def test_a_clean_clone_takes_git_s_trees_and_builds_only_the_root(tmp_path):
    ws = make_repo(tmp_path / "ws")
    head_tree = git("rev-parse", "HEAD^{tree}", cwd=ws).stdout.strip()
    before = tree_fingerprint(ws / ".git", mtimes=True)
    svc, res, w = first(tmp_path / "store", ws)
    assert res.tree == head_tree and w.last_seed["linked_packs"] == 1
    assert w.last_seed["adopted"] and w.last_seed["changed_files"] == 0        # git's index taken whole
    ours = [p for p in (tmp_path / "store" / "objects" / "pack").glob("*.idx") if p.stat().st_nlink == 1]
    assert ours == []                                          # nothing hashed, no tree built
    # the commit does not freshen its tree (write_commit), so the user's pack keeps its mtime
    assert tree_fingerprint(ws / ".git", mtimes=True) == before
    Chronos.forget_instances()
    _, plain, _ = first(tmp_path / "plain", ws, seed_from_git=False)
    assert plain.tree == res.tree                              # what hashing every file gives
    shutil.rmtree(ws / ".git")
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree])[b"d0/f0.txt"] == b"file 0\n"
    out = svc.consolidate()
    assert out.adopted == 1 and not consolidate.pending(svc.core.store)
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict"], check=True,
                   capture_output=True)


def test_a_changed_or_new_file_rebuilds_only_the_trees_above_it(tmp_path):
    ws = make_repo(tmp_path / "ws")
    head = pygit2.Repository(str(ws))
    old_tree = head[head.head.target].tree
    (ws / "d1" / "f1.txt").write_text("changed\n")           # d1 and the root are built again
    (ws / "d3" / "new.txt").write_text("new\n")              # d3 too
    os.chmod(ws / "d4" / "f4.txt", 0o755)                      # d4: a mode git's index does not have
    svc, res, w = first(tmp_path / "store", ws)
    Chronos.forget_instances()
    _, plain, _ = first(tmp_path / "plain", ws, seed_from_git=False)
    assert plain.tree == res.tree                              # what hashing every file gives
    repo = pygit2.Repository(str(tmp_path / "store"))
    tree = repo[res.tree]
    assert {e.name: e.filemode for e in repo[tree["d4"].id]}["f4.txt"] == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    for d in ("d0", "d2"):
        assert tree[d].id == old_tree[d].id                   # taken from git's cache tree
    for d in ("d1", "d3", "d4"):
        assert tree[d].id != old_tree[d].id
    made = [tree.id, tree["d1"].id, tree["d3"].id, tree["d4"].id,                # 4 trees built
            tree["d1"]["f1.txt"].id, tree["d3"]["new.txt"].id]                   # 2 blobs read
    for oid in made:
        assert (tmp_path / "store" / "objects" / str(oid)[:2] / str(oid)[2:]).is_file()
    assert w.last_seed["adopted"] and w.last_seed["changed_files"] == 3
    assert str(w._open_repo().index.write_tree()) == res.tree


def test_a_malformed_cache_tree_is_ignored_and_blob_ids_still_used(tmp_path):
    for bad in (b"\0" + b"x y\n", b"\0" + b"1 1\n" + b"\1" * 20 + b"a/b\0" + b"1 0\n" + b"\2" * 20,
                b"\0" + b"5 0\n" + b"\3" * 19, b"\0" + b"-1 0\n" + b"\0" + b"-1 0\n"):
        with pytest.raises(usergit.Unusable, match="cache tree"):
            usergit.parse_cache_tree(bad)
    good = b"\0" + b"2 1\n" + b"\1" * 20 + b"d\0" + b"1 0\n" + b"\2" * 20
    trees = usergit.parse_cache_tree(good)
    assert trees == {b"": (2, b"\1" * 20, [b"d"]), b"d": (1, b"\2" * 20, [])}
    ws = make_repo(tmp_path / "ws")
    index = ws / ".git" / "index"
    data = index.read_bytes()[:-20]
    cut = data.index(b"TREE")
    (size,) = struct.unpack(">I", data[cut + 4:cut + 8])
    data = data[:cut] + b"TREE" + struct.pack(">I", 5) + b"\0garb" + data[cut + 8 + size:]
    index.write_bytes(data + hashlib.sha1(data).digest())
    known = usergit.read_known(os.fsencode(ws))
    assert known.trees == {} and len(known.entries) > 60


def test_a_cache_tree_naming_a_blob_as_a_tree_is_not_taken(tmp_path):
    ws = make_repo(tmp_path / "ws")
    blob = bytes.fromhex(git("rev-parse", "HEAD:d0/f0.txt", cwd=ws).stdout.strip())
    index = ws / ".git" / "index"
    data = index.read_bytes()[:-20]
    cut = data.index(b"TREE") + 8
    head = data.index(b"\n", cut) + 1                         # the root entry: "" NUL count SP nsub LF
    data = data[:head] + blob + data[head + 20:]
    index.write_bytes(data + hashlib.sha1(data).digest())
    assert usergit.read_known(os.fsencode(ws)).trees[b""][1] == blob
    svc, res, w = first(tmp_path / "store", ws)
    Chronos.forget_instances()
    _, plain, _ = first(tmp_path / "plain", ws, seed_from_git=False)
    assert res.tree == plain.tree and w.last_seed["seeded_files"] > 60


def _vouched(known, path: bytes, mode: int, st) -> bytes | None:
    e = SimpleNamespace(path=path, mode=mode, st=packed_stat(st))
    return known.vouch([e]).get(id(e))


def test_racily_clean_and_changed_entries_are_not_trusted(tmp_path):
    ws = make_repo(tmp_path / "ws")
    known = usergit.read_known(os.fsencode(ws))
    p = os.fsencode(ws / "d0" / "f5.txt")
    st = os.lstat(p)
    assert _vouched(known, b"d0/f5.txt", usergit.MODE_FILE, st) is not None
    known.index_mtime_ns = st.st_mtime_ns            # the index written in the file's tick
    assert _vouched(known, b"d0/f5.txt", usergit.MODE_FILE, st) is None
    known = usergit.read_known(os.fsencode(ws))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert _vouched(known, b"d0/f5.txt", usergit.MODE_FILE, os.lstat(p)) is None
    assert _vouched(known, b"link", usergit.MODE_FILE, os.lstat(os.fsencode(ws / "link"))) is None


def test_a_time_the_index_cannot_hold_whole_is_never_vouched_for(tmp_path):
    """git's index keeps 32-bit seconds: a file dated past 2106 (or before 1970) matches its
    entry's wrapped time without being that file's state, so it is read, not vouched for."""
    ws = make_repo(tmp_path / "ws")
    known = usergit.read_known(os.fsencode(ws))
    p = os.fsencode(ws / "d0" / "f5.txt")
    sha, imode, size, _ = known.entries[b"d0/f5.txt"]
    for secs, vouched in ((1_700_000_000, True), (2**32 + 100, False), (-5, False)):
        os.utime(p, ns=(secs * 10**9, secs * 10**9))
        st = os.lstat(p)
        as_git_writes = bytearray(packed_stat(st)[:40])         # the seconds wrapped to 32 bits
        as_git_writes[24:28] = struct.pack(">I", imode)         # git's mode, never WIDE_TIME
        assert struct.unpack_from(">I", as_git_writes, 8)[0] == secs & 0xFFFFFFFF
        known.entries[b"d0/f5.txt"] = (sha, imode, size, bytes(as_git_writes))
        assert (_vouched(known, b"d0/f5.txt", usergit.MODE_FILE, st) == sha) is vouched, secs


def test_a_gitdir_file_and_no_repository(tmp_path):
    main = make_repo(tmp_path / "main")
    wt = tmp_path / "wt"
    git("worktree", "add", "-q", str(wt), cwd=main)
    backdate(wt)                                 # checked out in the index's tick: made older than
    git("status", "--porcelain", cwd=wt)         # the index git's refresh writes now
    assert usergit.find_gitdir(os.fsencode(wt)).startswith(os.fsencode(main / ".git" / "worktrees"))
    before = tree_fingerprint(main / ".git")
    _, _, w = first(tmp_path / "store", wt)
    assert w.last_seed["seeded_files"] > 60 and w.last_seed["linked_packs"] == 1
    assert tree_fingerprint(main / ".git") == before
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a").write_text("a")
    Chronos.forget_instances()
    _, _, w = first(tmp_path / "store2", plain)
    assert w.last_seed["seeded_files"] == 0 and w.last_seed["note"] == "no git repository"


@pytest.mark.parametrize("point", ["consolidate_mid_copy", "consolidate_before_delete",
                                   "consolidate_mid_delete"])
@pytest.mark.process
def test_consolidation_killed_at_each_point_loses_nothing(tmp_path, point, monkeypatch):
    ws = make_repo(tmp_path / "ws")
    (ws / "notes.txt").write_text("untracked\n")             # two pending packs: ours and the user's
    monkeypatch.setattr(adopt, "MAX_CHANGES", 0)              # the bulk import's own pack, not loose objects
    store = tmp_path / "store"
    svc, res, _ = first(store, ws)
    code = ("import sys; from chronos_git.service import Chronos; from chronos_git.settings import Settings;"
            "Chronos.get(sys.argv[1], Settings()).consolidate()")
    env = dict(os.environ, CHRONOS_GIT_FAULT=point)
    proc = subprocess.run([sys.executable, "-c", code, str(store)], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    shutil.rmtree(ws / ".git")                       # the user's objects are no fallback
    Chronos.forget_instances()
    svc = Chronos.get(store, Settings())
    assert consolidate.pending(svc.core.store)            # resumed by the next process
    svc.consolidate()
    assert not consolidate.pending(svc.core.store)
    repo = pygit2.Repository(str(store))
    got = blobs(repo, repo[res.tree])
    assert got[b"d4/f59.txt"] == b"file 59\n" + b"x" * 59 and len(got) == 64
    subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict"], check=True, capture_output=True)


@pytest.mark.parametrize("adopted", [True, False])
def test_a_linked_pack_full_of_history_is_copied_out_of_and_dropped(tmp_path, adopted, monkeypatch):
    if not adopted:
        monkeypatch.setattr(adopt, "MAX_CHANGES", 0)          # the bulk import: its own pack too
    ws = tmp_path / "ws"
    ws.mkdir()
    git("init", "-q", cwd=ws)
    for i in range(12):                                       # history the store has no use for
        (ws / "big.bin").write_bytes(os.urandom(20000))
        git("add", "-A", cwd=ws)
        git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", f"v{i}", cwd=ws)
    (ws / "big.bin").unlink()
    (ws / "small.txt").write_text("what is left\n")
    git("add", "-A", cwd=ws)
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "now", cwd=ws)
    git("gc", "-q", cwd=ws)
    (ws / "notes.txt").write_text("untracked\n")
    svc, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["seeded_files"] == 1 and w.last_seed["linked_packs"] == 1
    assert w.last_seed["adopted"] is adopted
    before = sum(f.stat().st_size for f in (tmp_path / "store" / "objects" / "pack").iterdir())
    out = svc.consolidate()
    assert (out.packs, out.adopted) == (1 if adopted else 2, 0) and out.objects >= (1 if adopted else 2)
    after = sum(f.stat().st_size for f in (tmp_path / "store" / "objects" / "pack").iterdir())
    assert after < before / 10                                # the history is gone from the store
    shutil.rmtree(ws / ".git")
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree]) == {b"small.txt": b"what is left\n", b"notes.txt": b"untracked\n"}
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict"], check=True,
                   capture_output=True)


def test_an_included_config_that_converts_is_found(tmp_path, monkeypatch):
    ws = make_repo(tmp_path / "ws")
    (tmp_path / "extra.cfg").write_text("[core]\n\tautocrlf = true\n")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".gitconfig").write_text(f'[includeIf "gitdir:~/work/"]\n\tpath = {tmp_path / "extra.cfg"}\n')
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    with pytest.raises(usergit.Unusable, match="line endings"):
        usergit.read_known(os.fsencode(ws))


def test_a_hostile_dot_git_file_is_harmless(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    for target in ("/proc/self", "/dev", "../../../../etc", "x" * 5000):
        (ws / ".git").write_text(f"gitdir: {target}\n")
        Chronos.forget_instances()
        store = tmp_path / f"store-{abs(hash(target))}"
        _, res, w = first(store, ws)
        assert w.last_seed["seeded_files"] == 0 and res.files == 1


@pytest.mark.process
def test_a_consolidation_cut_off_resumes_where_it_stopped(tmp_path, monkeypatch):
    """A process that exits mid-copy (a one-shot hermes chat) keeps the packs it finished;
    the next run copies only the rest."""
    from chronos_git.engine import pack_writer
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(40):
        (ws / f"f{i}.bin").write_bytes(os.urandom(30000))     # incompressible: 40 x 30 kB
    store = tmp_path / "store"
    first(store, ws)
    code = ("import sys; from chronos_git.engine import consolidate; consolidate.PACK_BYTES = 200_000;"
            "from chronos_git.service import Chronos; from chronos_git.settings import Settings;"
            "Chronos.get(sys.argv[1], Settings()).consolidate()")
    env = dict(os.environ, CHRONOS_GIT_FAULT="consolidate_mid_copy")
    proc = subprocess.run([sys.executable, "-c", code, str(store)], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    finished = [p for p in (store / "objects" / "pack").glob("pack-*.idx")
                if p.stem not in consolidate.pending(Chronos.get(store, Settings()).core.store)]
    assert len(finished) >= 2                                  # packs the cut-off run completed (>= 6 blobs each)
    Chronos.forget_instances()
    copied = []
    real = pack_writer.PackWriter.add
    monkeypatch.setattr(pack_writer.PackWriter, "add", lambda self, sha, packed: (copied.append(sha), real(self, sha, packed))[1])
    out = Chronos.get(store, Settings()).consolidate()
    assert out.packs == 1 and len(copied) <= 41 - 6 * len(finished)   # those blobs were not copied again
