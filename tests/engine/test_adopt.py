"""A first snapshot of a git work tree that adopts the user's index (engine/adopt.py): the
same tree as hashing every file, the user's loose objects copied, what git marks oddly or
what changed too much left to the bulk import, and a kill before the index is in place
leaves a store the next snapshot completes."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading

import pygit2
import pytest

from chronos_git.engine import adopt, usergit
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import git, tree_fingerprint

from .test_usergit import backdate, blobs, first, make_repo


def commit(ws, msg="c"):
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", msg, cwd=ws)


def hashed_tree(tmp_path, ws, name="plain", **settings):
    Chronos.forget_instances()
    _, plain, w = first(tmp_path / name, ws, seed_from_git=False, **settings)
    assert not w.last_seed["seeded_files"]
    return plain


def test_objects_git_holds_loose_are_copied_and_checked(tmp_path):
    ws = make_repo(tmp_path / "ws")
    (ws / "d1" / "f1.txt").write_text("staged, not packed\n")          # `git add`: a loose blob
    (ws / "d2" / "f2.txt").write_text("committed, not packed\n")       # commit: loose blob and trees
    backdate(ws)
    git("add", "-A", cwd=ws)
    commit(ws)
    before = tree_fingerprint(ws / ".git")
    svc, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["adopted"] and w.last_seed["loose_copied"] == 2          # the 2 blobs
    # the trees `git commit` wrote loose (root, d1, d2) are built again from the entries (a
    # loose tree may name blobs no entry asks for), with no file read and nothing freshened
    assert w.last_seed["changed_files"] == 0
    # contents, names and modes (not mtimes: a rebuilt tree can freshen the linked pack, open)
    assert tree_fingerprint(ws / ".git") == before
    assert res.tree == hashed_tree(tmp_path, ws).tree
    shutil.rmtree(ws / ".git")
    repo = pygit2.Repository(str(tmp_path / "store"))
    got = blobs(repo, repo[res.tree])
    assert got[b"d1/f1.txt"] == b"staged, not packed\n" and got[b"d2/f2.txt"] == b"committed, not packed\n"
    subprocess.run(["git", "--git-dir", str(tmp_path / "store"), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)


def test_a_damaged_loose_object_is_read_from_the_file_instead(tmp_path):
    ws = make_repo(tmp_path / "ws")
    (ws / "d1" / "f1.txt").write_text("staged\n")
    backdate(ws)
    git("add", "-A", cwd=ws)
    sha = git("rev-parse", ":d1/f1.txt", cwd=ws).stdout.strip()
    obj = ws / ".git" / "objects" / sha[:2] / sha[2:]
    os.chmod(obj, 0o644)
    obj.write_bytes(b"not zlib at all")                                  # git's copy is ruined
    svc, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["adopted"] and w.last_seed["loose_copied"] == 0 and w.last_seed["changed_files"] == 1
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree])[b"d1/f1.txt"] == b"staged\n"      # from the work tree


def test_a_tracked_file_an_ignore_rule_matches_is_left_out_as_by_the_bulk_import(tmp_path):
    ws = make_repo(tmp_path / "ws")
    for rel in ("kept.log", "d1/deep/also.log", "build/out.o", "d2/n.tmp", "d2/keep.tmp"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"tracked before the rules: {rel}\n")
    backdate(ws)
    git("add", "-A", cwd=ws)
    commit(ws)
    (ws / ".gitignore").write_text("*.log\n/build/\n")
    (ws / "d2" / ".gitignore").write_text("*.tmp\n!keep.tmp\n")
    (ws / "new.log").write_text("untracked and ignored\n")
    backdate(ws)
    svc, res, w = first(tmp_path / "store", ws, ignored_patterns=["d0/f5.txt"])
    assert w.last_seed["adopted"]
    repo = pygit2.Repository(str(tmp_path / "store"))
    got = blobs(repo, repo[res.tree])
    assert not {b"kept.log", b"d1/deep/also.log", b"build/out.o", b"d2/n.tmp", b"new.log", b"d0/f5.txt"} & set(got)
    assert got[b"d2/keep.tmp"] and got[b".gitignore"] and got[b"d0/f0.txt"]
    assert res.tree == hashed_tree(tmp_path, ws, ignored_patterns=["d0/f5.txt"]).tree


def _spy_placing(monkeypatch) -> list[str]:
    loads: list[str] = []
    real = adopt._load_index

    def load(path):
        loads.append(path)
        return real(path)
    monkeypatch.setattr(adopt, "_load_index", load)
    return loads


@pytest.mark.parametrize("late", ["none", "new_gitignore", "nested_repo"])
def test_a_clean_clone_s_index_goes_in_place_early_and_what_the_diff_finds_after_is_still_read(
        tmp_path, monkeypatch, late):
    """Nothing keeps an entry out of git's index at the parse: the copy goes in place and loads
    beside the walk (`_Placing`).  What the diff and the walk find after it (a file changed,
    one gone, one new; a new `.gitignore` that ignores a tracked file; a tracked folder that is
    a repository now) is taken out of the loaded index or read, as before: the tree is the
    hashed one, and the stat cache written holds none of what was left out."""
    ws = make_repo(tmp_path / "ws")
    (ws / "d0" / "f0.txt").write_text("changed since git looked\n")
    (ws / "d1" / "f1.txt").unlink()
    (ws / "new.txt").write_text("untracked\n")
    if late == "new_gitignore":
        (ws / "d2" / ".gitignore").write_text("f2.txt\n")
    elif late == "nested_repo":
        git("init", "-q", cwd=ws / "d3")
    loads = _spy_placing(monkeypatch)
    _, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["adopted"] and len(loads) == 1, w.last_seed
    assert res.tree == hashed_tree(tmp_path, ws).tree
    left_out = {"none": set(), "new_gitignore": {"d2/f2.txt"},
                "nested_repo": {e.path for e in pygit2.Index(str(ws / ".git" / "index")) if e.path.startswith("d3/")}}[late]
    in_place = {e.path for e in pygit2.Index(str(w.gitdir / "index"))}
    assert "new.txt" in in_place and "d1/f1.txt" not in in_place and not left_out & in_place
    assert left_out or late == "none"


def test_a_copy_libgit2_refuses_never_goes_in_place(tmp_path, monkeypatch):
    """The parse may accept what libgit2 refuses (a version-4 index with a name of 0xFFF bytes
    or more, which git writes): the thread beside waits for libgit2's read of the copy and
    places nothing then; the bulk import takes the workspace."""
    ws = make_repo(tmp_path / "ws")
    blob = git("hash-object", "-w", "d0/f0.txt", cwd=ws).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"100644,{blob},{'n' * 200 + '/' + 'm' * 4000}", cwd=ws)
    git("update-index", "--index-version", "4", cwd=ws)
    assert b"n" * 200 + b"/" + b"m" * 4000 in usergit.parse_index((ws / ".git" / "index").read_bytes())[0]
    loads = _spy_placing(monkeypatch)
    _, res, w = first(tmp_path / "store", ws)
    assert not w.last_seed["adopted"] and loads == [] and res.checkpoint
    assert not list((tmp_path / "store").rglob(adopt.TMP_NAME))


def _plant(path, kind: str, outside) -> None:
    if kind == "directory":
        (path / "sub").mkdir(parents=True)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(outside, path)


@pytest.mark.parametrize("first_one", [True, False], ids=["first", "later"])
@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_planted_temporary_name_of_any_kind_costs_a_walk_never_a_snapshot(tmp_path, kind, first_one):
    """The copy's temporary name says "an adoption did not finish"; whatever an agent plants
    there (a folder, a FIFO, a link to a file of the user's) is removed, never followed, and
    the snapshot goes on, the first one or a later one: its tree is the hashed one."""
    ws = make_repo(tmp_path / "ws")
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's\n")
    svc = Chronos.get(str(tmp_path / "store"), Settings())
    svc.start()
    w = svc.core.store.workspace(str(ws))
    w.repo()                                   # its folder in the store, no snapshot yet
    if not first_one:
        svc.snapshot(str(ws), "first")
        (ws / "d0" / "f0.txt").write_text("edited\n")
    _plant(w.gitdir / adopt.TMP_NAME, kind, outside)
    res = svc.snapshot(str(ws), "with something planted")
    assert res.checkpoint and not os.path.lexists(w.gitdir / adopt.TMP_NAME)
    assert outside.read_text() == "the user's\n"
    assert res.tree == hashed_tree(tmp_path, ws).tree


def test_the_copy_is_a_new_file_of_ours_never_written_through_what_is_there(tmp_path):
    """Planted between the check for an unfinished adoption and the copy: a link is removed,
    not written through; the copy is a regular file with the user's index's mtime."""
    ws = make_repo(tmp_path / "ws")
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's\n")
    tmp = tmp_path / adopt.TMP_NAME
    os.symlink(outside, tmp)
    raw = usergit.read_index(os.fsencode(ws))
    adopt._write_copy(str(tmp), raw)
    assert outside.read_text() == "the user's\n" and not tmp.is_symlink()
    assert tmp.read_bytes() == raw.data and os.stat(tmp).st_mtime_ns == raw.mtime_ns


def test_a_failure_right_after_the_early_placing_leaves_no_copy_in_place(tmp_path, monkeypatch):
    """Durable snapshots sync the folder after the link: an error there (EIO) ends the
    adoption, and both names of the copy go, so nothing unfinished is trusted later."""
    ws = make_repo(tmp_path / "ws")
    (ws / "d2" / ".gitignore").write_text("f2.txt\n")
    real, calls, seen = adopt.fsync_dir, [], []

    def failing(path):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(5, "an I/O error on the second name")
        return real(path)
    real_run = adopt.run

    def run(repo, gitdir, *a, **kw):
        got = real_run(repo, gitdir, *a, **kw)
        seen.append((got, os.path.exists(gitdir / "index"), os.path.lexists(gitdir / adopt.TMP_NAME)))
        return got
    monkeypatch.setattr(adopt, "fsync_dir", failing)
    monkeypatch.setattr(adopt, "run", run)
    _, res, w = first(tmp_path / "store", ws, durable_snapshots=True)
    (got, index_left, tmp_left), = seen
    assert isinstance(got, str) and "I/O error" in got and not index_left and not tmp_left
    assert res.tree == hashed_tree(tmp_path, ws, durable_snapshots=True).tree


def test_a_restore_then_a_dropped_index_never_commits_a_near_empty_tree(tmp_path):
    """A restore leaves the in-memory index holding its writes for the declared snapshot after
    it; a snapshot that finds the index dropped (an unfinished adoption's name planted, or a
    damaged index) reads the file afresh, and the restore's shortcut goes with the old index."""
    ws = make_repo(tmp_path / "ws")
    svc, res0, w = first(tmp_path / "store", ws)
    (ws / "d1" / "f1.txt").write_text("edited\n")
    svc.snapshot(str(ws), "edit")
    real = w.note_restored

    def and_planted(removed, written):
        real(removed, written)
        (w.gitdir / adopt.TMP_NAME).write_bytes(b"")
    w.note_restored = and_planted
    svc.restore(str(ws), res0.checkpoint, paths=[str(ws / "d1" / "f1.txt")])
    (ws / "d2" / "f2.txt").write_text("a declared change\n")
    after = svc.snapshot(str(ws), "declared", paths=[str(ws / "d2" / "f2.txt")])
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert set(blobs(repo, repo[after.tree])) == set(blobs(repo, repo[res0.tree]))


def test_an_entry_the_parse_keeps_out_means_the_copy_is_edited_before_it_goes_in_place(tmp_path, monkeypatch):
    ws = make_repo(tmp_path / "ws")
    loads = _spy_placing(monkeypatch)
    _, res, w = first(tmp_path / "store", ws, ignored_patterns=["d0/f5.txt"])
    assert w.last_seed["adopted"] and loads == []
    assert "d0/f5.txt" not in {e.path for e in pygit2.Index(str(w.gitdir / "index"))}
    assert res.tree == hashed_tree(tmp_path, ws, ignored_patterns=["d0/f5.txt"]).tree


@pytest.mark.parametrize("how", ["intent-to-add", "skip-worktree", "conflict"])
def test_entries_git_marks_are_left_to_the_bulk_import(tmp_path, how):
    ws = make_repo(tmp_path / "ws")
    if how == "intent-to-add":
        (ws / "later.txt").write_text("not yet added\n")
        git("add", "-N", "later.txt", cwd=ws)
    elif how == "skip-worktree":
        git("update-index", "--skip-worktree", "d0/f0.txt", cwd=ws)
    else:
        blob = git("rev-parse", ":d0/f0.txt", cwd=ws).stdout.strip()
        info = f"100644 {blob} 1\td0/f5.txt\n100644 {blob} 2\td0/f5.txt\n"
        subprocess.run(["git", "update-index", "--index-info"], cwd=ws, input=info, text=True, check=True)
    svc, res, w = first(tmp_path / "store", ws)
    assert not w.last_seed["adopted"]
    assert how in w.last_seed["adopt_note"] or (how == "conflict" and "conflicts" in w.last_seed["adopt_note"])
    assert res.tree == hashed_tree(tmp_path, ws).tree


def test_a_submodule_is_a_nested_repository_and_not_in_the_snapshot(tmp_path):
    ws = make_repo(tmp_path / "ws")
    sub = ws / "sub"
    sub.mkdir()
    git("init", "-q", cwd=sub)
    (sub / "inner.txt").write_text("the submodule's own\n")
    git("add", "-A", cwd=sub)
    commit(sub)
    head = git("rev-parse", "HEAD", cwd=sub).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},sub", cwd=ws)
    commit(ws, "with a gitlink")
    svc, res, w = first(tmp_path / "store", ws)
    assert w.last_seed["adopted"]
    assert "sub" in res.nested_repos
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert not any(p.startswith(b"sub") for p in blobs(repo, repo[res.tree]))
    assert res.tree == hashed_tree(tmp_path, ws).tree


