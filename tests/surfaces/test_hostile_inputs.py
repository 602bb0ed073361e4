"""Hostile input at the engine's boundaries: symlink swaps, crafted checkpoint trees, names
that are not UTF-8, undeletable files, uncaptured content, litter, permissions, FIFOs, a full
disk, a read-only store and odd settings.  Real stores, real CLI processes, real filesystems
(tmpfs and `chattr` when running as root; skipped with the reason otherwise).

Each test reproduces one finding of the hardening issue; each failed on main at a32f796."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store
from support.helpers import fifo_after_listing, git, tree_fingerprint

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (tmpfs mounts, chattr +i)")


# ----------------------------------------------------------------- helpers
def cli_bytes(store_dir, *args, cwd=None, env=None, fault=None, timeout=120):
    """The real CLI with raw bytes in and out (names that are not UTF-8)."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_SETTINGS", "HERMES_HOME")}
    e["CHRONOS_GIT_STORE"] = str(store_dir)
    if fault:
        e["CHRONOS_GIT_FAULT"] = fault
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "chronos_git.cli", *args], cwd=cwd, env=e,
                          capture_output=True, timeout=timeout)


def doc(proc) -> dict:
    """The one JSON document on stdout: strict UTF-8, or the test fails."""
    text = proc.stdout.decode("utf-8")          # raises on invalid UTF-8
    return json.loads(text)


def n_checkpoints(cli, ws) -> int:
    return len(cli("log", "--limit", "1000", "--json", cwd=ws).json["checkpoints"])


def n_events(cli, ws) -> int:
    return cli("journal", "status", "--json", cwd=ws).json["events"]


def everything_below(path: Path) -> set[str]:
    out = set()
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, name), path))
    return out


