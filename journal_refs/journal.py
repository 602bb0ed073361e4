"""The journal: append-only, compare-and-swap, durable, tamper-evident.

Each event is a commit whose first parent is the previous event, so git's
object hashes chain the history.  The commit tree holds `state.json` (the
derived state after the event) and, for file tools, the pre- and post-image
blobs of declared paths, which keeps them reachable as long as the journal.

Every append rewrites a *local checkpoint* (the witness) that lives beside the
store, so it survives the store's deletion.  The witness is the one file an
append syncs (in place, one fdatasync: journal_refs/witness.py): it names the
new head and carries the loose bytes of the objects not yet synced
(journal_refs/carried.py), so a power cut that takes them or the ref's last
updates is repaired at the next open.  The order is objects (page cache),
witness (synced: the event is durable), ref.

    ref == checkpoint               fine
    checkpoint descends from ref    the ref lost carried updates (crash, power cut): healed
    ref descends from checkpoint    by one event: a crash of an older version: healed
    anything else                   tampering or corruption: the gate closes

Damage below the head (an edited older event) is found by `verify`, which
walks the whole chain; it records what it found in `<store>/chronos/
journal-alarm.json`, so every process's gate closes (open, refresh and append
check that file) until a later verify of a repaired chain finds it clean.

Crash points (CHRONOS_GIT_FAULT): mid_append (objects written, witness not:
the event never happened), witness_half_written (the new record torn, the
previous one whole: the event never happened), after_witness (witness
durable, ref not moved: the event happened; the ref is moved forward at the
next open or append).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pygit2

from ..engine import faults, locking, loose
from ..engine.checkpoint import signature
from ..engine.durability import settle_objects
from ..engine.errors import explain
from ..engine.fsutil import atomic_write
from ..engine.owner import ProcessIdentity
from ..engine.powercut import current_boot, loose_object_ok
from ..engine.wording import plural
from . import carried, checkpoints
from .events import SCHEMA, WITNESS_SCHEMA, Event, Genesis, canonical, message, parse_message
from .operation import Operation
from .state import JournalState, TransitionError
from .witness import WitnessFile

REF = "refs/chronos/journal"
FULL_VERIFY_EVERY_S = 24 * 3600.0     # a long-lived host re-verifies the whole chain this often
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

__all__ = ["Journal", "JournalError", "IntegrityError", "TransitionError", "REF"]


class JournalError(Exception):
    code = "journal_error"


class IntegrityError(JournalError):
    code = "integrity"


class _AlarmRaised(IntegrityError):
    """The persisted result of a failed verify (see `Journal._check_alarm`)."""


def _read(repo, oid):
    """repo[oid], but a damaged loose object is an error, not a read: libgit2 1.9 loops
    forever inflating a truncated one (engine.powercut)."""
    oid = str(oid)
    if not loose_object_ok(Path(repo.path) / "objects" / oid[:2] / oid[2:]):
        raise ValueError(f"object {oid[:12]} is damaged (truncated or edited)")
    return repo[oid]


def _read_commit(repo, oid) -> pygit2.Commit:
    """A journal event: a ref or a witness naming a tree or a blob is damage (ValueError)."""
    obj = _read(repo, oid)
    if not isinstance(obj, pygit2.Commit):
        raise ValueError(f"object {str(oid)[:12]} is a {obj.type_str}, not a journal event")
    return obj


def _descends(repo, a: str, b: str) -> bool:
    """Whether commit `a` descends from `b`; a witness naming a tree or a blob is damage."""
    try:
        return repo.descendant_of(a, b)
    except (ValueError, pygit2.GitError) as exc:
        raise IntegrityError(f"the journal and its local checkpoint cannot be compared ({exc}): "
                             "one of them names something that is not a journal event") from None


def witness_path_for(store_root: Path) -> Path:
    """Beside the store's real folder, so that the store reached through a symlink has the same
    journal checkpoint (one kept beside such a link before, and only there, is still used)."""
    given, real = Path(store_root), Path(os.path.realpath(store_root))
    ours = real.parent / (real.name + ".journal-checkpoint.json")
    if real != given:
        beside_link = given.parent / (given.name + ".journal-checkpoint.json")
        if beside_link.exists() and not ours.exists():
            return beside_link
    return ours


class Journal:
    """One per store per process; thread-safe."""

    def __init__(self, store, *, witness_path: Path | None = None):
        self.store = store
        self.witness_path = Path(witness_path) if witness_path else witness_path_for(store.root)
        self._witness = WitnessFile(self.witness_path)
        self.witness_torn = False        # the witness's standby slot was torn when last read
        self._lock_path = store.meta_dir / "journal.lock"
        self.alarm_path = store.meta_dir / "journal-alarm.json"
        self.verified_path = store.meta_dir / "journal-verified.json"   # the last verified head
        self._integrity_from_alarm = False
        self._guard = threading.RLock()
        self.head: str | None = None
        self.state = JournalState()
        self.integrity = "ok"            # or a message: the gate is closed
        self.poisoned: str | None = None  # an outcome could not be recorded in this process
        self.opened = False
        self.healed: str | None = None
        self.unwritable: str | None = None   # why the last write failed (full disk, read-only store)
        self.me = ProcessIdentity.current()
        self.boot = current_boot()       # carried objects are written back only in a later boot
        self._carried_n: int | None = None   # objects the witness this process last wrote carries
        self._parsed: tuple[bytes, dict] | None = None   # the last witness record read, checked

    # ------------------------------------------------------------------ open
    def open(self) -> Journal:
        with self._guard, self.store.writing(), locking.exclusive(self._lock_path):
            if self.opened:
                return self
            self.store.clear_stale_git_lock(self.store.root / (REF + ".lock"))
            self._witness.clear_temp()
            try:
                self._open_locked()
                self._check_alarm()
                self._verify_new_events()
            except IntegrityError as exc:
                self.integrity = str(exc)
                self._integrity_from_alarm = isinstance(exc, _AlarmRaised)
            self.opened = True
            return self

    def _repo(self) -> pygit2.Repository:
        return self.store.repo()

    def _ref_tip(self) -> str | None:
        try:
            ref = self._repo().references.get(REF)
        except pygit2.GitError as exc:
            raise IntegrityError(f"journal ref unreadable: {exc}") from None
        return str(ref.target) if ref is not None else None

    def _read_witness(self, *, whole: bool = False) -> dict | None:
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
            if not isinstance(w["carried"], dict) or not all(
                    carried.is_oid(k) and isinstance(v, str) for k, v in w["carried"].items()):
                raise ValueError("its carried objects are malformed")
            if whole:
                for oid, text in w["carried"].items():
                    carried.decode(oid, text)
            self._parsed = (raw, {**w, "carried": dict(w["carried"])})
            return w
        except ValueError as exc:
            raise IntegrityError(f"local journal checkpoint {self.witness_path} is not valid ({exc}): "
                                 "it was edited or damaged") from None
        except OSError as exc:
            raise IntegrityError(f"local journal checkpoint {self.witness_path} could not be read: "
                                 f"{explain(exc, self.witness_path)}") from None

    def _write_witness(self, journal_id: str | None, head: str | None, seq: int, *,
                       carry: dict[str, str] | None = None) -> None:
        doc: dict = {"schema": WITNESS_SCHEMA, "journal_id": journal_id, "head": head, "seq": seq,
               "store": str(self.store.root)}
        if carry:
            doc["carried"] = carry
            doc["boot"] = self.boot
        record = canonical(doc).encode()
        try:
            self._witness.write(record)
            self.witness_torn = False
            self._carried_n = len(carry or ())
            self._parsed = (record, {**doc, "carried": dict(carry or {})})
        except OSError as exc:
            raise JournalError(f"could not write the journal witness {self.witness_path}: "
                               f"{explain(exc, self.witness_path)}") from None

    def _check_alarm(self) -> None:
        """O(1): one failed stat when all is well."""
        try:
            raw = self.alarm_path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _AlarmRaised(f"the journal alarm {self.alarm_path} is unreadable ({exc})") from None
        try:
            what = json.loads(raw).get("problem") or "damage"
        except (ValueError, AttributeError):
            what = "damage (the alarm file itself is not valid JSON)"
        raise _AlarmRaised(
            f"the integrity check found: {what}. Recorded in {self.alarm_path}; protected calls stay "
            "refused until `journal verify` comes back clean after the repair (or the store and its "
            "checkpoint file are moved away to start a new journal)")

    def _raise_alarm(self, problems: list[str], tip: str | None) -> None:
        data = canonical({"problem": problems[0], "problems": problems, "head": tip,
                          "detected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "detected_by": self.me.to_dict()}).encode()
        atomic_write(self.alarm_path, data, mode=0o600, durable=True)

    def _load_state_at(self, commit_id: str) -> JournalState:
        repo = self._repo()
        try:
            commit = _read_commit(repo, commit_id)
            blob = _read(repo, _read(repo, commit.tree_id)["state.json"].id)
            return JournalState.from_json(blob.data)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise IntegrityError(f"journal event {commit_id[:12]} is unreadable or corrupt ({exc})") from None

    def _open_locked(self) -> None:
        w = self._read_witness(whole=True)
        tip, rewritten = self._ref_tip_or_damaged(w)
        head, state, healed = self._reconcile(w, tip)
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
                self._genesis_locked(w)
            except JournalError as exc:     # a read-only or full store: readers still work
                self.unwritable = str(exc)
            return
        self.head, self.state = head, state

    def _genesis_locked(self, w: dict | None) -> None:
        journal_id = (w or {}).get("journal_id") or str(uuid.uuid4())
        if w is None:
            self._write_witness(journal_id, None, -1)
            w = self._read_witness()
        self._append_locked({"kind": Genesis.kind, "operation_id": None, "journal_id": journal_id,
                             "created_by": self.me.to_dict()}, blobs={}, w=w)

    def _ref_tip_or_damaged(self, w: dict | None) -> tuple[str | None, str | None]:
        """(the ref's target, a note).  A ref a power cut left unreadable is rewritten to the
        witness head (the newest event that was durable), as long as that event is whole."""
        try:
            return self._ref_tip(), None
        except IntegrityError:
            whead = (w or {}).get("head")
            if not w or not whead or not self._power_cut_since(w):
                raise
            try:
                carried.restore(self._repo(), self.store.root / "objects", w["carried"])
                self._load_state_at(whead)          # whole, or IntegrityError
                (self.store.root / REF).unlink(missing_ok=True)
                self._force_ref(whead)
            except (OSError, ValueError, JournalError) as exc:
                raise IntegrityError(f"the journal ref is unreadable and could not be rewritten: {exc}") from None
            return whead, "the journal ref was unreadable (power cut); rewritten to the local checkpoint's head"

    def _force_ref(self, head: str) -> None:
        try:
            self._repo().references.create(REF, pygit2.Oid(hex=head), force=True)
        except (pygit2.GitError, OSError) as exc:
            raise JournalError(f"could not move {REF} in {self.store.root}: "
                               f"{explain(exc, self.store.root)}") from None

    def _power_cut_since(self, w: dict | None) -> bool:
        """Whether the machine may have lost its page cache since the witness was written:
        it names another boot (or the boot is unknown).  Only then are carried objects
        written back and may the ref lag by more than the one event a crash leaves."""
        if not w:
            return False
        return bool(w["carried"]) and (self.boot is None or w.get("boot") != self.boot)

    def _reconcile(self, w: dict | None, tip: str | None) -> tuple[str | None, JournalState, str | None]:
        """The ref (`tip`) against the witness `w`: (head, state at head, a note of what was
        healed).  A ref behind the witness by one carried event (a crash between the two
        writes), or after a power cut by any carried events, is moved forward; after a power
        cut, carried objects it took are written back first.  Anything a crash cannot
        explain raises IntegrityError."""
        whead = (w or {}).get("head")
        power_cut = self._power_cut_since(w)
        if (tip is not None and w is not None and tip == whead == self.head and not power_cut
                and w["seq"] == self.state.seq and w["journal_id"] == self.state.journal_id):
            return tip, self.state, None          # an append's usual case: nothing to load
        notes = []
        repo = self._repo()
        if w and w["carried"] and power_cut:
            try:
                back = carried.restore(repo, self.store.root / "objects", w["carried"])
            except (OSError, ValueError) as exc:
                raise IntegrityError(f"journal objects carried by {self.witness_path} could not be "
                                     f"written back: {exc}") from None
            if back:
                notes.append(f"{plural(len(back), 'journal object')} lost in a power cut "
                             f"{'was' if len(back) == 1 else 'were'} written back from the local checkpoint")
        if whead and w is not None and tip != whead and self._behind_by_carried(repo, tip, whead, w["carried"],
                                                              None if power_cut else 1):
            note = ("the journal ref had not taken its last update(s) (crash or power cut); "
                    "moved forward to the local checkpoint")
            try:
                self._force_ref(whead)
            except JournalError as exc:        # a read-only store: readers still see the event
                self.unwritable = str(exc)
                note += f" (in memory only: {exc})"
            notes.append(note)
            tip = whead
        if tip is None:
            return None, JournalState(), "; ".join(notes) or None
        state = self._load_state_at(tip)
        lag = self._check_witness(w, tip, state)
        if lag:
            # the ref ahead of the witness (a crash of an older version between the two):
            # what the witness carried is synced before it is rewritten without it
            try:
                commit = repo[tip]
                carried.sync(self.store.root, REF, w["carried"],   # type: ignore[index]  # _check_witness raised if w is None
                             also=[tip, str(commit.tree_id), *(str(e.id) for e in commit.tree)])   # type: ignore[attr-defined]  # an event: a commit
                self._write_witness(state.journal_id, tip, state.seq)
            except (JournalError, OSError, pygit2.GitError) as exc:
                self.unwritable = str(exc)
                lag += f" (in memory only: {exc})"
            notes.append(lag)
        return tip, state, "; ".join(notes) or None

    @staticmethod
    def _behind_by_carried(repo, tip: str | None, whead: str, carry: dict, most: int | None) -> bool:
        """Whether every event after `tip` up to `whead` (at `most` of them) is one the
        witness carries."""
        cid: str | None = whead
        n = 0
        try:
            while cid != tip:
                n += 1
                if cid not in carry or (most is not None and n > most):
                    return False
                commit = _read_commit(repo, cid)
                cid = str(commit.parent_ids[0]) if commit.parent_ids else None
                if cid is None:
                    return tip is None
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return True

    def _check_witness(self, w: dict | None, tip: str, state: JournalState) -> str | None:
        """The local checkpoint against the journal at `tip` (state `state`): IntegrityError
        unless it matches, or lags consistently (crash between the two writes: returns a note)."""
        if w is None:
            raise IntegrityError(
                f"the local journal checkpoint {self.witness_path} is missing while the journal has "
                f"{state.seq + 1} events: it was deleted, or the store was copied from elsewhere")
        if w["journal_id"] != state.journal_id:
            raise IntegrityError(f"the local journal checkpoint belongs to journal {w['journal_id']}, "
                                 f"but the store holds journal {state.journal_id}")
        whead = w.get("head")
        repo = self._repo()
        if whead == tip:
            if w.get("seq") != state.seq:
                raise IntegrityError(f"the local journal checkpoint says seq {w.get('seq')} at "
                                     f"{tip[:12]}, the journal says {state.seq}: the checkpoint was edited")
            return None
        if self.witness_torn:
            # an event counts once its record is durable, so a write the disk tore cannot be
            # one the ref already took: the newest record was lost after it was written
            raise IntegrityError(
                f"the newest record of the local journal checkpoint {self.witness_path} is damaged "
                f"and the journal is ahead of the one that survives (at {str(whead)[:12]}, seq "
                f"{w.get('seq')}; the journal is at {tip[:12]}, seq {state.seq}): the file was "
                "edited or the disk lost written data")
        if whead is None:
            if w.get("seq", -1) != -1:
                raise IntegrityError(f"the local journal checkpoint records no head but seq {w.get('seq')}: "
                                     "the checkpoint was edited")
            return "the first event was written but the checkpoint was not (crash); healed"
        try:
            exists = pygit2.Oid(hex=whead) in repo.odb if len(whead) == 40 else False
        except (ValueError, pygit2.GitError):
            exists = False
        if not exists:
            raise IntegrityError(
                f"the journal head {tip[:12]} does not contain the checkpointed event "
                f"{whead[:12]} (seq {w.get('seq')}): the journal was replaced or its history rewritten")
        if _descends(repo, tip, whead):
            wseq = self._load_state_at(whead).seq
            if w.get("seq") != wseq:
                raise IntegrityError(
                    f"the local journal checkpoint says seq {w.get('seq')} at {whead[:12]}, but that "
                    f"event is seq {wseq}: the checkpoint was edited")
            if state.seq - wseq > 1:
                # every append rewrites the witness, and no append starts while it lags:
                # a crash leaves it one event behind at most
                raise IntegrityError(
                    f"the witness {self.witness_path} is {state.seq - wseq} events behind the journal "
                    f"(it records {whead[:12]}, seq {wseq}; the journal is at seq {state.seq}): it was "
                    "moved back or replaced with an older copy")
            return ("the journal ref was one event ahead of its witness (a crash between the two "
                    "writes); healed")
        if _descends(repo, whead, tip):
            raise IntegrityError(
                f"the journal ref was rolled back: it points at {tip[:12]} (seq {state.seq}) but the "
                f"local checkpoint records {whead[:12]} (seq {w.get('seq')})")
        raise IntegrityError(
            f"the journal has diverged from its local checkpoint: head {tip[:12]} does not "
            f"descend from checkpointed {whead[:12]}: history was rewritten")

    # --------------------------------------------------------------- refresh
    def refresh(self) -> None:
        """Follow appends made by other processes (O(1) unless the ref moved)."""
        with self._guard:
            if not self.opened:
                self.open()
                return
            if self._integrity_from_alarm and not self.alarm_path.exists():
                # a clean verify (maybe in another process) lifted the alarm
                self.integrity, self._integrity_from_alarm = "ok", False
            if self.integrity != "ok":
                return
            try:
                self._follow_ref()
                self._check_alarm()
            except IntegrityError as exc:
                self.integrity = str(exc)
                self._integrity_from_alarm = isinstance(exc, _AlarmRaised)

    def _follow_ref(self) -> None:
        tip = self._ref_tip()
        if tip == self.head:
            return
        if tip is None:
            raise IntegrityError(f"the journal ref {REF} disappeared (last seen at {str(self.head)[:12]})")
        repo = self._repo()
        if self.head is not None and not _descends(repo, tip, self.head):
            raise IntegrityError(f"the journal ref moved to {tip[:12]}, which does not descend from "
                                 f"{self.head[:12]}: history was rolled back or rewritten")
        state = self._load_state_at(tip)
        if state.journal_id != self.state.journal_id and self.state.journal_id is not None:
            raise IntegrityError("the journal ref now points at a different journal")
        self.head, self.state = tip, state

    # ---------------------------------------------------------------- append
    def append(self, kind: type[Event], fields: dict, *, blobs: dict[str, str] | None = None,
               while_running: bool = False) -> dict:
        """Append one event of type `kind` (events.Started, ...) durably; returns the payload
        with `id` (the event's commit) added.  `while_running`: only if its operation is still
        running when the lock is held (else TransitionError): two processes settling the same
        crashed call must not both record it."""
        with self._guard, self.store.writing(), locking.exclusive(self._lock_path):
            if not self.opened:
                self.open()
            if self.integrity != "ok":
                raise IntegrityError(self.integrity)
            try:
                self._follow_ref()
                self._check_alarm()
                # this append will overwrite the witness: it must still be ours, or deleting or
                # editing it while a process runs would go unnoticed
                w = self._read_witness()
                if self.head is not None or (w or {}).get("head"):
                    head, state, healed = self._reconcile(w, self.head)
                    if head is None:
                        raise IntegrityError(f"the journal ref {REF} is missing but the local checkpoint "
                                             f"{self.witness_path} records events: it was deleted")
                    self.head, self.state = head, state
                    if healed:
                        self.healed = healed
                        w = self._read_witness()
            except IntegrityError as exc:
                self.integrity = str(exc)
                self._integrity_from_alarm = isinstance(exc, _AlarmRaised)
                raise
            if while_running and (self.state.open.get(fields.get("operation_id")) or {}).get("state") != "running":
                raise TransitionError(f"operation {fields.get('operation_id')} is no longer running "
                                      "(settled meanwhile)")
            self.store.clear_stale_git_lock(self.store.root / (REF + ".lock"))
            if self.head is None:           # the genesis could not be written when we opened
                self._genesis_locked(w)
                w = self._read_witness()
            return self._append_locked({"kind": kind.kind, **fields}, blobs=blobs or {}, w=w)

    def _append_locked(self, fields: dict, *, blobs: dict[str, str], w: dict | None) -> dict:
        payload = {"schema": SCHEMA, "seq": self.state.seq + 1, "timestamp_ns": time.time_ns(), **fields}
        new_state = self.state.apply(payload)           # validates the transition
        repo = self._repo()
        try:
            # written as git writes loose objects, to the page cache only: the witness carries
            # them (the bytes in hand, not read back) until `sync`
            objects = self.store.root / "objects"
            state = new_state.to_json().encode()
            state_blob, state_raw = loose.write(objects, pygit2.GIT_OBJECT_BLOB, state)
            listing = loose.flat_tree({**blobs, "state.json": state_blob})
            tree, tree_raw = loose.write(objects, pygit2.GIT_OBJECT_TREE, listing)
            sig = signature(payload["timestamp_ns"] / 1e9)
            body = loose.commit_data(tree, [self.head] if self.head else [], sig, message(payload))
            commit, commit_raw = loose.write(objects, pygit2.GIT_OBJECT_COMMIT, body)
            new, big = carried.carry(repo, [commit, tree, state_blob, *blobs.values()],
                                     known={commit: (len(body), commit_raw), tree: (len(listing), tree_raw),
                                            state_blob: (len(state), state_raw)})
            settle_objects(objects, big)
            carry = dict((w or {}).get("carried") or {}) if (w or {}).get("head") == self.head else {}
            if carried.full(carry, new):
                self._sync_carried(carry)
                carry = {}
        except (pygit2.GitError, OSError) as exc:
            self.unwritable = explain(exc, self.store.root)
            raise JournalError(f"could not append to the journal in {self.store.root}: "
                               f"{self.unwritable}") from None
        faults.hit("mid_append")
        self._write_witness(new_state.journal_id, commit, new_state.seq, carry={**carry, **new})
        faults.hit("after_witness")
        # the event is durable; the ref follows (not fsynced: the witness carries it)
        try:
            self._move_ref(repo, commit)
        except JournalError:
            try:                             # not moved: the event must not count either
                self._write_witness(self.state.journal_id, self.head, self.state.seq, carry=carry)
            except JournalError as exc:
                self.poisoned = f"the journal ref could not be moved and its witness not put back: {exc}"
            raise
        self.head, self.state = commit, new_state
        self.unwritable = None
        return {**payload, "id": commit}

    def sync(self, *, min_objects: int = 0) -> bool:
        """Make the carried objects (one pack: carried.sync) and the ref durable, and stop
        carrying them (the outcome writer calls this when idle).  The fsyncs run outside the journal's lock,
        so the next call's gate check and intent do not wait for them.  Whether it synced."""
        if min_objects > 0 and self._carried_n is not None and self._carried_n <= min_objects:
            return False      # what this process last wrote carries too little (no lock, no read)
        with self._guard, self.store.writing(), locking.exclusive(self._lock_path):
            try:
                w = self._read_witness()
            except IntegrityError:
                return False
            if not w or w.get("head") != self.head or len(w["carried"]) <= max(min_objects, 0) \
                    or self.integrity != "ok":
                return False
            if not self._ref_at_head():
                return False
            carry = dict(w["carried"])
        try:
            with self.store.writing():      # a compaction does not move them meanwhile
                carried.sync(self.store.root, REF, carry)   # the ref: at least at that head now
        except OSError as exc:
            self.unwritable = explain(exc, self.store.root)
            return False
        with self._guard, self.store.writing(), locking.exclusive(self._lock_path):
            try:
                w = self._read_witness()
            except IntegrityError:
                return False
            if not w or w.get("head") != self.head or self.integrity != "ok":
                return False                # another process appended: it carries them on
            synced = set(carry)
            try:
                self._write_witness(w["journal_id"], w["head"], w["seq"],
                                    carry={o: t for o, t in w["carried"].items() if o not in synced})
            except JournalError as exc:
                self.unwritable = str(exc)
                return False
            return True

    def _ref_at_head(self) -> bool:
        """Whether the ref is at the head this journal holds.  What the witness carries is
        synced only then: a lagging ref made durable would read as a rollback later."""
        try:
            return self._ref_tip() == self.head
        except IntegrityError:
            return False

    def _sync_carried(self, carry: dict) -> None:
        """Make what the witness carries durable (carried.sync) and the ref (at the head)."""
        if not self._ref_at_head():
            raise JournalError(f"the journal ref is not at {str(self.head)[:12]}; what the witness "
                               "carries stays carried until it is")
        carried.sync(self.store.root, REF, carry)

    def _move_ref(self, repo, new: str) -> None:
        """Compare-and-swap: the ref must still be where we last saw it."""
        try:
            if self.head is None:
                repo.references.create(REF, pygit2.Oid(hex=new), force=False)
                return
            ref = repo.references.get(REF)
            if ref is None or str(ref.target) != self.head:
                raise IntegrityError(f"the journal ref moved underneath the journal lock "
                                     f"(expected {self.head[:12]}): another writer ignores the lock")
            ref.set_target(pygit2.Oid(hex=new), "chronos-git journal append")
        except pygit2.AlreadyExistsError:
            raise IntegrityError("the journal ref appeared underneath the journal lock") from None
        except (pygit2.GitError, OSError) as exc:
            if "does not match" in str(exc) or "not the first parent" in str(exc):
                raise IntegrityError(f"compare-and-swap of {REF} failed: {exc}") from None
            self.unwritable = explain(exc, self.store.root)
            raise JournalError(f"could not move {REF} in {self.store.root}: {self.unwritable}") from None

    # --------------------------------------------------------------- queries
    def operations(self) -> list[Operation]:
        """Every open operation, oldest first."""
        self.refresh()
        return [Operation.from_state(op, info)
                for op, info in sorted(self.state.open.items(), key=lambda kv: kv[1].get("started_seq", 0))]

    def unresolved(self) -> list[Operation]:
        """Operations that close the gate: uncertain, or started by a dead owner."""
        return [op for op in self.operations() if op.state != "running"]

    def running(self) -> list[Operation]:
        return [op for op in self.operations() if op.state == "running"]

    def pinned_checkpoints(self) -> set[str]:
        """Checkpoints that open or replayable operations refer to: retention keeps them."""
        self.refresh()
        out = set()
        for info in list(self.state.open.values()) + list(self.state.replayable.values()):
            if info.get("pre_checkpoint"):
                out.add(info["pre_checkpoint"])
        return out

    def event(self, commit_id: str) -> dict:
        commit = self._repo()[commit_id]
        payload, _ = parse_message(commit.message)   # type: ignore[attr-defined]  # event ids name commits
        return {**payload, "id": str(commit.id)}

    def events(self, limit: int | None = 50, *, kinds: set[type[Event]] | None = None) -> list[dict]:
        """Payloads (with `id`), newest first; `kinds`: only events of these types."""
        names = {k.kind for k in kinds} if kinds else None
        self.refresh()
        out: list[dict] = []
        repo = self._repo()
        cid = self.head
        while cid and (limit is None or len(out) < limit):
            commit = _read_commit(repo, cid)
            payload, _ = parse_message(commit.message)
            if names is None or payload["kind"] in names:
                out.append({**payload, "id": cid})
            cid = str(commit.parent_ids[0]) if commit.parent_ids else None
        return out

    def payloads_since(self, base: str | None) -> tuple[str | None, list[dict]] | None:
        """(head, the payloads of the events after `base` up to it, oldest first); every event
        when `base` is None; None when `base` is not below the head (a rewritten history)."""
        with self._guard:
            self.refresh()
            head = self.head
            repo = self._repo()
            out: list[dict] = []
            cid = head
            while cid and cid != base:
                commit = _read_commit(repo, cid)
                payload, _ = parse_message(commit.message)
                out.append({**payload, "id": cid})
                cid = str(commit.parent_ids[0]) if commit.parent_ids else None
            if base is not None and cid != base:
                return None
            out.reverse()
            return head, out

    def state_at(self, commit_id: str) -> JournalState:
        """The state stored with event `commit_id` (IntegrityError if it is unreadable)."""
        return self._load_state_at(commit_id)

    def last_boot(self, most: int = 10_000) -> tuple[str | None, int | None]:
        """(the boot id the journal last recorded, at which seq): the newest event that names
        one (a call's owner, the genesis's creator, a power-cut repair), looking back at most
        `most` events; (None, None) when none does."""
        self.refresh()
        repo = self._repo()
        cid, n = self.head, 0
        while cid and n < most:
            commit = _read_commit(repo, cid)
            payload, _ = parse_message(commit.message)
            for who in (payload.get("owner"), payload.get("created_by"), payload):
                boot = who.get("boot_id") if isinstance(who, dict) else None
                if isinstance(boot, str) and boot and boot != "unknown":
                    return boot, payload.get("seq")
            cid = str(commit.parent_ids[0]) if commit.parent_ids else None
            n += 1
        return None, None

    def alarm(self, problems: list[str]) -> None:
        """Record `problems` as the journal alarm (every process's gate closes until a verify
        comes back clean) and close this process's gate now."""
        with self._guard:
            try:
                self._raise_alarm(problems, self.head)
                from_alarm = True
            except OSError:
                from_alarm = False
            self.integrity, self._integrity_from_alarm = problems[0], from_alarm

    def export_head(self) -> dict:
        """The head as a document to keep elsewhere: `verify(exported)` proves append-only growth."""
        self.refresh()
        return {"schema": WITNESS_SCHEMA, "journal_id": self.state.journal_id, "head": self.head,
                "seq": self.state.seq, "store": str(self.store.root),
                "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def status(self) -> dict:
        self.refresh()
        return {
            "integrity": self.integrity if not self.poisoned else f"poisoned: {self.poisoned}",
            "head": self.head,
            "events": self.state.seq + 1,
            "journal_id": self.state.journal_id,
            "unresolved": [o.to_dict() for o in self.unresolved()] if self.integrity == "ok" else [],
            "running": [o.to_dict() for o in self.running()] if self.integrity == "ok" else [],
            "replayable": sorted(self.state.replayable),
            "totals": self.state.totals,
            "healed": self.healed,
            "checkpoint_file": str(self.witness_path),
        }

    # ---------------------------------------------------------------- verify
    def verify(self, checkpoint: dict | None = None, *, anchored: str | None = None) -> dict:
        """Re-hash and replay the whole chain; O(history).  Never raises for bad data.

        Damage in the chain itself is recorded as the journal alarm (every
        process's gate closes); a clean verify of the whole store clears it.
        """
        t0 = time.monotonic()
        problems: list[str] = []
        chain_problems: list[str] = []
        witness_problems: list[str] = []
        healed = None
        with self._guard, self.store.writing():     # compaction never swaps packs underneath
            if not self.opened:
                self.open()
            if self.integrity != "ok" and not self._integrity_from_alarm:
                problems.append(self.integrity)
            repo = self._repo()
            # the ref and the local checkpoint are read together, under the append lock:
            # an append in between must not look like a mismatch
            with locking.exclusive(self._lock_path):
                try:
                    tip = self._ref_tip()
                except IntegrityError as exc:
                    tip = None
                    problems.append(str(exc))
                try:
                    w = self._read_witness(whole=True)
                    if w is None and tip is None:
                        pass                # no journal yet (nothing could be written so far)
                    elif w is None:
                        witness_problems.append(f"local checkpoint {self.witness_path} is missing")
                    elif w.get("head") != tip:
                        try:
                            head, state, healed = self._reconcile(w, tip)
                        except IntegrityError as exc:
                            witness_problems.append(
                                f"local checkpoint records head {str(w.get('head'))[:12]} "
                                f"(seq {w.get('seq')}), the journal is at {str(tip)[:12]}: {exc}")
                        else:
                            if head is None:
                                witness_problems.append(f"the journal is missing but local checkpoint "
                                                        f"records head {str(w.get('head'))[:12]}")
                            elif healed and head != self.head and self.integrity == "ok":
                                self.head, self.state = head, state
                            tip = head
                except IntegrityError as exc:
                    witness_problems.append(str(exc))
            chain: list[str] = []
            cid = tip
            try:
                while cid:
                    chain.append(cid)
                    commit = _read_commit(repo, cid)
                    cid = str(commit.parent_ids[0]) if commit.parent_ids else None
            except (KeyError, ValueError, pygit2.GitError) as exc:
                chain_problems.append(f"the chain is broken at event {cid[:12] if cid else '?'}: {exc}")
            chain.reverse()
            state = JournalState()
            for i, cid in enumerate(chain if not chain_problems else ()):
                try:
                    state = self._check_event(repo, cid, state, first=i == 0)
                except (ValueError, KeyError, TransitionError, pygit2.GitError) as exc:
                    chain_problems.append(f"event #{i} ({cid[:12]}): {exc}")
                    break
            if not chain_problems:
                # whole and valid, but without an event known to have been in it: rolled back (the
                # ref and the local checkpoint put back together), which must not be cleared as clean
                held, marker = set(chain), self._read_verified()
                if isinstance(marker.get("head"), str) and not self._still_holds(repo, held, marker["head"]):
                    chain_problems.append(self._lost_verified(marker))
                if anchored and not self._still_holds(repo, held, anchored):
                    chain_problems.append(
                        f"the journal no longer contains event {anchored[:12]}, which the local anchor chain "
                        "(refs/chronos/anchor/journal, what pushes send) mirrors: its history was rewritten "
                        "or rolled back")
            trust = None
            if not chain_problems and tip is not None:
                # the checkpoints the chain names, against the refs (journal_refs/checkpoints.py)
                try:
                    trust = checkpoints.check(self, full=True)
                    chain_problems += trust.problems
                except (IntegrityError, KeyError, ValueError, OSError, pygit2.GitError) as exc:
                    problems.append(f"the checkpoints the journal names could not be checked: {exc}")
            problems += chain_problems + witness_problems
            if chain_problems:
                try:
                    self._raise_alarm(chain_problems, tip)
                    alarmed = True
                except OSError as exc:
                    problems.append(f"could not record the journal alarm {self.alarm_path}: {exc}")
                    alarmed = False
                if self.integrity == "ok":        # like the alarm: a clean verify lifts it again
                    self.integrity, self._integrity_from_alarm = chain_problems[0], alarmed
            elif not problems:
                try:
                    if self.alarm_path.exists():
                        self.alarm_path.unlink()
                except OSError as exc:
                    problems.append(f"the journal is clean but the old alarm {self.alarm_path} could not "
                                    f"be removed: {explain(exc, self.alarm_path)}")
                if self._integrity_from_alarm and not problems:
                    self.integrity, self._integrity_from_alarm = "ok", False
                if not problems:
                    self._note_verified(tip, state.seq, full=True)
                    if trust is not None:
                        checkpoints.note_checked(self.store, trust)
            internal_ok = not problems
            ext = None
            ext_ours = False
            if checkpoint is not None:
                ext = self._check_exported(checkpoint, tip)
                # a checkpoint of this journal that does not fit proves a rewrite; a foreign
                # or malformed file is only a wrong argument and must not close the gate
                ext_ours = (isinstance(checkpoint, dict) and checkpoint.get("schema") == WITNESS_SCHEMA
                            and checkpoint.get("journal_id") == self.state.journal_id)
                if ext != "ok":
                    problems.append(ext)
        ok = not problems
        if self.integrity == "ok" and (not internal_ok or (not ok and ext_ours)):
            self.integrity = problems[0]
        return {"integrity": "ok" if ok else problems[0], "problems": problems, "events": len(chain),
                "head": tip, "journal_id": state.journal_id, "external_checkpoint": ext,
                "healed": healed, "seconds": round(time.monotonic() - t0, 3)}

    @staticmethod
    def _check_event(repo, cid: str, state: JournalState, *, first: bool) -> JournalState:
        """One event re-hashed, parsed and replayed on `state`: the state after it, or an error."""
        commit = _read_commit(repo, cid)
        _typ, data = repo.odb.read(cid)
        if hashlib.sha1(b"commit %d\0" % len(data) + data).hexdigest() != cid:
            raise ValueError("object hash mismatch")
        payload, raw = parse_message(commit.message)
        if canonical(payload) != raw:
            raise ValueError("payload is not in canonical form")
        if payload.get("schema") != SCHEMA:
            raise ValueError(f"unknown schema {payload.get('schema')!r}")
        if first and (payload.get("kind") != Genesis.kind or commit.parent_ids):
            raise ValueError("the chain does not start with a genesis event")
        state = state.apply(payload)
        if _read(repo, _read(repo, commit.tree_id)["state.json"].id).data.decode() != state.to_json():
            raise ValueError("stored state.json differs from the replayed state")
        return state

    # ------------------------------------------------------ verified head
    def _read_verified(self) -> dict:
        try:
            data = json.loads(self.verified_path.read_bytes())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _note_verified(self, head: str | None, seq: int, *, full: bool) -> None:
        prior = self._read_verified()
        record = {"head": head, "seq": seq,
                  "full_at": time.time() if full else prior.get("full_at")}
        try:
            atomic_write(self.verified_path, canonical(record).encode(), durable=False)
        except OSError:
            pass                     # a read-only store: the next open verifies these again

    def full_verify_due(self, max_age_s: float = FULL_VERIFY_EVERY_S) -> bool:
        """Whether the whole chain was last verified longer ago than `max_age_s` (or never)."""
        full_at = self._read_verified().get("full_at")
        return not isinstance(full_at, (int, float)) or time.time() - full_at > max_age_s

    def _verify_new_events(self) -> None:
        """Re-hash and replay the events appended since the last verified head: O(new events),
        at every open, so damage is found without waiting for a manual `journal verify`.
        Damage below that head is the daily full verification's (Chronos.start)."""
        tip = self.head
        if tip is None:
            return
        marker = self._read_verified()
        base = marker.get("head") if isinstance(marker.get("head"), str) else None
        if base == tip:
            return
        repo = self._repo()
        chain: list[str] = []
        cid: str | None = tip
        try:
            while cid and cid != base:
                chain.append(cid)
                commit = _read_commit(repo, cid)
                cid = str(commit.parent_ids[0]) if commit.parent_ids else None
        except (KeyError, ValueError, pygit2.GitError) as exc:
            self._damage(f"the chain is broken at event {cid[:12] if cid else '?'}: {exc}", tip)
        if base is not None and cid != base:
            self._damage(self._lost_verified(marker), tip)
        state = self._load_state_at(base) if base else JournalState()
        for i, cid in enumerate(reversed(chain)):
            try:
                state = self._check_event(repo, cid, state, first=base is None and i == 0)
            except (ValueError, KeyError, TransitionError, pygit2.GitError) as exc:
                self._damage(f"event {cid[:12]} (seq {state.seq + 1}): {exc}", tip)
        self._note_verified(tip, state.seq, full=base is None)

    def _still_holds(self, repo, chain: set[str], head: str) -> bool:
        """Whether the journal holds `head`: in the chain just read, or (appended by another
        process since, and so noted or mirrored) below the ref as it is now, read under the
        journal's lock."""
        if head in chain:
            return True
        try:
            with locking.exclusive(self._lock_path):
                now = self._ref_tip()
        except IntegrityError:
            return False
        try:
            return now is not None and (now == head or repo.descendant_of(now, head))
        except (ValueError, pygit2.GitError):
            return False              # not a commit of this store: not held

    def _lost_verified(self, marker: dict) -> str:
        return (f"the journal no longer contains the last verified event {marker['head'][:12]} (seq "
                f"{marker.get('seq')}): its history was rewritten or rolled back. If that was deliberate "
                f"(the store put back from a backup), remove {self.verified_path} and verify again")

    def _damage(self, problem: str, tip: str | None):
        """Record damage as the alarm (every process's gate closes) and raise."""
        try:
            self._raise_alarm([problem], tip)
        except OSError:
            raise IntegrityError(problem) from None
        raise _AlarmRaised(f"the journal is damaged: {problem}")

    def _check_exported(self, cp: dict, tip: str | None) -> str:
        if not isinstance(cp, dict) or cp.get("schema") != WITNESS_SCHEMA:
            return "the exported checkpoint has an unknown schema"
        if cp.get("journal_id") != self.state.journal_id:
            return (f"the exported checkpoint belongs to journal {cp.get('journal_id')}, "
                    f"this is {self.state.journal_id}")
        head = cp.get("head")
        repo = self._repo()
        try:
            commit = repo[head]   # type: ignore[index]  # a None head raises TypeError, caught below
            if not isinstance(commit, pygit2.Commit):
                raise KeyError(head)
            payload, _ = parse_message(commit.message)
        except (KeyError, ValueError, TypeError, pygit2.GitError):
            return (f"the exported checkpoint's head {str(head)[:12]} is not in the store: "
                    "history was rewritten or replaced")
        try:
            ancestor = tip == head or bool(tip and repo.descendant_of(tip, head))
        except (ValueError, pygit2.GitError):
            ancestor = False
        if not ancestor:
            return (f"the exported checkpoint's head {head[:12]} is not an ancestor of the journal head "
                    f"{str(tip)[:12]}: history was rewritten")
        if payload.get("seq") != cp.get("seq"):
            return "the exported checkpoint's sequence number does not match its event"
        return "ok"