def test_many_changes_go_to_the_bulk_import_and_a_tracked_file_over_the_cap_is_skipped(tmp_path, monkeypatch):
    ws = make_repo(tmp_path / "ws")
    (ws / "d1" / "big.bin").write_bytes(b"x" * 300_000)
    backdate(ws)
    git("add", "-A", cwd=ws)
    commit(ws)
    svc, res, w = first(tmp_path / "store", ws, max_file_size_mb=0.1)
    assert w.last_seed["adopted"]
    assert [s.path for s in res.skipped if s.reason == "too_large"] == ["d1/big.bin"]
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert b"d1/big.bin" not in blobs(repo, repo[res.tree])
    assert res.tree == hashed_tree(tmp_path, ws, max_file_size_mb=0.1).tree
    for i in range(3):
        (ws / f"new{i}.txt").write_text(f"new {i}\n")
    monkeypatch.setattr(adopt, "MAX_CHANGES", 2)
    Chronos.forget_instances()
    _, res2, w2 = first(tmp_path / "store2", ws)
    assert not w2.last_seed["adopted"] and "3 paths differ" in w2.last_seed["adopt_note"]
    assert w2.last_seed["seeded_files"] > 60                   # the bulk import still seeds


@pytest.mark.parametrize("point", ["bulk_before_index", "adopt_placed", "bulk_before_ref"])
@pytest.mark.process
def test_killed_around_putting_the_adopted_index_in_place_the_next_snapshot_completes(tmp_path, point):
    """Cut off before, while and after the copy is in place, with what the diff and the walk
    find after an early placing: a changed file, a new `.gitignore` that keeps a tracked file
    out, a tracked folder that is a repository now.  The next snapshot is the hashed one."""
    ws = make_repo(tmp_path / "ws")
    (ws / "d1" / "f1.txt").write_text("staged\n")
    backdate(ws)
    git("add", "-A", cwd=ws)
    (ws / "new.txt").write_text("untracked\n")
    (ws / "d0" / "f0.txt").write_text("changed since git looked\n")
    (ws / "d2" / ".gitignore").write_text("f2.txt\n")
    git("init", "-q", cwd=ws / "d3")
    store = tmp_path / "store"
    code = ("import sys; from chronos_git.service import Chronos; from chronos_git.settings import Settings;"
            "c = Chronos.get(sys.argv[1], Settings()); c.start(); c.snapshot(sys.argv[2], 'first')")
    env = dict(os.environ, CHRONOS_GIT_FAULT=point)
    proc = subprocess.run([sys.executable, "-c", code, str(store), str(ws)], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    # the copy's temporary name stays until the adoption is finished
    assert bool(list(store.rglob(adopt.TMP_NAME))) == (point in ("bulk_before_index", "adopt_placed"))
    Chronos.forget_instances()
    svc, res, w = first(store, ws)
    assert res.checkpoint and not list(store.rglob(adopt.TMP_NAME))
    assert res.tree == hashed_tree(tmp_path, ws).tree
    shutil.rmtree(ws / ".git")
    subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict", "--no-dangling"], check=True,
                   capture_output=True)


