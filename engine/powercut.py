"""After an unclean reboot: check what was never fsynced before libgit2 reads it.

With `durable_snapshots` off (the default) snapshot objects, checkpoint refs,
workspace HEADs and stat caches are written without fsync, so a power cut can
leave them empty, half written or zeroed.  The journal loses nothing: its
witness is fsynced and carries the objects not yet synced, which the journal
writes back after a reboot (journal_refs/carried.py).

Two reasons to look before anyone reads: libgit2 1.9 loops forever inflating
a truncated loose object (libgit2 issue 7342, fixed upstream after the
release pygit2 ships), and a checkpoint whose objects are gone must not stay
the baseline the next snapshot builds on (its stat cache would vouch for
blobs that no longer exist).  So once per boot (the kernel's boot id, kept in
`<store>/chronos/boot.json`) `after_reboot` inflates every loose object in
Python, checks every pack's trailer, every snapshot ref and every stat cache,
moves damaged objects to `<store>/chronos/quarantine/`, points each damaged
checkpoint chain back at its newest complete checkpoint, and says what it did.
"""
from __future__ import annotations

import hashlib
import os
import time
import zlib
from pathlib import Path

import pygit2

from . import loose
from .checkpoint import message_of
from .fsutil import atomic_write
from .state_file import StateFile
from .wording import plural

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MARKER = "boot.json"
_HEX = set("0123456789abcdef")


def current_boot() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def loose_object_ok(path: Path | str) -> bool:
    """A loose object is whole: it inflates to the end, its header fits, its name is its hash.
    One found whole, or written by this process, is not read again while its file is the same
    (engine/loose.py `WHOLE`: inode, size, mtime, ctime): a listing of 10,000 checkpoints would
    otherwise inflate each on every call."""
    key = str(path)
    if not os.access(key, os.F_OK):         # packed (a long chain mostly is): no exception raised and caught
        return True                         # (a stat that fails costs 2.5x); unreadable: libgit2 says so
    try:
        st = os.stat(key)
    except FileNotFoundError:
        return True                         # packed meanwhile: not ours to judge
    except OSError:
        return False
    at = loose.stamp(st)
    if loose.WHOLE.get(key) == at:
        return True
    ok = _whole(Path(path))
    if ok:
        loose.know_whole(key, at)
    return ok


def _whole(path: Path) -> bool:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return True                         # packed meanwhile: not ours to judge
    d = zlib.decompressobj()
    try:
        data = d.decompress(raw)
    except zlib.error:
        return False
    if not d.eof:
        return False                        # truncated: exactly what makes libgit2 spin
    head, sep, body = data.partition(b"\0")
    parts = head.split(b" ")
    if not sep or len(parts) != 2 or parts[0] not in (b"blob", b"tree", b"commit", b"tag") \
            or not parts[1].isdigit() or int(parts[1]) != len(body):
        return False
    return hashlib.sha1(data).hexdigest() == path.parent.name + path.name


def _pack_ok(pack: Path) -> bool:
    """The pack's trailer is the SHA-1 of everything before it, and its index exists."""
    try:
        size = pack.stat().st_size
        if size < 32 or not pack.with_suffix(".idx").exists():
            return False
        h = hashlib.sha1()
        with open(pack, "rb") as fh:
            left = size - 20
            while left > 0:
                chunk = fh.read(min(left, 1 << 22))
                if not chunk:
                    return False
                h.update(chunk)
                left -= len(chunk)
            return fh.read(20) == h.digest()
    except OSError:
        return False


