"""A call refused before dispatch is journaled: a `refused` event, nothing run, no operation opened.

Two things refuse a call: a target that is chronos-git's own (service/self_protection.py,
code `protected_path`) and a closed recovery gate (service/gate.py, code `chronos_blocked`).
Either way the audit trail shows what the agent tried while it could not.  A journal that
cannot take the event (its integrity in doubt, a full disk) refuses the call all the same,
and the refusal says it was not recorded.
"""
from __future__ import annotations

import logging
import uuid

from ..journal_refs import events
from ..journal_refs.events import args_hash
from .calls import Call
from .core import Core

log = logging.getLogger("chronos_git")


def record(core: Core, start, call: Call, code: str, **extra) -> tuple[str, bool]:
    """(the refused call's own operation id, whether its event was journaled).  `start`: the
    service's once-per-process start (a CLI `write` is checked before `begin` opens the journal)."""
    op = uuid.uuid4().hex
    fields: dict[str, object] = {
        "operation_id": op, "tool": call.tool, "code": code, **extra,
        "args_hash": args_hash(call.args), "session_id": call.session_id, "tool_call_id": call.tool_call_id,
        "turn_id": call.turn_id, "workspace": call.workspace, **call.provenance()}
    try:
        start()
        fields["owner"] = core.journal.me.to_dict()
        core.journal.append(events.Refused, fields)
    except Exception as exc:          # noqa: BLE001 (refused all the same)
        log.warning("chronos-git: the refusal of a %s call could not be journaled: %s", call.tool, exc)
        return op, False
    return op, True
