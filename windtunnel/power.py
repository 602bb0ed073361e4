"""What a power cut leaves of data that was never fsynced, and a disk that really fills up.

A power cut loses what sat in the page cache: a file whose data was not
flushed comes back empty (its size written, its blocks not: ext4 with
delayed allocation) or as zeros.  `cut` does that to what chronos-git leaves
un-fsynced on purpose (snapshot objects, refs and the stat cache when
`durable_snapshots` is off; the stat cache and the journal objects and ref the
witness carries, always; a loose copy of a journal object its sync packed, whose
unlink the cut lost) and, as the control, to the witness, which is fsynced and
whose damage must be noticed.  `unpublished` is a cut before the newest journal
events were published: their objects never written, the ref at the witness's base.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pygit2

from ..engine.powercut import MARKER
from ..journal_refs.carried import loose_bytes
from ..journal_refs.events import canonical
from ..journal_refs.journal import REF
from ..journal_refs.witness import WitnessFile, read_doc, witness_path_for
from .scenario import Findings, Scenario


def _journal_objects(store: Path) -> set[str]:
    """Every object the journal reaches: synced or carried by the witness (the `journal`
    target damages what is carried)."""
    repo = pygit2.Repository(str(store))
    ref = repo.references.get("refs/chronos/journal")
    seen: set[str] = set()
    stack = [ref.target] if ref is not None else []
    while stack:
        oid = stack.pop()
        if str(oid) in seen:
            continue
        seen.add(str(oid))
        obj = repo[oid]
        if isinstance(obj, pygit2.Commit):
            stack += list(obj.parent_ids) + [obj.tree_id]
        elif isinstance(obj, pygit2.Tree):
            stack += [e.id for e in obj]
    return seen


def _damage(path: Path, how: str, rng) -> None:
    os.chmod(path, 0o600)
    size = path.stat().st_size
    if how == "truncate":
        os.truncate(path, 0 if rng.random() < 0.5 else size // 2)
    else:                                            # zero: the size made it, the blocks did not
        keep = rng.randint(0, size // 2) if size else 0
        with open(path, "r+b") as fh:
            fh.seek(keep)
            fh.write(b"\0" * (size - keep))


def cut(s: Scenario, target: str, rng) -> list[Path]:
    what, how = target.rsplit("_", 1)
    store = s.store
    if what == "loose":
        keep = _journal_objects(store)
        loose = [p for p in (store / "objects").glob("??/*")
                 if p.parent.name + p.name not in keep]
        victims = sorted(loose, key=lambda p: p.stat().st_mtime_ns)[-rng.randint(1, 4):]
    elif what == "pack":
        keep = _journal_objects(store)
        # only packs nothing durable lives in: the bulk import's (compaction packs are fsynced)
        victims = []
        for pack in sorted((store / "objects" / "pack").glob("*.pack"), key=lambda p: p.stat().st_mtime_ns):
            idx = pack.with_suffix(".idx")
            names = _pack_objects(idx)
            if names and not names & keep:
                victims = [pack] if rng.random() < 0.7 else [pack, idx]
    elif what == "ref":
        refs = sorted((store / "refs" / "chronos" / "snapshots").glob("*"))
        victims = refs[-1:] if rng.random() < 0.5 else refs
    elif what == "index":
        victims = sorted((store / "worktrees").glob("*/index"))
    elif what == "journal":
        # what the witness carries was never fsynced: its loose objects and the journal ref
        carried = json.loads(read_doc(witness_path_for(store))).get("carried") or {}
        objs = [store / "objects" / o[:2] / o[2:] for o in carried]
        objs = [p for p in objs if p.exists()]
        victims = rng.sample(objs, min(len(objs), rng.randint(1, 6)))
        if (store / REF).exists() and (not victims or rng.random() < 0.5):
            victims.append(store / REF)
    elif what == "stale":
        # the journal's sync packed them and deleted their loose copies; the cut lost an unlink
        # of a copy never written back: the loose file returns, empty or zeroed, beside the pack
        repo = pygit2.Repository(str(store))
        packed = sorted(o for o in _journal_objects(store)
                        if not (store / "objects" / o[:2] / o[2:]).exists() and o in repo.odb)
        victims = []
        for oid in rng.sample(packed, min(len(packed), rng.randint(1, 4))):
            path = store / "objects" / oid[:2] / oid[2:]
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(loose_bytes(repo, oid))       # then damaged below, as a cut leaves it
            victims.append(path)
    elif what == "unpublished":
        # the cut came before the newest events were published (journal_refs/publish.py):
        # their loose objects were never written and the ref still names the witness's base
        victims = _unpublish(store)
        s.witness_head = witness_head(store)
        reboot(store)
        return victims
    elif what == "witness":
        w = witness_path_for(store)
        victims = [w] if w.exists() else []
        if victims:
            s.witness_head = witness_head(store)     # what the store depends on
        if victims and how == "zero":
            _zero_newest_record(w, rng)
            return victims
    else:
        raise ValueError(target)
    for p in victims:
        _damage(p, how, rng)
    reboot(store)
    return victims


def _unpublish(store: Path) -> list[Path]:
    """Remove the loose objects of the events after the witness's `base` (those it carries)
    and point the ref back at `base`: what a cut before publication leaves."""
    w = json.loads(read_doc(witness_path_for(store)) or b"{}")
    base, head, carried = w.get("base"), w.get("head"), w.get("carried") or {}
    if not (base and head and head in carried):
        return []
    repo = pygit2.Repository(str(store))
    gone, cid = [], head
    while cid and cid != base and cid in carried:
        commit = repo[cid]
        tree = repo[commit.tree_id]
        for oid in (cid, str(commit.tree_id), str(tree["state.json"].id)):
            p = store / "objects" / oid[:2] / oid[2:]
            if oid in carried and p.exists():
                os.chmod(p, 0o600)
                p.unlink()
                gone.append(p)
        cid = str(commit.parent_ids[0]) if commit.parent_ids else None
    if cid != base:
        return []
    (store / REF).write_text(base + "\n")
    return gone + [store / REF]


def witness_head(store: Path) -> str | None:
    """The head the witness's newest whole record names (None if it has none)."""
    try:
        return json.loads(read_doc(witness_path_for(store))).get("head")
    except (OSError, ValueError, AttributeError):
        return None


