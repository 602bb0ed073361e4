"""The derived journal state: which operations are still open.

Every event commit carries the state *after* that event (`state.json` in its
tree), so opening the journal and admitting a call read one blob at the head,
whatever the history length.  `TRANSITIONS` is the only place where what an
event does to the state is defined (one function per event type); `journal
verify` replays it over the whole chain and compares.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .events import (
    OUTCOMES,
    STATE_SCHEMA,
    Genesis,
    JournalEvent,
    Maintenance,
    Recovered,
    Refused,
    ReplayedEvent,
    Resolved,
    Returned,
    Started,
    Uncertain,
    canonical,
    parse,
)

SETTINGS_ACTION = "settings"          # the Maintenance action that records the settings in force
CRASH_BOUNDARY = "crash_boundary"     # ... that checkpoints a crashed call's workspace as it was found
NARROWED, RESTORED, ACCEPTED = "capture_narrowed", "capture_restored", "capture_accepted"   # (service/capture.py)


class TransitionError(Exception):
    """An event that the current state does not allow (e.g. resolving twice)."""


# what an open operation keeps of its Started event
OPEN_FIELDS = ("tool", "session_id", "tool_call_id", "turn_id", "owner", "workspace",
               "pre_checkpoint", "declared", "snapshot", "replay_of")


@dataclass
class JournalState:
    journal_id: str | None = None
    seq: int = -1
    open: dict = field(default_factory=dict)          # op id -> info; state running|uncertain
    replayable: dict = field(default_factory=dict)    # op id -> info of a not-applied file op
    totals: dict = field(default_factory=dict)        # events per kind
    settings: dict = field(default_factory=dict)      # the last settings record: in_force, held, seq
    narrowed: dict = field(default_factory=dict)      # workspace -> its last capture_narrowed record

    def to_json(self) -> str:
        doc = {"schema": STATE_SCHEMA, "journal_id": self.journal_id, "seq": self.seq,
               "open": self.open, "replayable": self.replayable, "totals": self.totals}
        if self.settings:               # absent until the first record: older states are unchanged
            doc["settings"] = self.settings
        if self.narrowed:               # the same
            doc["narrowed"] = self.narrowed
        return canonical(doc)

    @classmethod
    def from_json(cls, text: str | bytes) -> JournalState:
        d = json.loads(text)
        if d.get("schema") != STATE_SCHEMA:
            raise ValueError(f"unknown state schema {d.get('schema')!r}")
        return cls(journal_id=d["journal_id"], seq=d["seq"], open=d["open"],
                   replayable=d["replayable"], totals=d.get("totals", {}), settings=d.get("settings", {}),
                   narrowed=d.get("narrowed", {}))

    def apply(self, payload: dict) -> JournalState:
        """The state after the event `payload`, or TransitionError.  Never mutates self."""
        try:
            ev = parse(payload)
        except ValueError as exc:
            raise TransitionError(str(exc)) from None
        if ev.seq != self.seq + 1:
            raise TransitionError(f"event seq {ev.seq} does not follow {self.seq}")
        if self.seq == -1 and not isinstance(ev, Genesis):
            raise TransitionError("the first event must be genesis")
        # each open operation's record is copied (transitions set its top-level fields); what
        # the records hold is never changed in place, and _started copies it from the event
        new = JournalState(journal_id=self.journal_id, seq=ev.seq, open={k: dict(v) for k, v in self.open.items()},
                           replayable=dict(self.replayable), totals=dict(self.totals),
                           settings=self.settings, narrowed=self.narrowed)
        new.totals[ev.kind] = new.totals.get(ev.kind, 0) + 1
        TRANSITIONS[type(ev)](self, new, ev)
        return new


def _genesis(old: JournalState, new: JournalState, ev: Genesis) -> None:
    if old.seq != -1:
        raise TransitionError("genesis must be the first event")
    new.journal_id = ev.journal_id


def _maintenance(old: JournalState, new: JournalState, ev: Maintenance) -> None:
    """A settings record (service/settings_watch.py) becomes the settings in force; a crash
    boundary (service/reconcile.py) is kept with the crashed operation, once."""
    if ev.action == CRASH_BOUNDARY:
        cur = new.open.get(ev.operation_id) if ev.operation_id else None
        if cur is None or cur.get("state") != "running" or "boundary_checkpoint" in cur:
            raise TransitionError(f"operation {ev.operation_id} is not a crashed call without a boundary")
        cur["boundary_checkpoint"] = ev.payload.get("checkpoint")   # None: it could not be taken
        return
    if ev.action in (NARROWED, RESTORED, ACCEPTED):
        _narrowing(new, ev)
        return
    if ev.action != SETTINGS_ACTION:
        return
    in_force, held = ev.payload.get("in_force"), ev.payload.get("held")
    if not isinstance(in_force, dict) or not isinstance(held, dict):
        raise TransitionError("a settings record needs the settings in force and those held (objects)")
    new.settings = {"in_force": in_force, "held": held, "fingerprint": ev.payload.get("fingerprint"),
                    "seq": ev.seq}


def _narrowing(new: JournalState, ev: Maintenance) -> None:
    """A workspace's last narrowing of capture stays until rules that no longer narrow are seen
    (restored) or an operator accepts it (kept, marked, so the same finding is not recorded again)."""
    ws = ev.payload.get("workspace")
    if not isinstance(ws, str):
        raise TransitionError(f"a {ev.action} record needs its workspace")
    narrowed = dict(new.narrowed)            # never mutated in place: states share it
    if ev.action == NARROWED:
        keep = ("checkpoint", "count", "files", "sample", "sources", "complete", "large", "timestamp_ns")
        narrowed[ws] = {**{k: ev.payload.get(k) for k in keep}, "seq": ev.seq}
    elif ev.action == RESTORED:
        narrowed.pop(ws, None)
    elif ws not in narrowed:
        raise TransitionError(f"workspace {ws} has no narrowing of capture to accept")
    else:
        narrowed[ws] = {**narrowed[ws], "accepted_seq": ev.seq}
    new.narrowed = narrowed


def _refused(old: JournalState, new: JournalState, ev: Refused) -> None:
    """Nothing opens or closes; its operation id is its own (never one in use)."""
    if ev.operation_id in new.open or ev.operation_id in new.replayable:
        raise TransitionError(f"operation {ev.operation_id} is in use; a refused call has an id of its own")


def _copied(value):
    """A JSON value's own copy (the caller keeps the payload): deepcopy without its memo,
    which cost as much as the rest of a call's transition."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value


