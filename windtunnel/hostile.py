"""The input suite: the hostile-input classes of the hardening work as a regression matrix.

Each class builds its trap in the scenario's workspace, then drives the service the way
every surface does.  Checked for each: nothing is written outside the workspace (a
sentinel folder beside it is fingerprinted before and after), no operation hangs (each
runs under a deadline), every refusal is a clear error (never `internal`), the bytes
the user had are still there or in a checkpoint, and then the usual invariants.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pygit2

from ..service.errors import envelope
from .scenario import Findings, Scenario

DEADLINE = 30.0     # seconds for one operation; a hang is a breach, not a stuck run


class Probe:
    """The service plus the bookkeeping of one class."""

    def __init__(self, s: Scenario, out: Findings):
        self.s, self.out = s, out
        self.ws = str(s.ws)
        self.outside = s.root / "outside"
        self.outside.mkdir(exist_ok=True)
        (self.outside / "keep.txt").write_text("the user's file outside the workspace\n")
        self.svc = s.next_start()
        self.svc.snapshot(self.ws, "baseline")

    def call(self, what: str, fn: Callable, *, refused: bool | None = None):
        """Run `fn` under the deadline: its result, or None when it raised (a clear error
        is expected when `refused`, an error at all is a breach when `refused` is False)."""
        box: dict = {}

        def target():
            try:
                box["value"] = fn()
            except BaseException as exc:           # noqa: BLE001 - every failure is classified
                box["error"] = exc
        t = threading.Thread(target=target, daemon=True)
        t.start()
        t.join(DEADLINE)
        if t.is_alive():
            self.out.breach("hangs", f"{what} did not return within {DEADLINE:.0f} s")
            return None
        exc = box.get("error")
        if exc is None:
            if refused:
                self.out.breach("escapes", f"{what} was accepted; it must be refused")
            return box.get("value")
        answer, _rc, _http = envelope(exc, str(self.s.store))
        if answer.code == "internal" or not answer.error:
            self.out.breach("unclear_errors", f"{what}: {answer.error[:300]}")
        elif refused is False:
            self.out.breach("unclear_errors", f"{what} failed: {answer.error[:300]}")
        return None

    def outside_fingerprint(self) -> str:
        return fingerprint(self.outside)


def fingerprint(root: Path) -> str:
    """Names, kinds, modes and bytes of everything below `root` (links not followed)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(os.fsencode(root)):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(p + b"\0%o\0" % st.st_mode)
            if os.path.islink(p):
                h.update(os.readlink(p))
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


# ------------------------------------------------------------------ classes
def symlinked_directory(p: Probe) -> None:
    """A directory of the checkpoint since replaced by a link to a folder outside."""
    ws = p.s.ws
    (ws / "linked").mkdir(exist_ok=True)
    (ws / "linked" / "inner.txt").write_text("inside\n")
    cp = p.svc.snapshot(p.ws, "with a real directory").checkpoint
    for f in (ws / "linked").iterdir():
        f.unlink()
    (ws / "linked").rmdir()
    (ws / "linked").symlink_to(p.outside, target_is_directory=True)
    p.call("restore --no-clean through a symlinked directory",
           lambda: p.svc.restore(p.ws, cp, clean=False, force=True))
    p.call("restore --path through a symlinked directory",
           lambda: p.svc.restore(p.ws, cp, paths=["linked/inner.txt"], clean=False, force=True))


def _plant(p: Probe, name: bytes, inner: list[bytes]) -> str:
    """A commit on the workspace's snapshot ref whose tree holds an attacker's entry."""
    repo = pygit2.Repository(str(p.s.store))
    ref = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")][0]
    tip = repo.references[ref].peel(pygit2.Commit)
    mode, raw = b"100644", repo.create_blob(b"#!/bin/sh\necho pwned\n").raw
    for part in reversed(inner[1:]):
        body = mode + b" " + part + b"\0" + raw
        mode, raw = b"40000", repo.odb.write(pygit2.GIT_OBJECT_TREE, body).raw
    entries = [(b"%o" % e.filemode, os.fsencode(e.name), e.id.raw) for e in tip.tree] + [(mode, name, raw)]
    body = b"".join(m + b" " + n + b"\0" + r for m, n, r in sorted(entries, key=lambda t: t[1]))
    tree = repo.odb.write(pygit2.GIT_OBJECT_TREE, body)
    sig = pygit2.Signature("attacker", "a@example.invalid")
    return str(repo.create_commit(ref, sig, sig, tip.message, tree, [tip.id]))