@pytest.fixture
def outside(tmp_path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("not the workspace's\n")
    return d


# ----------------------------------------------------- finding: symlink swaps
def _swap_dir_for_link(ws: Path, name: str, target: Path) -> None:
    shutil.rmtree(ws / name)
    os.symlink(target, ws / name)


def test_no_clean_restore_never_writes_through_a_symlinked_directory(cli, ws, outside):
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("in the checkpoint\n")
    cp = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    _swap_dir_for_link(ws, "d", outside)
    before = everything_below(outside)
    r = cli("restore", cp, "--no-clean", "--json", cwd=ws)
    assert everything_below(outside) == before                       # nothing created through the link
    assert os.path.islink(ws / "d")
    assert r.rc == 0, r.stdout
    (item,) = [i for i in r.json["plan"] if i["path"] == "d/f.txt"]
    assert item["action"] == "skip" and "symbolic link" in item["reason"]


def test_clean_restore_replaces_a_captured_link_itself_never_its_target(cli, ws, outside):
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("in the checkpoint\n")
    cp = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    _swap_dir_for_link(ws, "d", outside)
    before = everything_below(outside)
    r = cli("restore", cp, "--json", cwd=ws)
    assert r.rc == 0, r.stdout
    assert everything_below(outside) == before
    assert (outside / "precious.txt").read_text() == "not the workspace's\n"
    assert not os.path.islink(ws / "d") and (ws / "d" / "f.txt").read_text() == "in the checkpoint\n"
    undo = cli("restore", r.json["safety_checkpoint"], "--json", cwd=ws)   # the link comes back
    assert undo.rc == 0 and os.readlink(ws / "d") == str(outside)


def test_clean_restore_of_an_ignored_symlinked_directory_writes_nothing_outside(cli, ws, outside):
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("in the checkpoint\n")
    cp = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    (ws / ".gitignore").write_text("d\n")                            # the link is not captured now
    cli("snapshot", "--json", cwd=ws)
    _swap_dir_for_link(ws, "d", outside)
    before = everything_below(outside)
    r = cli("restore", cp, "--json", cwd=ws)
    assert everything_below(outside) == before
    assert os.path.islink(ws / "d")


def test_path_scoped_restore_through_a_symlink_writes_nothing_outside(cli, ws, outside):
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("in the checkpoint\n")
    cp = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    _swap_dir_for_link(ws, "d", outside)
    before = everything_below(outside)
    cli("restore", cp, "--path", "d", "--no-clean", "--json", cwd=ws)
    assert everything_below(outside) == before
    assert os.path.islink(ws / "d")


# ------------------------------------------------- finding: crafted trees
def _raw_tree(entries: list[tuple[bytes, bytes, bytes]]) -> bytes:
    """A tree object body with entries exactly as given (no validation: an attacker's tree)."""
    return b"".join(mode + b" " + name + b"\0" + raw_id for mode, name, raw_id in entries)


def _plant(store_dir: Path, ws: Path, entries) -> str:
    """A commit on the workspace's snapshot ref whose tree holds `entries` plus the real ones."""
    repo = pygit2.Repository(str(store_dir))
    ref = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")][0]
    tip = repo.references[ref].peel(pygit2.Commit)
    real = [(b"%o" % e.filemode, os.fsencode(e.name), e.id.raw) for e in tip.tree]
    tree = repo.odb.write(pygit2.GIT_OBJECT_TREE, _raw_tree(sorted(real + entries, key=lambda t: t[1])))
    sig = pygit2.Signature("x", "x@x")
    return str(repo.create_commit(ref, sig, sig, tip.message, tree, [tip.id]))


def _blob_tree(repo, path_parts: list[bytes], content: bytes) -> tuple[bytes, bytes]:
    """(mode, raw id) of a (nested) entry holding `content` at path_parts[-1]."""
    blob = repo.create_blob(content)
    mode, raw = b"100644", blob.raw
    for part in reversed(path_parts[1:]):
        t = repo.odb.write(pygit2.GIT_OBJECT_TREE, _raw_tree([(mode, part, raw)]))
        mode, raw = b"40000", t.raw
    return mode, raw


@pytest.mark.parametrize("name,inner", [
    (b"..", [b"..", b"escaped.txt"]),
    (b".git", [b".git", b"hooks", b"pre-commit"]),
    (b".GIT", [b".GIT", b"hooks", b"post-checkout"]),
    (b"git~1", [b"git~1", b"config"]),
])
def test_crafted_tree_entries_are_refused_before_anything_is_written(cli, ws, store_dir, tmp_path, name, inner):
    git("init", "-q", cwd=ws)                                      # the user's own .git
    hooks_before = tree_fingerprint(ws / ".git")
    cli("snapshot", "--json", cwd=ws)
    repo = pygit2.Repository(str(store_dir))
    mode, raw = _blob_tree(repo, inner, b"#!/bin/sh\necho pwned > /tmp/chronos-pwned\n")
    bad = _plant(store_dir, ws, [(mode, name, raw)])
    count = n_checkpoints(cli, ws)
    events = n_events(cli, ws)
    r = cli("restore", bad, "--json", cwd=ws)
    assert r.rc == 1 and "fsck" in r.json["error"] and name.decode() in r.json["error"]
    assert not (tmp_path / "escaped.txt").exists()
    assert tree_fingerprint(ws / ".git") == hooks_before            # the user's .git untouched
    assert not (ws / "git~1").exists()
    assert n_checkpoints(cli, ws) == count and n_events(cli, ws) == events   # refused: no history either
    v = cli("journal", "verify", "--json", cwd=ws)
    assert v.rc == 1 and name.decode() in v.json["error"]


def test_a_tree_entry_whose_name_holds_a_slash_is_refused(cli, ws, store_dir):
    cli("snapshot", "--json", cwd=ws)
    repo = pygit2.Repository(str(store_dir))
    bad = _plant(store_dir, ws, [(b"100644", b"sub/evil.txt", repo.create_blob(b"x").raw)])
    r = cli("restore", bad, "--json", cwd=ws)
    assert r.rc == 1 and "'/'" in r.json["error"]
    assert not (ws / "sub").exists()


# -------------------------------------------- finding: uncaptured content lost
def test_content_the_safety_checkpoint_could_not_read_is_kept(svc, ws, monkeypatch):
    """A file whose bytes cannot be stored (unreadable, a full disk) must not be overwritten:
    the safety checkpoint does not hold them, so the restore could not be undone."""
    s = svc()
    target = s.snapshot(str(ws), "base").wire()["checkpoint"]
    (ws / "a.txt").write_text("precious new bytes the store cannot take\n")
    real_add = pygit2.Index.add

    def failing_add(self, path_or_entry):
        if path_or_entry == "a.txt":
            raise OSError(28, "No space left on device")
        return real_add(self, path_or_entry)

    monkeypatch.setattr(pygit2.Index, "add", failing_add)
    res = s.restore(str(ws), target).wire()
    assert (ws / "a.txt").read_text() == "precious new bytes the store cannot take\n"
    (item,) = [i for i in res["plan"] if i["path"] == "a.txt"]
    assert item["action"] == "keep" and "not captured by the safety checkpoint" in item["reason"]


@needs_root
def test_a_full_store_disk_never_costs_workspace_bytes(cli, ws, tmp_path):
    """A blob that does not fit on the store's disk: the file keeps its new bytes."""
    with tmpfs(tmp_path / "small", "6m") as mnt:
        store = mnt / "store"
        r = cli("snapshot", "--json", cwd=ws, env={"CHRONOS_GIT_STORE": str(store)})
        target = r.json["checkpoint"]
        fill(mnt, leave=256 * 1024)
        big = os.urandom(2 << 20)
        (ws / "a.txt").write_bytes(big)                           # larger than the free space
        cli("restore", target, "--json", cwd=ws, env={"CHRONOS_GIT_STORE": str(store)})
        assert (ws / "a.txt").read_bytes() == big


# ------------------------------------------------------ finding: non-UTF-8
@pytest.mark.process
def test_names_that_are_not_utf8_round_trip_through_every_command(ws, store_dir):
    name = b"caf\xe9.txt"
    wsb = os.fsencode(ws)
    with open(os.path.join(wsb, name), "wb") as fh:
        fh.write(b"bytes\n")
    snap = doc(cli_bytes(store_dir, "snapshot", "--json", cwd=ws))
    assert snap["status"] == "ok"
    os.unlink(os.path.join(wsb, name))
    d = doc(cli_bytes(store_dir, "diff", "--json", cwd=ws))
    (f,) = d["files"]
    assert base64.b64decode(f["path_b64"]) == name and f["status"] == "deleted"
    r = cli_bytes(store_dir, "restore", snap["checkpoint"], "--json", cwd=ws)
    res = doc(r)
    assert r.returncode == 0 and res["status"] == "ok", res
    with open(os.path.join(wsb, name), "rb") as fh:
        assert fh.read() == b"bytes\n"
    assert any(base64.b64decode(i["path_b64"]) == name for i in res["plan"] if "path_b64" in i)
    w = cli_bytes(store_dir, "write", b"new-\xff.txt", "--content", "x", "--json", cwd=ws)
    assert w.returncode == 0, w.stdout + w.stderr
    with open(os.path.join(wsb, b"new-\xff.txt"), "rb") as fh:
        assert fh.read() == b"x"
    for args in (("journal", "status", "--json"), ("journal", "log", "--json"), ("log", "--json"),
                 ("journal", "verify", "--json")):
        p = cli_bytes(store_dir, *args, cwd=ws)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        doc(p)
    text = cli_bytes(store_dir, "log", cwd=ws)                      # human output never crashes
    assert text.returncode == 0


# ------------------------------------------------ finding: undeletable file
def _undeletable(path: Path):
    if ROOT and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], check=True)
        return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)
    os.chmod(path.parent, 0o555)
    return lambda: os.chmod(path.parent, 0o755)


