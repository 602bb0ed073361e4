"""Checkpoints in the chain of trust (docs/design.md has the rules and what they catch).

The journal names checkpoints of each workspace: the pre- and post-checkpoint of each of
its calls, the safety checkpoint of each restore (its pre-checkpoint) and the checkpoint a
restore put back (its post-checkpoint; a restore into a new folder takes it from another
chain, a fetched one).  A name has one of two roles:

    chain    a call's pre-/post-checkpoint, a restore's safety checkpoint, the boundary a
             retention cut keeps, the tip a power-cut repair chose: it must stay on the
             workspace's first-parent chain (the ref's tip or one of its ancestors)
    target   what a restore put back: it must stay in the store

A checkpoint ref moves legitimately only forward (a snapshot commits on top of its tip),
or by a journaled event that says so:

    retention        the listed checkpoints are dropped (may be gone); its boundary stays
    prune_orphans    the workspace's names are released; its ref may be gone
    power_cut_repair the workspace's names before it are released (its objects may have
                     been quarantined, its chain moved back); the new tip is a chain name
    remote_removed   restore targets named before it are released (fetched checkpoints
                     go with their remote)

`check` replays the events (all of them, or those after the last checked head kept in
`<store>/chronos/checkpoints-verified.json`) and compares what they name with the refs.
Anything else is a problem: the caller records it as the journal alarm (the gate closes).
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ..engine.powercut import loose_object_ok, refused as power_cut_refused
from ..engine.state_file import StateFile
from .commits import full_due

MARKER = "checkpoints-verified.json"
SCHEMA = 1
RETRY_AFTER_S = (0.05, 0.5, 1.5)   # a problem is read again after these pauses before it counts


@dataclass
class Name:
    id: str
    workspace: str
    role: str                # chain | target
    seq: int | None
    time_ns: int | None
    what: str

    def describe(self) -> str:
        when = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.time_ns / 1e9))
                if isinstance(self.time_ns, int) else "time unknown")
        return f"checkpoint {self.id[:12]} ({self.what}, journal seq {self.seq}, {when})"

    def to_dict(self) -> dict:
        return {"id": self.id, "workspace": self.workspace, "role": self.role, "seq": self.seq,
                "time_ns": self.time_ns, "what": self.what}

    @classmethod
    def from_dict(cls, d: dict) -> Name:
        return cls(id=str(d["id"]), workspace=str(d["workspace"]), role=str(d.get("role", "chain")),
                   seq=d.get("seq"), time_ns=d.get("time_ns"), what=str(d.get("what", "named by the journal")))


@dataclass
class Ledger:
    """What the journal says about the checkpoints of each workspace, event by event."""
    chain: dict[str, dict[str, Name]] = field(default_factory=dict)   # workspace -> id -> name
    targets: dict[str, Name] = field(default_factory=dict)            # id -> name
    dropped: set[str] = field(default_factory=set)
    ops: dict[str, tuple[str | None, bool, str | None]] = field(default_factory=dict)  # op -> (ws, restore, tool)

    def seed_ops(self, open_ops: dict) -> None:
        for op, info in open_ops.items():
            self.ops[op] = (info.get("workspace"), (info.get("snapshot") or {}).get("kind") == "safety",
                            info.get("tool"))

    def _name(self, ws: str, cid, role: str, p: dict, what: str) -> None:
        if not isinstance(cid, str) or len(cid) != 40:
            return
        n = Name(cid, ws, role, p.get("seq"), p.get("timestamp_ns"), what)
        if role == "chain":
            self.chain.setdefault(ws, {})[cid] = n
        else:
            self.targets[cid] = n

    def _release(self, ws: str | None) -> None:
        if not ws:
            return
        self.chain.pop(ws, None)
        self.targets = {k: v for k, v in self.targets.items() if v.workspace != ws}

    def apply(self, p: dict) -> None:
        kind, op = p.get("kind"), p.get("operation_id")
        if kind == "started":
            ws = p.get("workspace")
            snap = p.get("snapshot")
            restore = isinstance(snap, dict) and snap.get("kind") == "safety"     # an edited event: anything
            tool = p.get("tool")
            if op:
                self.ops[op] = (ws, restore, tool)
            if not isinstance(ws, str):
                return
            label = f"operation {str(op)[:12]} ({tool})"
            self._name(ws, p.get("pre_checkpoint"), "chain", p,
                       f"the {'safety' if restore else 'pre'}-checkpoint of {label}")
            args = p.get("args")
            if restore and isinstance(args, dict):
                self._name(ws, args.get("checkpoint"), "target", p, f"the checkpoint {label} restores")
        elif kind in ("returned", "uncertain"):
            ws, restore, tool = self.ops.get(op, (None, False, None)) if isinstance(op, str) else (None, False, None)
            if isinstance(ws, str):
                self._name(ws, p.get("post_checkpoint"), "target" if restore else "chain", p,
                           f"the {'restored' if restore else 'post'}-checkpoint of operation "
                           f"{str(op)[:12]} ({tool})")
        elif kind in ("recovered", "resolved"):
            pass
        elif kind == "maintenance":
            action = p.get("action")
            if action == "retention":
                for d in p.get("dropped") or ():
                    if not isinstance(d, dict):
                        continue
                    ids = [c for c in d.get("checkpoints") or () if isinstance(c, str)]
                    self.dropped.update(ids)
                    ws = d.get("workspace")
                    if isinstance(ws, str):
                        for c in ids:
                            self.chain.get(ws, {}).pop(c, None)
                        self._name(ws, d.get("boundary"), "chain", p, "the oldest checkpoint a retention cut kept")
            elif action == "prune_orphans":
                for d in p.get("pruned") or ():
                    if isinstance(d, dict):
                        self._release(d.get("workspace"))
            elif action == "power_cut_repair":
                for d in list(p.get("refs_repaired") or ()) + list(p.get("checkpoints_lost") or ()):
                    if isinstance(d, dict) and isinstance(d.get("workspace"), str):
                        self._release(d["workspace"])
                        self._name(d["workspace"], d.get("now"), "chain", p, "the tip a power-cut repair chose")
            elif action == "remote_removed":
                self.targets = {}
            elif action == "crash_boundary":
                ws = self.ops.get(op, (None, False, None))[0] if isinstance(op, str) else None
                if isinstance(ws, str):
                    self._name(ws, p.get("checkpoint"), "chain", p,
                               f"the checkpoint taken when the crash of operation {str(op)[:12]} was found")


@dataclass
class Result:
    problems: list[str] = field(default_factory=list)
    per_workspace: dict[str, str | None] = field(default_factory=dict)   # ws with a problem -> its tip
    live: set[str] = field(default_factory=set)      # named, not dropped, in the store: compaction keeps them
    head: str | None = None
    full: bool = False
    events: int = 0
    seconds: float = 0.0
    nearest: dict[str, dict] = field(default_factory=dict)   # per workspace: the chain name nearest its tip
    targets: list[dict] = field(default_factory=list)        # restore targets still named (carried over)


def _marker(store) -> StateFile:
    return StateFile(store.meta_dir, MARKER)


def read_marker(store) -> dict:
    """The last clean check; {} when missing, damaged or of another schema (everything is replayed)."""
    d = _marker(store).read({}, expect=dict)
    return d if d.get("schema") == SCHEMA else {}


def _tip(store, repo, ws_path: str) -> tuple[str | None, str]:
    """(the tip of the workspace's checkpoint ref, the ref's name); a torn ref reads from the
    workspace's HEAD, as the snapshots do."""
    wid = hashlib.sha256(os.fsencode(ws_path)).hexdigest()[:16]
    ref = f"refs/chronos/snapshots/{wid}"
    try:
        r = repo.references.get(ref)
        return (str(r.target) if r is not None else None), ref
    except (pygit2.GitError, ValueError):
        try:
            text = (store.root / "worktrees" / wid / "HEAD").read_text("ascii", "replace").strip()
        except OSError:
            return None, ref
        return (text if len(text) == 40 else None), ref


