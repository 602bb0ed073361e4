"""Snapshot engine: what a checkpoint captures, skips and records (real pygit2 store on disk)."""
from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import git, tree_fingerprint, wait_for

GIT_ID = ("-c", "user.name=Test", "-c", "user.email=test@example.com")


# ---------------------------------------------------------------- helpers
def tree_entries(store_root: Path, commit_id: str) -> dict[bytes, tuple[int, bytes]]:
    """Every blob/link in a checkpoint: relative path (bytes) -> (git filemode, content)."""
    repo = pygit2.Repository(str(store_root))
    out: dict[bytes, tuple[int, bytes]] = {}

    def walk(tree, prefix: bytes):
        for e in tree:
            name = prefix + os.fsencode(e.name)
            if e.type_str == "tree":
                walk(repo[e.id], name + b"/")
            else:
                out[name] = (e.filemode, repo[e.id].data)

    walk(repo[commit_id].tree, b"")
    return out


def chain(store_root: Path, ws_id: str) -> list[str]:
    """Checkpoint ids of one workspace, newest first; raises if a parent is missing."""
    repo = pygit2.Repository(str(store_root))
    c = repo[repo.references[f"refs/chronos/snapshots/{ws_id}"].target]
    out = []
    while True:
        out.append(str(c.id))
        if not c.parent_ids:
            return out
        c = repo[c.parent_ids[0]]


def init_user_repo(path: Path) -> None:
    git("init", "-q", cwd=path)
    git("add", "-A", cwd=path)
    git(*GIT_ID, "commit", "-q", "-m", "init", "--allow-empty", cwd=path)


def fsck(store_root: Path) -> subprocess.CompletedProcess:
    return git("--git-dir", store_root, "fsck", "--strict", check=False)


@pytest.fixture
def engine(store_dir):
    """Open the store with an EngineConfig (no service, no journal)."""
    def make(**cfg) -> Store:
        return Store.open(store_dir, EngineConfig(**cfg))
    return make


def snap(store: Store, ws: Path, desc: str = "t", **kw):
    return store.workspace(ws).snapshot(CheckpointMeta(description=desc), **kw)


# ------------------------------------------------------------- basics
def test_unchanged_workspace_reuses_previous_checkpoint(engine, ws, store_dir):
    store = engine()
    first = snap(store, ws, "one")
    assert first.created and first.checkpoint is not None
    again = snap(store, ws, "two")
    assert again.created is False
    assert again.checkpoint.id == first.checkpoint.id
    assert chain(store_dir, store.workspace(ws).id) == [first.checkpoint.id]

    (ws / "a.txt").write_text("changed\n")
    third = snap(store, ws, "three")
    assert third.created and third.checkpoint.id != first.checkpoint.id
    assert third.checkpoint.parent_id == first.checkpoint.id
    assert chain(store_dir, store.workspace(ws).id) == [third.checkpoint.id, first.checkpoint.id]
    # and once more unchanged: the new tip is reused, not the old one
    fourth = snap(store, ws, "four")
    assert fourth.created is False and fourth.checkpoint.id == third.checkpoint.id


def test_checkpoint_content_is_the_workspace(engine, ws, store_dir):
    store = engine()
    (ws / "src" / "deep" / "er").mkdir(parents=True)
    (ws / "src" / "deep" / "er" / "x.bin").write_bytes(bytes(range(256)))
    res = snap(store, ws)
    entries = tree_entries(store_dir, res.checkpoint.id)
    assert entries == {
        b"a.txt": (pygit2.GIT_FILEMODE_BLOB, b"alpha\n"),
        b"src/main.py": (pygit2.GIT_FILEMODE_BLOB, b"print('hi')\n"),
        b"src/deep/er/x.bin": (pygit2.GIT_FILEMODE_BLOB, bytes(range(256))),
    }
    # deletions are recorded too
    (ws / "a.txt").unlink()
    res2 = snap(store, ws)
    assert b"a.txt" not in tree_entries(store_dir, res2.checkpoint.id)


def test_nothing_is_written_into_a_plain_workspace(engine, svc, ws, store_dir):
    before = tree_fingerprint(ws)
    s = svc()
    first = s.snapshot(str(ws), "one").wire()
    s.diff(str(ws))
    s.diff(str(ws), "1")
    s.restore(str(ws), "1", dry_run=True)
    s.restore(str(ws), "1")
    s.compact(grace_s=0)
    s.log(str(ws))
    s.health(str(ws))
    assert not (ws / ".git").exists()
    assert tree_fingerprint(ws) == before
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "src"]
    assert first["checkpoint"]


# ------------------------------------------------------------- ignores
def _ignore_tree(ws: Path) -> None:
    (ws / ".gitignore").write_text("*.log\n!keep.log\n/build/\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("secret.txt\n*.dat\n!important.dat\n")
    for rel, text in {
        "a.log": "ignored", "keep.log": "negated: kept", "build/out.o": "ignored dir",
        "sub/secret.txt": "ignored by nested .gitignore", "secret.txt": "not ignored at the root",
        "sub/x.dat": "ignored", "sub/important.dat": "negated: kept",
        "node_modules/pkg/index.js": "default ignored pattern", "cache/c.bin": "setting pattern",
        "y.tmp": "setting pattern", "sub/deeper/z.tmp": "setting pattern",
    }.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)


def test_gitignore_nested_negation_and_configured_patterns(svc, ws, store_dir):
    _ignore_tree(ws)
    init_user_repo(ws)
    res = svc(ignored_patterns=["*.tmp", "cache/"]).snapshot(str(ws)).wire()
    paths = set(tree_entries(store_dir, res["checkpoint"]))
    assert paths == {
        b".gitignore", b"a.txt", b"src/main.py", b"keep.log", b"secret.txt",
        b"sub/.gitignore", b"sub/important.dat",
        # the defaults were replaced by the configured list, so node_modules is captured now
        b"node_modules/pkg/index.js",
    }
    assert not any(p.startswith(b".git/") for p in paths)