def _index_ok(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return True
    return len(data) >= 32 and data[:4] == b"DIRC" and hashlib.sha1(data[:-20]).digest() == data[-20:]


def _quarantine(store, path: Path, kind: str) -> None:
    dest = store.meta_dir / "quarantine" / kind / f"{int(time.time())}-{path.parent.name}-{path.name}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, dest)


def sweep(store, *, journal_checkpoints=None, refuse=None) -> dict:
    """Check and repair what a power cut can damage; the report lists every change.

    `journal_checkpoints()` (called once the damaged objects are out of the way)
    gives {workspace root: [checkpoint ids, newest first]} from the journal.
    `refuse()`, asked once before the first change (a quarantine or a chain moved back),
    returns why this must not be repaired (no reboot happened), or None: the report then
    says `refused` and nothing was changed."""
    report: dict = {"objects_quarantined": [], "packs_quarantined": [], "indexes_dropped": 0, "refs_repaired": []}
    objects = store.root / "objects"
    bad_loose = [f for d in sorted(objects.glob("[0-9a-f][0-9a-f]")) for f in sorted(d.iterdir())
                 if len(f.name) == 38 and not loose_object_ok(f)]
    bad_packs = [p for p in sorted((objects / "pack").glob("pack-*.pack")) if not _pack_ok(p)]
    if refuse is not None and (bad_loose or bad_packs):
        why = refuse()
        if why:
            return {**report, "refused": why, "objects_damaged": [f.parent.name + f.name for f in bad_loose],
                    "packs_damaged": [p.name for p in bad_packs]}
        refuse = None
    for f in bad_loose:
        _quarantine(store, f, "objects")
        report["objects_quarantined"].append(f.parent.name + f.name)
    for pack in bad_packs:
        idx = pack.with_suffix(".idx")
        _quarantine(store, pack, "packs")
        if idx.exists():
            _quarantine(store, idx, "packs")
        report["packs_quarantined"].append(pack.name)
    store.forget_repos()
    repo = pygit2.Repository(str(store.root))
    # a damaged loose copy of an object a pack holds (the journal's sync deletes loose copies
    # once they are packed; a power cut can lose that unlink) loses nothing
    damaged_objects = bool(report["packs_quarantined"]
                           or any(oid not in repo.odb for oid in report["objects_quarantined"]))
    known = None
    for ws in store.workspaces():
        target, readable = _ref_target(store, ws)
        if readable and (target is None or _complete(repo, target)):
            fix = None
        else:
            if refuse is not None:
                why, refuse = refuse(), None
                if why:
                    report["refused"] = why
            if report.get("refused"):          # nothing moves back without a reboot
                report.setdefault("refs_not_repaired", []).append(
                    {"workspace": os.fsdecode(ws.root_bytes), "was": target if readable else "(unreadable ref)"})
                continue
            if known is None:
                known = journal_checkpoints() if journal_checkpoints else {}
            fix = _repair_chain(store, repo, ws, target, readable, known)
        if fix:
            report["refs_repaired"].append(fix)
        index = ws.gitdir / "index"
        # a stat cache vouches for blob ids: after lost objects none of them is trusted
        if index.exists() and (damaged_objects or fix or not _index_ok(index)):
            index.unlink()
            report["indexes_dropped"] += 1
    store.forget_repos()
    return report


def _ref_target(store, ws) -> tuple[str | None, bool]:
    """(target, readable) of a workspace's checkpoint ref, read as text (never libgit2 on bad data)."""
    path = store.root / ws.ref
    try:
        text = path.read_text("ascii", "replace").strip()
    except FileNotFoundError:
        packed = store.root / "packed-refs"
        try:
            for line in packed.read_text("ascii", "replace").splitlines():
                if line.endswith(" " + ws.ref):
                    return line.split()[0], True
        except FileNotFoundError:
            pass
        return None, True
    return (text, True) if len(text) == 40 and set(text) <= _HEX else (None, False)


def _complete(repo, cid: str) -> bool:
    """A checkpoint commit whose every tree and blob is in the store."""
    try:
        commit = repo[cid]
    except (KeyError, ValueError, pygit2.GitError):
        return False
    if not isinstance(commit, pygit2.Commit) or not message_of(commit).startswith("chronos checkpoint:"):
        return False
    stack, seen = [commit.tree_id], set()
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        try:
            tree = repo[oid]
        except (KeyError, pygit2.GitError):
            return False
        for e in tree:
            if e.filemode == pygit2.GIT_FILEMODE_TREE:
                stack.append(e.id)
            elif e.filemode != pygit2.GIT_FILEMODE_COMMIT and not repo.odb.exists(e.id):
                return False
    return True


def _repair_chain(store, repo, ws, target, readable, journal_checkpoints: dict) -> dict:
    # newest first: the chain below a readable tip, the workspace HEAD, the journal's record
    candidates: list[str] = []
    if readable:
        try:
            c = repo[target]
            while c.parent_ids:
                c = repo[c.parent_ids[0]]
                candidates.append(str(c.id))
        except (KeyError, ValueError, pygit2.GitError):
            pass
    try:
        head = (ws.gitdir / "HEAD").read_text("ascii", "replace").strip()
        if len(head) == 40 and set(head) <= _HEX:
            candidates.append(head)
    except FileNotFoundError:
        pass
    candidates += list(journal_checkpoints.get(os.fsdecode(ws.root_bytes), ()))
    good = next((c for c in candidates if c != target and _complete(repo, c)), None)
    ref_file = store.root / ws.ref
    if good is None:
        ref_file.unlink(missing_ok=True)                # the next snapshot starts a new chain
        (ws.gitdir / "HEAD").write_bytes(b"ref: refs/heads/chronos-unborn\n")
    else:
        atomic_write(ref_file, (good + "\n").encode(), mode=0o644)
        atomic_write(ws.gitdir / "HEAD", (good + "\n").encode(), mode=0o644)
    return {"workspace": os.fsdecode(ws.root_bytes), "was": target if readable else "(unreadable ref)",
            "now": good, "note": ("back to its newest complete checkpoint" if good else
                                  "no complete checkpoint left: the next snapshot starts a new chain")}


def _seen_boot(store) -> str | None:
    """The boot the last sweep ran in; None when its record is missing or damaged (asked again)."""
    return StateFile(store.meta_dir, MARKER).read({}, expect=dict).get("boot_id")


REFUSED = "power-cut-refused.json"


def refused(store) -> str | None:
    """Why the last power-cut check refused to repair (kept until a check goes through), or None."""
    record = StateFile(store.meta_dir, REFUSED)
    got = record.load()              # unreadable or damaged is a finding: the refusal stands
    if got.state == "missing":
        return None
    if got.state == "unreadable":
        return f"the record of a refused power-cut repair ({record.path}) is unreadable: {got.error}"
    try:
        if got.state == "ok":
            return str(got.doc["problem"])
    except (KeyError, TypeError):
        pass
    return f"the record of a refused power-cut repair ({record.path}) is damaged"


def repaired(report: dict | None) -> bool:
    """Whether a sweep's report changed anything."""
    if not report:
        return False
    return any(report.get(k) for k in ("objects_quarantined", "packs_quarantined", "refs_repaired")) \
        or bool(report.get("indexes_dropped"))


def after_reboot(store, *, journal_checkpoints=None, same_boot=None, always: bool = False) -> dict | None:
    """`sweep` once per boot; the report when something was repaired (`always`: whenever it
    swept), else None.

    When the record of the last sweep (`boot.json`) is missing or unreadable, `same_boot()`
    is asked first: it returns why no reboot happened (the journal last recorded this very
    boot), or None; the report then carries it as `same_boot`, so that nothing found missing
    is taken for a power cut's loss.  Deleting the record must not turn tampering into a
    repair: where the sweep finds damage, nothing is changed, the report says `refused`, the record is
    not written (every start asks again) and `refused(store)` keeps saying why until a sweep
    goes through."""
    boot = current_boot()
    if boot is not None and _seen_boot(store) == boot:
        return None
    if store.maintenance.held_here():            # started from inside an operation of this
        return None                              # thread: the next start sweeps instead
    t0 = time.monotonic()
    with store.maintenance.exclusive():             # nobody writes while objects are judged
        seen = _seen_boot(store)
        if seen == boot and boot is not None:
            return None                             # another process did it meanwhile
        # a missing record on the boot the journal last wrote in is no reboot: asked up front, so
        # that nothing this start finds missing is taken for a power cut's loss (damaged or not)
        why = same_boot() if (same_boot is not None and seen is None and boot is not None) else None
        report = sweep(store, journal_checkpoints=journal_checkpoints,
                       refuse=(lambda: why) if why else None)
        if why:
            report["same_boot"] = why
        if report.get("refused"):
            found = [f"{plural(len(report.get('objects_damaged') or ()), 'damaged loose object')}",
                     f"{plural(len(report.get('packs_damaged') or ()), 'damaged pack')}",
                     f"{plural(len(report.get('refs_not_repaired') or ()), 'checkpoint chain')} whose tip "
                     "is incomplete"]
            report["refused"] = f"{report['refused']}; the check found {', '.join(found)}; nothing was repaired"
            StateFile(store.meta_dir, REFUSED).write(
                {"problem": report["refused"], "boot_id": boot, "at": time.time()})
            report["seconds"] = round(time.monotonic() - t0, 3)
            return report
        StateFile(store.meta_dir, REFUSED).remove()
        StateFile(store.meta_dir, MARKER).write({"boot_id": boot, "checked_at": time.time()})
    if not repaired(report) and not always:
        return None
    report["seconds"] = round(time.monotonic() - t0, 3)
    return report
