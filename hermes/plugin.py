"""Hermes wiring: thin.  Everything real happens in the service.

Hermes 0.19.0 facts this module is built around (see docs/hermes-notes.md):
* a raising hook or middleware fails OPEN, so the gate is enforced with a
  `pre_tool_call` block directive and a middleware short-circuit, never by raising;
* `tool_execution` middleware runs twice, nested, for calls of a parallel batch
  (same tool_call_id): the inner frame passes straight through;
* batches run on worker threads: all state here is lock- or contextvar-guarded;
* hooks must accept **kwargs; newer hosts add ctx.get_config and friends.
"""
from __future__ import annotations

import atexit
import contextvars
import json
import logging
import os
import sys
import threading
from pathlib import Path

from ..engine.codec import human
from ..settings import PLUGIN_KEY, Loaded, Settings, hermes_home, store_location
from ..settings import load as load_settings
from .alerts import (
    changed_notice,
    disk_notice,
    failure_hint,
    model_block,
    person_notice,
    protected_block,
    protection_notice,
    recovery_alert,
)
from .approval import APPROVAL_HOOK, RollbackApproval
from .shell import HERMES_PROG
from .subagents import Subagents

log = logging.getLogger("chronos_git")

HOOKS = ("pre_tool_call", "transform_tool_result", "pre_llm_call", "transform_llm_output", "on_session_end",
         APPROVAL_HOOK, "subagent_start")
MIDDLEWARE = ("tool_execution", "llm_execution")
OWN_TOOLS = frozenset({"chronos_snapshot", "chronos_list_checkpoints", "chronos_diff", "chronos_rollback",
                       "chronos_status", "chronos_verify"})
_active: contextvars.ContextVar[tuple] = contextvars.ContextVar("chronos_git_active", default=())
_plugins: list["Plugin"] = []


def register(ctx) -> None:
    plugin = Plugin(ctx)
    _plugins.append(plugin)
    from .tools import SCHEMAS, TOOLSET, handlers
    fns = handlers(plugin)
    for name, schema in SCHEMAS.items():
        ctx.register_tool(name=name, toolset=TOOLSET, schema={"name": name, **schema},
                          handler=fns[name], emoji="⏱")
    ctx.register_hook("pre_tool_call", plugin.on_pre_tool_call)
    ctx.register_hook("transform_tool_result", plugin.on_transform_tool_result)
    ctx.register_hook("pre_llm_call", plugin.on_pre_llm_call)
    ctx.register_hook("transform_llm_output", plugin.on_transform_llm_output)
    ctx.register_hook("on_session_end", plugin.on_session_end)
    if _host_has_hook(APPROVAL_HOOK):
        ctx.register_hook(APPROVAL_HOOK, plugin.on_approval)
    if _host_has_hook("subagent_start"):
        ctx.register_hook("subagent_start", plugin.subagents.started)
    atexit.register(plugin.drain_pushes)
    ctx.register_middleware("tool_execution", plugin.tool_execution)
    ctx.register_middleware("llm_execution", plugin.llm_execution)
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
                             args_hint="[ID [--agent-only]|undo|redo|revert OP|status|verify|recover|resolve|"
                                       "--list N|--diff ID|--dry-run ID]")
    if hasattr(ctx, "register_cli_command"):
        ctx.register_cli_command(PLUGIN_KEY, help="chronos-git checkpoints and tool-call journal",
                                 setup_fn=plugin.setup_cli, handler_fn=plugin.handle_cli,
                                 description="The chronos-git operator CLI (same as the standalone `chronos-git`).")


def store_dir_for(settings: Settings) -> Path:
    return store_location(settings)


NARROWED_FOR_MODEL = ("chronos-git: the workspace's ignore rules now leave files out of its checkpoints; the person "
                      "was told. Do not change ignore files to keep work out of checkpoints.")
HELD_FOR_MODEL = ("chronos-git: a change to its settings is waiting for the operator's approval; the previous "
                  "settings stay in force. Do not try to change, accept or work around it yourself.")


