"""What the model (and the user) is told: crash recovery, a closed gate, protection off."""
from __future__ import annotations

from ..engine.codec import human
from ..journal_refs import Operation
from ..service.results import Protection, Refusal, Settled


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


def failure_hint(tool: str, pre_checkpoint: str) -> str:
    cp = pre_checkpoint[:8]
    return (f"[chronos-git] This {tool} call failed. The workspace was checkpointed just before it "
            f"as {cp}. Inspect with chronos_diff(from_checkpoint=\"{cp}\"); undo with "
            f"chronos_rollback(checkpoint_id=\"{cp}\") (the user will be asked to approve).")