def _get(repo, cid) -> pygit2.Object:
    """repo[cid], but never a damaged loose object (libgit2 1.9 loops forever inflating a
    truncated one: engine/powercut.py): that is a ValueError."""
    cid = str(cid)
    if len(cid) != 40 or not loose_object_ok(Path(repo.path) / "objects" / cid[:2] / cid[2:]):
        raise ValueError(f"object {cid[:12]} is damaged")
    return repo[cid]


def _exists(repo, cid: str) -> bool:
    try:
        c = _get(repo, cid)
    except (KeyError, ValueError, pygit2.GitError):
        return False
    return isinstance(c, pygit2.Commit) and c.tree_id in repo.odb


def _check_refs(store, ledger: Ledger, out: Result) -> dict[str, dict]:
    """Every chain name on its workspace's chain, every target in the store.  Returns, per
    workspace, the chain name nearest its tip (what the next incremental check starts from)."""
    repo = store.repo()
    nearest: dict[str, dict] = {}
    for ws, names in sorted(ledger.chain.items()):
        want = {cid: n for cid, n in names.items() if cid not in ledger.dropped}
        if not want:
            continue
        tip, ref = _tip(store, repo, ws)
        if tip is None:
            n = max(want.values(), key=lambda n: n.seq or -1)
            out.problems.append(
                f"workspace {ws}: its checkpoint ref {ref} is gone, but the journal names {n.describe()} "
                "as one of its checkpoints, and no journaled orphan pruning or power-cut repair explains it")
            out.per_workspace[ws] = None
            continue
        left, first = dict(want), None
        hollow: list[Name] = []
        try:
            c = _get(repo, tip)
            while isinstance(c, pygit2.Commit):
                if str(c.id) in left:
                    first = first or left[str(c.id)]
                    if c.tree_id not in repo.odb:
                        hollow.append(left[str(c.id)])
                    del left[str(c.id)]
                    if not left:
                        break
                if not c.parent_ids:
                    break
                c = _get(repo, c.parent_ids[0])
        except (KeyError, ValueError, pygit2.GitError):
            pass                        # the chain ends (damaged, or below a cut): what is left is a problem
        if first is not None:
            nearest[ws] = first.to_dict()
        for n in hollow[:1]:
            out.problems.append(f"workspace {ws}: {n.describe()} is on its chain but its root tree is not in "
                                "the store, and no journaled retention cut explains it")
            out.per_workspace[ws] = tip
        out.live.update(cid for cid in want if cid not in left)
        if left:
            n = max(left.values(), key=lambda n: n.seq or -1)
            where = ("is not in the store" if not _exists(repo, n.id) else
                     "is not one of the workspace's checkpoints any more")
            more = f" (and {len(left) - 1} more named checkpoints)" if len(left) > 1 else ""
            out.problems.append(
                f"workspace {ws}: {n.describe()} {where}{more}: its checkpoint ref {ref} points at "
                f"{tip[:12]}, whose history does not hold it, and no journaled retention cut, orphan "
                "pruning or power-cut repair explains that (the ref was moved or the history rewritten)")
            out.per_workspace[ws] = tip
    for cid, n in sorted(ledger.targets.items()):
        if cid in ledger.dropped:
            continue
        if _exists(repo, cid):
            out.live.add(cid)
            out.targets.append(n.to_dict())
        else:
            out.problems.append(f"workspace {n.workspace}: {n.describe()} is not in the store, and no "
                                "journaled retention cut, orphan pruning or power-cut repair explains it")
            out.per_workspace.setdefault(n.workspace, _tip(store, repo, n.workspace)[0])
    return nearest


