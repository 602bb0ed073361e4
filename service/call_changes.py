"""What protected calls changed in a workspace, read from the journal: the segments an
agent-only restore, a revert and an undo take back (engine/agent_merge.py merges them).

A call's change is the step from its pre-checkpoint to its post-checkpoint; what changed
between one call's post-checkpoint and the next call's pre-checkpoint was done outside the
calls (the person, their editor, another tool) and is kept.  Where that boundary is not known
the change is marked ambiguous, and every path it touched becomes a conflict, never a guess:

* a call with no post-checkpoint (it crashed, its outcome is uncertain, the snapshot failed)
  or whose pre-checkpoint is partial or missing;
* the gap after a shell call that left a process running (what changed then may be the
  agent's process as well as the person);
* calls of two sessions whose runs overlapped in time (each one's checkpoints hold some of
  the other's work).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pygit2

from ..engine.agent_merge import Segment
from ..journal_refs.journal import REF as JOURNAL_REF
from ..journal_refs.operation import well_formed_declared
from ..journal_refs.state import CRASH_BOUNDARY

log = logging.getLogger("chronos_git")

TIME_MACHINE_TOOLS = frozenset({"chronos.restore", "chronos.revert", "chronos.agent_restore", "chronos.undo",
                                "chronos.redo", "chronos.rollback"})
OPERATION_TOOLS = TIME_MACHINE_TOOLS | {"chronos_rollback"}      # and the model's rollback (a tool call too)


@dataclass
class CallChange:
    operation_id: str
    tool: str | None
    session_id: str | None
    actor: str | None
    started_ns: int
    finished_ns: int | None = None
    pre: str | None = None
    post: str | None = None
    status: str | None = None          # returned: ok | error | partial; else the event kind (uncertain, ...)
    left_running: bool = False
    partial_pre: bool = False
    pre_kind: str | None = None        # how its checkpoint before was taken: full, declared (its paths only)
    parent_call: str | None = None     # the subagent's parent tool call, where the host says
    boundary: str | None = None        # a crashed call: the workspace as the crash was found
    subagent_id: str | None = None     # the subagent that made it, where the host says
    settled: str | None = None         # a crashed call settled later: its outcome (completed, not_applied)
    args: dict = field(default_factory=dict)
    declared: list = field(default_factory=list)   # a file call's paths with their pre- and post-images
    outcome: dict = field(default_factory=dict)
    ambiguous: str | None = None       # why the agent/person boundary around it is not known

    @property
    def is_time_machine(self) -> bool:
        return (self.tool or "") in TIME_MACHINE_TOOLS

    def segment(self) -> Segment | None:
        """Its change as a segment (None: no pre-checkpoint, so nothing to take back)."""
        if self.pre is None:
            return None
        # no checkpoint after it (a crash): it may have changed anything up to the checkpoint taken
        # as the crash was found, or up to now (an empty `after`): all of that is a conflict
        return Segment(before=self.pre, after=self.post or self.boundary or "", label=self.operation_id,
                       ambiguous=self.ambiguous is not None)


KINDS = frozenset({"started", "returned", "uncertain", "recovered", "resolved"})
_KEPT = ("kind", "operation_id", "timestamp_ns", "workspace", "tool", "session_id", "actor", "pre_checkpoint",
         "snapshot", "parent_tool_call_id", "subagent_id", "parent_session_id", "args", "declared",
         "post_checkpoint", "status", "outcome", "left_running", "after_checkpoint", "time_machine", "action",
         "checkpoint")


# fields that name something (an id, a path, a tool): anything but text is dropped, as an edited
# event may carry anything and one such event must not stop every listing after it
_TEXT = frozenset({"kind", "operation_id", "workspace", "tool", "session_id", "actor", "pre_checkpoint",
                   "parent_tool_call_id", "subagent_id", "parent_session_id", "post_checkpoint", "status",
                   "outcome", "after_checkpoint", "time_machine", "action", "checkpoint"})


def compact(payload: dict) -> dict:
    """What `calls` reads of an event (kept in memory by a long-lived host, so it stays small)."""
    out = {k: payload[k] for k in _KEPT if k in payload and (k not in _TEXT or isinstance(payload[k], str))}
    if not isinstance(out.get("timestamp_ns"), int) or isinstance(out.get("timestamp_ns"), bool):
        out["timestamp_ns"] = 0
    for key in ("snapshot", "args"):
        if key in out and not isinstance(out[key], dict):
            del out[key]
    if "declared" in out and well_formed_declared(out["declared"]) is None:
        del out["declared"]               # malformed (or none): declares nothing
    args = out.get("args")
    if isinstance(args, dict):            # only what the time machine reads back
        out["args"] = {k: args[k] for k in ("undoes", "redoes", "target", "checkpoint", "operation", "session",
                                            "subagent") if k in args and isinstance(args[k], str)}
    return out


class CallEvents:
    """The journal's call events, read once: each read takes only what was appended since the
    last (the journal only grows; a history that did not is read again whole).  Also what role
    each checkpoint served a call in, since a checkpoint is reused when nothing changed (one
    call's after-checkpoint is often the next one's before-checkpoint)."""

    def __init__(self, core):
        self._core = core
        self._seen: list[dict] = []                      # compacted, newest first
        self._head: str | None = None                    # ... up to this event
        self._roles = _Roles()
        self._lock = threading.Lock()

    def newest_first(self) -> list[dict]:
        with self._lock:
            got = self._core.journal.payloads_since(self._head)
            if got is None:
                self._roles = _Roles()
                self._seen, got = [], self._core.journal.payloads_since(None)
            head, new = got or (None, [])
            kept = [compact(p) for p in reversed(new) if call_event(p)]
            for ev in reversed(kept):                    # oldest first: an intent before its outcome
                self._roles.note(ev)
            self._seen = kept + self._seen
            self._head = head
            return self._seen

    def roles(self, workspace: str, since_ns: int = 0) -> dict[str, set[str]]:
        """Checkpoint id -> the roles the journal says it served in `workspace`'s calls, for
        checkpoints made at or after `since_ns` (a store without a journal: none, and none is
        created by looking).  Read from what is kept when a reader of the whole journal (a
        revert, an undo) has kept it; else only the events back to `since_ns` are read: a
        listing of the 20 newest checkpoints does not read a long journal whole.  A journal
        that cannot be read gives none (its own checks report it)."""
        try:
            if self._core.store.repo().references.get(JOURNAL_REF) is None:
                return {}
            if self._head is not None:
                self.newest_first()
                with self._lock:
                    return self._roles.of(workspace)
            return _roles_back_to(self._core.journal, workspace, since_ns)
        except (ValueError, TypeError, KeyError, AttributeError, pygit2.GitError) as exc:
            log.info("chronos-git: no roles from the journal: %s", exc)
            return {}


def call_event(payload) -> bool:
    """A call's event (what `calls` and the time machine read), of a kind this version knows;
    also the checkpoint taken of a crashed call's workspace as the crash was found."""
    if not isinstance(payload, dict) or not isinstance(payload.get("kind"), str):
        return False
    return payload["kind"] in KINDS or (payload["kind"] == "maintenance" and payload.get("action") == CRASH_BOUNDARY)


