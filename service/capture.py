"""Capture that narrows, journaled and reported (engine/narrowing.py finds it).

A snapshot whose ignore rules changed says how many paths of the checkpoint they now ignore;
that is journaled as `capture_narrowed` (workspace, checkpoint, count, a sample, the ignore
files).  The journal state keeps each workspace's last one (journal_refs/state.py), so a large
one makes `health` DEGRADED until rules that no longer narrow are seen (`capture_restored`) or
an operator accepts it (`capture_accepted`, `chronos-git capture accept`).
"""
from __future__ import annotations

import os

from ..engine import narrowing
from ..journal_refs import events
from ..journal_refs.journal import REF
from ..journal_refs.state import ACCEPTED, NARROWED, RESTORED
from . import operators
from .core import Core
from .results import CaptureAccepted, NarrowedCapture, Protection

ACCEPT = "chronos-git capture accept --workspace"
SHOWN = 3                        # paths named in health's line


def noted(core: Core, ws, res) -> str | None:
    """After a snapshot: journal a narrowing it found, or (while one is reported) a change of the
    reported ignore files.  Never raises: returns why it could not be journaled."""
    change = res.report.get("ignore_change")
    journal = core.journal
    root = os.fsdecode(ws.root_bytes)
    try:
        if change is None:
            if not journal.opened and core.store.repo().references.get(REF) is not None:
                journal.open()   # a process's first snapshot (a CLI's): a reported narrowing is rechecked
            if not journal.opened or root not in journal.state.narrowed:
                return None      # the usual case: nothing found, nothing reported to recheck
        journal.refresh()
        prev = journal.state.narrowed.get(root)
        recheck = change is None
        if recheck:
            if prev is None or not _sources_changed(ws, prev):
                return None
            change = ws.ignore_reach(prev["sources"]).to_dict()
        checkpoint = res.checkpoint.id if res.checkpoint is not None else None
        if not change["count"]:
            if prev is not None:
                journal.append(events.Maintenance, {"operation_id": None, "action": RESTORED, "workspace": root,
                                                    "checkpoint": checkpoint, "sources": change["sources"]})
            return None
        if not recheck and prev is not None and (prev.get("count"), prev.get("sources")) \
                == (change["count"], change["sources"]) and not _sources_changed(ws, prev):
            return None          # the same finding again, its ignore files untouched since: recorded once
        journal.append(events.Maintenance, {"operation_id": None, "action": NARROWED, "workspace": root,
                                            "checkpoint": checkpoint, **change})
    except Exception as exc:         # noqa: BLE001 (after a snapshot: never in the way of the call)
        return str(exc)
    return None


def _sources_changed(ws, prev: dict) -> bool:
    """Whether an ignore file of a reported narrowing is gone or changed since it was recorded
    (a self-ignoring `.gitignore` is in no tree diff, so its removal is seen only so)."""
    since = (prev.get("timestamp_ns") or 0) / 1e9
    for src in prev.get("sources") or ():
        path = src if os.path.isabs(src) else os.path.join(ws.root_bytes, os.fsencode(src))
        try:
            if narrowing.changed_at(path) >= since:
                return True
        except OSError:
            return True
    return False


def reported(core: Core) -> list[NarrowedCapture]:
    """The large narrowings nobody accepted (from the journal state: O(1))."""
    out = []
    for ws, rec in sorted(core.journal.state.narrowed.items()):
        if rec.get("large") and rec.get("accepted_seq") is None:
            out.append(NarrowedCapture(workspace=ws, checkpoint=rec.get("checkpoint"), count=rec.get("count") or 0,
                                       files=rec.get("files") or 0, sample=list(rec.get("sample") or ()),
                                       sources=list(rec.get("sources") or ()),
                                       complete=rec.get("complete") is not False, since_seq=rec.get("seq")))
    return out


def reason(found: list[NarrowedCapture]) -> str:
    from ..engine.codec import human
    parts = []
    for n in found:
        names = ", ".join(human(p) for p in n.sample[:SHOWN]) + (" ..." if n.count > SHOWN else "")
        parts.append(f"ignore rules changed in {human(n.workspace)} ({', '.join(human(s) for s in n.sources)}) "
                     f"now ignore {'at least ' if not n.complete else ''}{n.count} of its {n.files} captured "
                     f"paths ({names}): files created there from now on are left out of every checkpoint")
    return "; ".join(parts)


def fix(found: list[NarrowedCapture]) -> str:
    return (f"undo the rule (the next checkpoint clears this), or if you made it: "
            f"`{ACCEPT} {found[0].workspace}`")


def degraded(p: Protection, found: list[NarrowedCapture]) -> Protection:
    """A large narrowing nobody accepted makes protection DEGRADED (as a held setting does)."""
    if not found or p.state not in ("on", "degraded"):
        return p
    return p.degraded(reason(found), fix(found))


def accept(core: Core, workspace: str, *, actor: str) -> CaptureAccepted:
    """The operator accepts a workspace's reported narrowing: refused from the agent's processes,
    signed with the operator key where one is registered."""
    record = operators.check(core, "capture accept")
    journal = core.journal
    journal.refresh()
    root = os.fsdecode(core.store.workspace(workspace).root_bytes)
    rec = journal.state.narrowed.get(root)
    if rec is None or not rec.get("large") or rec.get("accepted_seq") is not None:
        return CaptureAccepted(workspace=root, accepted=False, note="no narrowing of capture is reported there")
    fields = {"operation_id": None, "action": ACCEPTED, "workspace": root, "seq_accepted": rec.get("seq"),
              "actor": actor, "operator": record}
    signed = operators.authorize(core, "capture accept", {"kind": events.Maintenance.kind, **fields})
    journal.append(events.Maintenance, {**fields, **signed})
    return CaptureAccepted(workspace=root, accepted=True, count=rec.get("count"),
                           sources=list(rec.get("sources") or ()))
