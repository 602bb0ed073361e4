"""Reading the journal: open operations, events, the state at an event, the status.

Each query follows other processes' appends first (`Journal.refresh`), then reads; none
writes.  Events come back as their stored payloads with `id` (the event's commit), the
form the service, the reports and the wind tunnel read; `typed_events` gives the typed
views of `events.py` instead.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .commits import read_commit
from .events import WITNESS_SCHEMA, JournalEvent, parse, parse_message
from .operation import OpenOperation

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["operations", "unresolved", "running", "pinned_checkpoints", "event", "events", "typed_events",
           "payloads_since", "last_boot", "export_head", "status"]


def operations(journal: Journal) -> list[OpenOperation]:
    """Every open operation, oldest first."""
    journal.refresh()
    return [OpenOperation.from_state(op, info)
            for op, info in sorted(journal.state.open.items(), key=lambda kv: kv[1].get("started_seq", 0))]


def unresolved(journal: Journal) -> list[OpenOperation]:
    """Operations that close the gate: uncertain, or started by a dead owner."""
    return [op for op in journal.operations() if op.state != "running"]


def running(journal: Journal) -> list[OpenOperation]:
    return [op for op in journal.operations() if op.state == "running"]


def pinned_checkpoints(journal: Journal) -> set[str]:
    """Checkpoints that open or replayable operations refer to: retention keeps them."""
    journal.refresh()
    out = set()
    for info in list(journal.state.open.values()) + list(journal.state.replayable.values()):
        if info.get("pre_checkpoint"):
            out.add(info["pre_checkpoint"])
    return out


def event(journal: Journal, commit_id: str) -> dict:
    commit = journal.repo()[commit_id]
    payload, _ = parse_message(commit.message)   # type: ignore[attr-defined]  # event ids name commits
    return {**payload, "id": str(commit.id)}


def events(journal: Journal, limit: int | None = 50, *, kinds: set[type[JournalEvent]] | None = None) -> list[dict]:
    """Payloads (with `id`), newest first; `kinds`: only events of these types."""
    names = {k.kind for k in kinds} if kinds else None
    out: list[dict] = []
    if limit is not None and limit < 1:
        return out
    for payload in walk(journal):
        if names is None or payload["kind"] in names:
            out.append(payload)
            if limit is not None and len(out) >= limit:
                break
    return out


def walk(journal: Journal):
    """Payloads (with `id`), newest first, read as they are consumed: a reader that stops early
    reads no further.  ValueError for an event whose message is not one."""
    with journal.guard:                  # no append between the settle and the head read
        journal.refresh()
        repo = journal.repo()
        cid = journal.head
    while cid:
        commit = read_commit(repo, cid)
        payload, _ = parse_message(commit.message)
        yield {**payload, "id": cid}
        cid = str(commit.parent_ids[0]) if commit.parent_ids else None


def typed_events(journal: Journal, limit: int | None = 50, *,
                 kinds: set[type[JournalEvent]] | None = None) -> list[JournalEvent]:
    """`events`, as typed views (`ev.payload["id"]` is the event's commit); ValueError for an
    event of a kind this version does not know."""
    return [parse(p) for p in journal.events(limit, kinds=kinds)]


def payloads_since(journal: Journal, base: str | None) -> tuple[str | None, list[dict]] | None:
    """(head, the payloads of the events after `base` up to it, oldest first); every event
    when `base` is None; None when `base` is not below the head (a rewritten history)."""
    with journal.guard:
        journal.refresh()
        repo = journal.repo()
        head = journal.head
        out: list[dict] = []
        cid = head
        while cid and cid != base:
            commit = read_commit(repo, cid)
            payload, _ = parse_message(commit.message)
            out.append({**payload, "id": cid})
            cid = str(commit.parent_ids[0]) if commit.parent_ids else None
        if base is not None and cid != base:
            return None
        out.reverse()
        return head, out


def last_boot(journal: Journal, most: int = 10_000) -> tuple[str | None, int | None]:
    """(the boot id the journal last recorded, at which seq): the newest event that names
    one (a call's owner, the genesis's creator, a power-cut repair), looking back at most
    `most` events; (None, None) when none does."""
    with journal.guard:
        journal.refresh()
        repo = journal.repo()
        cid, n = journal.head, 0
    while cid and n < most:
        commit = read_commit(repo, cid)
        payload, _ = parse_message(commit.message)
        for who in (payload.get("owner"), payload.get("created_by"), payload):
            boot = who.get("boot_id") if isinstance(who, dict) else None
            if isinstance(boot, str) and boot and boot != "unknown":
                return boot, payload.get("seq")
        cid = str(commit.parent_ids[0]) if commit.parent_ids else None
        n += 1
    return None, None


def export_head(journal: Journal) -> dict:
    """The head as a document to keep elsewhere: `verify(exported)` proves append-only growth."""
    journal.refresh()
    return {"schema": WITNESS_SCHEMA, "journal_id": journal.state.journal_id, "head": journal.head,
            "seq": journal.state.seq, "store": str(journal.store.root),
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def status(journal: Journal) -> dict:
    journal.refresh()
    return {
        "integrity": journal.integrity if not journal.poisoned else f"poisoned: {journal.poisoned}",
        "head": journal.head,
        "events": journal.state.seq + 1,
        "journal_id": journal.state.journal_id,
        "unresolved": [o.to_dict() for o in journal.unresolved()] if journal.integrity == "ok" else [],
        "running": [o.to_dict() for o in journal.running()] if journal.integrity == "ok" else [],
        "replayable": sorted(journal.state.replayable),
        "totals": journal.state.totals,
        "healed": journal.healed,
        "checkpoint_file": str(journal.witness_path),
    }