def test_default_ignored_patterns(svc, ws, store_dir):
    _ignore_tree(ws)
    (ws / "__pycache__").mkdir()
    (ws / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0pyc")
    res = svc().snapshot(str(ws)).wire()
    paths = set(tree_entries(store_dir, res["checkpoint"]))
    assert b"node_modules/pkg/index.js" not in paths
    assert b"__pycache__/m.cpython-311.pyc" not in paths
    assert b"y.tmp" in paths and b"cache/c.bin" in paths     # not in the defaults


def test_changing_ignored_patterns_applies_to_new_files(store_dir, ws):
    Chronos.get(store_dir, Settings(ignored_patterns=[])).snapshot(str(ws))
    (ws / "new.tmp").write_text("x")
    Chronos._instances.clear()
    res = Chronos.get(store_dir, Settings(ignored_patterns=["*.tmp"])).snapshot(str(ws)).wire()
    assert b"new.tmp" not in tree_entries(store_dir, res["checkpoint"])
    (ws / "other.tmp").write_text("x")
    Chronos._instances.clear()
    res = Chronos.get(store_dir, Settings(ignored_patterns=[])).snapshot(str(ws)).wire()
    assert {b"new.tmp", b"other.tmp"} <= set(tree_entries(store_dir, res["checkpoint"]))


@pytest.mark.parametrize("inner", [".chronos-store", "var/state/chronos", "odd [1]*?"])
def test_store_inside_workspace_is_never_captured(ws, inner):
    store_dir = ws / inner
    s = Chronos.get(store_dir, Settings())
    first = s.snapshot(str(ws), "one").wire()
    assert first["created"]
    paths = set(tree_entries(store_dir, first["checkpoint"]))
    assert paths == {b"a.txt", b"src/main.py"}
    # the store itself changed (objects, refs, journal) but the workspace did not
    s.core.journal.open()
    second = s.snapshot(str(ws), "two").wire()
    assert second["created"] is False and second["checkpoint"] == first["checkpoint"]
    (ws / "a.txt").write_text("changed\n")
    third = s.snapshot(str(ws), "three").wire()
    paths = set(tree_entries(store_dir, third["checkpoint"]))
    assert paths == {b"a.txt", b"src/main.py"}
    # a clean restore must not delete the store either
    s.restore(str(ws), first["checkpoint"])
    assert (store_dir / "HEAD").exists() and (store_dir / "objects").is_dir()
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0


def test_workspace_inside_the_store_is_refused(engine, store_dir):
    store = engine()
    inner = store_dir / "chronos" / "x"
    inner.mkdir(parents=True)
    from chronos_git.engine.errors import WorkspaceRefused
    with pytest.raises(WorkspaceRefused):
        store.workspace(inner)


# ------------------------------------------------------- the user's .git
def test_user_git_dir_untouched_and_never_captured(engine, ws, store_dir):
    init_user_repo(ws)
    (ws / "a.txt").write_text("dirty working copy\n")   # uncommitted change in the user's repo
    before = tree_fingerprint(ws / ".git")
    store = engine()
    res = snap(store, ws)
    assert not any(p == b".git" or p.startswith(b".git/") for p in tree_entries(store_dir, res.checkpoint.id))
    (ws / "b.txt").write_text("b\n")
    snap(store, ws)
    from chronos_git.engine import restore as restore_mod
    restore_mod.restore(store.workspace(ws), res.checkpoint.id)
    assert tree_fingerprint(ws / ".git") == before
    assert git("status", "--porcelain", cwd=ws).stdout.strip() == "M a.txt"


# ------------------------------------------------------- nested repositories
def test_nested_repositories_are_skipped_and_listed(svc, ws, tmp_path, store_dir):
    init_user_repo(ws)
    # a nested clone with commits
    (ws / "vendor" / "lib").mkdir(parents=True)
    (ws / "vendor" / "lib" / "lib.c").write_text("int x;\n")
    init_user_repo(ws / "vendor" / "lib")
    # an empty `git init`
    (ws / "scratch").mkdir()
    git("init", "-q", cwd=ws / "scratch")
    (ws / "scratch" / "notes.txt").write_text("n\n")
    # a registered submodule (its .git is a file pointing into the parent's .git/modules)
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "up.txt").write_text("upstream\n")
    init_user_repo(upstream)
    git(*GIT_ID, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "mod", cwd=ws)
    assert (ws / "mod" / ".git").is_file()
    # a directory with a hand-written .git file
    (ws / "linked").mkdir()
    (ws / "linked" / ".git").write_text("gitdir: /nonexistent/elsewhere\n")
    (ws / "linked" / "l.txt").write_text("l\n")

    nested_gits = [ws / ".git", ws / "vendor/lib/.git", ws / "scratch/.git", ws / "mod/.git", ws / "linked/.git"]
    before = {str(p): tree_fingerprint(p) if p.is_dir() else p.read_bytes() for p in nested_gits}

    res = svc().snapshot(str(ws), "with nested repos").wire()
    assert res["status"] == "ok" and res["created"]
    assert sorted(res["nested_repos"]) == ["linked", "mod", "scratch", "vendor/lib"]
    assert sorted(res["checkpoint_info"]["nested_repos"]) == ["linked", "mod", "scratch", "vendor/lib"]
    paths = set(tree_entries(store_dir, res["checkpoint"]))
    assert paths == {b".gitmodules", b"a.txt", b"src/main.py"}

    # the metadata survives in the commit and in the log
    log = svc().log(str(ws)).wire()["checkpoints"][0]
    assert sorted(log["nested_repos"]) == ["linked", "mod", "scratch", "vendor/lib"]
    msg = git("--git-dir", store_dir, "log", "--all", "--format=%B").stdout
    assert "Nested repositories excluded:" in msg and "vendor/lib" in msg

    # a change inside a nested repo is not a change of the workspace
    (ws / "vendor" / "lib" / "lib.c").write_text("int y;\n")
    again = svc().snapshot(str(ws), "again").wire()
    assert again["created"] is False

    # a restore (clean mode) never touches nested repositories
    (ws / "a.txt").write_text("changed\n")
    svc().snapshot(str(ws), "changed")
    svc().restore(str(ws), res["checkpoint"])
    after = {str(p): tree_fingerprint(p) if p.is_dir() else p.read_bytes() for p in nested_gits}
    assert after == before
    assert (ws / "vendor" / "lib" / "lib.c").read_text() == "int y;\n"
    assert (ws / "scratch" / "notes.txt").exists() and (ws / "linked" / "l.txt").exists()
    assert (ws / "mod" / "up.txt").read_text() == "upstream\n"
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0