def _open_op(new: JournalState, ev: JournalEvent) -> dict:
    cur = new.open.get(ev.operation_id)
    if cur is None:
        raise TransitionError(f"operation {ev.operation_id} is not open")
    return cur


def _started(old: JournalState, new: JournalState, ev: Started) -> None:
    op = ev.operation_id
    if op in new.open or op in new.replayable:
        raise TransitionError(f"operation {op} already started")
    info = {k: _copied(ev.payload[k]) for k in OPEN_FIELDS if ev.payload.get(k) is not None}
    info.update(state="running", started_seq=ev.seq)
    new.open[op] = info


def _returned(old: JournalState, new: JournalState, ev: Returned) -> None:
    cur = new.open.get(ev.operation_id)
    if cur is None or cur["state"] != "running":
        raise TransitionError(f"operation {ev.operation_id} is not running; cannot record a return")
    del new.open[ev.operation_id]


def _uncertain(old: JournalState, new: JournalState, ev: Uncertain) -> None:
    cur = _open_op(new, ev)
    cur["state"] = "uncertain"
    cur["reason"] = ev.reason
    if ev.evidence is not None:
        cur["evidence"] = _copied(ev.evidence)     # kept by every later state: its own copy


def _settled(new: JournalState, ev: Recovered | Resolved) -> dict:
    cur = new.open.get(ev.operation_id)
    if cur is None:
        raise TransitionError(f"operation {ev.operation_id} is not unresolved (already closed or unknown)")
    if ev.outcome not in OUTCOMES:
        raise TransitionError(f"unknown outcome {ev.outcome!r}")
    del new.open[ev.operation_id]
    return cur


def _recovered(old: JournalState, new: JournalState, ev: Recovered) -> None:
    cur = new.open.get(ev.operation_id)
    if cur is not None and cur["state"] != "running":
        raise TransitionError(f"operation {ev.operation_id} is {cur['state']}; only an operator can resolve it")
    cur = _settled(new, ev)
    if ev.outcome == "not_applied" and ev.replayable:
        new.replayable[ev.operation_id] = {k: cur[k] for k in OPEN_FIELDS if k in cur}


def _resolved(old: JournalState, new: JournalState, ev: Resolved) -> None:
    if not (ev.evidence or "").strip():
        raise TransitionError("a resolution needs non-empty evidence")
    _settled(new, ev)


def _replayed(old: JournalState, new: JournalState, ev: ReplayedEvent) -> None:
    if ev.operation_id not in new.replayable:
        raise TransitionError(f"operation {ev.operation_id} is not replayable (never settled as not "
                              "applied, or already replayed)")
    del new.replayable[ev.operation_id]


TRANSITIONS: dict[type[JournalEvent], Callable[[JournalState, JournalState, Any], None]] = {
               Genesis: _genesis, Started: _started, Returned: _returned, Uncertain: _uncertain,
               Recovered: _recovered, Resolved: _resolved, ReplayedEvent: _replayed, Maintenance: _maintenance,
               Refused: _refused}