def crafted_tree(p: Probe) -> None:
    """Tree entries `..`, `.git`, `.GIT` and a name with a slash on the snapshot ref."""
    git_dir = p.s.ws / ".git"
    (git_dir / "hooks").mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    before = fingerprint(git_dir)
    for name, inner in ((b"..", [b"..", b"escaped.txt"]), (b".git", [b".git", b"hooks", b"pre-commit"]),
                        (b".GIT", [b".GIT", b"hooks", b"post-checkout"]), (b"a/b", [b"a/b"])):
        bad = _plant(p, name, inner)
        p.call(f"restore of a tree with an entry {name!r}", lambda: p.svc.restore(p.ws, bad, force=True),
               refused=True)
        # the planted commit stays the newest on the ref: move past it for the next class
        p.svc.snapshot(p.ws, "after the planted commit")
    v = p.svc.journal_verify()
    if v.status == "ok" or "'..'" not in (v.error or ""):
        p.out.breach("integrity", f"journal verify did not name the planted entries: {v.error}")
    if fingerprint(git_dir) != before:
        p.out.breach("escapes", "a crafted tree changed the user's .git")
    if (p.s.root / "escaped.txt").exists():
        p.out.breach("escapes", "a crafted tree wrote beside the workspace")


def non_utf8_names(p: Probe) -> None:
    """Names Linux allows that are not UTF-8, with control characters, and of 255 bytes."""
    names = [b"caf\xe9.txt", b"tab\there.txt", b"new\nline.txt", b"esc\x1b[31m.txt", b"x" * 251 + b".txt",
             b"\xff\xfe dir/inner.txt"]
    root = os.fsencode(p.s.ws)
    for n in names:
        path = os.path.join(root, n)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"original " + n + b"\n")
    cp = p.call("snapshot with hostile names", lambda: p.svc.snapshot(p.ws, "hostile names"), refused=False)
    if cp is None:
        return
    for n in names:
        with open(os.path.join(root, n), "wb") as f:
            f.write(b"changed\n")
    p.call("write_file to a non-UTF-8 name",
           lambda: p.svc.write_file(p.ws, os.fsdecode(b"caf\xe9.txt"), b"written\n"), refused=False)
    p.call("diff over hostile names", lambda: p.svc.diff(p.ws, cp.checkpoint), refused=False)
    p.call("restore of hostile names", lambda: p.svc.restore(p.ws, cp.checkpoint, force=True), refused=False)
    for n in names:
        with open(os.path.join(root, n), "rb") as f:
            if f.read() != b"original " + n + b"\n":
                p.out.breach("torn_paths", f"{n!r} was not restored")
    p.call("journal over hostile names", lambda: p.svc.journal_log(50), refused=False)


def special_files(p: Probe) -> None:
    """A FIFO as a file and as the .gitignore of a subfolder that has a folder of its own (each
    path below it is asked of libgit2, which opens that .gitignore); a socket-free device-free tree."""
    os.mkfifo(p.s.ws / "pipe")
    (p.s.ws / "sub" / "deeper").mkdir(parents=True, exist_ok=True)
    os.mkfifo(p.s.ws / "sub" / ".gitignore")
    (p.s.ws / "sub" / "real.txt").write_text("real\n")
    (p.s.ws / "sub" / "deeper" / "inner.txt").write_text("inner\n")
    cp = p.call("snapshot with FIFOs", lambda: p.svc.snapshot(p.ws, "fifos"), refused=False)
    p.call("diff with FIFOs", lambda: p.svc.diff(p.ws), refused=False)
    if cp is not None:
        p.call("restore with FIFOs", lambda: p.svc.restore(p.ws, cp.checkpoint, force=True), refused=False)


def deep_nesting(p: Probe) -> None:
    """Directories nested deeper than anyone writes by hand (git itself refuses some)."""
    deep = p.s.ws / "deep"
    cur = os.fsencode(deep)
    for i in range(150):
        cur = os.path.join(cur, b"d%d" % i)
    os.makedirs(cur)
    with open(os.path.join(cur, b"bottom.txt"), "wb") as f:
        f.write(b"bottom\n")
    p.call("snapshot of a deep tree", lambda: p.svc.snapshot(p.ws, "deep"))
    p.call("diff of a deep tree", lambda: p.svc.diff(p.ws))


def outside_paths(p: Probe) -> None:
    """Paths that leave the workspace, through every operation that takes one."""
    cp = p.svc.log(p.ws, 1).checkpoints[0].id
    for bad in ("../escaped.txt", "/etc/chronos-escaped", "a/../../escaped.txt", "", ".", "x\0y"):
        p.call(f"write_file {bad!r}", lambda: p.svc.write_file(p.ws, bad, b"x\n"), refused=True)
        p.call(f"restore --path {bad!r}", lambda: p.svc.restore(p.ws, cp, paths=[bad], force=True), refused=True)
    (p.s.ws / "out").symlink_to(p.outside, target_is_directory=True)
    p.call("write_file through a symlink", lambda: p.svc.write_file(p.ws, "out/keep.txt", b"pwned\n"),
           refused=True)
    if (p.s.root / "escaped.txt").exists():
        p.out.breach("escapes", "a path outside the workspace was written")


def bad_roots(p: Probe) -> None:
    """Workspaces that cannot be one: missing, a file, the store itself, the filesystem root."""
    f = p.s.root / "a-file"
    f.write_text("not a folder\n")
    for root in (str(p.s.root / "missing"), str(f), str(p.s.store), "/", ""):
        p.call(f"snapshot of workspace {root!r}", lambda: p.svc.snapshot(root, "bad root"), refused=True)