def test_one_undeletable_file_does_not_stop_the_rest_of_the_restore(cli, ws):
    target = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    (ws / "a.txt").write_text("edited\n")
    (ws / "stuck").mkdir()
    (ws / "stuck" / "new.txt").write_text("added later\n")
    cli("snapshot", "--json", cwd=ws)
    undo = _undeletable(ws / "stuck" / "new.txt")
    try:
        r = cli("restore", target, "--json", cwd=ws)
    finally:
        undo()
    assert (ws / "a.txt").read_text() == "alpha\n"                  # the rest was restored
    assert (ws / "stuck" / "new.txt").exists()
    assert r.rc == 1 and "incomplete" in r.json["error"]
    (item,) = [i for i in r.json["plan"] if i["path"] == "stuck/new.txt"]
    assert item["action"] == "failed"
    st = cli("journal", "status", "--json", cwd=ws).json
    assert st["gate"] == "open" and not st["unresolved"]              # a known outcome
    ev = [e for e in cli("journal", "log", "--json", cwd=ws).json["events"] if e["kind"] == "returned"][0]
    assert ev["status"] == "partial" and ev["not_restored"][0]["path"].endswith("stuck/new.txt")


# ------------------------------------- finding: validation before side effects
def test_a_refused_restore_changes_nothing_history_included(cli, ws):
    first = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    (ws / "a.txt").write_text("second\n")
    cli("snapshot", "--json", cwd=ws)
    (ws / "a.txt").write_text("unsaved edit\n")
    count, events = n_checkpoints(cli, ws), n_events(cli, ws)
    for bad in (("--path", "../x"), ("--path", ".git/config"), ("--path", "/etc/passwd")):
        r = cli("restore", "2", *bad, "--json", cwd=ws)
        assert r.rc == 1, (bad, r.stdout)
    assert n_checkpoints(cli, ws) == count and n_events(cli, ws) == events
    assert (ws / "a.txt").read_text() == "unsaved edit\n"
    r = cli("restore", "2", "--json", cwd=ws)                       # the retry means the same one
    assert r.rc == 0 and r.json["restored_checkpoint"] == first