def test_health_says_the_index_was_adopted_or_why_not(tmp_path, monkeypatch):
    from chronos_git.cli import render
    ws = make_repo(tmp_path / "ws")
    (ws / "new.txt").write_text("untracked\n")
    svc, res, w = first(tmp_path / "store", ws)
    said = " ".join(render.text(svc.health(str(ws))).split())
    assert "first snapshot adopted the workspace's git index (63 files vouched for, 1 file read, 1 pack linked" in said
    monkeypatch.setattr(adopt, "MAX_CHANGES", 0)
    Chronos.forget_instances()
    svc, res, w = first(tmp_path / "store2", ws)
    said = " ".join(render.text(svc.health(str(ws))).split())
    assert "from the workspace's git index (1 pack linked; its index not adopted: 1 path differs" in said


def test_an_index_whose_checksum_fails_is_not_adopted_and_nothing_is_vouched_for(tmp_path):
    """The parse beside libgit2 leaves the checksum to libgit2, which loads the same bytes:
    a flipped bit in an entry's blob id is refused there, and the first snapshot is the
    hashed one."""
    ws = make_repo(tmp_path / "ws")
    index = ws / ".git" / "index"
    data = bytearray(index.read_bytes())
    data[12 + 40] ^= 1                         # the first entry's blob id, the trailer kept
    index.write_bytes(bytes(data))
    _, res, w = first(tmp_path / "store", ws)
    assert not w.last_seed.get("adopted") and "checksum" in w.last_seed["adopt_note"]
    assert w.last_seed["seeded_files"] == 0
    assert res.tree == hashed_tree(tmp_path, ws).tree


