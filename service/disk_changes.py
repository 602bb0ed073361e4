"""What the time machine changed on disk since a conversation last looked, told to the model's
next turn and to the person, so neither acts on what they remember of the files.

A restore, revert, undo or redo may come from anywhere (the slash command, the model's tool,
the dashboard, the Desktop pane, the CLI in another terminal): every one is journaled, so the
journal is where they are found.  Each is told once per conversation: the caller keeps the
journal event it was told up to (`position`)."""
from __future__ import annotations

import os

from ..engine.checkpoint import ROLES
from ..journal_refs.journal import REF as JOURNAL_REF
from .call_changes import OPERATION_TOOLS as _TOOLS, CallEvents, call_event, compact
from .results import DiskChange, DiskChanges

_WHAT = {"chronos.restore": "restore", "chronos_rollback": "restore (the model's rollback)",
         "chronos.agent_restore": "agent-only restore", "chronos.revert": "revert", "chronos.undo": "undo",
         "chronos.redo": "redo", "chronos.rollback": "restore"}
PATHS_SHOWN = 20


def since(core, events: CallEvents, time, workspace: str, after: str | None) -> DiskChanges:
    """The workspace's time-machine operations whose outcome was journaled after event `after`
    (None: none, only where the journal stands now, to start from), oldest first.  Reads only
    the events after `after` (an intent older than that, of an operation that straddled it, is
    looked up in the whole journal's cache)."""
    ws = time.existing(workspace)
    root = os.fsdecode(ws.root_bytes)
    core.journal.settle()                            # an intent published in the background counts
    tip = core.journal.ref_tip() if core.store.repo().references.get(JOURNAL_REF) is not None else None
    if tip is None:                                  # no journal yet: none is made by looking
        return DiskChanges(workspace=root, position=None, changes=[])
    got = core.journal.payloads_since(after) if after is not None else None
    if got is None:                                  # to start from, or a history rewritten since
        return DiskChanges(workspace=root, position=tip, changes=[])
    head, new = got
    new = [compact(p) for p in new if call_event(p)]
    started = {p.get("operation_id"): p for p in new if p["kind"] == "started" and p.get("tool") in _TOOLS}
    # a time-machine operation's outcome says what it was; an older version's only by its intent
    done = [p for p in new if p["kind"] in ("returned", "uncertain")
            and (p.get("operation_id") in started or p.get("time_machine") in _TOOLS)]
    if any(p.get("operation_id") not in started for p in done):
        started.update({p.get("operation_id"): p for p in events.newest_first()
                        if p["kind"] == "started" and p.get("tool") in _TOOLS})
    out = []
    for p in done:
        intent = started.get(p.get("operation_id"))
        if intent is not None and intent.get("workspace") == root and \
                (p["kind"] == "uncertain" or p.get("status") in ("ok", "partial")):
            out.append(_change(time, ws, intent, p))
    return DiskChanges(workspace=root, position=head, changes=[c for c in out if c.count])


def _change(time, ws, intent: dict, outcome: dict) -> DiskChange:
    before, after = intent.get("pre_checkpoint"), outcome.get("after_checkpoint")
    paths: list[str] = []
    count = -1                            # its checkpoint after was not taken, or its outcome is not known
    if before and after and before == after:
        count = 0                         # it changed nothing
    elif before and after and outcome.get("kind") != "uncertain":
        try:
            files = time.diff(os.fsdecode(ws.root_bytes), before, after, patch=False).files
            count = len(files)
            paths = [f.path for f in files[:PATHS_SHOWN]]
        except Exception:                 # noqa: BLE001 (a checkpoint gone: said without the files)
            count = -1
    return DiskChange(operation_id=intent["operation_id"],
                      what=_WHAT.get(intent.get("tool") or "", str(intent.get("tool"))),
                      actor=intent.get("actor") if isinstance(intent.get("actor"), str) else None,
                      back_to=_back_to(ws, intent.get("args") or {}), paths=paths, count=count,
                      after_checkpoint=after)


def _back_to(ws, args: dict) -> str | None:
    """To which call or turn it went back, in words."""
    if args.get("checkpoint"):
        try:
            cp = ws.resolve(args["checkpoint"])
        except Exception:                 # noqa: BLE001 (gone since: its id is still an answer)
            return f"back to checkpoint {str(args['checkpoint'])[:12]}"
        role = ROLES.get(cp.meta.role or "", "") if cp.meta.role else ""
        tool = cp.meta.tool if cp.meta.tool and cp.meta.tool != "turn start" else None
        return "back to " + ", ".join(filter(None, (f"checkpoint @{cp.number}" if cp.number else
                                                    f"checkpoint {cp.id[:12]}",
                                       role, f"{tool} call" if tool and role != ROLES["turn_start"] else None)))
    for key, words in (("operation", "took back call {}"), ("session", "took back the calls of session {}"),
                       ("subagent", "took back the calls of subagent {}"), ("undoes", "undid operation {}"),
                       ("redoes", "redid what operation {} undid")):
        if args.get(key):
            return words.format(str(args[key])[:40])
    return None
