"""The derived journal state: which operations are still open.

Every event commit carries the state *after* that event (`state.json` in its
tree), so opening the journal and admitting a call read one blob at the head,
whatever the history length.  `apply` is the only place where transitions
are defined; `journal verify` replays it over the whole chain and compares.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from .events import OUTCOMES, STATE_SCHEMA, canonical


class TransitionError(Exception):
    """An event that the current state does not allow (e.g. resolving twice)."""


OPEN_FIELDS = ("tool", "session_id", "tool_call_id", "turn_id", "owner", "workspace",
               "pre_checkpoint", "declared", "snapshot", "replay_of")


@dataclass
class JournalState:
    journal_id: str | None = None
    seq: int = -1
    open: dict = field(default_factory=dict)          # op id -> info; state running|uncertain
    replayable: dict = field(default_factory=dict)    # op id -> info of a not-applied file op
    totals: dict = field(default_factory=dict)        # events per kind

    def to_json(self) -> str:
        return canonical({"schema": STATE_SCHEMA, "journal_id": self.journal_id, "seq": self.seq,
                          "open": self.open, "replayable": self.replayable, "totals": self.totals})

    @classmethod
    def from_json(cls, text: str | bytes) -> "JournalState":
        import json
        d = json.loads(text)
        if d.get("schema") != STATE_SCHEMA:
            raise ValueError(f"unknown state schema {d.get('schema')!r}")
        return cls(journal_id=d["journal_id"], seq=d["seq"], open=d["open"],
                   replayable=d["replayable"], totals=d.get("totals", {}))

    def apply(self, ev: dict) -> "JournalState":
        """The state after `ev`, or TransitionError.  Never mutates self."""
        kind = ev["kind"]
        if ev.get("seq") != self.seq + 1:
            raise TransitionError(f"event seq {ev.get('seq')} does not follow {self.seq}")
        new = JournalState(journal_id=self.journal_id, seq=ev["seq"],
                           open=copy.deepcopy(self.open), replayable=copy.deepcopy(self.replayable),
                           totals=dict(self.totals))
        new.totals[kind] = new.totals.get(kind, 0) + 1
        op = ev.get("operation_id")
        if kind == "genesis":
            if self.seq != -1:
                raise TransitionError("genesis must be the first event")
            new.journal_id = ev["journal_id"]
            return new
        if self.seq == -1:
            raise TransitionError("the first event must be genesis")
        if kind == "maintenance":
            return new
        if not op:
            raise TransitionError(f"{kind} event without operation_id")
        cur = new.open.get(op)
        if kind == "started":
            if cur is not None or op in new.replayable:
                raise TransitionError(f"operation {op} already started")
            info = {k: ev.get(k) for k in OPEN_FIELDS if ev.get(k) is not None}
            info.update(state="running", started_seq=ev["seq"])
            new.open[op] = info
        elif kind == "returned":
            if cur is None or cur["state"] != "running":
                raise TransitionError(f"operation {op} is not running; cannot record a return")
            del new.open[op]
        elif kind == "uncertain":
            if cur is None:
                raise TransitionError(f"operation {op} is not open")
            cur["state"] = "uncertain"
            cur["reason"] = ev.get("reason")
            if ev.get("evidence") is not None:
                cur["evidence"] = ev["evidence"]
        elif kind in ("recovered", "resolved"):
            if cur is None:
                raise TransitionError(f"operation {op} is not unresolved (already closed or unknown)")
            outcome = ev.get("outcome")
            if outcome not in OUTCOMES:
                raise TransitionError(f"unknown outcome {outcome!r}")
            if kind == "recovered" and cur["state"] != "running":
                raise TransitionError(f"operation {op} is {cur['state']}; only an operator can resolve it")
            if kind == "resolved" and not (ev.get("evidence") or "").strip():
                raise TransitionError("a resolution needs non-empty evidence")
            del new.open[op]
            if kind == "recovered" and outcome == "not_applied" and ev.get("replayable"):
                new.replayable[op] = {k: cur[k] for k in OPEN_FIELDS if k in cur}
        elif kind == "replayed":
            if op not in new.replayable:
                raise TransitionError(f"operation {op} is not replayable (never settled as not applied, "
                                      "or already replayed)")
            del new.replayable[op]
        else:
            raise TransitionError(f"unknown event kind {kind!r}")
        return new