# ------------------------------------------------------- finding: litter
@pytest.mark.process
@pytest.mark.parametrize("fault", ["mid_restore_file", "mid_restore"])
def test_a_killed_restore_leaves_no_temp_files_in_the_workspace(cli, ws, fault):
    for i in range(5):
        (ws / f"f{i}.txt").write_text(f"v1 {i}\n" * 1000)
    target = cli("snapshot", "--json", cwd=ws).json["checkpoint"]
    for i in range(5):
        (ws / f"f{i}.txt").write_text(f"v2 {i}\n")
    r = cli("restore", target, "--json", cwd=ws, fault=fault)        # killed inside a file's write
    assert r.rc == -signal.SIGKILL
    assert [p for p in everything_below(ws) if ".chronos" in p] == []
    assert cli("journal", "status", "--json", cwd=ws).rc == 0         # the next start
    assert [p for p in everything_below(ws) if ".chronos" in p] == []


@needs_root
def test_a_restore_that_fails_mid_file_leaves_no_temp_file(cli, ws, tmp_path):
    """The workspace's own disk fills up while a restore writes: no half file anywhere."""
    with tmpfs(tmp_path / "wsdisk", "4m") as mnt:
        w = mnt / "ws"
        w.mkdir()
        (w / "big.bin").write_bytes(os.urandom(2 << 20))
        env = {"CHRONOS_GIT_STORE": str(tmp_path / "store")}
        target = cli("snapshot", "--json", cwd=w, env=env).json["checkpoint"]
        (w / "big.bin").write_bytes(b"small now\n")
        fill(mnt, leave=512 * 1024)
        r = cli("restore", target, "--json", cwd=w, env=env)
        assert r.rc == 1
        (item,) = [i for i in r.json["plan"] if i["path"] == "big.bin"]
        assert item["action"] == "failed" and "space" in item["reason"].lower()
        assert (w / "big.bin").read_bytes() == b"small now\n"
        assert [p for p in everything_below(w) if ".chronos" in p] == []


