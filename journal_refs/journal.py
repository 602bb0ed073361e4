"""The journal: append-only, compare-and-swap, durable, tamper-evident.

Each event is a commit whose first parent is the previous event, so git's
object hashes chain the history.  The commit tree holds `state.json` (the
derived state after the event) and, for file tools, the pre- and post-image
blobs of declared paths, which keeps them reachable as long as the journal.

Every append rewrites a *witness* file that lives beside the
store, so it survives the store's deletion.  The witness is the one file an
append syncs (in place, one fdatasync: journal_refs/witness.py): it names the
new head and the `base` the ref stands at, and carries the loose bytes of the
objects not yet synced (journal_refs/carried.py), so a crash or power cut that
takes them or the ref's last updates is repaired at the next open.  The order is
witness (synced: the event is durable), then publication: objects (page cache)
and ref; a call's intent returns at the witness and is published in the
background (journal_refs/publish.py), other events write their objects first.

    ref == witness                  fine
    witness descends from ref       the ref lost carried updates (crash, power cut): healed
    ref descends from witness       by one event: a crash of an older version: healed
    anything else                   tampering or corruption: the gate closes

Damage below the head (an edited older event) is found by `verify`, which
walks the whole chain; it records what it found in `<store>/chronos/
journal-alarm.json`, so every process's gate closes (open, refresh and append
check that file) until a later verify of a repaired chain finds it clean.

This module holds the `Journal` (open, refresh, append, sync) and composes the rest,
one module per concept: `heal` (the ref against the witness after a crash),
`verify` (the chain re-hashed and replayed, the alarm), `query` (what readers ask),
`batch` (group commit), `publish` (objects and ref after the witness), `commits` (shared).

Crash points (CHRONOS_GIT_FAULT): mid_append (the event made, the witness not:
it never happened), witness_half_written (the new record torn, the previous one
whole: the event never happened), after_witness and mid_publish (witness durable,
objects partly or not written, ref at base: the event happened; the objects are
written back and the ref moved forward at the next open or append).
"""
from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pygit2

from ..engine import locking, metadir
from ..engine.errors import explain
from ..engine.owner import ProcessIdentity
from ..engine.powercut import current_boot
from . import carried, query
from .batch import Request, commit as batch_commit, copy_error, prelude as batch_prelude
from .commits import REF, AlarmRaised, IntegrityError, JournalError, Unpublished, descends, load_state
from .events import WITNESS_SCHEMA, Genesis, JournalEvent
from .heal import reconcile, ref_tip_or_damaged
from .operation import OpenOperation
from .publish import PUBLISHER, Pending, publish
from .state import JournalState, TransitionError
from .verify import FULL_VERIFY_EVERY_S, AlarmFile, VerifiedHead, verify_chain, verify_new_events
from .witness import WitnessFile, witness_path_for

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

__all__ = ["Journal", "JournalError", "IntegrityError", "TransitionError", "REF"]