def _host_has_hook(name: str) -> bool:
    try:
        from hermes_cli.plugins import VALID_HOOKS
    except Exception:                  # noqa: BLE001 (an older or a bare host: not offered)
        return False
    return name in VALID_HOOKS


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
        self.approvals = RollbackApproval(self)
        self.subagents = Subagents()               # child session -> what the host said of that subagent
        self._told: dict[str, str] = {}           # session -> the protection notice it was given
        self._person_lock = threading.Lock()
        self._gate_told: dict[str, tuple] = {}    # session -> (operation ids, message) of the closed gate told
        self._footers: dict[str, list[str]] = {}  # session -> notices for the answer's end (stderr unseen)
        self._held_keys: tuple = ()                # the held settings changes the person was told of
        self._narrowed_told: tuple = ()            # the narrowings of capture the person was told of
        self._disk_told: dict[str, str | None] = {}   # session -> the journal event its disk changes were told up to

    # ------------------------------------------------------------- plumbing
    def store_dir(self) -> Path:
        return store_dir_for(self.settings)

    def svc(self):
        with self._svc_lock:
            if self._svc is None:
                import atexit

                from ..service import Chronos
                self._svc = Chronos.get(self.store_dir(), self.settings, problems=self.settings_problems)
                self._svc.background = True      # watchers and a background first snapshot
                # config.yaml is the agent's to edit: a weakening change waits for the operator
                self._svc.watch_settings(lambda: load_settings(self.ctx, env=False), hermes_home() / "config.yaml")
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
            svc = self.svc()
            svc.settings_check()                   # any tool, read-only ones too: config.yaml changed?
            self._tell_held(svc, kwargs.get("session_id"), kwargs.get("platform"))
            if svc.settings.is_read_only(tool_name):
                return None
            refusal = svc.refusal()
            if refusal is not None:         # asked again with the call, which journals the refusal
                refusal = svc.refusal(self._refused_call(tool_name, args, tool_call_id, kwargs))
            if refusal is not None:
                return {"action": "block", "message": json.dumps(model_block(refusal))}
            protected = self._protected_target(tool_name, args or {}, tool_call_id, kwargs)
            if protected is not None:
                return protected
            if tool_name == "chronos_rollback":
                return self._approval(args or {}, tool_call_id)
        except Exception as exc:
            log.warning("chronos-git pre_tool_call failed: %s", exc)
            if tool_name == "chronos_rollback":
                return {"action": "block", "message": f"chronos-git could not prepare the rollback: {exc}"}
            return {"action": "block",
                    "message": f"chronos-git could not check its recovery gate ({exc}); the call was not run"}
        return None

    def _refused_call(self, tool_name: str, args, tool_call_id, kwargs):
        """The call as the journal records it if the gate refuses it (a `refused` event)."""
        from ..service import Call
        return Call(tool=tool_name, args=args if isinstance(args, dict) else {}, workspace=self.cwd(),
                    session_id=kwargs.get("session_id"), turn_id=kwargs.get("turn_id"), tool_call_id=tool_call_id,
                    subagent=self.subagents.of(kwargs.get("session_id")))

    def _protected_target(self, tool_name: str, args: dict, tool_call_id, kwargs) -> dict | None:
        """A file call whose target is chronos-git's own: a block directive (journaled as refused),
        as the middleware would refuse it (hooks and middleware fail open when they raise)."""
        from ..service import Call, Declared
        from ..service.errors import ProtectedPath
        from .semantics import target_paths
        cwd = self.cwd()
        paths = target_paths(tool_name, args, cwd)
        if not paths:
            return None
        try:
            self.svc().check_protected(Call(
                tool=tool_name, args=args, workspace=cwd, session_id=kwargs.get("session_id"),
                turn_id=kwargs.get("turn_id"), tool_call_id=tool_call_id, declared=[Declared(p) for p in paths]))
        except ProtectedPath as exc:
            self._say(f"⚠ chronos-git refused a {tool_name} call: {exc}", kwargs.get("session_id") or "",
                      kwargs.get("platform"))
            return {"action": "block", "message": json.dumps(protected_block(exc))}
        return None

    def _approval(self, args: dict, tool_call_id) -> dict:
        return self.approvals.directive(args, tool_call_id)

    def on_approval(self, **kwargs):
        return self.approvals.answered(**kwargs)

    def approval_outcome(self) -> str:
        return self.approvals.outcome()

    def tool_execution(self, tool_name=None, args=None, next_call=None, tool_call_id=None,
                       session_id=None, turn_id=None, **kwargs):
        """The protected call: `svc.protect` around exactly one `next_call`."""
        from ..service import Call
        from ..service.errors import Blocked, ProtectedPath
        from .semantics import classify, declared_paths
        tool_name = tool_name or ""
        key = (tool_name, tool_call_id or "")
        svc = self.svc()
        if key in _active.get() or svc.settings.is_read_only(tool_name) or tool_name in OWN_TOOLS:
            # the nested 0.19.0 double invocation, a read-only tool (as the settings in force
            # say), or one of ours (a rollback journals itself as a restore)
            return next_call(args)
        cwd = self.cwd()
        if svc.settings.duplicate_guard:
            prior = svc.completed_before(session_id, tool_name, args or {})
            if prior:
                return json.dumps({"status": "ok", "chronos_duplicate": True,
                                   "message": f"not run again: an identical {tool_name} call already completed "
                                              f"in this session (operation {prior['operation_id'][:12]}, "
                                              f"checkpoint {str(prior['post_checkpoint'])[:12]})",
                                   "operation_id": prior["operation_id"]})
        call = Call(tool=tool_name, args=args or {}, workspace=cwd, session_id=session_id, turn_id=turn_id,
                    tool_call_id=tool_call_id, declared=declared_paths(tool_name, args or {}, cwd),
                    subagent=self.subagents.of(session_id))
        dispatched = False
        try:
            # write-behind: the outcome is recorded after Hermes has the result, before the next call
            with svc.protect(call, write_behind=True) as t:
                dispatched = True
                token = _active.set(_active.get() + (key,))
                try:
                    result = next_call(args)
                finally:
                    _active.reset(token)
                t.outcome = classify(result)
        except Blocked as exc:
            return json.dumps(model_block(exc.refusal))
        except ProtectedPath as exc:                  # chronos-git's own files: not run, journaled
            self._say(f"⚠ chronos-git refused a {tool_name} call: {exc}", session_id or "", kwargs.get("platform"))
            return json.dumps(protected_block(exc))
        except Exception as exc:
            if dispatched:
                raise                                 # the tool's own exception: Hermes reports it
            log.warning("chronos-git could not record the intent of %s: %s", tool_name, exc)
            return json.dumps({"error": f"chronos-git could not record the intent of this {tool_name} call "
                                        f"({exc}); it was NOT run. Check `hermes chronos-git health`."})
        if tool_call_id:
            with self._calls_lock:
                self._calls[tool_call_id] = {"pre": t.ticket.pre_checkpoint, "tool": tool_name}
                if len(self._calls) > 512:
                    self._calls.pop(next(iter(self._calls)))
        if t.record.protected_changed:
            notice = changed_notice(tool_name, t.record.operation_id, t.record.protected_changed)
            self._say("⚠ " + notice, session_id or "", kwargs.get("platform"))
            result = _annotate(result, "chronos_warning", notice)
        if not t.record.recorded:
            result = _annotate(result, "chronos_warning",
                               "the outcome of this call could not be recorded; further protected calls "
                               "are blocked in this process until an operator checks `hermes chronos-git journal status`")
        return result

    def llm_execution(self, request=None, next_call=None, **kwargs):
        """Around each model request: the outcomes behind are written once the request is on
        its way, while Hermes' thread waits on the network (ProtectedCalls.release_behind), or
        once the model has answered, whichever is first (ProtectedCalls.answered)."""
        svc = self._svc
        if svc is not None:
            try:
                svc.release_behind()
            except Exception as exc:          # never in the way of the model request
                log.info("chronos-git: outcomes not released: %s", exc)
        try:
            return next_call(request)
        finally:
            if svc is not None:
                try:
                    svc.answered()      # a fast model: write beside Hermes' handling of the answer
                except Exception as exc:
                    log.info("chronos-git: outcomes not released: %s", exc)

    def on_transform_tool_result(self, tool_name=None, result=None, tool_call_id=None, status=None, **kwargs):
        """After a failed protected call, tell the model exactly how to inspect or undo it."""
        if not tool_call_id:
            return None
        with self._calls_lock:
            info = self._calls.pop(tool_call_id, None)
        if not info or not info.get("pre"):
            return None
        from .semantics import failed
        if status != "error" and not failed(result):
            return None
        return result + "\n\n" + failure_hint(info["tool"], info["pre"]) if isinstance(result, str) else None

    def system_prompt_section(self, *args, **kwargs) -> str:
        """Newer hosts render this once per session: the crash alert, if any."""
        try:
            svc = self.svc()
            svc.start()
            settled = svc.take_alerts(self.cwd())
            unresolved, integrity = svc.recovery_state()
            info = args[0] if args and isinstance(args[0], dict) else kwargs
            self._tell_person(settled, info.get("session_id"), info.get("platform"))
            if not settled and not unresolved and integrity == "ok":
                return ""
            return recovery_alert(settled, unresolved, integrity)
        except Exception as exc:
            log.warning("chronos-git system prompt section failed: %s", exc)
            return ""

    def on_pre_llm_call(self, session_id=None, is_first_turn=None, **kwargs):
        """The first turn after a crash (and every turn while blocked) learns what happened;
        while protection is off, the first turn of each session says so."""
        try:
            svc = self.svc()
            svc.start()
            try:
                svc.turn_checkpoint(self.cwd(), session_id=session_id, turn_id=kwargs.get("turn_id"))
            except Exception as exc:       # a refused workspace (/, $HOME) must not break the turn
                log.info("chronos-git: no turn checkpoint: %s", exc)
            unresolved, integrity = svc.recovery_state()
            settled = svc.take_alerts(self.cwd())        # settled by this or any earlier process, told once
            self._tell_person(settled, session_id, kwargs.get("platform"))
            parts = []
            # a held settings change is told apart (HELD_FOR_MODEL): the model never learns how to accept it
            off = self._tell_once(protection_notice(svc.protection(held=False)), session_id, kwargs.get("platform"))
            if off:
                parts.append(off)
            alert = recovery_alert(settled, unresolved, integrity)
            if alert:
                parts.append(alert)
            if self._tell_held(svc, session_id, kwargs.get("platform")) or (is_first_turn and self._held_keys):
                parts.append(HELD_FOR_MODEL)
            if self._tell_narrowed(svc, session_id, kwargs.get("platform")) or (is_first_turn and self._narrowed_told):
                parts.append(NARROWED_FOR_MODEL)
            moved = self._tell_disk_changes(svc, session_id, kwargs.get("platform"))
            if moved:
                parts.append(moved)
            return {"context": "\n\n".join(parts)} if parts else None
        except Exception as exc:
            log.warning("chronos-git pre_llm_call failed: %s", exc)
            return None

    def _tell_disk_changes(self, svc, session_id, platform) -> str | None:
        """Restores, reverts, undos and redos since this conversation's last turn (from any
        surface: they are journaled), told once to the model and to the person.  A conversation
        new to this process starts where the journal stands: it has no last turn to correct."""
        key = session_id or ""
        with self._person_lock:
            known = key in self._disk_told
            told = self._disk_told.get(key)
        try:
            res = svc.disk_changes(self.cwd(), told if known else None)
        except Exception as exc:           # a workspace never checkpointed or refused: nothing to tell
            log.info("chronos-git: no disk changes looked up: %s", exc)
            return None
        with self._person_lock:
            self._disk_told[key] = res.position
        notice = disk_notice(res.changes)
        if notice:
            self._say(notice, key, platform)
        return notice

    def on_session_end(self, **kwargs):
        """After every user turn: push the journal to the remotes and, when a budget is
        exceeded, compact, both in the background."""
        try:
            if self._svc is not None:
                self._svc.after_turn()     # the turn's outcomes are durable before it ends; push
        except Exception as exc:
            log.info("chronos-git: no background push: %s", exc)
        try:
            if self._svc is not None:
                self._svc.compact_in_background_if_due()
        except Exception as exc:
            log.info("chronos-git: no background compaction: %s", exc)

    def drain_pushes(self) -> None:
        if self._svc is not None:
            self._svc.drain_pushes(10.0)

    def _tell_once(self, notice: str | None, session_id, platform=None) -> str | None:
        """A protection notice for the user (stderr) and the model (context): on the first turn
        of each session and whenever it changes."""
        key = session_id or ""
        if notice is None:
            self._told.pop(key, None)
            return None
        if self._told.get(key) == notice:
            return None
        self._told[key] = notice
        self._say(notice, key, platform)
        return notice + " Tell the user this before you change any files."

    def _tell_held(self, svc, session_id, platform=None) -> bool:
        """A weakening settings change held for the operator: the person is told what and how to
        accept it (once per change); the model only that one waits.  True when there was news."""
        held = svc.settings_held()
        keys = tuple((h.key, json.dumps(h.written, sort_keys=True)) for h in held)
        with self._person_lock:
            news, self._held_keys = keys != self._held_keys and bool(keys), keys
        if news:
            lines = "; ".join(f"{h.key}: {json.dumps(h.written)} in config.yaml, {json.dumps(h.in_force)} stays "
                              f"in force ({h.why})" for h in held)
            self._say(f"⚠ chronos-git: a change to its settings weakens protection and waits for you: {lines}. "
                      f"If you made it, run `hermes {PLUGIN_KEY} settings accept {' '.join(h.key for h in held)}` "
                      "in your own terminal; if not, "
                      "undo it in config.yaml.", session_id or "", platform)
        return news

    def _tell_narrowed(self, svc, session_id, platform=None) -> bool:
        """Ignore rules that now leave much of a workspace out of its checkpoints: the person is
        told what and how to accept it (once per change), the model only that it happened."""
        found = svc.capture_narrowed()
        keys = tuple((n.workspace, n.since_seq) for n in found)
        with self._person_lock:
            news, self._narrowed_told = keys != self._narrowed_told and bool(keys), keys
        if news:
            for n in found:
                self._say(f"⚠ chronos-git: ignore rules changed in {human(n.workspace)} ("
                          f"{', '.join(human(x) for x in n.sources)}) now leave out {n.count} of its {n.files} "
                          "captured paths; files created there from now on are in no checkpoint. If you made "
                          f"them: `hermes {PLUGIN_KEY} capture accept --workspace {human(n.workspace)}` in your "
                          "own terminal; if not, undo them.", session_id or "", platform)
        return news

    def _tell_person(self, settled, session_id, platform=None) -> None:
        """The person learns what the model learns from `recovery_alert`, once per occurrence:
        calls settled by evidence (each batch is taken once), and the recovery gate closing
        (again only when an operation they were not told of joins, or the reason changes)."""
        try:
            notice = person_notice(settled, self._gate_news(session_id or ""))
            if notice:
                self._say(notice, session_id or "", platform)
        except Exception as exc:          # the model's alert must not depend on this
            log.warning("chronos-git: the person was not told: %s", exc)

    def _gate_news(self, key: str):
        """The closed gate's refusal if this session was not told of it yet, else None."""
        if self._svc is None:
            return None
        gate = self._svc.gate_state()
        with self._person_lock:
            told_ids, told_msg = self._gate_told.get(key, (frozenset(), None))
            if gate is None:              # open again: a later closing is news
                self._gate_told.pop(key, None)
                return None
            ids = frozenset(gate.operation_ids)
            fresh = not ids <= told_ids if ids else gate.message != told_msg
            self._gate_told[key] = (told_ids | ids, gate.message)
            return gate if fresh else None

    def _say(self, notice: str, key: str, platform) -> None:
        """To the person: on stderr (the CLI shows it, with -Q too); where stderr is not theirs (the
        gateway, the TUI, `hermes -z`), at the end of the next answer (`transform_llm_output`)."""
        print(notice, file=sys.stderr, flush=True)
        if platform not in (None, "", "cli") or getattr(sys.stderr, "name", None) == os.devnull:
            with self._person_lock:
                self._footers.setdefault(key, []).append(notice)

    def on_transform_llm_output(self, response_text=None, session_id=None, platform=None, **kwargs):
        """The end of a turn: a gate that closed during it is told now (a `-q` run has no next
        turn), and notices the person could not see on stderr end the answer."""
        try:
            if self._svc is not None:
                self._tell_person([], session_id, platform)
            with self._person_lock:
                footers = self._footers.pop(session_id or "", [])
            if not footers or not isinstance(response_text, str):
                return None
            return response_text.rstrip() + "\n\n" + "\n".join(footers)
        except Exception as exc:
            log.info("chronos-git: no notice for the person: %s", exc)
            return None

    # ------------------------------------------------------------------ CLI
    def setup_cli(self, parser) -> None:
        from ..cli.main import configure
        configure(parser)

    def handle_cli(self, args) -> int:
        from ..cli.main import dispatch
        rc = dispatch(args, loaded=Loaded(self.settings, self.settings_problems), store=str(self.store_dir()),
                      prog=HERMES_PROG)
        if rc:
            sys.exit(rc)
        return rc


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
