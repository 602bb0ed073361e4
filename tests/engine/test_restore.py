"""Restore and diff: plans, safety checkpoints, minimal writes, clean mode (real store on disk)."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine import diff as diff_mod
from chronos_git.engine import restore as restore_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.errors import CheckpointNotFound, PathError
from chronos_git.engine.store import Store
from support.helpers import git, tree_fingerprint

GIT_ID = ("-c", "user.name=Test", "-c", "user.email=test@example.com")


def files_of(root: Path, skip=(b".git",)) -> dict[bytes, tuple[str, bytes]]:
    """Everything under root: relpath -> (kind, content or link target); dirs listed as ('dir', b'')."""
    out = {}
    rootb = os.fsencode(root)
    for dirpath, dirs, files in os.walk(rootb):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, rootb)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"")
            else:
                with open(p, "rb") as fh:
                    out[rel] = ("x" if st.st_mode & 0o100 else "f", fh.read())
    return out


def inodes(root: Path, rels) -> dict[str, tuple[int, int]]:
    return {r: (os.lstat(root / r).st_ino, os.lstat(root / r).st_mtime_ns) for r in rels}


@pytest.fixture
def store(store_dir):
    return Store.open(store_dir, EngineConfig())


def snap(store, ws, desc="t", **kw):
    return store.workspace(ws).snapshot(CheckpointMeta(description=desc), **kw)


@pytest.fixture
def history(store, ws):
    """Two checkpoints: v1 (base) and v2 (edits, a new file, a deletion, a new dir)."""
    (ws / "keep.txt").write_text("unchanged\n")
    (ws / "docs").mkdir()
    (ws / "docs" / "guide.md").write_text("guide v1\n")
    (ws / "old.txt").write_text("old\n")
    v1 = snap(store, ws, "v1").checkpoint
    state1 = files_of(ws)
    (ws / "a.txt").write_text("alpha v2\n")
    (ws / "old.txt").unlink()
    (ws / "added.txt").write_text("added in v2\n")
    (ws / "pkg" / "sub").mkdir(parents=True)
    (ws / "pkg" / "sub" / "mod.py").write_text("x = 2\n")
    v2 = snap(store, ws, "v2").checkpoint
    state2 = files_of(ws)
    return {"v1": v1, "v2": v2, "state1": state1, "state2": state2}


# ------------------------------------------------------------------ restore
def test_full_restore_returns_exact_state(store, ws, history):
    w = store.workspace(ws)
    res = restore_mod.restore(w, history["v1"].id)
    assert files_of(ws) == history["state1"]
    assert res["restored_checkpoint"] == history["v1"].id
    assert res["dry_run"] is False and res["clean"] is True
    plan = {(p["path"], p["action"]) for p in res["plan"]}
    assert plan == {("a.txt", "restore"), ("old.txt", "create"), ("added.txt", "delete"),
                    ("pkg/sub/mod.py", "delete")}
    assert res["files_changed"] == 2 and res["untracked_removed"] == 2
    # the emptied directories went with their files
    assert not (ws / "pkg").exists()
    # and forward again
    restore_mod.restore(w, history["v2"].id)
    assert files_of(ws) == history["state2"]


def test_safety_checkpoint_first_and_restoring_it_undoes_the_restore(store, ws, history):
    w = store.workspace(ws)
    # uncheckpointed work in progress, incl. an ignored file and an empty dir
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "debug.log").write_text("ignored, must survive\n")
    (ws / "a.txt").write_text("work in progress\n")
    (ws / "wip").mkdir()
    (ws / "wip" / "draft.txt").write_text("draft\n")
    os.symlink("a.txt", ws / "link")
    (ws / "empty_dir").mkdir()
    before = tree_fingerprint(ws)
    before_files = files_of(ws)
    n_before = w.count()

    res = restore_mod.restore(w, history["v1"].id)
    safety = res["safety_checkpoint"]
    assert safety and safety != history["v2"].id
    tip = w.tip()
    assert tip.id == safety                       # the safety checkpoint is the newest
    assert tip.meta.kind == "safety"
    assert history["v1"].id in (tip.meta.note or "")
    assert w.count() == n_before + 1
    assert (ws / "debug.log").read_text() == "ignored, must survive\n"
    assert not (ws / "wip").exists()

    res2 = restore_mod.restore(w, safety)
    assert files_of(ws) == before_files
    assert tree_fingerprint(ws) == before
    assert res2["restored_checkpoint"] == safety


def test_dry_run_changes_nothing_and_returns_the_plan(store, ws, history):
    w = store.workspace(ws)
    (ws / "agent_new.txt").write_text("created after v2\n")
    before = tree_fingerprint(ws)
    n = w.count()
    gitdir_refs = sorted(p.name for p in (store.root / "refs" / "chronos" / "snapshots").iterdir())
    res = restore_mod.restore(w, history["v1"].id, dry_run=True)
    assert tree_fingerprint(ws) == before
    assert w.count() == n
    assert sorted(p.name for p in (store.root / "refs" / "chronos" / "snapshots").iterdir()) == gitdir_refs
    assert res["dry_run"] is True and res["safety_checkpoint"] is None
    actions = {p["path"]: p["action"] for p in res["plan"]}
    assert actions == {"a.txt": "restore", "old.txt": "create", "added.txt": "delete",
                       "pkg/sub/mod.py": "delete", "agent_new.txt": "delete"}
    # the plan is what a real restore then does
    real = restore_mod.restore(w, history["v1"].id)
    assert {p["path"]: p["action"] for p in real["plan"]} == actions
    assert files_of(ws) == history["state1"]


def test_per_path_restore(store, ws, history):
    w = store.workspace(ws)
    (ws / "docs" / "guide.md").write_text("guide v3\n")
    res = restore_mod.restore(w, history["v1"].id, paths=[str(ws / "a.txt"), "old.txt"])
    assert {(p["path"], p["action"]) for p in res["plan"]} == {("a.txt", "restore"), ("old.txt", "create")}
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert (ws / "old.txt").read_text() == "old\n"
    # everything else is as it was
    assert (ws / "added.txt").exists() and (ws / "pkg" / "sub" / "mod.py").exists()
    assert (ws / "docs" / "guide.md").read_text() == "guide v3\n"
    # a directory path restores (and in clean mode cleans) below it only
    (ws / "pkg" / "sub" / "extra.py").write_text("extra\n")
    res = restore_mod.restore(w, history["v1"].id, paths=["pkg"])
    assert {(p["path"], p["action"]) for p in res["plan"]} == {("pkg/sub/mod.py", "delete"),
                                                                ("pkg/sub/extra.py", "delete")}
    assert not (ws / "pkg").exists()
    assert (ws / "added.txt").exists()


def test_clean_mode_removes_agent_files_but_keeps_ignored(store, ws, history):
    w = store.workspace(ws)
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    snap(store, ws, "with gitignore")
    (ws / "agent_made.txt").write_text("new\n")
    (ws / "notes.log").write_text("ignored\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"\x7fELF")
    res = restore_mod.restore(w, "1")           # the checkpoint just taken
    assert {(p["path"], p["action"]) for p in res["plan"]} == {("agent_made.txt", "delete")}
    assert not (ws / "agent_made.txt").exists()
    assert (ws / "notes.log").read_text() == "ignored\n"
    assert (ws / "build" / "out.o").read_bytes() == b"\x7fELF"


def test_no_clean_keeps_files_absent_from_the_checkpoint(store, ws, history):
    w = store.workspace(ws)
    (ws / "agent_made.txt").write_text("new\n")
    res = restore_mod.restore(w, history["v1"].id, clean=False)
    assert (ws / "agent_made.txt").read_text() == "new\n"
    assert (ws / "added.txt").read_text() == "added in v2\n"
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert (ws / "old.txt").read_text() == "old\n"
    skipped = {p["path"] for p in res["plan"] if p["action"] == "skip"}
    assert skipped == {"agent_made.txt", "added.txt", "pkg/sub/mod.py"}
    assert res["untracked_removed"] == 0


def test_only_differing_files_are_rewritten(store, ws, history):
    w = store.workspace(ws)
    unchanged = ["keep.txt", "docs/guide.md", "src/main.py", "added.txt"]
    before = inodes(ws, unchanged)
    a_before = inodes(ws, ["a.txt"])
    (ws / "added.txt").write_text("added in v2\n")        # same content rewritten: same bytes
    before["added.txt"] = inodes(ws, ["added.txt"])["added.txt"]
    res = restore_mod.restore(w, history["v1"].id, paths=["a.txt", "keep.txt", "docs", "src"])
    assert {p["path"] for p in res["plan"]} == {"a.txt"}
    assert inodes(ws, unchanged) == before
    assert inodes(ws, ["a.txt"]) != a_before                 # rewritten (atomically: new inode)
    # a full restore to the current state writes nothing at all
    snap(store, ws)
    before = inodes(ws, unchanged + ["a.txt"])
    res = restore_mod.restore(w, "latest")
    assert res["plan"] == [] and res["files_changed"] == 0
    assert inodes(ws, unchanged + ["a.txt"]) == before


def test_restore_across_type_changes(store, ws):
    w = store.workspace(ws)
    (ws / "x").write_text("x is a file\n")
    (ws / "d").mkdir()
    (ws / "d" / "inner.txt").write_text("inner\n")
    os.symlink("a.txt", ws / "ln")
    (ws / "f2l").write_text("regular\n")
    v1 = snap(store, ws, "v1").checkpoint
    state1 = files_of(ws)
    # x becomes a directory, d becomes a file, a link becomes a file and a file a link
    (ws / "x").unlink()
    (ws / "x").mkdir()
    (ws / "x" / "child.txt").write_text("child\n")
    shutil.rmtree(ws / "d")
    (ws / "d").write_text("d is a file\n")
    os.unlink(ws / "ln")
    (ws / "ln").write_text("now a file\n")
    os.unlink(ws / "f2l")
    os.symlink("src/main.py", ws / "f2l")
    v2 = snap(store, ws, "v2").checkpoint
    state2 = files_of(ws)
    restore_mod.restore(w, v1.id)
    assert files_of(ws) == state1
    restore_mod.restore(w, v2.id)
    assert files_of(ws) == state2


def test_restore_never_touches_uncaptured_paths(store_dir, ws):
    store = Store.open(store_dir, EngineConfig(max_file_size_mb=0.001))
    w = store.workspace(ws)
    v1 = snap(store, ws, "v1").checkpoint
    (ws / ".gitignore").write_text("secret.env\n")
    (ws / "secret.env").write_text("TOKEN=1\n")
    (ws / "huge.bin").write_bytes(b"h" * 4096)
    (ws / "nested").mkdir()
    (ws / "nested" / "n.txt").write_text("n\n")
    git("init", "-q", cwd=ws / "nested")
    os.mkfifo(ws / "fifo")
    restore_mod.restore(w, v1.id)
    assert not (ws / ".gitignore").exists()          # captured and absent from v1: removed
    assert (ws / "secret.env").read_text() == "TOKEN=1\n"
    assert (ws / "huge.bin").read_bytes() == b"h" * 4096
    assert (ws / "nested" / "n.txt").exists() and (ws / "nested" / ".git").is_dir()
    assert stat.S_ISFIFO(os.lstat(ws / "fifo").st_mode)


def test_restore_after_workspace_removed(store, ws, history):
    w = store.workspace(ws)
    shutil.rmtree(ws)
    assert [c.id for c in w.checkpoints()] == [history["v2"].id, history["v1"].id]
    res = restore_mod.restore(w, history["v2"].id)
    assert files_of(ws) == history["state2"]
    assert res["files_changed"] == len([k for k, v in history["state2"].items() if v[0] != "dir"])
    # the safety checkpoint recorded the empty workspace
    safety = w.lookup_commit(res["safety_checkpoint"])
    assert len(safety.tree) == 0


def test_restore_after_git_clean_fdx(store, ws, history):
    w = store.workspace(ws)
    git("init", "-q", cwd=ws)
    git("add", "a.txt", cwd=ws)
    git(*GIT_ID, "commit", "-q", "-m", "only a.txt", cwd=ws)
    dot_git = tree_fingerprint(ws / ".git")
    git("clean", "-fdxq", cwd=ws)
    assert sorted(p.name for p in ws.iterdir()) == [".git", "a.txt"]
    assert w.count() == 2
    restore_mod.restore(w, history["v2"].id)
    assert files_of(ws) == history["state2"]
    assert tree_fingerprint(ws / ".git") == dot_git


def test_restore_bad_specs(store, ws, history):
    w = store.workspace(ws)
    for spec in ("", "nothex!", "abc", "99", "0", "ffffffffffffffffffffffffffffffffffffffff", "deadbeef1"):
        with pytest.raises(CheckpointNotFound):
            restore_mod.restore(w, spec)
    # all of id, prefix, index and latest work
    assert w.resolve(history["v1"].id).id == history["v1"].id
    assert w.resolve(history["v1"].id[:7]).id == history["v1"].id
    assert w.resolve(history["v1"].id[:7].upper()).id == history["v1"].id
    assert w.resolve("2").id == history["v1"].id
    assert w.resolve("1").id == history["v2"].id
    assert w.resolve("latest").id == history["v2"].id


def test_restore_rejects_a_checkpoint_of_another_workspace(store, ws, tmp_path, history):
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("o\n")
    foreign = snap(store, other).checkpoint
    with pytest.raises(CheckpointNotFound):
        store.workspace(ws).resolve(foreign.id[:10])


def test_a_checkpoint_off_every_chain_goes_only_into_a_new_or_empty_folder(store, ws, tmp_path, history):
    """New-user trial: a fetched checkpoint, or one retention had just dropped from another
    workspace's chain, was planned (and restored) over an unrelated folder, deleting its files."""
    from chronos_git.engine.errors import WorkspaceRefused
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("o\n")
    orphan = snap(store, other).checkpoint
    store.repo().references.delete(store.workspace(other).ref)       # on no workspace's chain now
    before = files_of(ws)
    w = store.workspace(ws)
    for dry in (True, False):
        with pytest.raises(WorkspaceRefused, match="only into a new or empty folder"):
            restore_mod.restore(w, orphan.id, dry_run=dry)
    assert files_of(ws) == before and w.tip().id == history["v2"].id   # no safety checkpoint either
    empty = tmp_path / "empty"
    empty.mkdir()
    for dest in (empty, tmp_path / "new" / "dir"):
        restore_mod.restore(store.workspace(dest), orphan.id)
        assert (dest / "o.txt").read_text() == "o\n"
    restore_mod.preview(w, orphan.id, foreign_ok=True)                 # a recovery that knows it


