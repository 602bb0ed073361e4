"""Group commit: the events of one witness write.

Every append queues a `Request`; whichever caller holds the journal's locks commits every
request queued by then (journal.Journal.append), so concurrent appends of one process share
one witness write and one sync.  Each request is checked against the state the ones before it
left (a refused transition fails alone), becomes a commit whose tree holds the state after it,
and is carried by the witness with the blobs its caller staged (a file call's post-images:
loose.staged_blob).  A call's intent (`defer`) leaves all of them for the publisher
(publish.py); any other event, or any event on a nearly full disk, writes them before the witness,
so a full disk fails the append before it counts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pygit2

from ..engine import faults, loose
from ..engine.checkpoint import signature
from ..engine.durability import settle_objects
from ..engine.errors import explain
from . import carried
from .commits import REF, AlarmRaised, IntegrityError, JournalError
from .events import SCHEMA, message
from .heal import reconcile
from .publish import Pending, room
from .state import TransitionError

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["Request", "prelude", "commit", "copy_error"]


@dataclass
class Request:
    """One caller's event, queued for the next commit."""
    fields: dict
    blobs: dict[str, str]
    while_running: bool
    defer: bool = False
    objects: dict[str, tuple[int, bytes]] = field(default_factory=dict)   # staged blobs: id -> (size, loose bytes)
    early: bool = False          # its objects were written before the witness: published before it returns
    done: bool = False
    result: dict | None = None
    error: BaseException | None = None

    def outcome(self) -> dict:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def prelude(journal: Journal) -> dict | None:
    """Before a commit: the gate, other processes' appends, the witness still ours (healed if a
    crash left it ahead); returns the witness."""
    if not journal.opened:
        journal.open()
    if journal.integrity != "ok":
        raise IntegrityError(journal.integrity)
    try:
        journal.follow_ref()
        journal.alarm_file.check()
        # this append will overwrite the witness: it must still be ours, or deleting or
        # editing it while a process runs would go unnoticed
        w = journal.read_witness()
        if journal.pending is None and (journal.head is not None or (w or {}).get("head")):
            head, state, healed = reconcile(journal, w, journal.head)
            if head is None:
                raise IntegrityError(f"the journal ref {REF} is missing but the local checkpoint "
                                     f"{journal.witness_path} records events: it was deleted")
            journal.head, journal.state = head, state
            if healed:
                journal.healed = healed
                w = journal.read_witness()
        elif journal.pending is not None and (w or {}).get("head") != journal.head:
            raise IntegrityError(f"the journal's witness file {journal.witness_path} no longer names "
                                 f"this process's last event {str(journal.head)[:12]}: it was replaced")
    except IntegrityError as exc:
        journal.integrity = str(exc)
        journal.integrity_from_alarm = isinstance(exc, AlarmRaised)
        raise
    if journal.head is None:           # the genesis could not be written when we opened
        journal.genesis_locked(w)
        w = journal.read_witness()
    return w


def commit(journal: Journal, batch: list[Request], w: dict | None) -> None:
    """Every request of `batch` that the state allows becomes an event; one witness write makes
    them all durable (the caller holds the journal's guard and locks; `w`: the witness as read)."""
    state, head, repo = journal.state, journal.head, journal.store.repo()
    made: list[tuple[Request, dict]] = []
    objects: list[tuple[str, bytes]] = []
    new: dict[str, str] = {}
    settle: list[str] = []           # not carried: made durable where they are, before the witness
    try:
        for req in batch:
            op = req.fields.get("operation_id")
            payload = {"schema": SCHEMA, "seq": state.seq + 1, "timestamp_ns": time.time_ns(), **req.fields}
            try:
                if req.while_running and (state.open.get(op) or {}).get("state") != "running":
                    raise TransitionError(f"operation {op} is no longer running (settled meanwhile)")
                new_state = state.apply(payload)           # validates the transition
            except TransitionError as exc:
                req.error, req.done = exc, True
                continue
            text = new_state.to_json().encode()
            state_blob, state_raw = loose.prepare(pygit2.GIT_OBJECT_BLOB, text)
            listing = loose.flat_tree({**req.blobs, "state.json": state_blob})
            tree, tree_raw = loose.prepare(pygit2.GIT_OBJECT_TREE, listing)
            sig = signature(payload["timestamp_ns"] / 1e9)
            body = loose.commit_data(tree, [head] if head else [], sig, message(payload))
            cid, commit_raw = loose.prepare(pygit2.GIT_OBJECT_COMMIT, body)
            try:                         # a linked blob the store lacks fails this request alone
                got, in_place = carried.carry(repo, [cid, tree, state_blob, *req.blobs.values()],
                                             known={**req.objects, cid: (len(body), commit_raw),
                                                    tree: (len(listing), tree_raw), state_blob: (len(text), state_raw)})
            except (KeyError, ValueError, pygit2.GitError) as exc:
                req.error, req.done = JournalError(f"could not append to the journal: a linked object is "
                                                   f"missing or unreadable ({exc})"), True
                continue
            objects += [(oid, raw) for oid, (_n, raw) in req.objects.items()]
            objects += [(state_blob, state_raw), (tree, tree_raw), (cid, commit_raw)]
            new.update(got)
            settle += in_place
            made.append((req, {**payload, "id": cid}))
            state, head = new_state, cid
        if not made:
            return
        where = journal.store.root / "objects"
        ours = dict(objects)
        if not all(r.defer for r, _p in made) or not room(where):
            for oid, raw in objects:     # before the witness: a full disk fails the append here
                loose.put(where, oid, raw)
            objects = []
            for r, _p in made:
                r.early = True
        else:
            for oid in settle:           # ours and too big to carry: written, then synced below
                if oid in ours:
                    loose.put(where, oid, ours[oid])
        settle_objects(where, settle, journal.store.compaction_token())
        carry = dict((w or {}).get("carried") or {}) if (w or {}).get("head") == journal.head else {}
        if carried.full(carry, new):
            journal.publish_locked()
            journal.sync_carried(carry)
            carry = {}
    except (pygit2.GitError, OSError) as exc:
        journal.unwritable = explain(exc, journal.store.root)
        raise JournalError(f"could not append to the journal in {journal.store.root}: "
                           f"{journal.unwritable}") from None
    faults.hit("mid_append")
    assert head is not None              # at least one event was made
    base = journal.pending.base if journal.pending is not None else journal.head
    journal.write_witness(state.journal_id, head, state.seq, carry={**carry, **new}, base=base)
    faults.hit("after_witness")
    # durable: the objects and the ref follow (publish.py)
    journal.pending = Pending(base, head, (journal.pending.objects if journal.pending else []) + objects)
    journal.head, journal.state = head, state
    journal.unwritable = None
    for req, payload in made:
        req.result, req.done = payload, True


def copy_error(exc: BaseException) -> BaseException:
    """`exc` for another thread to raise: the same type and message where it allows, else a
    JournalError saying what it was (an interrupt of the committing thread is not theirs)."""
    if isinstance(exc, Exception):
        try:
            return type(exc)(*exc.args)
        except Exception:                # noqa: BLE001 - a type that wants other arguments
            pass
    return JournalError(f"the append was not recorded: {type(exc).__name__}: {exc}")
