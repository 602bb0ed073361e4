"""Hermes wiring: thin.  Everything real happens in service.Chronos.

Hermes 0.19.0 facts this module is built around (see docs/hermes-notes.md):
* a raising hook or middleware fails OPEN, so the gate is enforced with a
  `pre_tool_call` block directive and a middleware short-circuit, never by raising;
* `tool_execution` middleware runs twice, nested, for calls of a parallel batch
  (same tool_call_id): the inner frame passes straight through;
* batches run on worker threads: all state here is lock- or contextvar-guarded;
* hooks must accept **kwargs; newer hosts add ctx.get_config and friends.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import threading
from pathlib import Path

from . import PLUGIN_KEY
from .settings import Settings, store_location
from .settings import Loaded
from .settings import load as load_settings

log = logging.getLogger("chronos_git")

HOOKS = ("pre_tool_call", "transform_tool_result", "pre_llm_call")
OWN_TOOLS = frozenset({"chronos_snapshot", "chronos_list_checkpoints", "chronos_diff", "chronos_rollback",
                       "chronos_status", "chronos_verify"})
_active: contextvars.ContextVar[tuple] = contextvars.ContextVar("chronos_git_active", default=())
_plugins: list["Plugin"] = []


def register(ctx) -> None:
    plugin = Plugin(ctx)
    _plugins.append(plugin)
    from .hermes_tools import SCHEMAS, TOOLSET, handlers
    fns = handlers(plugin)
    for name, schema in SCHEMAS.items():
        ctx.register_tool(name=name, toolset=TOOLSET, schema={"name": name, **schema},
                          handler=fns[name], emoji="⏱")
    ctx.register_hook("pre_tool_call", plugin.on_pre_tool_call)
    ctx.register_hook("transform_tool_result", plugin.on_transform_tool_result)
    ctx.register_hook("pre_llm_call", plugin.on_pre_llm_call)
    ctx.register_middleware("tool_execution", plugin.tool_execution)
    section = getattr(ctx, "register_system_prompt_section", None)
    if callable(section):            # newer hosts: the alert goes into the session's system prompt
        try:
            section("chronos-git-recovery", plugin.system_prompt_section)
            plugin.section_registered = True
        except Exception as exc:      # an unexpected signature must not cost us the plugin
            log.info("chronos-git: system prompt section not registered: %s", exc)
    from .slash import SlashCommand
    if hasattr(ctx, "register_command"):
        ctx.register_command("chronos", SlashCommand(plugin),
                             description="chronos-git checkpoints, rollback and recovery",
                             args_hint="[ID|status|verify|recover|resolve|--list N|--diff ID|--dry-run ID]")
    if hasattr(ctx, "register_cli_command"):
        ctx.register_cli_command(PLUGIN_KEY, help="chronos-git checkpoints and tool-call journal",
                                 setup_fn=plugin.setup_cli, handler_fn=plugin.handle_cli,
                                 description="The chronos-git operator CLI (same as the standalone `chronos-git`).")


def store_dir_for(settings: Settings) -> Path:
    return store_location(settings)


def read_settings(ctx=None) -> Settings:
    """Newer hosts: ctx.get_config; 0.19.0: plugins.entries.<key>.settings of config.yaml."""
    return load_settings(ctx, env=False).settings


class Plugin:
    def __init__(self, ctx):
        self.ctx = ctx
        loaded = load_settings(ctx, env=False)
        self.settings = loaded.settings
        self.settings_problems = loaded.problems
        self._svc = None
        self._svc_lock = threading.Lock()
        self._calls: dict[str, dict] = {}        # tool_call_id -> what transform_tool_result needs
        self._calls_lock = threading.Lock()
        self.section_registered = False
        self._told: dict[str, str] = {}           # session -> the protection notice it was given

    # ------------------------------------------------------------- plumbing
    def store_dir(self) -> Path:
        return store_dir_for(self.settings)

    def svc(self):
        with self._svc_lock:
            if self._svc is None:
                import atexit

                from .service import Chronos
                self._svc = Chronos.get(self.store_dir(), self.settings, problems=self.settings_problems)
                self._svc.background = True      # watchers and a background first snapshot
                atexit.register(self._svc.flush)
            return self._svc

    @staticmethod
    def cwd() -> str:
        try:
            from agent.runtime_cwd import resolve_agent_cwd
            return str(resolve_agent_cwd())
        except Exception:
            return os.environ.get("TERMINAL_CWD") or os.getcwd()

    # ---------------------------------------------------------------- hooks
    def on_pre_tool_call(self, tool_name=None, args=None, tool_call_id=None, **kwargs):
        """The gate (block directive: cannot fail open) and the rollback approval."""
        try:
            tool_name = tool_name or ""
            if self.settings.is_read_only(tool_name):
                return None
            gate = self.svc().gate()
            if gate is not None and (self.settings.gate_mode == "block" or gate["integrity"] != "ok"):
                return {"action": "block", "message": json.dumps(_model_block(gate))}
            if tool_name == "chronos_rollback":
                return self._approval(args or {}, tool_call_id)
        except Exception as exc:
            log.warning("chronos-git pre_tool_call failed: %s", exc)
            if tool_name == "chronos_rollback":
                return {"action": "block", "message": f"chronos-git could not prepare the rollback: {exc}"}
            return {"action": "block",
                    "message": f"chronos-git could not check its recovery gate ({exc}); the call was not run"}
        return None

    def _approval(self, args: dict, tool_call_id) -> dict:
        spec = str(args.get("checkpoint_id") or "")
        svc = self.svc()
        try:
            plan = svc.restore(self.cwd(), spec, dry_run=True, paths=args.get("paths"), clean=args.get("clean"))
            cp = plan["restored_checkpoint"]
            summary = (f"{plan['files_changed']} file(s) rewritten, {plan['untracked_removed']} removed"
                       + (f", {plan['skipped']} left untouched" if plan["skipped"] else ""))
        except Exception as exc:
            return {"action": "block", "message": f"chronos_rollback: {exc}"}
        # a unique rule key: "allow permanently" can never pre-approve a future rollback
        return {"action": "approve",
                "message": f"chronos-git rollback of {self.cwd()} to checkpoint {cp[:8]}: {summary} "
                           "(a safety checkpoint is taken first)",
                "rule_key": f"chronos-git:rollback:{cp[:12]}:{tool_call_id or os.urandom(4).hex()}"}

    def tool_execution(self, tool_name=None, args=None, next_call=None, tool_call_id=None,
                       session_id=None, turn_id=None, **kwargs):
        """gate -> snapshot -> durable intent -> next_call once -> outcome -> post-snapshot."""
        from .calls import Blocked, Call
        from .tool_semantics import classify, declared_paths
        tool_name = tool_name or ""
        key = (tool_name, tool_call_id or "")
        if key in _active.get() or self.settings.is_read_only(tool_name):
            return next_call(args)                    # nested 0.19.0 double invocation, or read-only
        if tool_name in OWN_TOOLS:
            return next_call(args)                    # our tools journal themselves (rollback as a restore)
        svc = self.svc()
        cwd = self.cwd()
        try:
            if self.settings.duplicate_guard:
                prior = svc.completed_before(session_id, tool_name, args or {})
                if prior:
                    return json.dumps({"status": "ok", "chronos_duplicate": True,
                                       "message": f"not run again: an identical {tool_name} call already "
                                                  f"completed in this session (operation {prior['operation_id'][:12]}, "
                                                  f"checkpoint {str(prior['post_checkpoint'])[:8]})",
                                       "operation_id": prior["operation_id"]})
            call = Call(tool=tool_name, args=args or {}, workspace=cwd, session_id=session_id,
                        turn_id=turn_id, tool_call_id=tool_call_id,
                        declared=declared_paths(tool_name, args or {}, cwd))
            ticket = svc.begin(call)
        except Blocked as exc:
            return json.dumps(_model_block(exc.details))
        except Exception as exc:
            log.warning("chronos-git could not record the intent of %s: %s", tool_name, exc)
            return json.dumps({"error": f"chronos-git could not record the intent of this {tool_name} call "
                                        f"({exc}); it was NOT run. Check `hermes chronos-git health`."})
        token = _active.set(_active.get() + (key,))
        try:
            result = next_call(args)
        except BaseException as exc:
            from .calls import Outcome
            svc.finish(ticket, Outcome(status="error", uncertain_reason=f"exception: {type(exc).__name__}"))
            raise
        finally:
            _active.reset(token)
        info = svc.finish(ticket, classify(result))
        if tool_call_id:
            with self._calls_lock:
                self._calls[tool_call_id] = {"pre": ticket.pre_checkpoint, "tool": tool_name, **info}
                if len(self._calls) > 512:
                    self._calls.pop(next(iter(self._calls)))
        if not info.get("recorded", True):
            result = _annotate(result, "chronos_warning",
                               "the outcome of this call could not be recorded; further protected calls "
                               "are blocked in this process until an operator checks `hermes chronos-git journal status`")
        return result

    def on_transform_tool_result(self, tool_name=None, result=None, tool_call_id=None, status=None, **kwargs):
        """After a failed protected call, tell the model exactly how to inspect or undo it."""
        if not tool_call_id:
            return None
        with self._calls_lock:
            info = self._calls.pop(tool_call_id, None)
        if not info or not info.get("pre"):
            return None
        from .tool_semantics import failed
        if status not in ("error",) and not failed(result):
            return None
        cp = info["pre"][:8]
        hint = (f"[chronos-git] This {info['tool']} call failed. The workspace was checkpointed just before it "
                f"as {cp}. Inspect with chronos_diff(from_checkpoint=\"{cp}\"); undo with "
                f"chronos_rollback(checkpoint_id=\"{cp}\") (the user will be asked to approve).")
        if isinstance(result, str):
            return result + "\n\n" + hint
        return None

    def system_prompt_section(self, *args, **kwargs) -> str:
        """Newer hosts render this once per session: the crash alert, if any."""
        try:
            svc = self.svc()
            svc.start()
            settled = svc.take_alerts()
            unresolved = svc.journal.unresolved() if svc.journal.integrity == "ok" else []
            if not settled and not unresolved and svc.journal.integrity == "ok":
                return ""
            return recovery_alert(settled, unresolved, svc.journal.integrity)
        except Exception as exc:
            log.warning("chronos-git system prompt section failed: %s", exc)
            return ""

    def on_pre_llm_call(self, session_id=None, is_first_turn=None, **kwargs):
        """The first turn after a crash (and every turn while blocked) learns what happened."""
        try:
            svc = self.svc()
            svc.start()
            try:
                svc.turn_checkpoint(self.cwd(), session_id=session_id, turn_id=kwargs.get("turn_id"))
            except Exception as exc:       # a refused workspace (/, $HOME) must not break the turn
                log.info("chronos-git: no turn checkpoint: %s", exc)
            unresolved = svc.journal.unresolved() if svc.journal.integrity == "ok" else []
            settled = svc.take_alerts()        # settled by this or any earlier process, told once
            parts = []
            off = self._protection_notice(svc.protection(), session_id)
            if off:
                parts.append(off)
            if settled or unresolved or svc.journal.integrity != "ok":
                parts.append(recovery_alert(settled, unresolved, svc.journal.integrity))
            return {"context": "\n\n".join(parts)} if parts else None
        except Exception as exc:
            log.warning("chronos-git pre_llm_call failed: %s", exc)
            return None

    def _protection_notice(self, prot: dict, session_id) -> str | None:
        """When protection is off or degraded: told to the user (stderr) and the model (context),
        on the first turn of each session and whenever the reason changes."""
        if prot.get("state") in ("on", "ready"):
            self._told.pop(session_id or "", None)
            return None
        what = ("is OFF" if prot["state"] == "off" else "is DEGRADED")
        consequence = ("Protected tool calls are refused: their intent cannot be recorded."
                       if prot["state"] == "off" else "Tool calls are still journaled.")
        text = (f"⚠ chronos-git protection {what}: {prot.get('reason')}. {consequence}"
                + (f" Fix: {prot['fix']}." if prot.get("fix") else ""))
        key = session_id or ""
        if self._told.get(key) == text:
            return None
        self._told[key] = text
        print(text, file=sys.stderr, flush=True)
        return text + " Tell the user this before you change any files."

    # ------------------------------------------------------------------ CLI
    def setup_cli(self, parser) -> None:
        from .cli import configure
        configure(parser)

    def handle_cli(self, args) -> int:
        import sys

        from .cli import dispatch
        rc = dispatch(args, loaded=Loaded(self.settings, self.settings_problems), store=str(self.store_dir()))
        if rc:
            sys.exit(rc)
        return rc


def _model_block(gate: dict) -> dict:
    return {"error": "chronos_blocked", "blocked": True, "operation_ids": gate.get("operation_ids", []),
            "message": gate.get("message"),
            "what_you_can_do": "Use read-only tools (read_file, search_files, chronos_status) and tell the "
                               "user: an operator must reconcile the listed operations with "
                               "`hermes chronos-git journal resolve <op> --outcome completed|not_applied "
                               "--evidence <text>` (or /chronos resolve) before protected tools run again."}


def _annotate(result, key: str, text: str):
    if isinstance(result, str):
        try:
            data = json.loads(result)
            if isinstance(data, dict):
                data[key] = text
                return json.dumps(data)
        except ValueError:
            pass
        return result + f"\n\n[{key}] {text}"
    return result


def recovery_alert(settled: list[dict], unresolved: list[dict], integrity: str) -> str:
    lines = ["[chronos-git recovery alert]"]
    if integrity != "ok":
        lines.append(f"The tool-call journal failed its integrity check: {integrity}. Protected tools are "
                     "blocked until an operator investigates (`hermes chronos-git journal verify`).")
    done = [s for s in settled if s["result"] in ("completed", "not_applied")]
    if done:
        lines.append("A previous session was cut off during tool calls. Settled by evidence on disk:")
        for s in done:
            verb = ("had completed before the crash; do NOT repeat it" if s["result"] == "completed"
                    else "was NOT applied; nothing changed on disk (an operator may replay it)")
            lines.append(f"- {s['tool']} on {', '.join(s.get('paths') or [])}: {verb}")
    if unresolved:
        lines.append("Waiting for the operator (protected tools are blocked; read-only tools work):")
        for op in unresolved:
            what = op.get("reason") or ("cut off by a crash" if op["state"] == "pending" else "outcome unknown")
            lines.append(f"- operation {op['operation_id'][:12]} ({op['tool']}): {what}")
        lines.append("Tell the user to check these and run `hermes chronos-git journal resolve <op> "
                     "--outcome completed|not_applied --evidence <text>` or `/chronos resolve ...`.")
    return "\n".join(lines)