def test_a_checkpoint_whose_files_retention_dropped_is_named_not_an_internal_error(store, ws, history):
    from chronos_git.engine import loose
    from chronos_git.engine.checkpoint import signature
    objects = store.root / "objects"
    body = loose.commit_data("1" * 40, [], signature(1.0), CheckpointMeta(description="gone").to_message())
    cid = loose.write(objects, pygit2.GIT_OBJECT_COMMIT, body)[0]
    for call in (lambda: store.workspace(ws).resolve(cid[:12]),
                 lambda: diff_mod.diff(store.workspace(ws), cid, None),
                 lambda: restore_mod.restore(store.workspace(ws), cid, dry_run=True)):
        with pytest.raises(CheckpointNotFound, match="dropped by retention"):
            call()


def test_mtime_and_content_after_restore_match_snapshot(store, ws, history):
    """Restored regular files keep the workspace's permissions; exec bits follow the checkpoint."""
    w = store.workspace(ws)
    (ws / "keep.txt").chmod(0o600)
    snap(store, ws)
    (ws / "keep.txt").write_text("edited\n")
    restore_mod.restore(w, "2")        # the checkpoint before the chmod-only one: same blob mode 100644
    assert (ws / "keep.txt").read_text() == "unchanged\n"
    assert stat.S_IMODE(os.stat(ws / "keep.txt").st_mode) == 0o600