@pytest.mark.parametrize("name", [b"../f0.txt", b".git/f0.t", b"/d0/f0.tx", b"d0//f0.tx", b"d0/./f0.t"])
def test_a_hostile_entry_name_in_git_s_index_changes_nothing_outside_or_in_the_snapshot(tmp_path, name):
    ws = tmp_path / "ws"
    ws.mkdir()
    git("init", "-q", cwd=ws)
    (ws / "d0").mkdir()
    (ws / "d0" / "f0.txt").write_text("a\n")
    (ws / "keep.txt").write_text("b\n")
    (tmp_path / "f0.txt").write_text("outside the workspace\n")
    git("add", "-A", cwd=ws)
    commit(ws)
    index = ws / ".git" / "index"
    data = index.read_bytes()[:-20].replace(b"d0/f0.txt", name)        # same length: the entry stays whole
    index.write_bytes(data + hashlib.sha1(data).digest())
    svc, res, w = first(tmp_path / "store", ws)
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert blobs(repo, repo[res.tree]) == {b"d0/f0.txt": b"a\n", b"keep.txt": b"b\n"}
    assert (tmp_path / "f0.txt").read_text() == "outside the workspace\n"
    assert w.last_seed["adopted"] or "invalid" in w.last_seed["adopt_note"]