def check(journal, *, full: bool = False, again: bool = True) -> Result:
    """Replay what the journal names and compare it with the checkpoint refs.  Incremental
    (the events after the last checked head, plus one name per workspace carried over) unless
    `full` or there is no usable record (`note_checked` records a clean result as the base).
    `again`: a problem is read again after short pauses before it counts."""
    t0 = time.monotonic()
    store = journal.store
    out = _check_once(journal, store, full=full)
    for pause in RETRY_AFTER_S if again else ():
        # another process may be between moving a ref and journaling why (a compaction's cut,
        # a power-cut repair at the same start, a call's checkpoint): read both again
        if not out.problems:
            break
        time.sleep(pause)
        out = _check_once(journal, store, full=full)
    why = power_cut_refused(store)
    if why:
        out.problems.append(why)
    out.seconds = round(time.monotonic() - t0, 3)
    return out


def _check_once(journal, store, *, full: bool) -> Result:
    marker = {} if full else read_marker(store)
    base = marker.get("head") if isinstance(marker.get("head"), str) else None
    got = journal.payloads_since(base) if base else None
    ledger = Ledger()
    if got is None:                     # no record, or it is not below the head: everything
        head, payloads = journal.payloads_since(None)   # None: from genesis, never None
        full = True
    else:
        head, payloads = got
        try:
            ledger.seed_ops(journal.state_at(base).open)
        except Exception:               # an unreadable base: start again from genesis
            head, payloads = journal.payloads_since(None)
            full, ledger = True, Ledger()
        else:
            for ws, d in (marker.get("nearest") or {}).items():
                try:
                    n = Name.from_dict(d)
                except (KeyError, TypeError):
                    continue
                ledger.chain.setdefault(ws, {})[n.id] = n
            for d in marker.get("targets") or ():
                try:
                    n = Name.from_dict(d)
                except (KeyError, TypeError):
                    continue
                ledger.targets[n.id] = n
    for p in payloads:
        ledger.apply(p)
    out = Result(head=head, full=full, events=len(payloads))
    out.nearest = _check_refs(store, ledger, out)
    return out


def full_check_due(store, max_age_s: float = 24 * 3600.0) -> bool:
    """Whether the whole journal was last checked against the refs longer ago than `max_age_s`
    (or never, or the record is gone: then the next check replays everything anyway)."""
    return full_due(read_marker(store).get("full_at"), max_age_s)


def note_checked(store, result: Result) -> None:
    """A clean result becomes the base of the next incremental check."""
    if result.problems or result.head is None:
        return
    prior = read_marker(store)
    if (not result.full and prior.get("head") == result.head and prior.get("nearest") == result.nearest
            and prior.get("targets", []) == result.targets):
        return                      # nothing new: a start writes nothing
    doc = {"schema": SCHEMA, "head": result.head, "nearest": result.nearest, "targets": result.targets,
           "full_at": time.time() if result.full else prior.get("full_at"), "checked_at": time.time()}
    try:
        _marker(store).write(doc)           # not synced (metadir.JSON_FILES)
    except OSError:
        pass                        # a read-only store: the next check starts from further back


def lost_in_power_cut(result: Result) -> list[dict]:
    """After a reboot, what the check found as entries of the power_cut_repair event."""
    return [{"workspace": ws, "now": tip,
             "note": "checkpoints the journal names were lost in the power cut: the chain goes on from its tip"}
            for ws, tip in sorted(result.per_workspace.items())]