def hostile_settings(p: Probe) -> None:
    """Settings values a careless or malicious config holds: each named, none used."""
    from .. import settings
    for values in ({"max_checkpoints": -1}, {"max_checkpoints": "many"}, {"size_budget_mb": 10**30},
                   {"store_dir": "\0"}, {"no_such_key": 1}, {"exclude": "*.log"}):
        try:
            settings.Settings(**values)
        except (ValueError, TypeError):
            continue
        p.out.breach("escapes", f"settings {values} were accepted")


def damaged_metadata(p: Probe) -> None:
    """Checkpoint commits whose metadata lacks a field, has a wrong-typed or an unknown one or
    is not there at all, then a ref that names a blob: every surface answers, the damage is
    named, an intact checkpoint still restores, a protected call still gets its checkpoint,
    the gate stays open (damaged metadata is no journal problem) and a snapshot mends the ref."""
    intact = p.svc.log(p.ws, 1).checkpoints[0].id
    repo = pygit2.Repository(str(p.s.store))
    ref = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")][0]
    tip = repo.references[ref].peel(pygit2.Commit)
    lines = tip.message.rstrip("\n").split("\n")
    meta = json.loads(lines[-1])
    sig = pygit2.Signature("attacker", "a@example.invalid")
    planted = []
    for change in ({"description": None}, {"files": "many", "surprise": 1}, {"time": "yesterday"}, None):
        if change is None:
            message = "not a checkpoint at all\n"
        else:
            fields = {k: v for k, v in {**meta, **change}.items() if v is not None}
            message = "\n".join(lines[:-1] + [json.dumps(fields)]) + "\n"
        parent = repo.references[ref].target
        planted.append(str(repo.create_commit(ref, sig, sig, message, tip.tree_id, [parent])))
    log = p.call("log over damaged metadata", lambda: p.svc.log(p.ws, 10), refused=False)
    if log is not None and any(c.id in planted and not c.damaged for c in log.checkpoints):
        p.out.breach("unclear_errors", "log did not mark a checkpoint whose metadata is damaged")
    for cid in planted:
        p.call(f"show {cid[:8]}", lambda cid=cid: p.svc.show(p.ws, cid), refused=False)
    p.call("diff over damaged metadata", lambda: p.svc.diff(p.ws), refused=False)
    p.call("restore --dry-run of an intact checkpoint",
           lambda: p.svc.restore(p.ws, intact, dry_run=True), refused=False)
    health = p.call("health over damaged metadata", lambda: p.svc.health(p.ws), refused=False)
    named = {d.id for d in (health.damaged or ())} if health is not None else set()
    if health is not None and (health.protection.state != "degraded" or not set(planted) <= named):
        p.out.breach("unclear_errors", f"health did not name the damage: {health.protection.state}, {named}")
    if health is not None and health.gate != "open":
        p.out.breach("integrity", "damaged checkpoint metadata closed the gate")
    w = p.call("a protected call past damaged metadata",
               lambda: p.svc.write_file(p.ws, "after-damage.txt", b"written\n"), refused=False)
    if w is not None and not w.pre_checkpoint:
        p.out.breach("integrity", f"a protected call ran without a checkpoint: {w.snapshot}")
    blob = repo.create_blob(b"not a checkpoint\n")
    (p.s.store / ref).write_text(f"{blob}\n")
    health = p.call("health over a ref that names a blob", lambda: p.svc.health(p.ws), refused=False)
    if health is not None and not any(d.ref for d in health.damaged or ()):
        p.out.breach("unclear_errors", "health did not name a ref that names a blob")
    (p.s.ws / "after-ref.txt").write_text("changed\n")
    snap = p.call("snapshot over a ref that names a blob", lambda: p.svc.snapshot(p.ws, "mends the ref"),
                  refused=False)
    if snap is not None and (snap.damaged_tip is None or str(repo.references[ref].target) != snap.checkpoint):
        p.out.breach("integrity", "the snapshot did not replace the ref that named a blob")
    p.call("restore --dry-run after the ref was mended",
           lambda: p.svc.restore(p.ws, intact, dry_run=True), refused=False)


CLASSES: dict[str, Callable[[Probe], None]] = {
    "symlinked directory": symlinked_directory, "crafted checkpoint tree": crafted_tree,
    "non-UTF-8, control and long names": non_utf8_names, "FIFOs and a FIFO .gitignore": special_files,
    "deeply nested directories": deep_nesting, "paths outside the workspace": outside_paths,
    "bad workspace roots": bad_roots, "hostile settings": hostile_settings,
    "damaged_metadata": damaged_metadata,
}


# classes that leave attacker objects in the store on purpose: there, `journal verify`
# and `git fsck` must *report* them (checked by the class), not come out clean
PLANTED = {"crafted checkpoint tree"}


def run(s: Scenario, name: str) -> Findings:
    out = Findings()
    p = Probe(s, out)
    before = p.outside_fingerprint()
    CLASSES[name](p)
    if p.outside_fingerprint() != before:
        out.breach("escapes", "something outside the workspace changed")
    planted = name in PLANTED
    out.merge(s.check(s.next_start(), expect_integrity=not planted, fsck=not planted))
    out.note = f"{len(out.breaches)} breach(es)"
    return out