def test_declared_path_inside_nested_repo_is_skipped(engine, ws, store_dir):
    (ws / "vendor").mkdir()
    (ws / "vendor" / "v.txt").write_text("v\n")
    init_user_repo(ws / "vendor")
    store = engine()
    snap(store, ws)                                 # a baseline: declared snapshots build on it
    (ws / "vendor" / "v.txt").write_text("v2\n")
    res = snap(store, ws, paths=[str(ws / "vendor" / "v.txt"), str(ws / "a.txt")])
    assert res.report["nested_repos"] == ["vendor"]
    assert {"path": "vendor/v.txt", "reason": "inside_nested_repo"} in res.report["skipped"]
    assert b"vendor/v.txt" not in tree_entries(store_dir, res.checkpoint.id)


# ------------------------------------------------------- files changing underneath
CHURN = r"""
import os, sys, time
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
i = 0
while True:
    i += 1
    p = os.path.join(d, "f%03d" % (i % 50))
    try:
        if i % 3 == 0:
            os.unlink(p)
        elif i % 3 == 1:
            with open(p + ".tmp", "w") as fh:
                fh.write("x" * (i % 4000))
            os.replace(p + ".tmp", p)
        else:                      # appends only: in-place truncation is the subprocess test below
            with open(p, "a") as fh:
                fh.write(str(i) * 100)
        if i % 97 == 0:
            sub = os.path.join(d, "dir%d" % (i % 5))
            os.makedirs(sub, exist_ok=True)
            open(os.path.join(sub, "x"), "w").close()
        if i % 131 == 0:
            import shutil
            shutil.rmtree(os.path.join(d, "dir%d" % (i % 5)), ignore_errors=True)
    except OSError:
        pass
"""


def _assert_stable_files(store_dir, cid):
    entries = tree_entries(store_dir, cid)
    assert entries[b"a.txt"] == (pygit2.GIT_FILEMODE_BLOB, b"alpha\n")
    assert entries[b"src/main.py"] == (pygit2.GIT_FILEMODE_BLOB, b"print('hi')\n")


@pytest.mark.process
def test_files_vanishing_mid_snapshot_process_churn(engine, ws, store_dir):
    store = engine()
    proc = subprocess.Popen([sys.executable, "-c", CHURN, str(ws / "churn")])
    try:
        wait_for(lambda: (ws / "churn").is_dir() and len(os.listdir(ws / "churn")) >= 10,   # it churns
                 message="the churning process never filled its folder")
        results = []
        for i in range(15):
            (ws / "src" / "main.py").write_text("print('hi')\n")
            results.append(snap(store, ws, f"churn {i}"))
    finally:
        proc.kill()
        proc.wait()
    assert len(results) == 15
    for r in results:
        assert r.checkpoint is not None
        _assert_stable_files(store_dir, r.checkpoint.id)
    assert any(r.created for r in results[1:])      # the churn really was seen
    # after the churn stops, a snapshot captures the final state exactly
    final = snap(store, ws, "settled")
    on_disk = {os.fsencode(os.path.relpath(os.path.join(r, f), ws))
               for r, _d, fs in os.walk(ws) for f in fs}
    assert set(tree_entries(store_dir, final.checkpoint.id)) == on_disk
    assert fsck(store_dir).returncode == 0


IN_PLACE_CHURN = r"""
import json, os, sys, threading
from chronos_git.engine.store import Store
from chronos_git.engine.checkpoint import CheckpointMeta
store_dir, ws, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = os.path.join(ws, "churn")
os.makedirs(d, exist_ok=True)
blob = os.urandom(256 * 1024)
stop = threading.Event()

def churn():                      # in-place rewrites (truncate, then write) and deletions
    i = 0
    while not stop.is_set():
        i += 1
        p = os.path.join(d, "g%d" % (i % 8))
        try:
            if i % 5 == 0:
                os.unlink(p)
            else:
                with open(p, "wb") as fh:
                    fh.write(blob[: (i * 7919) % len(blob)])
        except OSError:
            pass

t = threading.Thread(target=churn, daemon=True)
t.start()
store = Store.open(store_dir)
out = []
try:
    for i in range(n):
        r = store.workspace(ws).snapshot(CheckpointMeta(description="churn %d" % i))
        out.append(r.checkpoint.id)
finally:
    stop.set()
    t.join()
print(json.dumps(out))
"""