def _assume_unchanged(ws, tmp_path):
    git("update-index", "--assume-unchanged", "d0/f0.txt", cwd=ws)
    (ws / "d0" / "f0.txt").write_text("changed under assume-unchanged\n")


def _nested_now(ws, tmp_path):
    git("init", "-q", cwd=ws / "d1")                          # a tracked folder, a repository of its own now


def _link_now(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f1.txt").write_text("outside the workspace\n")
    shutil.rmtree(ws / "d1")
    os.symlink(outside, ws / "d1")                            # a tracked folder replaced by a link


def _odd_rules(ws, tmp_path):
    (ws / ".gitignore").write_text("[z-a]\n[!]]\n*a*a*a*a*a*a*a*a*b\nd2/f7.txt\t\n\ufeffx\n")
    (ws / ("a" * 40)).mkdir()                                  # no regex of ours backtracks on it


@pytest.mark.parametrize("make", [_assume_unchanged, _nested_now, _link_now, _odd_rules])
def test_what_git_s_index_no_longer_says_is_taken_from_the_work_tree(tmp_path, make):
    ws = make_repo(tmp_path / "ws")
    make(ws, tmp_path)
    svc, res, w = first(tmp_path / "store", ws)
    plain = hashed_tree(tmp_path, ws)
    assert res.tree == plain.tree
    repo = pygit2.Repository(str(tmp_path / "store"))
    got = blobs(repo, repo[res.tree])
    assert b"outside the workspace\n" not in got.values()
    if make is _assume_unchanged:
        assert not w.last_seed["adopted"] and "assume-unchanged" in w.last_seed["adopt_note"]
        assert got[b"d0/f0.txt"] == b"changed under assume-unchanged\n"
    if make is _nested_now:
        assert "d1" in res.nested_repos and not any(p.startswith(b"d1/") for p in got)
    if make is _link_now:
        assert got[b"d1"] == os.fsencode(tmp_path / "outside")     # the link itself
        (tmp_path / "outside" / "f1.txt").write_text("edited outside\n")
        later = svc.snapshot(str(ws), "later")                     # a later full scan: the same
        assert not any(p.startswith(b"d1/") for p in blobs(repo, repo[later.tree]))