_WALK_ON = 1000         # events read past `since_ns` for the intents of outcomes found before it


def _roles_back_to(journal, workspace: str, since_ns: int) -> dict[str, set[str]]:
    roles = _Roles()
    pending: list[dict] = []
    wanted: set[str] = set()
    past = 0
    for payload in journal.walk():                       # newest first
        if not call_event(payload):
            continue
        ev = compact(payload)
        if ev["timestamp_ns"] < since_ns:
            past += 1
            if not wanted or past > _WALK_ON:
                break
        pending.append(ev)
        if ev.get("kind") == "started":
            wanted.discard(ev.get("operation_id") or "")
        elif ev.get("operation_id"):
            wanted.add(ev["operation_id"])
    for ev in reversed(pending):
        roles.note(ev)
    return roles.of(workspace)


class _Roles:
    """Checkpoint id -> roles, per workspace, from call events given oldest first (an outcome
    names no workspace: its intent does)."""

    def __init__(self):
        self.by_ws: dict[str, dict[str, set[str]]] = {}
        self.ops: dict[str, tuple[str, bool]] = {}           # operation -> (workspace, a time-machine op)

    def note(self, ev: dict) -> None:
        op = ev.get("operation_id")
        if ev.get("kind") == "started":
            ws = ev.get("workspace")
            if not ws or not op:
                return
            tm = ev.get("tool") in OPERATION_TOOLS
            self.ops[op] = (ws, tm)
            if ev.get("pre_checkpoint"):
                self._add(ws, ev["pre_checkpoint"], "safety" if tm else "before_call")
            return
        ws, tm = self.ops.get(op or "", (None, False))
        if ws is None:
            return
        if ev.get("after_checkpoint"):
            self._add(ws, ev["after_checkpoint"], "restored")
        if ev.get("post_checkpoint") and not tm:         # a time-machine op's post is what it went back to
            self._add(ws, ev["post_checkpoint"], "after_call")

    def _add(self, ws: str, checkpoint: str, role: str) -> None:
        self.by_ws.setdefault(ws, {}).setdefault(checkpoint, set()).add(role)

    def of(self, workspace: str) -> dict[str, set[str]]:
        return self.by_ws.get(workspace, {})