def test_temp_names_are_never_captured_and_are_swept_when_their_owner_is_dead(cli, ws, store_dir):
    cli("snapshot", "--json", cwd=ws)
    (ws / "sub").mkdir()
    leftover = ws / "sub" / ".chronos-tmp-999999xdeadbeef-0"
    leftover.write_text("half a restore\n")
    manifest = store_dir / "chronos" / "inflight" / "dead.json"
    manifest.parent.mkdir(exist_ok=True)
    manifest.write_text(json.dumps({"owner": {"pid": 999999, "start_time": 1, "boot_id": "gone"},
                                    "token": "999999xdeadbeef", "workspace": str(ws), "dirs": ["sub"]}))
    (ws / "sub" / "real.txt").write_text("real\n")
    snap = cli("snapshot", "--json", cwd=ws).json
    tree = git(f"--git-dir={store_dir}", "ls-tree", "-r", "--name-only", snap["checkpoint"]).stdout
    assert "real.txt" in tree and ".chronos-tmp" not in tree           # never captured
    assert cli("journal", "status", "--json", cwd=ws).rc == 0          # the next start of the service
    assert not leftover.exists() and not manifest.exists()           # swept


# ------------------------------------------------- finding: permissions
def test_restored_files_and_directories_are_never_wider_than_they_were(cli, ws):
    (ws / "secret.env").write_text("TOKEN=1\n")
    os.chmod(ws / "secret.env", 0o600)
    (ws / "private").mkdir()
    (ws / "private" / "key").write_text("k\n")
    os.chmod(ws / "private" / "key", 0o640)
    os.chmod(ws / "private", 0o700)
    (ws / "outer" / "inner").mkdir(parents=True)         # a directory that holds only a directory
    (ws / "outer" / "inner" / "f").write_text("f\n")
    os.chmod(ws / "outer", 0o750)
    cp = cli("snapshot", "--json", cwd=ws).json["checkpoint"]     # the first: a bulk import
    os.unlink(ws / "secret.env")
    shutil.rmtree(ws / "private")
    shutil.rmtree(ws / "outer")
    r = cli("restore", cp, "--json", cwd=ws)
    assert r.rc == 0, r.stdout
    assert stat.S_IMODE(os.stat(ws / "secret.env").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ws / "private").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws / "private" / "key").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(ws / "outer").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(ws / "outer" / "inner").st_mode) == 0o755


# ----------------------------------------------------- finding: FIFOs
def _in_thread(fn, timeout: float):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the snapshot hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_file_that_becomes_a_fifo_after_listing_never_hangs_the_first_snapshot(ws, store_dir, monkeypatch):
    fifo_after_listing(monkeypatch, ws / "a.txt")
    store = Store.open(store_dir, EngineConfig())
    res = _in_thread(lambda: store.workspace(ws).snapshot(CheckpointMeta(description="first")), 20)
    assert any(s["path"] == "a.txt" and "fifo" in s["reason"] for s in res.report["skipped"])


def test_a_fifo_swapped_in_under_libgit2_never_hangs_a_snapshot(ws, store_dir, monkeypatch):
    from chronos_git.engine import scan
    store = Store.open(store_dir, EngineConfig())
    w = store.workspace(ws)
    w.snapshot(CheckpointMeta(description="base"))
    (ws / "a.txt").write_text("changed\n")
    real_visit = scan.Scanner.visit

    def visit_then_swap(self, rel):
        verdict = real_visit(self, rel)
        if rel == "a.txt":                  # after our own type check, before libgit2 opens it
            os.unlink(ws / "a.txt")
            os.mkfifo(ws / "a.txt")
        return verdict

    monkeypatch.setattr(scan.Scanner, "visit", visit_then_swap)
    res = _in_thread(lambda: w.snapshot(CheckpointMeta(description="after")), 20)
    assert res.checkpoint is not None


def test_the_fifo_guard_releases_libgit2_blocked_on_a_fifo(tmp_path):
    """libgit2 opens work-tree files with plain O_RDONLY (a FIFO blocks it for good): the guard
    that every snapshot runs under lets the open go and the scan then skips the path."""
    from chronos_git.engine import fifo_guard
    w = tmp_path / "w"
    w.mkdir()
    os.mkfifo(w / "ff")
    repo = pygit2.init_repository(str(w))

    def add():
        with fifo_guard.watching(os.fsencode(w)):
            repo.index.add("ff")
        return True
    assert _in_thread(add, 10)


