"""The model's rollback behind Hermes' approval prompt: the prompt's text (the dry run of what
would happen) and how it was answered, journaled: an approval goes with the rollback's call as
its actor; a denial or a timeout is journaled as a refused call.  The answer arrives through
the host's `post_approval_response` hook where the host has it (feature-detected)."""
from __future__ import annotations

import logging
import os
import threading

from ..engine.wording import plural

log = logging.getLogger("chronos_git")

APPROVAL_HOOK = "post_approval_response"
ROLLBACK_RULE = "chronos-git:rollback:"
APPROVED = {"once", "session", "always", "smart_approve"}


class RollbackApproval:
    def __init__(self, plugin):
        self.plugin = plugin
        self._answer = threading.local()      # the answer, for the rollback about to run on this thread

    def directive(self, args: dict, tool_call_id) -> dict:
        """pre_tool_call's `approve` directive for chronos_rollback, its message the dry run."""
        from .tools import preview
        try:
            plan = preview(self.plugin, "chronos_rollback", args)
        except Exception as exc:
            return {"action": "block", "message": f"chronos_rollback: {exc}"}
        if plan.status == "error":
            return {"action": "block", "message": f"chronos_rollback: {plan.error}"}
        cp = plan.restored_checkpoint
        summary = (f"{plural(plan.files_changed, 'file')} rewritten, {plan.untracked_removed} removed"
                   + (f", {plan.skipped + plan.kept} left untouched" if plan.skipped + plan.kept else "")
                   + (f", {plural(plan.conflicts, 'conflict')} left as they are" if plan.conflicts else ""))
        how = "only what tool calls changed since checkpoint" if plan.kind else "to checkpoint"
        # a unique rule key: "allow permanently" can never pre-approve a future rollback
        return {"action": "approve",
                "message": f"chronos-git rollback of {self.plugin.cwd()} {how} {cp[:12]}: {summary} "
                           "(a safety checkpoint is taken first)",
                "rule_key": f"{ROLLBACK_RULE}{cp[:12]}:{tool_call_id or os.urandom(4).hex()}"}

    def answered(self, choice=None, pattern_key=None, pattern_keys=None, decided_by=None, session_key=None,
                 tool_call_id=None, **kwargs):
        """The hook: how a prompt was answered (only ours are looked at; never in the way)."""
        keys = [k for k in (pattern_key, *(pattern_keys or ())) if isinstance(k, str)]
        if not any(k.startswith(ROLLBACK_RULE) for k in keys):
            return None
        try:
            if choice in APPROVED:
                self._answer.how = (f"approved at the prompt ({choice})" if not decided_by
                                    else f"approved by {decided_by} ({choice})")
            else:
                self._answer.how = None
                self.plugin.svc().record_refusal(
                    "chronos_rollback", "approval_denied", f"the approval prompt answered {choice or 'nothing'}",
                    session_id=session_key, tool_call_id=tool_call_id, workspace=self.plugin.cwd())
        except Exception as exc:           # observer only
            log.warning("chronos-git: the rollback's approval could not be recorded: %s", exc)
        return None

    def outcome(self) -> str:
        """For the rollback about to run on this thread: how its prompt was answered."""
        how = getattr(self._answer, "how", None)
        self._answer.how = None
        if how:
            return how
        if os.environ.get("HERMES_YOLO_MODE"):
            return "approved automatically (the host's approvals mode: no prompt)"
        return "approved (the host reported no answer)"
