"""Verifying the chain, and the alarm that keeps every process's gate closed after damage.

Damage below the head (an edited older event) cannot be seen by the O(1) checks of an
append, so the chain is re-hashed and replayed: the events appended since the last
verified head at every open (`verify_new_events`, O(new events)), the whole chain by
`journal verify` and daily (`verify_chain`, O(history)).  What they find is recorded in
`<store>/chronos/journal-alarm.json` (`AlarmFile`): open, refresh and append check that
file, so every process's gate closes until a later verify of a repaired chain finds it
clean.  The last verified head (`VerifiedHead`) also tells a rollback: a chain that is
whole but no longer holds that event was put back.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from ..engine import locking
from ..engine.errors import explain
from ..engine.owner import ProcessIdentity
from ..engine.state_file import StateFile
from . import checkpoints
from .commits import AlarmRaised, IntegrityError, Unpublished, full_due, load_state, read_commit, read_object
from .events import SCHEMA, WITNESS_SCHEMA, Genesis, canonical, parse_message
from .heal import reconcile
from .state import JournalState, TransitionError

if TYPE_CHECKING:
    from .journal import Journal

FULL_VERIFY_EVERY_S = 24 * 3600.0     # a long-lived host re-verifies the whole chain this often

__all__ = ["AlarmFile", "VerifiedHead", "verify_chain", "verify_new_events", "check_event", "FULL_VERIFY_EVERY_S"]


class AlarmFile:
    """`journal-alarm.json`: damage a verify found, persisted so that every process's gate closes."""

    def __init__(self, path: Path):
        self.file = StateFile(path.parent, path.name)
        self.path = path
        self._where = os.fspath(path)

    def check(self) -> None:
        """O(1): one failed stat when all is well; AlarmRaised while the file is there.
        An unreadable or damaged alarm is still an alarm."""
        try:
            os.lstat(self._where)        # the usual case, asked on every append: one failed lstat
        except FileNotFoundError:
            return
        except OSError:
            pass                         # a folder that cannot be searched: load() says unreadable
        got = self.file.load()
        if got.state == "missing":
            return
        if got.state == "unreadable":
            raise AlarmRaised(f"the journal alarm {self.path} is unreadable ({got.error})")
        if got.state == "ok" and isinstance(got.doc, dict):
            what = got.doc.get("problem") or "damage"
        else:
            what = "damage (the alarm file itself is not valid JSON)"
        raise AlarmRaised(
            f"the integrity check found: {what}. Recorded in {self.path}; protected calls stay "
            "refused until `journal verify` comes back clean after the repair (or the store and its "
            "checkpoint file are moved away to start a new journal)")

    def record(self, problems: list[str], tip: str | None, by: ProcessIdentity) -> None:
        self.file.write({"problem": problems[0], "problems": problems, "head": tip,
                         "detected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "detected_by": by.to_dict()})     # fsynced (metadir.JSON_FILES)


class VerifiedHead:
    """`journal-verified.json`: the head the last verify found clean, and when the whole
    chain was last verified.  Not synced: lost, it only makes the next open verify more."""

    def __init__(self, path: Path):
        self.file = StateFile(path.parent, path.name)
        self.path = path

    def read(self) -> dict:
        """The marker; {} when it is missing or damaged (the next verify replays everything)."""
        return self.file.read({}, expect=dict)

    def note(self, head: str | None, seq: int, *, full: bool) -> None:
        prior = self.read()
        record = {"head": head, "seq": seq,
                  "full_at": time.time() if full else prior.get("full_at")}
        try:
            self.file.write(record)          # not synced (metadir.JSON_FILES)
        except OSError:
            pass                     # a read-only store: the next open verifies these again

    def full_verify_due(self, max_age_s: float = FULL_VERIFY_EVERY_S) -> bool:
        """Whether the whole chain was last verified longer ago than `max_age_s` (or never)."""
        return full_due(self.read().get("full_at"), max_age_s)

    def lost(self, marker: dict) -> str:
        """The problem of a chain that no longer holds the head `marker` names."""
        return (f"the journal no longer contains the last verified event {marker['head'][:12]} (seq "
                f"{marker.get('seq')}): its history was rewritten or rolled back. If that was deliberate "
                f"(the store put back from a backup), remove {self.path} and verify again")


def verify_chain(journal: Journal, checkpoint: dict | None = None, *, anchored: str | None = None) -> dict:
    """`Journal.verify`: re-hash and replay the whole chain; O(history).  Never raises for bad data.

    Damage in the chain itself is recorded as the journal alarm (every
    process's gate closes); a clean verify of the whole store clears it.
    """
    t0 = time.monotonic()
    problems: list[str] = []
    chain_problems: list[str] = []
    witness_problems: list[str] = []
    healed = None
    with journal.guard, journal.store.writing():     # compaction never swaps packs underneath
        if not journal.opened:
            journal.open()
        if journal.integrity != "ok" and not journal.integrity_from_alarm:
            problems.append(journal.integrity)
        repo = journal.repo()
        # the ref and the local checkpoint are read together, under the append lock:
        # an append in between must not look like a mismatch
        with locking.exclusive(journal.lock_path):
            try:
                tip = journal.ref_tip()
            except IntegrityError as exc:
                tip = None
                problems.append(str(exc))
            try:
                w = journal.read_witness(whole=True)
                if w is None and tip is None:
                    pass                # no journal yet (nothing could be written so far)
                elif w is None:
                    witness_problems.append(f"local checkpoint {journal.witness_path} is missing")
                elif w.get("head") != tip:
                    try:
                        head, state, healed = reconcile(journal, w, tip)
                    except IntegrityError as exc:
                        witness_problems.append(
                            f"local checkpoint records head {str(w.get('head'))[:12]} "
                            f"(seq {w.get('seq')}), the journal is at {str(tip)[:12]}: {exc}")
                    except Unpublished:
                        pass            # a live writer's newest events, not yet in the store
                    else:
                        if head is None:
                            witness_problems.append(f"the journal is missing but local checkpoint "
                                                    f"records head {str(w.get('head'))[:12]}")
                        elif healed and head != journal.head and journal.integrity == "ok":
                            journal.head, journal.state = head, state
                        tip = head
            except IntegrityError as exc:
                witness_problems.append(str(exc))
        chain: list[str] = []
        cid = tip
        try:
            while cid:
                chain.append(cid)
                commit = read_commit(repo, cid)
                cid = str(commit.parent_ids[0]) if commit.parent_ids else None
        except (KeyError, ValueError, pygit2.GitError) as exc:
            chain_problems.append(f"the chain is broken at event {cid[:12] if cid else '?'}: {exc}")
        chain.reverse()
        state = JournalState()
        for i, cid in enumerate(chain if not chain_problems else ()):
            try:
                state = check_event(repo, cid, state, first=i == 0)
            except (ValueError, KeyError, TransitionError, pygit2.GitError) as exc:
                chain_problems.append(f"event #{i} ({cid[:12]}): {exc}")
                break
        if not chain_problems:
            # whole and valid, but without an event known to have been in it: rolled back (the
            # ref and the local checkpoint put back together), which must not be cleared as clean
            held, marker = set(chain), journal.verified.read()
            if isinstance(marker.get("head"), str) and not _still_holds(journal, repo, held, marker["head"]):
                chain_problems.append(journal.verified.lost(marker))
            if anchored and not _still_holds(journal, repo, held, anchored):
                chain_problems.append(
                    f"the journal no longer contains event {anchored[:12]}, which the local anchor chain "
                    "(refs/chronos/anchor/journal, what pushes send) mirrors: its history was rewritten "
                    "or rolled back")
        trust = None
        if not chain_problems and tip is not None:
            # the checkpoints the chain names, against the refs (journal_refs/checkpoints.py)
            try:
                trust = checkpoints.check(journal, full=True)
                chain_problems += trust.problems
            except (IntegrityError, KeyError, ValueError, OSError, pygit2.GitError) as exc:
                problems.append(f"the checkpoints the journal names could not be checked: {exc}")
        problems += chain_problems + witness_problems
        if chain_problems:
            try:
                journal.alarm_file.record(chain_problems, tip, journal.me)
                alarmed = True
            except OSError as exc:
                problems.append(f"could not record the journal alarm {journal.alarm_path}: {exc}")
                alarmed = False
            if journal.integrity == "ok":        # like the alarm: a clean verify lifts it again
                journal.integrity, journal.integrity_from_alarm = chain_problems[0], alarmed
        elif not problems:
            try:
                if journal.alarm_path.exists():
                    journal.alarm_path.unlink()
            except OSError as exc:
                problems.append(f"the journal is clean but the old alarm {journal.alarm_path} could not "
                                f"be removed: {explain(exc, journal.alarm_path)}")
            if journal.integrity_from_alarm and not problems:
                journal.integrity, journal.integrity_from_alarm = "ok", False
            if not problems:
                journal.verified.note(tip, state.seq, full=True)
                if trust is not None:
                    checkpoints.note_checked(journal.store, trust)
        internal_ok = not problems
        ext = None
        ext_ours = False
        if checkpoint is not None:
            ext = _check_exported(journal, checkpoint, tip)
            # a checkpoint of this journal that does not fit proves a rewrite; a foreign
            # or malformed file is only a wrong argument and must not close the gate
            ext_ours = (isinstance(checkpoint, dict) and checkpoint.get("schema") == WITNESS_SCHEMA
                        and checkpoint.get("journal_id") == journal.state.journal_id)
            if ext != "ok":
                problems.append(ext)
    ok = not problems
    if journal.integrity == "ok" and (not internal_ok or (not ok and ext_ours)):
        journal.integrity = problems[0]
    return {"integrity": "ok" if ok else problems[0], "problems": problems, "events": len(chain),
            "head": tip, "journal_id": state.journal_id, "external_checkpoint": ext,
            "healed": healed, "seconds": round(time.monotonic() - t0, 3)}


def check_event(repo, cid: str, state: JournalState, *, first: bool) -> JournalState:
    """One event re-hashed, parsed and replayed on `state`: the state after it, or an error."""
    commit = read_commit(repo, cid)
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
    if read_object(repo, read_object(repo, commit.tree_id)["state.json"].id).data.decode() != state.to_json():
        raise ValueError("stored state.json differs from the replayed state")
    return state


def verify_new_events(journal: Journal) -> None:
    """Re-hash and replay the events appended since the last verified head: O(new events),
    at every open, so damage is found without waiting for a manual `journal verify`.
    Damage below that head is the daily full verification's (Chronos.start)."""
    tip = journal.head
    if tip is None:
        return
    marker = journal.verified.read()
    base = marker.get("head") if isinstance(marker.get("head"), str) else None
    if base == tip:
        return
    repo = journal.repo()
    chain: list[str] = []
    cid: str | None = tip
    try:
        while cid and cid != base:
            chain.append(cid)
            commit = read_commit(repo, cid)
            cid = str(commit.parent_ids[0]) if commit.parent_ids else None
    except (KeyError, ValueError, pygit2.GitError) as exc:
        _damage(journal, f"the chain is broken at event {cid[:12] if cid else '?'}: {exc}", tip)
    if base is not None and cid != base:
        _damage(journal, journal.verified.lost(marker), tip)
    state = load_state(repo, base) if base else JournalState()
    for i, cid in enumerate(reversed(chain)):
        try:
            state = check_event(repo, cid, state, first=base is None and i == 0)
        except (ValueError, KeyError, TransitionError, pygit2.GitError) as exc:
            _damage(journal, f"event {cid[:12]} (seq {state.seq + 1}): {exc}", tip)
    journal.verified.note(tip, state.seq, full=base is None)


def _still_holds(journal: Journal, repo, chain: set[str], head: str) -> bool:
    """Whether the journal holds `head`: in the chain just read, or (appended by another
    process since, and so noted or mirrored) below the ref as it is now, read under the
    journal's lock."""
    if head in chain:
        return True
    try:
        with locking.exclusive(journal.lock_path):
            now = journal.ref_tip()
    except IntegrityError:
        return False
    try:
        return now is not None and (now == head or repo.descendant_of(now, head))
    except (ValueError, pygit2.GitError):
        return False              # not a commit of this store: not held


def _damage(journal: Journal, problem: str, tip: str | None):
    """Record damage as the alarm (every process's gate closes) and raise."""
    try:
        journal.alarm_file.record([problem], tip, journal.me)
    except OSError:
        raise IntegrityError(problem) from None
    raise AlarmRaised(f"the journal is damaged: {problem}")


def _check_exported(journal: Journal, cp: dict, tip: str | None) -> str:
    if not isinstance(cp, dict) or cp.get("schema") != WITNESS_SCHEMA:
        return "the exported checkpoint has an unknown schema"
    if cp.get("journal_id") != journal.state.journal_id:
        return (f"the exported checkpoint belongs to journal {cp.get('journal_id')}, "
                f"this is {journal.state.journal_id}")
    head = cp.get("head")
    repo = journal.repo()
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
