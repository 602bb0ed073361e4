"""The recovery gate: protected calls wait while an outcome is unknown.

Closed when the journal's integrity is in doubt, when the store holds something
chronos-git never writes (found at this process's start or verify), when an outcome could not be
recorded in this process, or while any operation is unresolved (uncertain, or
started by an owner that died).  `gate_mode: warn` only warns about
unresolved operations; integrity failures always refuse.  This is the one
place the rule is written; the Hermes hook and middleware ask `refusal()`.
"""
from __future__ import annotations

from . import refusals
from .calls import Call
from .core import Core
from .errors import Blocked
from .remote_anchor import gate_reason
from .results import Refusal


class Gate:
    def __init__(self, core: Core, start):
        self.core = core
        self._start = start             # the service's once-per-process start (opens the journal)

    def state(self) -> Refusal | None:
        """None when protected calls may run, else what keeps them waiting (even in warn mode)."""
        self._start()
        j = self.core.journal
        j.refresh()
        reasons, ops = [], []
        anchor = gate_reason(self.core)
        tampered = self.core.tampered          # found in the store at this process's start or verify
        integrity = j.integrity if j.integrity != "ok" else tampered or anchor or "ok"
        if j.integrity != "ok":
            reasons.append(f"journal integrity: {j.integrity}")
        elif j.poisoned:
            reasons.append(f"an outcome could not be recorded in this process: {j.poisoned}")
        else:
            ops = j.unresolved()
        if anchor and j.integrity == "ok":
            reasons.insert(0, anchor)
        if tampered and j.integrity == "ok":
            reasons.insert(0, tampered)
        if not reasons and not ops:
            return None
        lines = []
        for op in ops:
            what = "outcome unknown (uncertain)" if op.state == "uncertain" else "cut off by a crash (pending)"
            lines.append(f"{op.operation_id[:12]} {op.tool} {what}" + (f": {op.reason}" if op.reason else ""))
        if tampered and not ops and j.integrity == "ok":
            msg = (f"chronos-git recovery gate is closed: {tampered}. Protected tool calls are refused until it "
                   "is removed and `chronos-git journal verify` comes back clean. Read-only tools still work.")
        elif anchor and not ops and j.integrity == "ok":
            msg = f"chronos-git recovery gate is closed: {anchor}. Read-only tools still work."
        elif not ops:          # nothing to resolve: the journal itself, or this process's record
            msg = (f"chronos-git recovery gate is closed: {'; '.join(reasons).rstrip('.')}. Protected tool calls "
                   "are refused until that is fixed (`chronos-git journal verify` says what it finds). "
                   "Read-only tools still work.")
        else:
            msg = ("chronos-git recovery gate is closed: " + "; ".join(reasons + lines).rstrip(".")
                   + ". Protected tool calls are refused until an operator reconciles: "
                     "`chronos-git journal status`, then `chronos-git journal resolve <op> --outcome "
                     "completed|not_applied --evidence <text>` or `chronos-git journal recover <op> --rollback`"
                     " (in Hermes: `hermes chronos-git journal ...` or /chronos resolve). Read-only tools "
                     "still work.")
        return Refusal(operation_ids=[o.operation_id for o in ops], operations=[o.to_dict() for o in ops],
                       integrity=integrity, message=msg, mode=self.core.settings.gate_mode)

    def is_open(self) -> bool:
        return self.state() is None

    def refusal(self, call: Call | None = None) -> Refusal | None:
        """The refusal a protected call gets now, or None (also in warn mode with only a warning).
        Given the `call`, a refusal is journaled (service/refusals.py)."""
        r = self.state()
        if r is not None and (self.core.settings.gate_mode == "block" or r.integrity != "ok"):
            return self._journaled(r, call)
        return None

    def check(self, call: Call | None = None) -> str | None:
        """Raise Blocked when closed (journaled, given the `call`); in warn mode return the
        warning to pass on."""
        r = self.state()
        if r is None:
            return None
        if self.core.settings.gate_mode == "block" or r.integrity != "ok":
            raise Blocked(self._journaled(r, call))
        return r.message

    def _journaled(self, r: Refusal, call: Call | None) -> Refusal:
        """`r` with the refused call journaled, unless the journal, the store or the anchor is in
        doubt (the gate is closed for that): nothing is added on top of such a history."""
        if call is None:
            return r
        if r.integrity != "ok":
            return r.model_copy(update={"recorded": False})
        op, recorded = refusals.record(self.core, self._start, call, Blocked.code,
                                       blocked_by=r.operation_ids)
        return r.model_copy(update={"recorded": recorded, "refused_operation_id": op if recorded else None})