def _zero_newest_record(path: Path, rng) -> None:
    """Zero the witness's newest record from a random point inside it to the end of its slot.
    The other slot only holds the superseded record: zeroing that one is what a torn write
    leaves, and harmless (tests/journal/test_witness.py)."""
    wf = WitnessFile(path)
    wf.read()
    k, slot = wf.newest_slot()
    raw = path.read_bytes()
    start = k * slot + rng.randint(0, max(raw.find(b"\n", k * slot) - k * slot + 64, 1))
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(b"\0" * ((k + 1) * slot - start))


def reboot(store: Path) -> None:
    """What the machine's restart after the cut looks like to the store: the boot id it and
    the witness recorded is not this boot's."""
    marker = store / "chronos" / MARKER
    if marker.exists():
        marker.write_text(json.dumps({"boot_id": "the boot before the power cut"}))
    w = WitnessFile(witness_path_for(store))
    try:
        raw, torn = w.read() or (b"null", False)
        doc = json.loads(raw)
    except (OSError, ValueError):
        return
    if torn:
        return                                       # a damaged witness stays as damaged
    if isinstance(doc, dict) and doc.get("boot"):
        doc["boot"] = "the boot before the power cut"
        w.write(canonical(doc).encode())


def _pack_objects(idx: Path) -> set[str]:
    try:
        out = subprocess.run(["git", "show-index"], stdin=idx.open("rb"), capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {line.split()[1] for line in out.splitlines() if len(line.split()) >= 2}


def full_tmpfs(s: Scenario, rng) -> Findings:
    """A store on a real 3 MiB tmpfs, filled by the victim until writes fail (ENOSPC)."""
    out = Findings()
    mnt = Path(tempfile.mkdtemp(prefix="chronos-windtunnel-tmpfs-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        out.reached = False
        out.note = f"no tmpfs: {mounted.stderr.strip()}"
        shutil.rmtree(mnt, ignore_errors=True)
        return out
    try:
        s.store = mnt / "store"
        big = os.urandom(512 * 1024)
        for i in range(7):                             # incompressible files that outgrow the disk
            (s.ws / f"big{i}.bin").write_bytes(big[i:] + big[:i])
        c = s.child(ops=30, only=("write", "multi", "shell", "snapshot"))
        acks = s.acknowledged()
        full = [a for a in acks if a.get("error") and a["error"].get("code") in ("os_error", "store_unwritable",
                                                                                   "journal", None)]
        out.reached = any(a.get("error") for a in acks)
        out.note = f"{len(full)} of {len(acks)} operation(s) answered 'disk full'"
        if c.rc != 0:
            out.breach("unclear_errors", f"the victim died on a full disk: {c.stderr.strip()[-300:]}")
        # make room, as an operator would, then the next start must verify and carry on
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], capture_output=True, check=True)
        out.merge(s.check(s.next_start()))
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)
    return out