@pytest.mark.process
def test_files_truncated_mid_snapshot_thread_churn(ws, store_dir):
    """Files rewritten in place by another thread while snapshots run: every snapshot succeeds
    and the process survives (libgit2's add_all mmaps changed files: a truncation = SIGBUS)."""
    proc = subprocess.run([sys.executable, "-c", IN_PLACE_CHURN, str(store_dir), str(ws), "40"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc={proc.returncode} (SIGBUS is {-signal.SIGBUS})\n{proc.stderr[-3000:]}"
    ids = json.loads(proc.stdout)
    assert len(ids) == 40
    for cid in set(ids):
        _assert_stable_files(store_dir, cid)
    assert fsck(store_dir).returncode == 0


# ------------------------------------------------------- special files
def test_symlinks_are_stored_as_links_never_followed(engine, ws, store_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the workspace\n")
    os.symlink("a.txt", ws / "rel_link")
    os.symlink("/nonexistent/dangling/target", ws / "abs_dangling")
    os.symlink("missing.txt", ws / "rel_dangling")
    os.symlink(str(outside), ws / "abs_dir_link")
    os.symlink("src", ws / "dir_link")
    res = snap(engine(), ws)
    entries = tree_entries(store_dir, res.checkpoint.id)
    L = pygit2.GIT_FILEMODE_LINK
    assert entries[b"rel_link"] == (L, b"a.txt")
    assert entries[b"abs_dangling"] == (L, b"/nonexistent/dangling/target")
    assert entries[b"rel_dangling"] == (L, b"missing.txt")
    assert entries[b"abs_dir_link"] == (L, os.fsencode(outside))
    assert entries[b"dir_link"] == (L, b"src")
    assert not any(p.startswith((b"abs_dir_link/", b"dir_link/")) for p in entries)
    assert len(entries) == 7

    # restore brings them back as links, byte-exact targets
    for name in ("rel_link", "abs_dangling", "rel_dangling", "abs_dir_link", "dir_link"):
        os.unlink(ws / name)
    (ws / "rel_link").write_text("now a regular file\n")      # type change back to a link
    from chronos_git.engine import restore as restore_mod
    restore_mod.restore(engine().workspace(ws), res.checkpoint.id)
    assert os.readlink(ws / "rel_link") == "a.txt"
    assert os.readlink(ws / "abs_dangling") == "/nonexistent/dangling/target"
    assert os.readlink(ws / "rel_dangling") == "missing.txt"
    assert os.readlink(ws / "abs_dir_link") == str(outside)
    assert os.readlink(ws / "dir_link") == "src"
    assert (outside / "secret.txt").read_text() == "outside the workspace\n"


def test_executable_bit_is_kept_and_restored(engine, ws, store_dir):
    store = engine()
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    first = snap(store, ws)
    assert tree_entries(store_dir, first.checkpoint.id)[b"run.sh"][0] == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    script.chmod(0o644)
    (ws / "a.txt").chmod(0o755)
    second = snap(store, ws)
    assert second.created
    e2 = tree_entries(store_dir, second.checkpoint.id)
    assert e2[b"run.sh"][0] == pygit2.GIT_FILEMODE_BLOB
    assert e2[b"a.txt"][0] == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    from chronos_git.engine import restore as restore_mod
    restore_mod.restore(store.workspace(ws), first.checkpoint.id)
    assert os.stat(script).st_mode & 0o111 == 0o111
    assert os.stat(ws / "a.txt").st_mode & 0o111 == 0
    script.unlink()
    restore_mod.restore(store.workspace(ws), first.checkpoint.id)
    assert os.stat(script).st_mode & 0o100
    assert script.read_text() == "#!/bin/sh\necho hi\n"


def test_non_utf8_names_are_byte_exact(engine, ws, store_dir):
    root = os.fsencode(ws)
    names = [b"caf\xe9.txt", b"dir\xff\xfe/inner\x80.bin", "nfc-é.txt".encode()]
    for n in names:
        os.makedirs(os.path.dirname(os.path.join(root, n)), exist_ok=True)
        with open(os.path.join(root, n), "wb") as fh:
            fh.write(b"content of " + n)
    store = engine()
    res = snap(store, ws)
    entries = tree_entries(store_dir, res.checkpoint.id)
    for n in names:
        assert entries[n] == (pygit2.GIT_FILEMODE_BLOB, b"content of " + n)
    # plain git sees the same bytes
    raw = subprocess.run(["git", "--git-dir", str(store_dir), "ls-tree", "-r", "-z", "--name-only",
                          res.checkpoint.id], capture_output=True, check=True).stdout
    assert set(raw.split(b"\0")) - {b""} == set(entries)
    # restore re-creates them byte-exact
    for n in names:
        os.unlink(os.path.join(root, n))
    from chronos_git.engine import restore as restore_mod
    out = restore_mod.restore(store.workspace(ws), res.checkpoint.id)
    assert out["files_changed"] == 3
    for n in names:
        with open(os.path.join(root, n), "rb") as fh:
            assert fh.read() == b"content of " + n
    assert sorted(os.listdir(root)) == sorted([b"a.txt", b"src", b"caf\xe9.txt", b"dir\xff\xfe",
                                               "nfc-é.txt".encode()])


def test_files_above_max_size_are_skipped_and_listed(svc, ws, store_dir):
    s = svc(max_file_size_mb=0.001)          # 1048 bytes
    (ws / "big.bin").write_bytes(b"B" * 5000)
    (ws / "grows.bin").write_bytes(b"g" * 100)
    (ws / "edge.bin").write_bytes(b"e" * 1048)  # exactly the cap: kept
    first = s.snapshot(str(ws), "one").wire()
    assert first["skipped"] == [{"path": "big.bin", "reason": "too_large", "size": 5000}]
    entries = tree_entries(store_dir, first["checkpoint"])
    assert b"big.bin" not in entries and b"grows.bin" in entries and b"edge.bin" in entries
    assert first["checkpoint_info"]["skipped"] == first["skipped"]

    # a captured file that grows above the cap leaves the checkpoint (no stale content)
    (ws / "grows.bin").write_bytes(b"G" * 2000)
    second = s.snapshot(str(ws), "two").wire()
    assert second["created"]
    assert {"path": "grows.bin", "reason": "too_large", "size": 2000} in second["skipped"]
    assert b"grows.bin" not in tree_entries(store_dir, second["checkpoint"])

    # listed in the commit message (for git log) and in the JSON metadata line
    msg = git("--git-dir", store_dir, "log", "-1", "--format=%B", second["checkpoint"]).stdout
    assert "Skipped:" in msg and "grows.bin" in msg
    meta = json.loads(msg.strip().splitlines()[-1])
    assert {"path": "grows.bin", "reason": "too_large", "size": 2000} in meta["skipped"]

    # a clean restore never deletes or overwrites an uncaptured file
    s.restore(str(ws), first["checkpoint"])
    assert (ws / "big.bin").read_bytes() == b"B" * 5000
    assert (ws / "grows.bin").read_bytes() == b"G" * 2000


def test_fifo_is_skipped(engine, ws, store_dir):
    os.mkfifo(ws / "pipe")
    (ws / "sub").mkdir()
    os.mkfifo(ws / "sub" / "pipe2")
    res = snap(engine(), ws)
    entries = tree_entries(store_dir, res.checkpoint.id)
    assert set(entries) == {b"a.txt", b"src/main.py"}
    assert stat.S_ISFIFO(os.lstat(ws / "pipe").st_mode)


@pytest.mark.parametrize("git_tree", [False, True])
def test_a_fifo_gitignore_above_a_subfolder_never_stops_a_snapshot(ws, store_dir, git_tree):
    """libgit2 opens every `.gitignore` on a path with a plain open(2): a FIFO one blocked it
    with the GIL held (pygit2), so the guard that releases such opens could not run and the
    whole process waited for a writer.  Asked through ctypes, the GIL is let go.  In a child
    process: a regression hangs it, not the test run."""
    (ws / "sub" / "deeper").mkdir(parents=True)
    (ws / "sub" / "deeper" / "b.txt").write_text("b\n")
    if git_tree:
        git("init", "-q", cwd=ws)
        git("add", "-A", cwd=ws)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", cwd=ws)
    os.mkfifo(ws / "sub" / ".gitignore")
    code = textwrap.dedent(f"""
        import json, pathlib
        from chronos_git.service import Chronos
        ws = {str(ws)!r}
        s = Chronos.get({str(store_dir)!r})
        s.start()
        first = s.snapshot(ws, "first")                # the first snapshot, then an incremental one
        pathlib.Path(ws, "sub", "deeper", "b.txt").write_text("b2\\n")
        print(json.dumps([first.checkpoint, s.snapshot(ws, "second").checkpoint]))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("a snapshot waited on a FIFO .gitignore")
    assert out.returncode == 0, out.stderr
    first, second = json.loads(out.stdout.strip().splitlines()[-1])
    for cp, text in ((first, b"b\n"), (second, b"b2\n")):
        entries = tree_entries(store_dir, cp)
        assert b"sub/deeper/b.txt" in entries and b"sub/.gitignore" not in entries
        repo = pygit2.Repository(str(store_dir))
        assert repo[repo[cp].tree["sub/deeper/b.txt"].id].data == text
    assert stat.S_ISFIFO(os.lstat(ws / "sub" / ".gitignore").st_mode)


# ------------------------------------------------------- declared paths
def test_declared_path_snapshot_updates_only_named_paths(engine, ws, store_dir):
    store = engine()
    (ws / "b.txt").write_text("b1\n")
    (ws / "gone.txt").write_text("to be deleted\n")
    (ws / "pkg").mkdir()
    (ws / "pkg" / "m.py").write_text("m1\n")
    base = snap(store, ws)

    (ws / "a.txt").write_text("a2\n")            # declared
    (ws / "b.txt").write_text("b2\n")            # not declared: keeps b1 in the checkpoint
    (ws / "new.txt").write_text("new\n")         # declared, new
    (ws / "gone.txt").unlink()                   # declared, deleted
    (ws / "pkg" / "m.py").write_text("m2\n")     # declared via its directory
    (ws / "pkg" / "n.py").write_text("n\n")
    (ws / "undeclared_new.txt").write_text("u\n")
    res = store.workspace(ws).snapshot(
        CheckpointMeta(description="declared"),
        paths=[str(ws / "a.txt"), "new.txt", str(ws / "gone.txt"), str(ws / "pkg")])
    assert res.created
    assert res.checkpoint.meta.kind == "declared"
    entries = tree_entries(store_dir, res.checkpoint.id)
    assert entries[b"a.txt"][1] == b"a2\n"
    assert entries[b"b.txt"][1] == b"b1\n"
    assert entries[b"new.txt"][1] == b"new\n"
    assert b"gone.txt" not in entries
    assert entries[b"pkg/m.py"][1] == b"m2\n" and entries[b"pkg/n.py"][1] == b"n\n"
    assert b"undeclared_new.txt" not in entries
    assert res.checkpoint.parent_id == base.checkpoint.id

    # the next full snapshot picks up the rest
    full = snap(store, ws)
    entries = tree_entries(store_dir, full.checkpoint.id)
    assert entries[b"b.txt"][1] == b"b2\n" and b"undeclared_new.txt" in entries
    assert full.checkpoint.meta.kind == "full"


def test_declared_path_snapshot_via_service_is_declared(svc, ws, store_dir):
    s = svc()
    s.snapshot(str(ws), "base")
    (ws / "a.txt").write_text("a2\n")
    (ws / "src" / "main.py").write_text("changed\n")
    res = s.snapshot(str(ws), "only a", paths=[str(ws / "a.txt")]).wire()
    assert res["kind"] == "declared"
    assert res["checkpoint_info"]["kind"] == "declared"
    entries = tree_entries(store_dir, res["checkpoint"])
    assert entries[b"a.txt"][1] == b"a2\n"
    assert entries[b"src/main.py"][1] == b"print('hi')\n"


def test_declared_path_honours_ignores_and_refuses_outside(engine, ws, store_dir):
    from chronos_git.engine.errors import PathError
    (ws / ".gitignore").write_text("*.log\n")
    store = engine(ignored_patterns=())
    snap(store, ws)
    (ws / "x.log").write_text("ignored\n")
    (ws / "a.txt").write_text("a2\n")
    res = snap(store, ws, paths=["x.log", "a.txt"])
    entries = tree_entries(store_dir, res.checkpoint.id)
    assert b"x.log" not in entries and entries[b"a.txt"][1] == b"a2\n"
    assert {"path": "x.log", "reason": "ignored"} in res.report["skipped"]
    with pytest.raises(PathError):
        snap(store, ws, paths=[str(ws.parent / "elsewhere.txt")])
    res = snap(store, ws, paths=[".git/config"])
    assert {"path": ".git/config", "reason": "inside_git_dir"} in res.report["skipped"]


# ------------------------------------------------------- metadata
def test_metadata_in_git_log_and_api(svc, ws, store_dir):
    s = svc(max_file_size_mb=0.001)
    (ws / "huge.dat").write_bytes(b"h" * 4096)
    t0 = time.time()
    res = s.snapshot(str(ws), "before write_file", tool="write_file", session_id="sess-123",
                     turn_id="turn-7", tool_call_id="call-abc").wire()
    t1 = time.time()
    cid = res["checkpoint"]
    text = git("--git-dir", store_dir, "log", "--all", "--format=%H%n%B").stdout
    assert cid in text
    assert "chronos checkpoint: before write_file" in text
    for line in ("Tool: write_file", "Session: sess-123", "Turn: turn-7", "Tool-Call: call-abc",
                 "Skipped: 1 path(s): huge.dat"):
        assert line in text
    body = git("--git-dir", store_dir, "log", "-1", "--format=%B", cid).stdout
    meta = json.loads(body.strip().splitlines()[-1])
    assert meta["schema"] == "chronos-git.checkpoint.v1"
    assert meta["description"] == "before write_file"
    assert meta["tool"] == "write_file" and meta["session_id"] == "sess-123"
    assert meta["turn_id"] == "turn-7" and meta["tool_call_id"] == "call-abc"
    assert t0 - 1 <= meta["time"] <= t1 + 1
    assert meta["skipped"] == [{"path": "huge.dat", "reason": "too_large", "size": 4096}]
    # canonical JSON: sorted keys, no spaces
    last = body.strip().splitlines()[-1]
    assert last == json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    row = s.log(str(ws)).wire()["checkpoints"][0]
    assert row["id"] == cid and row["index"] == 1
    assert (row["description"], row["tool"], row["session_id"], row["turn_id"], row["tool_call_id"]) == \
        ("before write_file", "write_file", "sess-123", "turn-7", "call-abc")
    assert row["time"] == meta["time"]
    assert row["skipped"] == meta["skipped"]
    # commit time in git agrees with the metadata time
    ct = int(git("--git-dir", store_dir, "log", "-1", "--format=%ct", cid).stdout.strip())
    assert abs(ct - meta["time"]) < 2


def test_metadata_of_pre_call_snapshot_from_protected_call(svc, ws, store_dir):
    s = svc()
    from chronos_git.service import Call, Declared, Outcome
    t = s.begin(Call(tool="write_file", args={"path": str(ws / "a.txt")}, workspace=str(ws),
                     session_id="S1", turn_id="T1", tool_call_id="C1",
                     declared=[Declared(str(ws / "a.txt"), b"new\n")]))
    (ws / "a.txt").write_text("new\n")
    s.finish(t, Outcome(status="ok"))
    rows = s.log(str(ws)).wire()["checkpoints"]
    after = rows[0]
    assert after["tool"] == "write_file" and after["session_id"] == "S1"
    assert after["turn_id"] == "T1" and after["tool_call_id"] == "C1"
    assert after["kind"] == "declared"
    assert tree_entries(store_dir, after["id"])[b"a.txt"][1] == b"new\n"


# ------------------------------------------------------- stale locks
KILLER = r"""
import os, signal, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"0000000000000000000000000000000000000000\n")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.process
def test_stale_git_locks_from_killed_process_do_not_block(engine, ws, store_dir):
    store = engine()
    w = store.workspace(ws)
    first = snap(store, ws)
    locks = [w.gitdir / "index.lock", store_dir / (w.ref + ".lock"), w.gitdir / "HEAD.lock"]
    proc = subprocess.run([sys.executable, "-c", KILLER, *map(str, locks)])
    assert proc.returncode == -signal.SIGKILL
    assert all(p.exists() for p in locks)
    (ws / "a.txt").write_text("after the crash\n")
    res = snap(store, ws)
    assert res.created and res.checkpoint.parent_id == first.checkpoint.id
    assert tree_entries(store_dir, res.checkpoint.id)[b"a.txt"][1] == b"after the crash\n"
    assert not any(p.exists() for p in locks)
    assert fsck(store_dir).returncode == 0


@pytest.mark.process
def test_stale_locks_do_not_block_the_cli(cli, ws, store_dir):
    assert cli("snapshot", "--workspace", ws, "--json").rc == 0
    w = Store.open(store_dir).workspace(ws)
    locks = [w.gitdir / "index.lock", store_dir / (w.ref + ".lock")]
    subprocess.run([sys.executable, "-c", KILLER, *map(str, locks)])
    assert all(p.exists() for p in locks)
    (ws / "a.txt").write_text("x\n")
    r = cli("snapshot", "--workspace", ws, "--json")
    assert r.rc == 0, r.stdout + r.stderr
    assert r.json["created"] is True
    assert cli("log", "--workspace", ws, "--json").json["checkpoints"][0]["id"] == r.json["checkpoint"]


@pytest.mark.process
def test_snapshot_process_killed_mid_snapshot(cli, ws, store_dir):
    first = cli("snapshot", "--workspace", ws, "--json").json
    (ws / "a.txt").write_text("mid\n")
    r = cli("snapshot", "--workspace", ws, "--json", fault="mid_snapshot")
    assert r.rc == -signal.SIGKILL
    r2 = cli("snapshot", "--workspace", ws, "--json")
    assert r2.rc == 0 and r2.json["created"] is True
    assert r2.json["checkpoint"] != first["checkpoint"]
    assert tree_entries(store_dir, r2.json["checkpoint"])[b"a.txt"][1] == b"mid\n"
    assert fsck(store_dir).returncode == 0


# ------------------------------------------------------- concurrency
WORKER = r"""
import json, os, sys
from chronos_git.engine.store import Store
from chronos_git.engine.checkpoint import CheckpointMeta
store_dir, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
workspaces = sys.argv[4:]
store = Store.open(store_dir)
out = []
for i in range(n):
    for w in workspaces:
        with open(os.path.join(w, "by-%s.txt" % tag), "w") as fh:
            fh.write("%s %d\n" % (tag, i))
        r = store.workspace(w).snapshot(CheckpointMeta(description="%s %d" % (tag, i)))
        out.append({"ws": store.workspace(w).id, "id": r.checkpoint.id, "created": r.created})
print(json.dumps(out))
"""


@pytest.mark.process
def test_concurrent_threads_and_processes(ws, tmp_path, store_dir):
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    (ws2 / "x.txt").write_text("x\n")
    store = Store.open(store_dir)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(store_dir), f"p{k}", "6", str(ws), str(ws2)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(3)]
    results: list[dict] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def thread_worker(tag, targets):
        try:
            for i in range(6):
                for w in targets:
                    (w / f"by-{tag}.txt").write_text(f"{tag} {i}\n")
                    r = store.workspace(w).snapshot(CheckpointMeta(description=f"{tag} {i}"))
                    with lock:
                        results.append({"ws": store.workspace(w).id, "id": r.checkpoint.id,
                                        "created": r.created})
        except BaseException as exc:          # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=thread_worker, args=(f"t{k}", [ws, ws2] if k % 2 else [ws]))
               for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "Traceback" not in err
        results.extend(json.loads(out))
    assert not errors, errors
    assert len(results) == 3 * 6 * 2 + (2 * 6 + 2 * 12)

    for w in (ws, ws2):
        wid = store.workspace(w).id
        ids = chain(store_dir, wid)                       # every parent present
        assert len(ids) == len(set(ids))
        created = {r["id"] for r in results if r["ws"] == wid and r["created"]}
        assert created <= set(ids)                         # no checkpoint lost
        assert created                                     # work was done
        # the tip holds the final content of every writer's file
        entries = tree_entries(store_dir, ids[0])
        for f in w.iterdir():
            if f.is_file():
                assert entries[os.fsencode(f.name)][1] == f.read_bytes()
    r = fsck(store_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert git("--git-dir", store_dir, "log", "--all", "--oneline", check=False).returncode == 0


def test_first_declared_snapshot_via_engine_is_full(engine, ws, store_dir):
    res = snap(engine(), ws, paths=["a.txt"])
    assert set(tree_entries(store_dir, res.checkpoint.id)) == {b"a.txt", b"src/main.py"}
    assert res.checkpoint.meta.kind == "full"


def test_first_declared_snapshot_has_a_full_baseline(svc, ws, store_dir):
    """With no earlier checkpoint there is no baseline for the undeclared files: a declared
    snapshot must not claim the workspace held only the declared paths (a clean restore of it
    would delete everything else)."""
    s = svc()
    from chronos_git.service import Call, Declared, Outcome
    t = s.begin(Call(tool="write_file", args={"path": str(ws / "a.txt")}, workspace=str(ws),
                     declared=[Declared(str(ws / "a.txt"), b"new\n")]))
    pre = t.pre_checkpoint
    assert pre
    assert set(tree_entries(store_dir, pre)) == {b"a.txt", b"src/main.py"}
    (ws / "a.txt").write_text("new\n")
    s.finish(t, Outcome(status="ok"))
    s.restore(str(ws), pre)
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"


def test_a_declared_snapshot_in_a_new_process_keeps_files_an_unsaved_cache_lacks(store_dir, ws):
    """Regression: process 1's declared snapshot leaves the stat cache file unsaved; process
    2's declared snapshot built on that stale file and dropped process 1's file from its
    checkpoint, and `diff` showed the file deleted and added."""
    for n, name in enumerate(("one.txt", "two.txt")):
        Chronos.forget_instances()                       # a new process, as each CLI call is
        svc = Chronos.get(store_dir, Settings())
        assert svc.write_file(str(ws), name, f"{n}\n".encode()).status == "ok"
    Chronos.forget_instances()
    svc = Chronos.get(store_dir, Settings())
    repo = pygit2.Repository(str(store_dir))
    for c in svc.log(str(ws), None).checkpoints[:2]:
        names = {e.name for e in repo[c.id].tree}
        assert "one.txt" in names, (c.description, names)
    assert svc.diff(str(ws)).files == []


def test_first_import_takes_what_it_read_not_what_was_listed(svc, ws, store_dir, monkeypatch):
    """The first import's listing keeps libgit2's kind and size; the stat is the reader's.
    A file that grows past the cap, turns executable or loses permissions between the two is
    taken as read, and the index's stat data vouch for exactly those bytes."""
    from chronos_git.engine import bulk
    s = svc(max_file_size_mb=0.001)          # 1048 bytes
    (ws / "grows.bin").write_bytes(b"g" * 100)
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "key.pem").write_text("k\n")
    real = bulk._list_files

    def list_then_change(*a, **kw):
        entries = real(*a, **kw)
        (ws / "grows.bin").write_bytes(b"G" * 2000)
        os.chmod(ws / "run.sh", 0o755)
        os.chmod(ws / "key.pem", 0o600)
        return entries

    monkeypatch.setattr(bulk, "_list_files", list_then_change)
    first = s.snapshot(str(ws), "one").wire()
    assert {"path": "grows.bin", "reason": "too_large", "size": 2000} in first["skipped"]
    entries = tree_entries(store_dir, first["checkpoint"])
    assert b"grows.bin" not in entries
    assert entries[b"run.sh"][0] == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    os.unlink(ws / "key.pem")
    s.restore(str(ws), first["checkpoint"])          # the bits were recorded as read
    assert stat.S_IMODE(os.stat(ws / "key.pem").st_mode) == 0o600
    monkeypatch.setattr(bulk, "_list_files", real)
    (ws / "key.pem").write_text("changed\n")          # same size: the stat must tell
    second = s.snapshot(str(ws), "two").wire()
    assert second["created"]
    assert tree_entries(store_dir, second["checkpoint"])[b"key.pem"][1] == b"changed\n"


def test_first_import_frames_every_size_git_can_read(engine, ws, store_dir):
    """The first import writes blobs as stored deflate blocks of its own framing: empty, one
    block, exactly one full block, several blocks; git must read each back byte for byte."""
    store = engine()
    sizes = [0, 1, 4095, 0xFFFF, 0x10000, 3 * 0xFFFF, 3 * 0xFFFF + 1, (1 << 20) + 7]
    rnd = random.Random(7)
    want = {}
    for n in sizes:
        data = rnd.randbytes(n)
        (ws / f"size-{n}.bin").write_bytes(data)
        want[f"size-{n}.bin".encode()] = (pygit2.GIT_FILEMODE_BLOB, data)
    res = snap(store, ws)
    assert res.report["scan"] == "bulk"
    entries = tree_entries(store_dir, res.checkpoint.id)
    for name, item in want.items():
        assert entries[name] == item, name
    assert fsck(store_dir).returncode == 0
    for n in sizes:              # and git's own reader, not only libgit2's
        out = subprocess.run(["git", "--git-dir", str(store_dir), "cat-file", "blob",
                              f"{res.checkpoint.id}:size-{n}.bin"], capture_output=True, check=True)
        assert out.stdout == want[f"size-{n}.bin".encode()][1]


def test_read_all_reads_on_after_a_short_read_that_is_not_the_end(monkeypatch):
    """One read for a file of a known size, but a read that comes back short of that size
    (a pipe here; some file systems do it for files) is not taken for the end."""
    from chronos_git.engine import fsutil
    from chronos_git.engine.fsutil import read_all
    r, w = os.pipe()
    os.write(w, b"abc")
    first_read = threading.Event()
    real_read = fsutil.os.read

    def read(fd, n):
        try:
            return real_read(fd, n)
        finally:
            first_read.set()
    monkeypatch.setattr(fsutil.os, "read", read)

    def rest():
        first_read.wait(60)                # the first read has come back short (b"abc")
        os.write(w, b"def")
        os.close(w)
    t = threading.Thread(target=rest)
    t.start()
    try:
        assert read_all(r, 6) == b"abcdef"
    finally:
        t.join()
        os.close(r)


def test_read_all_stops_early_only_on_its_first_read(monkeypatch):
    """A file one byte under 1 MiB: its first read asks for 1 MiB, the one-read shortcut must
    not fire on a later read of 1 MiB - 1 bytes (that would drop what came before)."""
    from chronos_git.engine import fsutil
    size = (1 << 20) - 1
    chunks = [b"a" * 100, b"b" * size, b""]
    monkeypatch.setattr(fsutil.os, "read", lambda fd, n: chunks.pop(0))
    assert fsutil.read_all(0, size) == b"a" * 100 + b"b" * size


def test_write_commit_is_create_commit_without_freshening_the_tree(tmp_path):
    """Byte for byte the commit libgit2 writes (signatures with offsets, parents, non-ASCII),
    and the pack that holds its tree keeps its mtime."""
    import os
    import pygit2
    from chronos_git.engine.checkpoint import signature, write_commit
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    objects = tmp_path / "r" / "objects"
    tb = repo.TreeBuilder()
    tb.insert("a", repo.create_blob(b"x"), pygit2.GIT_FILEMODE_BLOB)
    tree = tb.write()
    for sig in (signature(1796197339.5), pygit2.Signature("n", "e@x", 100, -330)):
        root = repo.create_commit(None, sig, sig, "first\n\nKey: v\n{\"a\":1}", tree, [])
        assert write_commit(objects, tree, [], sig, "first\n\nKey: v\n{\"a\":1}") == root
        assert write_commit(objects, tree, [root], sig, "ünïcode ✓") == \
            repo.create_commit(None, sig, sig, "ünïcode ✓", tree, [root])
    loose = tmp_path / "r" / "objects" / str(tree)[:2] / str(tree)[2:]
    os.utime(loose, ns=(10**18, 10**18))
    write_commit(objects, tree, [], signature(5.0), "new")
    assert loose.stat().st_mtime_ns == 10**18            # create_commit would have touched it