class Journal:
    """One per store per process; thread-safe.

    `guard` (this process's threads) and the file lock at `lock_path` (other processes)
    serialise open, append and sync; `heal` and `verify` run under them and update this
    object's head, state and integrity, which is why those are plain public attributes."""

    def __init__(self, store, *, witness_path: Path | None = None):
        self.store = store
        self.witness_path = Path(witness_path) if witness_path else witness_path_for(store.root)
        self._witness = WitnessFile(self.witness_path)
        self.witness_torn = False        # the witness's standby slot was torn when last read
        self.lock_path = metadir.lock_path(store.meta_dir, "journal")
        self.alarm_path = store.meta_dir / "journal-alarm.json"
        self.ref_lock_path = store.root / (REF + ".lock")   # git's, left by a killed writer
        self.verified_path = store.meta_dir / "journal-verified.json"   # the last verified head
        self.me = ProcessIdentity.current()
        self.alarm_file = AlarmFile(self.alarm_path)
        self.verified = VerifiedHead(self.verified_path)
        self.integrity_from_alarm = False   # the gate was closed by the alarm file: its removal opens it
        self.guard = locking.OwnedRLock()
        self.head: str | None = None
        self.state = JournalState()
        self.integrity = "ok"            # or a message: the gate is closed
        self.poisoned: str | None = None  # an outcome could not be recorded in this process
        self.opened = False
        self.healed: str | None = None
        self.unwritable: str | None = None   # why the last write failed (full disk, read-only store)
        self.boot = current_boot()       # carried objects are written back only in a later boot
        self._carried_n: int | None = None   # objects the witness this process last wrote carries
        self._carried_bytes = 0               # and their encoded size
        self._parsed: tuple[bytes, dict] | None = None   # the last witness record read, checked
        self.pending: Pending | None = None   # durable events not yet published (publish.py)
        self.publish_failures = 0
        self._queue: list[Request] = []       # appends waiting for the next commit (group commit)
        self._queue_lock = threading.Lock()
        self._encoder = carried.RecordEncoder()

    # ------------------------------------------------------------------ open
    def open(self) -> Journal:
        with self.guard, self.store.writing(), locking.exclusive(self.lock_path):
            if self.opened:
                return self
            self.store.clear_stale_git_lock(self.ref_lock_path)
            self._witness.clear_temp()
            try:
                self._open_locked()
                self.alarm_file.check()
                verify_new_events(self)
            except IntegrityError as exc:
                self.integrity = str(exc)
                self.integrity_from_alarm = isinstance(exc, AlarmRaised)
            self.opened = True
            return self

    def repo(self) -> pygit2.Repository:
        """The store's repository, with every durable event published (readers of the chain)."""
        if self.pending is not None:
            self.settle()
        return self.store.repo()

    def settle(self) -> None:
        """Publish what appends left pending (publish.py), here or, when this thread holds a
        lock that comes after the journal's own in the lock order, by waiting for the publisher."""
        if self.pending is None:
            return
        if self.guard.owned() or not locking.holding_exclusive():
            self.publish_pending()
        elif not PUBLISHER.wait(self):
            raise JournalError(f"the journal's newest event {str(self.head)[:12]} is not published yet "
                               f"({self.unwritable or 'its publisher did not finish'})")

    def publish_pending(self) -> None:
        with self.guard, self.store.writing(), locking.exclusive(self.lock_path):
            self.publish_locked()

    def publish_locked(self) -> None:
        p = self.pending
        if p is None:
            return
        try:
            publish(self, p)
        except IntegrityError as exc:
            self.pending = None
            self.integrity = str(exc)
            PUBLISHER.notify()
            raise
        except (pygit2.GitError, OSError) as exc:
            self.unwritable = explain(exc, self.store.root)
            self.publish_failures += 1
            PUBLISHER.notify()
            raise JournalError(f"could not publish journal events in {self.store.root}: "
                               f"{self.unwritable}") from None
        self.pending = None
        PUBLISHER.notify()

    def ref_tip(self) -> str | None:
        """Where the journal ref points (None: no journal yet); IntegrityError if unreadable."""
        try:
            ref = self.store.repo().references.get(REF)
        except pygit2.GitError as exc:
            raise IntegrityError(f"journal ref unreadable: {exc}") from None
        return str(ref.target) if ref is not None else None

    def read_witness(self, *, whole: bool = False) -> dict | None:
        """The witness, checked; `whole`: also every carried object's bytes against its name
        (at open and in verify: an append only needs their shape)."""
        try:
            got = self._witness.read()
            if got is None:
                self.witness_torn = False
                return None
            raw, self.witness_torn = got
            if not whole and self._parsed is not None and self._parsed[0] == raw:
                # the record checked last time, byte for byte (mostly the one this process wrote)
                w = self._parsed[1]
                return {**w, "carried": dict(w["carried"])}
            w = json.loads(raw)
            if not isinstance(w, dict) or w.get("schema") != WITNESS_SCHEMA or "journal_id" not in w:
                raise ValueError("wrong schema")
            head, seq = w.get("head"), w.get("seq")
            if not (head is None or carried.is_oid(head)):
                raise ValueError("head is not a commit id")
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < -1:
                raise ValueError("seq is not an event number")
            # older witnesses carry nothing: every event was fsynced when it was appended
            w.setdefault("carried", {})
            if not (w.get("boot") is None or isinstance(w.get("boot"), str)):
                raise ValueError("boot is not a boot id")
            if not (w.get("base") is None or carried.is_oid(w["base"])):
                raise ValueError("base is not a commit id")
            if not isinstance(w["carried"], dict) or not all(
                    carried.is_oid(k) and isinstance(v, str) for k, v in w["carried"].items()):
                raise ValueError("its carried objects are malformed")
            if whole:
                for oid, text in w["carried"].items():
                    carried.decode(oid, text)
            self._parsed = (raw, {**w, "carried": dict(w["carried"])})
            return w
        except ValueError as exc:
            raise IntegrityError(f"the journal's witness file {self.witness_path} is not valid ({exc}): "
                                 "it was edited or damaged") from None
        except OSError as exc:
            raise IntegrityError(f"the journal's witness file {self.witness_path} could not be read: "
                                 f"{explain(exc, self.witness_path)}") from None

    def write_witness(self, journal_id: str | None, head: str | None, seq: int, *,
                      carry: dict[str, str] | None = None, base: str | None = None) -> None:
        """Rewrite the witness (synced: what it names is durable from now on).  `base`: where
        the ref stays until the events after it are published (publish.py)."""
        doc: dict = {"schema": WITNESS_SCHEMA, "journal_id": journal_id, "head": head, "seq": seq,
                     "store": str(self.store.root)}
        if carry:
            doc["boot"] = self.boot
            if base != head:
                doc["base"] = base
        record = self._encoder.record(doc, carry or {})
        try:
            self._witness.write(record)
            self.witness_torn = False
            self._carried_n, self._carried_bytes = len(carry or ()), carried.size(carry or {})
            self._parsed = (record, {**doc, "carried": dict(carry or {})})
        except OSError as exc:
            raise JournalError(f"could not write the journal witness {self.witness_path}: "
                               f"{explain(exc, self.witness_path)}") from None

    def _open_locked(self) -> None:
        w = self.read_witness(whole=True)
        tip, rewritten = ref_tip_or_damaged(self, w)
        try:
            head, state, healed = reconcile(self, w, tip)
        except Unpublished as exc:       # readers see the journal up to the ref; appends wait
            self.unwritable = str(exc)
            head, state, healed = tip, (self.state_at(tip) if tip else JournalState()), None
        self.healed = "; ".join(n for n in (rewritten, healed) if n) or None
        if head is None:
            if w is not None and w.get("head"):
                raise IntegrityError(
                    f"the journal is missing from {self.store.root} but its local checkpoint "
                    f"{self.witness_path} records {w.get('seq', 0) + 1} events up to {w['head'][:12]}: "
                    "the journal or the whole store was deleted or replaced. If that was deliberate, "
                    "move the checkpoint file away to start a new journal.")
            self.state = JournalState()
            self.head = None
            try:
                self.genesis_locked(w)
            except JournalError as exc:     # a read-only or full store: readers still work
                self.unwritable = str(exc)
            return
        self.head, self.state = head, state

    def genesis_locked(self, w: dict | None) -> None:
        journal_id = (w or {}).get("journal_id") or str(uuid.uuid4())
        if w is None:
            self.write_witness(journal_id, None, -1)
            w = self.read_witness()
        req = Request({"kind": Genesis.kind, "operation_id": None, "journal_id": journal_id,
                       "created_by": self.me.to_dict()}, {}, False)
        batch_commit(self, [req], w)
        self.publish_locked()
        req.outcome()

    def force_ref(self, head: str) -> None:
        """Point the ref at `head` whatever it holds (healing only: appends compare-and-swap)."""
        self.store.clear_stale_git_lock(self.ref_lock_path)     # a killed writer's: we hold the lock
        try:
            self.repo().references.create(REF, pygit2.Oid(hex=head), force=True)
        except (pygit2.GitError, OSError) as exc:
            raise JournalError(f"could not move {REF} in {self.store.root}: "
                               f"{explain(exc, self.store.root)}") from None

    # --------------------------------------------------------------- refresh
    def refresh(self) -> None:
        """Follow appends made by other processes (O(1) unless the ref moved), after this
        process's own are published (what the head names is then in the store)."""
        if self.pending is not None:
            try:
                self.settle()
            except JournalError:
                pass                     # readers of the chain get it from repo()
        with self.guard:
            if not self.opened:
                self.open()
                return
            if self.integrity_from_alarm and not self.alarm_path.exists():
                # a clean verify (maybe in another process) lifted the alarm
                self.integrity, self.integrity_from_alarm = "ok", False
            if self.integrity != "ok":
                return
            try:
                self.follow_ref()
                self.alarm_file.check()
            except IntegrityError as exc:
                self.integrity = str(exc)
                self.integrity_from_alarm = isinstance(exc, AlarmRaised)

    def follow_ref(self) -> None:
        tip = self.ref_tip()
        if self.pending is not None:
            if tip == self.pending.base:
                return                     # ours, durable, not published yet
            self.pending = None            # published by another process (a heal), maybe appended to
        if tip == self.head:
            return
        if tip is None:
            raise IntegrityError(f"the journal ref {REF} disappeared (last seen at {str(self.head)[:12]})")
        repo = self.repo()
        if self.head is not None and not descends(repo, tip, self.head):
            raise IntegrityError(f"the journal ref moved to {tip[:12]}, which does not descend from "
                                 f"{self.head[:12]}: history was rolled back or rewritten")
        state = self.state_at(tip)
        if state.journal_id != self.state.journal_id and self.state.journal_id is not None:
            raise IntegrityError("the journal ref now points at a different journal")
        self.head, self.state = tip, state

    # ---------------------------------------------------------------- append
    def append(self, kind: type[JournalEvent], fields: dict, *, blobs: dict[str, str] | None = None,
               objects: dict[str, tuple[int, bytes]] | None = None,
               while_running: bool = False, defer: bool = False) -> dict:
        """Append one event of type `kind` (events.Started, ...) durably; returns the payload
        with `id` (the event's commit) added.  `blobs`: name -> blob id, linked from its tree;
        `objects`: those of them not in the store yet, id -> (size, loose bytes), written and
        carried with the event's own objects (loose.staged_blob).  `while_running`: only if its operation is still
        running when the lock is held (else TransitionError): two processes settling the same
        crashed call must not both record it.  Appends queued meanwhile by other threads share
        this one's witness write and sync (group commit).

        `defer` (a call's intent, which the call waits for): return once the event is durable,
        its objects and the ref follow in the background (publish.py).  Otherwise they are
        published before this returns; a publication that fails then leaves the event durable
        and pending (`unwritable` says why), published by the next append or read."""
        req = Request({"kind": kind.kind, **fields}, blobs or {}, while_running, defer, objects or {})
        with self._queue_lock:
            self._queue.append(req)
        try:
            with self.guard:
                if not req.done or (not defer and self.pending is not None):
                    with self.store.writing(), locking.exclusive(self.lock_path):
                        while not req.done:
                            self._commit_queued()
                        if (not defer or req.early) and req.error is None:
                            try:
                                self.publish_locked()
                            except JournalError:
                                pass             # durable; recorded in unwritable / integrity
        except BaseException as exc:
            # a lock that could not be taken: the caller is told the append failed, so it must
            # not be committed later by another thread's batch
            with self._queue_lock:
                if req in self._queue:
                    self._queue.remove(req)
                    raise
            if not req.done:
                with self.guard:                 # the batch that took it is committing it
                    pass
            if not req.done or req.error is not None or not isinstance(exc, Exception):
                raise
            # another thread's batch made it durable: that outcome stands
        if self.pending is not None:
            PUBLISHER.kick(self)
        return req.outcome()

    MAX_BATCH = 32             # requests one witness record takes at most

    def _commit_queued(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue[:self.MAX_BATCH], self._queue[self.MAX_BATCH:]
        try:
            w = batch_prelude(self)
            batch_commit(self, batch, w)
        except BaseException as exc:
            for r in batch:
                if not r.done:          # each waiter its own exception (a traceback is per raise)
                    r.error, r.done = copy_error(exc), True
            if not isinstance(exc, Exception):
                raise

    def sync(self, *, min_objects: int = 0) -> bool:
        """Make the carried objects (one pack: carried.sync) and the ref durable, and stop
        carrying them (the outcome writer calls this when idle).  The fsyncs run outside the journal's lock,
        so the next call's gate check and intent do not wait for them.  Whether it synced."""
        if min_objects > 0 and self._carried_n is not None and not carried.worth_syncing(
                self._carried_n, self._carried_bytes, min_objects):
            return False      # what this process last wrote carries too little (no lock, no read)
        with self.guard, self.store.writing(), locking.exclusive(self.lock_path):
            try:
                self.publish_locked()
                w = self.read_witness()
            except JournalError:
                return False
            if not w or w.get("head") != self.head or self.integrity != "ok" or not w["carried"] \
                    or not carried.worth_syncing(len(w["carried"]), carried.size(w["carried"]), min_objects):
                return False
            if not self._ref_at_head():
                return False
            carry = dict(w["carried"])
        try:
            with self.store.writing():      # a compaction does not move them meanwhile
                # the ref: at least at that head now
                carried.sync(self.store.root, REF, carry, token=self.store.compaction_token())
        except OSError as exc:
            self.unwritable = explain(exc, self.store.root)
            return False
        with self.guard, self.store.writing(), locking.exclusive(self.lock_path):
            try:
                w = self.read_witness()
            except IntegrityError:
                return False
            if not w or w.get("head") != self.head or self.integrity != "ok":
                return False                # another process appended: it carries them on
            synced = set(carry)
            try:
                self.write_witness(w["journal_id"], w["head"], w["seq"],
                                    carry={o: t for o, t in w["carried"].items() if o not in synced})
            except JournalError as exc:
                self.unwritable = str(exc)
                return False
            return True

    def _ref_at_head(self) -> bool:
        """Whether the ref is at the head this journal holds.  What the witness carries is
        synced only then: a lagging ref made durable would read as a rollback later."""
        try:
            return self.ref_tip() == self.head
        except IntegrityError:
            return False

    def sync_carried(self, carry: dict) -> None:
        """Make what the witness carries durable (carried.sync) and the ref (at the head)."""
        if not self._ref_at_head():
            raise JournalError(f"the journal ref is not at {str(self.head)[:12]}; what the witness "
                               "carries stays carried until it is")
        carried.sync(self.store.root, REF, carry, token=self.store.compaction_token())

    def move_ref(self, expected: str | None, new: str) -> None:
        """Compare-and-swap: the ref must still be at `expected` (None: no ref yet).  The caller
        holds the journal lock, so a git lock file of the ref is a killed writer's: removed here,
        where the ref is written, not on every append (an intent does not write it)."""
        self.store.clear_stale_git_lock(self.ref_lock_path)
        repo = self.store.repo()
        try:
            if expected is None:
                repo.references.create(REF, pygit2.Oid(hex=new), force=False)
                return
            ref = repo.references.get(REF)
            if ref is None or str(ref.target) != expected:
                raise IntegrityError(f"the journal ref moved underneath the journal lock "
                                     f"(expected {expected[:12]}): another writer ignores the lock")
            ref.set_target(pygit2.Oid(hex=new), "chronos-git journal append")
        except pygit2.AlreadyExistsError:
            raise IntegrityError("the journal ref appeared underneath the journal lock") from None
        except (pygit2.GitError, OSError) as exc:
            if "does not match" in str(exc) or "not the first parent" in str(exc):
                raise IntegrityError(f"compare-and-swap of {REF} failed: {exc}") from None
            self.unwritable = explain(exc, self.store.root)
            raise JournalError(f"could not move {REF} in {self.store.root}: {self.unwritable}") from None

    # ----------------------------------------------- queries (journal_refs/query.py)
    def operations(self) -> list[OpenOperation]:
        """Every open operation, oldest first."""
        return query.operations(self)

    def unresolved(self) -> list[OpenOperation]:
        """Operations that close the gate: uncertain, or started by a dead owner."""
        return query.unresolved(self)

    def running(self) -> list[OpenOperation]:
        return query.running(self)

    def pinned_checkpoints(self) -> set[str]:
        """Checkpoints that open or replayable operations refer to: retention keeps them."""
        return query.pinned_checkpoints(self)

    def event(self, commit_id: str) -> dict:
        return query.event(self, commit_id)

    def events(self, limit: int | None = 50, *, kinds: set[type[JournalEvent]] | None = None) -> list[dict]:
        """Payloads (with `id`), newest first; `kinds`: only events of these types."""
        return query.events(self, limit, kinds=kinds)

    def walk(self):
        """Payloads (with `id`), newest first, read lazily (query.walk)."""
        return query.walk(self)

    def typed_events(self, limit: int | None = 50, *,
                     kinds: set[type[JournalEvent]] | None = None) -> list[JournalEvent]:
        """`events` as typed views (events.py)."""
        return query.typed_events(self, limit, kinds=kinds)

    def payloads_since(self, base: str | None) -> tuple[str | None, list[dict]] | None:
        """(head, the payloads of the events after `base` up to it, oldest first); every event
        when `base` is None; None when `base` is not below the head (a rewritten history)."""
        return query.payloads_since(self, base)

    def state_at(self, commit_id: str) -> JournalState:
        """The state stored with event `commit_id` (IntegrityError if it is unreadable)."""
        return load_state(self.repo(), commit_id)

    def last_boot(self, most: int = 10_000) -> tuple[str | None, int | None]:
        """(the boot id the journal last recorded, at which seq), looking back at most `most` events."""
        return query.last_boot(self, most)

    def export_head(self) -> dict:
        """The head as a document to keep elsewhere: `verify(exported)` proves append-only growth."""
        return query.export_head(self)

    def status(self) -> dict:
        return query.status(self)

    # ------------------------------------------ verify (journal_refs/verify.py)
    def verify(self, checkpoint: dict | None = None, *, anchored: str | None = None) -> dict:
        """Re-hash and replay the whole chain; O(history).  Never raises for bad data.

        Damage in the chain itself is recorded as the journal alarm (every
        process's gate closes); a clean verify of the whole store clears it.
        """
        return verify_chain(self, checkpoint, anchored=anchored)

    def full_verify_due(self, max_age_s: float = FULL_VERIFY_EVERY_S) -> bool:
        """Whether the whole chain was last verified longer ago than `max_age_s` (or never)."""
        return self.verified.full_verify_due(max_age_s)

    def alarm(self, problems: list[str]) -> None:
        """Record `problems` as the journal alarm (every process's gate closes until a verify
        comes back clean) and close this process's gate now."""
        with self.guard:
            try:
                self.alarm_file.record(problems, self.head, self.me)
                from_alarm = True
            except OSError:
                from_alarm = False
            self.integrity, self.integrity_from_alarm = problems[0], from_alarm

