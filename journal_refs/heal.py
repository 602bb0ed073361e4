"""Healing after a crash or a power cut: the journal ref against its witness.

The order of an append is objects (page cache), witness (synced: the event is
durable), ref.  So at the next open, or before the next append, the ref and the
witness tell what a crash did:

    ref == witness                  fine
    witness descends from ref       the ref lost carried updates (crash, power cut): healed
    ref descends from witness       by one event: a crash of an older version: healed
    anything else                   tampering or corruption: IntegrityError (the gate closes)

Since events are published after the witness (journal_refs/publish.py), a crash
can leave the ref at the witness's `base` (where the ref stood when the batch
began) with the batch's objects never written: the carried objects are written
back (only what is missing or damaged) and the ref moved forward, in any boot.
A lag the witness does not record (the ref further back) is a rollback outside a
power cut.  After a power cut (the witness names another boot) any carried lag is
healed, and a ref the cut left unreadable is rewritten to the witness's head.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pygit2

from ..engine.wording import plural
from . import carried
from .commits import REF, IntegrityError, JournalError, Unpublished, descends, read_commit
from .state import JournalState

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["ref_tip_or_damaged", "power_cut_since", "reconcile"]


def ref_tip_or_damaged(journal: Journal, w: dict | None) -> tuple[str | None, str | None]:
    """(the ref's target, a note).  A ref a power cut left unreadable is rewritten to the
    witness head (the newest event that was durable), as long as that event is whole."""
    try:
        return journal.ref_tip(), None
    except IntegrityError:
        whead = (w or {}).get("head")
        if not w or not whead or not power_cut_since(journal, w):
            raise
        try:
            carried.restore(journal.repo(), journal.store.root / "objects", w["carried"])
            journal.state_at(whead)             # whole, or IntegrityError
            (journal.store.root / REF).unlink(missing_ok=True)
            journal.force_ref(whead)
        except (OSError, ValueError, JournalError) as exc:
            raise IntegrityError(f"the journal ref is unreadable and could not be rewritten: {exc}") from None
        return whead, "the journal ref was unreadable (power cut); rewritten to the witness's head"


def power_cut_since(journal: Journal, w: dict | None) -> bool:
    """Whether the machine may have lost its page cache since the witness was written:
    it names another boot (or the boot is unknown).  Only then are carried objects
    written back and may the ref lag by more than the one event a crash leaves."""
    if not w:
        return False
    return bool(w["carried"]) and (journal.boot is None or w.get("boot") != journal.boot)


def reconcile(journal: Journal, w: dict | None, tip: str | None) -> tuple[str | None, JournalState, str | None]:
    """The ref (`tip`) against the witness `w`: (head, state at head, a note of what was
    healed).  A ref behind the witness by one carried event (a crash between the two
    writes), or after a power cut by any carried events, is moved forward; after a power
    cut, carried objects it took are written back first.  Anything a crash cannot
    explain raises IntegrityError."""
    whead = (w or {}).get("head")
    power_cut = power_cut_since(journal, w)
    if (tip is not None and w is not None and tip == whead == journal.head and not power_cut
            and w["seq"] == journal.state.seq and w["journal_id"] == journal.state.journal_id):
        return tip, journal.state, None          # an append's usual case: nothing to load
    notes = []
    repo = journal.repo()
    lagging = bool(w and w["carried"] and whead and tip != whead)
    if w and w["carried"] and (power_cut or lagging):
        try:
            back = carried.restore(repo, journal.store.root / "objects", w["carried"])
        except OSError as exc:
            if not power_cut:                # the window before a live writer publishes, seen by
                raise Unpublished(           # a process that cannot write the store: not damage
                    f"the journal's newest events (up to {str(whead)[:12]}) are not published yet "
                    f"and this process cannot write them to {journal.store.root}: {exc}") from None
            raise IntegrityError(f"journal objects carried by {journal.witness_path} could not be "
                                 f"written back: {exc}") from None
        except ValueError as exc:
            raise IntegrityError(f"journal objects carried by {journal.witness_path} could not be "
                                 f"written back: {exc}") from None
        if back:
            why = "lost in a power cut" if power_cut else "not yet published (its process stopped or was publishing)"
            notes.append(f"{plural(len(back), 'journal object')} {why} "
                         f"{'was' if len(back) == 1 else 'were'} written back from the witness")
    most = None if power_cut or (w is not None and "base" in w and w["base"] == tip) else 1
    if whead and w is not None and tip != whead and _behind_by_carried(repo, tip, whead, w["carried"], most):
        note = ("the journal ref had not taken its last update(s) (crash or power cut); "
                "moved forward to the witness")
        try:
            journal.force_ref(whead)
        except JournalError as exc:        # a read-only store: readers still see the event
            journal.unwritable = str(exc)
            note += f" (in memory only: {exc})"
        notes.append(note)
        tip = whead
    if tip is None:
        return None, JournalState(), "; ".join(notes) or None
    state = journal.state_at(tip)
    lag = _check_witness(journal, w, tip, state)
    if lag:
        # the ref ahead of the witness (a crash of an older version between the two):
        # what the witness carried is synced before it is rewritten without it
        try:
            commit = repo[tip]
            carried.sync(journal.store.root, REF, w["carried"],   # type: ignore[index]  # _check_witness raised if w is None
                         also=[tip, str(commit.tree_id), *(str(e.id) for e in commit.tree)])   # type: ignore[attr-defined]  # an event: a commit
            journal.write_witness(state.journal_id, tip, state.seq)
        except (JournalError, OSError, pygit2.GitError) as exc:
            journal.unwritable = str(exc)
            lag += f" (in memory only: {exc})"
        notes.append(lag)
    return tip, state, "; ".join(notes) or None


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
            commit = read_commit(repo, cid)
            cid = str(commit.parent_ids[0]) if commit.parent_ids else None
            if cid is None:
                return tip is None
    except (KeyError, ValueError, pygit2.GitError):
        return False
    return True


def _check_witness(journal: Journal, w: dict | None, tip: str, state: JournalState) -> str | None:
    """The witness against the journal at `tip` (state `state`): IntegrityError
    unless it matches, or lags consistently (crash between the two writes: returns a note)."""
    if w is None:
        raise IntegrityError(
            f"the journal's witness file {journal.witness_path} is missing while the journal has "
            f"{state.seq + 1} events: it was deleted, or the store was copied from elsewhere")
    if w["journal_id"] != state.journal_id:
        raise IntegrityError(f"the journal's witness file belongs to journal {w['journal_id']}, "
                             f"but the store holds journal {state.journal_id}")
    whead = w.get("head")
    repo = journal.repo()
    if whead == tip:
        if w.get("seq") != state.seq:
            raise IntegrityError(f"the journal's witness file says seq {w.get('seq')} at "
                                 f"{tip[:12]}, the journal says {state.seq}: the witness was edited")
        return None
    if journal.witness_torn:
        # an event counts once its record is durable, so a write the disk tore cannot be
        # one the ref already took: the newest record was lost after it was written
        raise IntegrityError(
            f"the newest record of the journal's witness file {journal.witness_path} is damaged "
            f"and the journal is ahead of the one that survives (at {str(whead)[:12]}, seq "
            f"{w.get('seq')}; the journal is at {tip[:12]}, seq {state.seq}): the file was "
            "edited or the disk lost written data")
    if whead is None:
        if w.get("seq", -1) != -1:
            raise IntegrityError(f"the journal's witness file records no head but seq {w.get('seq')}: "
                                 "the witness was edited")
        return "the first event was written but the witness was not (crash); healed"
    try:
        exists = pygit2.Oid(hex=whead) in repo.odb if len(whead) == 40 else False
    except (ValueError, pygit2.GitError):
        exists = False
    if not exists:
        raise IntegrityError(
            f"the journal head {tip[:12]} does not contain the witnessed event "
            f"{whead[:12]} (seq {w.get('seq')}): the journal was replaced or its history rewritten")
    if descends(repo, tip, whead):
        wseq = journal.state_at(whead).seq
        if w.get("seq") != wseq:
            raise IntegrityError(
                f"the journal's witness file says seq {w.get('seq')} at {whead[:12]}, but that "
                f"event is seq {wseq}: the witness was edited")
        if state.seq - wseq > 1:
            # every append rewrites the witness, and no append starts while it lags:
            # a crash leaves it one event behind at most
            raise IntegrityError(
                f"the witness {journal.witness_path} is {state.seq - wseq} events behind the journal "
                f"(it records {whead[:12]}, seq {wseq}; the journal is at seq {state.seq}): it was "
                "moved back or replaced with an older copy")
        return ("the journal ref was one event ahead of its witness (a crash between the two "
                "writes); healed")
    if descends(repo, whead, tip):
        raise IntegrityError(
            f"the journal ref was rolled back: it points at {tip[:12]} (seq {state.seq}) but the "
            f"witness records {whead[:12]} (seq {w.get('seq')})")
    raise IntegrityError(
        f"the journal has diverged from its witness: head {tip[:12]} does not "
        f"descend from witnessed {whead[:12]}: history was rewritten")