# ------------------------------------------------------------------ diff
def test_diff_between_checkpoints(store, ws, history):
    w = store.workspace(ws)
    d = diff_mod.diff(w, history["v1"].id, history["v2"].id)
    files = {f["path"]: f for f in d["files"]}
    assert {p: f["status"] for p, f in files.items()} == {
        "a.txt": "modified", "old.txt": "deleted", "added.txt": "added", "pkg/sub/mod.py": "added"}
    assert (files["a.txt"]["additions"], files["a.txt"]["deletions"]) == (1, 1)
    assert (files["old.txt"]["additions"], files["old.txt"]["deletions"]) == (0, 1)
    assert (files["added.txt"]["additions"], files["added.txt"]["deletions"]) == (1, 0)
    assert d["stats"] == {"files": 4, "additions": 3, "deletions": 2}
    assert "-alpha\n+alpha v2\n" in d["patch"]
    assert "diff --git a/old.txt b/old.txt" in d["patch"]
    assert d["from"] == history["v1"].id and d["to"] == history["v2"].id
    # reversed
    back = diff_mod.diff(w, history["v2"].id, history["v1"].id)
    assert {f["path"]: f["status"] for f in back["files"]}["old.txt"] == "added"


def test_diff_against_working_tree_and_renames(store, ws, history):
    w = store.workspace(ws)
    body = "".join(f"line {i}\n" for i in range(40))
    (ws / "big.txt").write_text(body)
    base = snap(store, ws).checkpoint
    os.rename(ws / "big.txt", ws / "moved.txt")
    (ws / "keep.txt").write_text("unchanged\nplus one\n")
    d = diff_mod.diff(w)                       # newest checkpoint vs working tree
    assert d["from"] == base.id and d["to"] == "working tree"
    files = {f["path"]: f for f in d["files"]}
    assert files["moved.txt"]["status"] == "renamed"
    assert files["moved.txt"]["old_path"] == "big.txt"
    assert files["moved.txt"]["similarity"] == 100
    assert files["keep.txt"]["status"] == "modified"
    assert (files["keep.txt"]["additions"], files["keep.txt"]["deletions"]) == (1, 0)
    assert "big.txt" not in files
    assert "rename from big.txt" in d["patch"] and "rename to moved.txt" in d["patch"]
    # the working-tree diff commits nothing
    assert w.tip().id == base.id
    # patch can be left out, paths narrowed
    d2 = diff_mod.diff(w, patch=False, paths=["keep.txt"])
    assert "patch" not in d2 and [f["path"] for f in d2["files"]] == ["keep.txt"]
    # a path in neither side is a typo, not "no changes" (as restore's --path says); one that is
    # only in the checkpoint (moved away since) or only on disk is a change
    assert [f["path"] for f in diff_mod.diff(w, paths=["big.txt"])["files"]] == ["moved.txt"]   # renamed
    assert [f["path"] for f in diff_mod.diff(w, paths=["moved.txt"])["files"]] == ["moved.txt"]
    with pytest.raises(PathError, match=r"'nope.txt' is in neither checkpoint .* nor the workspace"):
        diff_mod.diff(w, paths=["keep.txt", "nope.txt"])
    later = snap(store, ws).checkpoint
    with pytest.raises(PathError, match=f"in neither checkpoint {base.id[:12]} nor checkpoint {later.id[:12]}"):
        diff_mod.diff(w, base.id, later.id, paths=["nope.txt"])
    assert [f["old_path"] for f in diff_mod.diff(w, base.id, later.id, paths=["big.txt"])["files"]] == ["big.txt"]
    # a file only on disk that the workspace's rules ignore is in no checkpoint: said, not an empty diff
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    (ws / "x.log").write_text("noise\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"o")
    for ignored in ("x.log", "build", "build/out.o"):
        with pytest.raises(PathError, match=f"'{ignored}' is ignored by the workspace's rules"):
            diff_mod.diff(w, paths=[ignored])
    assert [f["path"] for f in diff_mod.diff(w, paths=[".gitignore"])["files"]] == [".gitignore"]


def test_diff_binary_and_typechange(store, ws):
    w = store.workspace(ws)
    (ws / "img.bin").write_bytes(b"\0\1\2" * 100)
    (ws / "f").write_text("file\n")
    snap(store, ws)
    (ws / "img.bin").write_bytes(b"\0\3\2" * 100)
    os.unlink(ws / "f")
    os.symlink("a.txt", ws / "f")
    d = diff_mod.diff(w)
    files = {f["path"]: f for f in d["files"]}
    assert files["img.bin"]["binary"] is True and files["img.bin"]["status"] == "modified"
    assert [f["path"] for f in d["files"]].count("f") == 1
    assert files["f"]["status"] == "modified"


def test_diff_patch_truncation(store, ws):
    w = store.workspace(ws)
    snap(store, ws)
    for i in range(5):
        (ws / f"f{i}.txt").write_text("x" * 100 + "\n")
    d = diff_mod.diff(w, max_patch_chars=300)
    assert d["patch_truncated"] is True
    assert len(d["patch"]) <= 300
    assert len(d["files"]) == 5                  # the file list is never truncated


@pytest.mark.process
def test_safety_checkpoint_exists_before_the_first_write(cli, store_dir, ws):
    """A restore killed after its first write: the safety checkpoint is already there and holds
    the exact pre-restore state, so nothing was lost."""
    import signal
    r = cli("snapshot", "--workspace", ws, "--json")
    c1 = r.json["checkpoint"]
    (ws / "a.txt").write_text("precious, never checkpointed by hand\n")
    (ws / "new.txt").write_text("also precious\n")
    (ws / "src" / "main.py").write_text("edited\n")
    before = files_of(ws)
    killed = cli("restore", c1, "--workspace", ws, "--json", fault="mid_restore")
    assert killed.rc == -signal.SIGKILL
    store = Store.open(store_dir)
    w = store.workspace(ws)
    tip = w.tip()
    assert tip.id != c1 and tip.meta.kind == "safety"
    # the safety checkpoint has the pre-restore content
    repo = pygit2.Repository(str(store_dir))
    tree = repo[tip.id].tree
    assert repo[tree["a.txt"].id].data == b"precious, never checkpointed by hand\n"
    assert repo[tree["new.txt"].id].data == b"also precious\n"
    assert repo[tree["src/main.py"].id].data == b"edited\n"
    assert files_of(ws) != before                 # the killed restore did write something
    restore_mod.restore(w, tip.id)
    assert files_of(ws) == before