def calls(events_newest_first, workspace: str, *, since_ns: int = 0) -> list[CallChange]:
    """The workspace's calls started at or after `since_ns`, oldest first, with their outcomes
    and ambiguity.  `events_newest_first`: journal payloads (query.events order); reading stops
    at the first `started` event older than `since_ns`."""
    found: dict[str, CallChange] = {}
    outcomes: dict[str, dict] = {}
    boundaries: dict[str, str] = {}
    for ev in events_newest_first:
        kind, op = ev.get("kind"), ev.get("operation_id")
        if kind == "started":
            if ev.get("timestamp_ns", 0) < since_ns:
                break
            if ev.get("workspace") != workspace or not op:
                continue
            snap = ev.get("snapshot") or {}
            found[op] = CallChange(operation_id=op, tool=ev.get("tool"), session_id=ev.get("session_id"),
                                   actor=ev.get("actor"), started_ns=int(ev.get("timestamp_ns") or 0),
                                   pre=ev.get("pre_checkpoint"), partial_pre=bool(snap.get("partial")
                                                                                  or snap.get("error")),
                                   pre_kind=snap.get("kind"),
                                   parent_call=ev.get("parent_tool_call_id"), subagent_id=ev.get("subagent_id"),
                                   args=dict(ev.get("args") or {}),
                                   declared=list(ev.get("declared") or ()))
        elif op and kind in ("returned", "uncertain", "recovered", "resolved") and op not in outcomes:
            outcomes[op] = ev
        elif op and kind == "maintenance" and ev.get("checkpoint"):
            boundaries.setdefault(op, ev["checkpoint"])
    out = sorted(found.values(), key=lambda c: c.started_ns)
    for c in out:
        c.boundary = boundaries.get(c.operation_id)
        ev = outcomes.get(c.operation_id)
        if ev is not None:
            c.finished_ns = int(ev.get("timestamp_ns") or 0)
            c.post = ev.get("post_checkpoint")
            c.status = ev.get("status") if ev.get("kind") == "returned" else ev.get("kind")
            c.settled = ev.get("outcome")            # recovered / resolved: completed, not_applied, ...
            c.left_running = bool(ev.get("left_running"))
            c.outcome = ev
    _mark_ambiguous(out)
    return out


def _mark_ambiguous(out: list[CallChange]) -> None:
    for c in out:
        if c.pre is None or c.partial_pre:
            c.ambiguous = "its checkpoint before the call is partial or missing"
        elif c.post is None or c.status in ("uncertain", "recovered", "resolved"):
            c.ambiguous = "no checkpoint after it (it crashed or its outcome is not known)"
    for i, a in enumerate(out):
        end_a = a.finished_ns or float("inf")
        for b in out[i + 1:]:
            if b.started_ns >= end_a:
                break
            if a.session_id != b.session_id:
                why = "it overlapped in time with a call of another session"
                a.ambiguous = a.ambiguous or why
                b.ambiguous = b.ambiguous or why


def gaps(cs: list[CallChange]) -> list[Segment]:
    """The stretches between calls whose author is not known: after a call that left a
    process running, up to the next checkpoint of the whole workspace taken before a call (a
    file call's reads only its own paths, so it says nothing of the rest), or now (`""` as
    `after`, for the caller to fill with the current tree)."""
    out = []
    for i, c in enumerate(cs):
        if c.left_running and c.post:
            nxt = next((d.pre for d in cs[i + 1:] if d.pre and d.pre_kind != "declared"), None)
            if nxt != c.post:
                out.append(Segment(before=c.post, after=nxt or "", label=f"after {c.operation_id[:12]}",
                                   ambiguous=True))
    return out
