"""Operator acts are the operator's: who acted is recorded, and an act from a process the agent
started is refused and journaled.

The agent runs shell commands as the operator's own user, so it can run `chronos-git journal
resolve OP ...` itself.  What tells the two apart is descent (engine.processes): a command the
agent ran descends from the process that dispatched its call (the owner every intent records:
Hermes, or `chronos-git run`) when that call can start processes (a shell command, code, an
unknown tool), or from a process such a call left running (recorded in the
call's outcome as `left_running`).  An act whose ancestors include a live one of those is
refused, and the attempt is journaled with the actor's ancestry.  The process the act runs in
is not checked itself: a slash command or the dashboard run inside the host, on the person's
input.  What this cannot see (a process that outlived its host, a command started by a
scheduler the agent wrote to): docs/threat-model.md.
"""
from __future__ import annotations

import os
from typing import NoReturn

from ..engine import processes
from ..engine.errors import ChronosError
from ..engine.owner import ProcessIdentity
from ..journal_refs import events
from .core import Core
from .operator_key import OperatorKey, OperatorKeyError

RECENT_EVENTS = 5000            # owners of newer calls are the ones that can still be alive


class AgentDescendant(ChronosError):
    """An operator act from a process that descends from a protected call."""
    code = "agent_descendant"


def actor_record() -> dict:
    """Who acts: uid, controlling terminal (none for an agent's tool) and the ancestry."""
    return {"uid": os.getuid(), "tty": processes.controlling_terminal(),
            "ancestry": [[p.pid, p.start, p.comm] for p in processes.ancestry()],
            "own_pid_namespace": processes.own_pid_namespace()}


def check(core: Core, act: str, operation_id: str | None = None) -> dict:
    """The actor's record for `act`; raises AgentDescendant (after journaling the attempt) when an
    ancestor is a live dispatcher of protected calls or a process one of them left running."""
    record = actor_record()
    if processes.own_pid_namespace():
        comm, pid, why = "a PID namespace of its own", record["ancestry"][0][0] if record["ancestry"] else 0, (
            "so its ancestry cannot be read (an `unshare -p` or a container's own /proc)")
        _refuse(core, act, operation_id, record, comm, pid, why)
    agents = _agent_processes(core)
    hit = next(((pid, start, comm) for pid, start, comm in record["ancestry"][1:]
                if (pid, start) in agents), None)
    if hit is None:
        return record
    pid, start, comm = hit
    _refuse(core, act, operation_id, record, comm, pid, agents[(pid, start)])


def authorize(core: Core, act: str, payload: dict, operation_id: str | None = None) -> dict:
    """{"signature": ...} for the event of `act` (`payload`: its kind and claimed fields), made
    before the act starts; {} where no operator key is registered.  An act that cannot be signed
    is refused and the attempt journaled (service/operator_key.py)."""
    try:
        sig = OperatorKey(core).signature(payload)
    except OperatorKeyError as exc:
        _journal_refusal(core, act, operation_id, actor_record(), f"not signed: {exc}")
        raise
    return {"signature": sig} if sig else {}


def _journal_refusal(core: Core, act: str, operation_id: str | None, record: dict, why: str) -> None:
    try:
        core.journal.append(events.Maintenance, {"operation_id": operation_id, "action": "operator_refused",
                                                  "act": act, "actor": record, "because": why})
    except Exception:              # the refusal stands; a journal that cannot record it says so itself
        pass


def _refuse(core: Core, act: str, operation_id: str | None, record: dict, comm: str, pid: int,
            why: str) -> NoReturn:
    _journal_refusal(core, act, operation_id, record, why)
    raise AgentDescendant(
        f"refused: `{act}` was run by a process that descends from {comm} (pid {pid}), {why}; an "
        "operator act must come from the operator, not from a command the agent ran. Run it from "
        "your own terminal, outside the agent's session. The attempt is journaled.")


def _agent_processes(core: Core) -> dict[tuple[int, int], str]:
    """(pid, start) -> why it counts, for every live process of this boot that dispatched a
    protected call or that such a call left running."""
    journal = core.journal
    if not core.store_exists():
        return {}
    journal.open()
    boot = ProcessIdentity.current().boot_id
    found: dict[tuple[int, int], str] = {}
    owners: dict[tuple[int, int], str] = {}
    for ev in journal.events(RECENT_EVENTS):
        owner = ev.get("owner") or {}
        if (ev.get("kind") == "started" and _spawns(ev) and owner.get("boot_id") == boot and owner.get("pid")
                and isinstance(owner.get("start_time"), int)):
            key = (int(owner["pid"]), owner["start_time"])
            owners.setdefault(key, f"which dispatched the protected call {str(ev.get('operation_id'))[:12]}")
        for left in ev.get("left_running") or ():
            try:
                pid, start = int(left[0]), int(left[1])
            except (TypeError, ValueError, IndexError):
                continue
            found.setdefault((pid, start), f"which the call {str(ev.get('operation_id'))[:12]} left running")
    for key, why in owners.items():
        found.setdefault(key, why)
    return {k: v for k, v in found.items() if processes.alive(*k)}


def _spawns(started: dict) -> bool:
    """A call that can start processes: a shell command, code, an unknown tool; not a file call
    (its paths are declared) nor chronos-git's own (a restore).  Only a dispatcher of such calls
    has the agent's processes below it (a harness that only writes files and resolves is not)."""
    return "declared" not in started and not str(started.get("tool") or "").startswith("chronos.")