def test_special_files_are_listed_in_skipped_with_their_kind(cli, ws):
    os.mkfifo(ws / "pipe")
    import socket
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock"))
    try:
        r = cli("snapshot", "--json", cwd=ws)
    finally:
        sock.close()
    reasons = {s["path"]: s["reason"] for s in r.json["skipped"]}
    assert reasons["pipe"] == "special_file: fifo" and reasons["sock"] == "special_file: socket"


# ----------------------------------------------- finding: full disk, read-only
class tmpfs:
    """A small tmpfs mounted for the test (root only)."""

    def __init__(self, path: Path, size: str):
        self.path, self.size = path, size

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        return self.path

    def __exit__(self, *exc):
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


def fill(mnt: Path, leave: int = 0) -> None:
    """Fill the filesystem at `mnt`, leaving about `leave` bytes."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as fh:
        try:
            fh.write(b"\0" * max(0, free - leave))
        except OSError:
            pass
    if not leave:
        n = 0
        while True:
            try:
                (mnt / f"f{n}").write_bytes(b"x" * 1024)
            except OSError:
                break
            n += 1


@needs_root
def test_a_full_disk_still_reads_and_says_why_it_cannot_write(cli, ws, tmp_path):
    with tmpfs(tmp_path / "small", "8m") as mnt:
        store = mnt / "store"
        env = {"CHRONOS_GIT_STORE": str(store)}
        assert cli("snapshot", "--json", cwd=ws, env=env).rc == 0
        assert cli("journal", "status", "--json", cwd=ws, env=env).rc == 0     # the journal exists
        (ws / "a.txt").write_text("edited\n")
        fill(mnt)
        before = tree_fingerprint(store)
        for args in (("journal", "status"), ("journal", "verify"), ("log",), ("diff",), ("health",)):
            r = cli(*args, "--json", cwd=ws, env=env)
            assert r.rc == 0, (args, r.stdout, r.stderr)
        assert tree_fingerprint(store) == before                    # nothing written by reading
        assert cli("diff", "--json", cwd=ws, env=env).json["files"][0]["path"] == "a.txt"
        h = cli("health", "--json", cwd=ws, env=env).json
        assert h["protection"]["state"] == "off" and "full" in h["protection"]["reason"]
        w = cli("write", "b.txt", "--content", "x", "--json", cwd=ws, env=env)
        assert w.rc == 1 and "full" in w.json["error"] and str(mnt) in w.json["error"]
        assert "no error" not in w.json["error"].lower()
        assert not (ws / "b.txt").exists()


@needs_root
def test_run_exits_4_when_its_outcome_cannot_be_recorded(cli, ws, tmp_path):
    with tmpfs(tmp_path / "small", "8m") as mnt:
        env = {"CHRONOS_GIT_STORE": str(mnt / "store")}
        assert cli("snapshot", "--json", cwd=ws, env=env).rc == 0
        filler = f"import os; open('{mnt}/filler','wb').write(b'\\0' * (64 << 20))"
        r = cli("run", "--json", "--", sys.executable, "-c",
                f"try:\n    {filler}\nexcept OSError:\n    pass\n", cwd=ws, env=env)
        assert r.rc == 4, r.stdout + r.stderr
        assert r.json["status"] == "error" and "could not be recorded" in r.json["error"]


@needs_root
def test_a_read_only_store_still_answers_every_read(cli, ws, tmp_path):
    with tmpfs(tmp_path / "ro", "16m") as mnt:
        env = {"CHRONOS_GIT_STORE": str(mnt / "store")}
        assert cli("snapshot", "--json", cwd=ws, env=env).rc == 0
        assert cli("run", "--json", "--", "true", cwd=ws, env=env).rc == 0
        (ws / "a.txt").write_text("edited\n")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        for args in (("journal", "status"), ("journal", "verify"), ("log",), ("diff",), ("health",)):
            r = cli(*args, "--json", cwd=ws, env=env)
            assert r.rc == 0, (args, r.stdout, r.stderr)
        h = cli("health", "--json", cwd=ws, env=env).json
        assert h["protection"]["state"] == "off" and "read-only" in h["protection"]["reason"]
        w = cli("snapshot", "--json", cwd=ws, env=env)
        assert w.rc == 1 and "read-only" in w.json["error"]


# -------------------------------------------------------- finding: settings
@pytest.mark.process
def test_store_dir_with_a_tilde_means_the_home_directory_everywhere(cli, ws, tmp_path):
    home = tmp_path / "home"
    hermes = tmp_path / "hermes"
    home.mkdir()
    hermes.mkdir()
    (hermes / "config.yaml").write_text(
        "plugins:\n  entries:\n    chronos-git:\n      settings:\n        store_dir: ~/chronos-store\n")
    env = {"HOME": str(home), "HERMES_HOME": str(hermes), "CHRONOS_GIT_STORE": ""}
    r = cli("snapshot", "--json", cwd=ws, env=env)
    assert r.rc == 0, r.stdout + r.stderr
    assert (home / "chronos-store" / "HEAD").exists()
    assert not (ws / "~").exists() and not Path("~").exists()
    from chronos_git.settings import Settings, store_location
    assert store_location(Settings(store_dir="~/chronos-store")).is_relative_to(Path.home())


def test_read_only_commands_never_create_a_store(cli, ws, tmp_path):
    nowhere = tmp_path / "no-store-here"
    for args in (("log",), ("health",)):
        r = cli(*args, "--json", cwd=ws, env={"CHRONOS_GIT_STORE": str(nowhere)})
        assert r.rc == 0, r.stdout
        assert not nowhere.exists()
    assert cli("health", "--json", cwd=ws, env={"CHRONOS_GIT_STORE": str(nowhere)}).json["store_exists"] is False


@pytest.mark.parametrize("config,needle", [
    ("plugins: [unclosed\n", "not valid YAML"),
    ("plugins:\n  entries:\n    chronos-git:\n      settings: [1, 2]\n", "must be a mapping"),
    ("plugins:\n  entries:\n    chronos-git:\n      settings:\n        max_checkpoints: many\n",
     "settings.max_checkpoints"),
    ("plugins:\n  entries:\n    chronos-git:\n      settings:\n        store_dir: relative/dir\n",
     "settings.store_dir"),
])
def test_a_config_that_cannot_be_used_is_reported_naming_the_file_and_key(cli, ws, tmp_path, config, needle):
    hermes = tmp_path / "hermes"
    hermes.mkdir()
    (hermes / "config.yaml").write_text(config)
    env = {"HERMES_HOME": str(hermes)}
    r = cli("snapshot", "--json", cwd=ws, env=env)
    assert r.rc == 1 and needle in r.json["error"] and str(hermes / "config.yaml") in r.json["error"]
    h = cli("health", "--json", cwd=ws, env=env)
    assert h.rc == 0 and any(needle in p for p in h.json["settings_problems"])


def test_ignore_rules_apply_to_names_that_are_not_utf8(ws, store_dir):
    """pygit2's ignore check only takes UTF-8: such names are asked of libgit2 directly."""
    root = os.fsencode(ws)
    with open(os.path.join(root, b".gitignore"), "wb") as fh:
        fh.write(b"caf\xe9*\n")
    for name in (b"caf\xe9.log", b"keep\xe9.txt"):
        with open(os.path.join(root, name), "wb") as fh:
            fh.write(b"x")
    os.mkdir(os.path.join(root, b"d\xff"))
    os.mkfifo(os.path.join(root, b"d\xff", b"pipe"))
    store = Store.open(store_dir, EngineConfig())
    res = store.workspace(ws).snapshot(CheckpointMeta(description="t"))
    names = {os.fsencode(e.path) for e in pygit2.Repository(str(store.workspace(ws).gitdir)).index}
    assert b"keep\xe9.txt" in names and b"caf\xe9.log" not in names
    assert any(s["path"] == os.fsdecode(b"d\xff/pipe") and "fifo" in s["reason"] for s in res.report["skipped"])
