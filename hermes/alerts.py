"""What the model (and the user) is told: crash recovery, a closed gate, protection off."""
from __future__ import annotations

from ..cli.render import for_prog
from ..engine.codec import human
from ..engine.wording import plural
from ..service.results import Operation, Protection, Refusal, Settled
from .shell import HERMES_PROG


def recovery_alert(settled: list[Settled], unresolved: list[Operation], integrity: str) -> str:
    lines = ["[chronos-git recovery alert]"]
    if integrity != "ok":
        lines.append(f"The tool-call journal failed its integrity check: {integrity}. Protected tools are "
                     "blocked until an operator investigates (`hermes chronos-git journal verify`).")
    done = [s for s in settled if s.result in ("completed", "not_applied")]
    if done:
        lines.append("A previous session was cut off during tool calls. Settled by evidence on disk:")
        for s in done:
            verb = ("had completed before the crash; do NOT repeat it" if s.result == "completed"
                    else "was NOT applied; nothing changed on disk (an operator may replay it)")
            lines.append(f"- {s.tool} on {', '.join(human(p) for p in s.paths or [])}: {verb}")
    if unresolved:
        lines.append("Waiting for the operator (protected tools are blocked; read-only tools work):")
        for op in unresolved:
            what = op.reason or ("cut off by a crash" if op.state == "pending" else "outcome unknown")
            lines.append(f"- operation {op.operation_id[:12]} ({op.tool}): {what}")
        lines.append("Tell the user to check these and run `hermes chronos-git journal resolve <op> "
                     "--outcome completed|not_applied --evidence <text>` or `/chronos resolve ...`.")
    # settlements that were only "needs an operator" and are resolved by now: nothing to say
    return "\n".join(lines) if len(lines) > 1 else ""


def person_notice(settled: list[Settled], gate: Refusal | None) -> str:
    """What the person is told (stderr, or a footer of the answer where stderr is not seen) when
    calls cut off by a crash were settled, or the recovery gate closed; "" when nothing.  The
    model is told by `recovery_alert`; this says the same in a few lines, with the commands."""
    lines = []
    done = [s for s in settled if s.result in ("completed", "not_applied")]
    if done:
        lines.append(f"⚠ chronos-git: an earlier session was cut off during {plural(len(done), 'tool call')}; "
                     "settled by evidence on disk:")
        for s in done:
            what = ("had completed before the crash (the agent is told not to repeat it)" if s.result == "completed"
                    else f"was NOT applied, nothing changed on disk (`{HERMES_PROG} journal recover "
                         f"{s.operation_id[:12]} --replay` applies it once)")
            on = f" on {', '.join(human(p) for p in s.paths)}" if s.paths else ""
            lines.append(f"  - {s.tool}{on}: {what}")
    if gate is not None:
        refused = gate.mode == "block" or gate.integrity != "ok"
        if gate.operations:
            lines.append(f"⚠ chronos-git: the recovery gate is {'CLOSED' if refused else 'closed (gate_mode warn)'}: "
                         f"{plural(len(gate.operations), 'tool call')} with an unknown outcome "
                         f"{'wait' if len(gate.operations) > 1 else 'waits'} for you"
                         + ("; protected tool calls are refused until then:" if refused else ":"))
            for op in gate.operations:
                why = op.reason or ("cut off by a crash" if op.state == "pending" else "outcome unknown")
                lines.append(f"  - {op.operation_id[:12]} ({op.tool}): {human(why)}")
            op = gate.operations[0].operation_id[:12] if len(gate.operations) == 1 else "OP"
            lines.append(f"  settle: `{HERMES_PROG} journal status`, then `{HERMES_PROG} journal resolve {op} "
                         "--outcome completed|not_applied --evidence TEXT` (or /chronos resolve ...)")
        else:
            lines.append("⚠ " + for_prog(human(gate.message), HERMES_PROG))
    return "\n".join(lines)


def protection_notice(prot: Protection) -> str | None:
    """None when protection is on (or ready), else the one line that says OFF/DEGRADED, why, and the fix."""
    if prot.state in ("on", "ready"):
        return None
    what = "is OFF" if prot.state == "off" else "is DEGRADED"
    consequence = ("Protected tool calls are refused: their intent cannot be recorded."
                   if prot.state == "off" else "Tool calls are still journaled.")
    return (f"⚠ chronos-git protection {what}: {prot.reason}. {consequence}"
            + (f" Fix: {prot.fix}." if prot.fix else ""))


def model_block(refusal: Refusal) -> dict:
    """The tool result a refused call gets: why, and what the model can still do."""
    return {"error": "chronos_blocked", "blocked": True, "operation_ids": refusal.operation_ids,
            "message": refusal.message,
            "what_you_can_do": "Use read-only tools (read_file, search_files, chronos_status) and tell the "
                               "user: an operator must reconcile the listed operations with "
                               "`hermes chronos-git journal resolve <op> --outcome completed|not_applied "
                               "--evidence <text>` (or /chronos resolve) before protected tools run again."}


def protected_block(exc) -> dict:
    """The tool result of a call refused because its target is chronos-git's own (a
    service.errors.ProtectedPath): why, and what the model can do instead."""
    return {"error": "protected_path", "refused": True, "operation_id": exc.operation_id,
            "paths": [p["path"] for p in exc.paths], "message": str(exc),
            "what_you_can_do": "Leave chronos-git's store, journal and code alone: no tool call may change them, "
                               "and a shell command that does is recorded against that call and reported to "
                               "the user. If the user asked for this change, tell them it must be made by them, "
                               "outside this agent."}


def changed_notice(tool: str, operation_id: str | None, paths: list[str]) -> str:
    """What the model and the person are told when a call changed chronos-git's own files."""
    shown = ", ".join(human(p) for p in paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (f"chronos-git: this {tool} call changed chronos-git's own files ({shown}). This is recorded "
            f"against the call (operation {str(operation_id)[:12]}; `{HERMES_PROG} journal show "
            f"{str(operation_id)[:12]}`) and shown by `{HERMES_PROG} health`. Do not change these files; "
            "tell the user what you ran.")


def disk_notice(changes) -> str | None:
    """The files a restore, revert, undo or redo changed since the conversation last looked
    (service DiskChange items): the model must read them again, not trust its memory."""
    if not changes:
        return None
    lines = ["chronos-git: the files on disk changed since your last turn; what you remember of them is out "
             "of date, so read a file again before you rely on it or edit it:"]
    for c in changes:
        who = f" by {human(c.actor)}" if c.actor else ""
        back = f": {human(c.back_to)}" if c.back_to else ""
        if c.count < 0:
            files = "the files it changed cannot be listed (a checkpoint is gone)"
        else:
            shown = ", ".join(human(p) for p in c.paths)
            more = f" and {c.count - len(c.paths)} more" if c.count > len(c.paths) else ""
            files = f"{plural(c.count, 'file')} changed: {shown}{more}"
        lines.append(f"- {c.what}{who}{back}; {files} (operation {c.operation_id[:12]})")
    return "\n".join(lines)


def failure_hint(tool: str, pre_checkpoint: str) -> str:
    cp = pre_checkpoint[:12]
    return (f"[chronos-git] This {tool} call failed. The workspace was checkpointed just before it "
            f"as {cp}. Inspect with chronos_diff(from_checkpoint=\"{cp}\"); undo with "
            f"chronos_rollback(checkpoint_id=\"{cp}\") (the user will be asked to approve).")
