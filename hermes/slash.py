"""`/chronos` for the Hermes REPL, TUI and gateway.

Slash handlers cannot prompt, so a restore is two steps: `/chronos 3` runs
the dry run and arms it (keeping its plan token), `/chronos confirm` runs
exactly that restore within two minutes: if the workspace changed since, its
plan differs and nothing runs; the new plan is shown and armed instead.  Text comes from cli/render.py.
"""
from __future__ import annotations

import shlex
import threading
import time

from ..cli import render
from ..commands import COMMANDS, Context
from ..engine.codec import human
from ..service.errors import PlanChanged, envelope
from .shell import HERMES_PROG

CONFIRM_WINDOW_S = 120

ACTOR = "operator (/chronos)"
USER = "user (/chronos confirm)"

# the forms /chronos adds around the table's commands (arming a restore, which a handler that
# cannot prompt does in two steps)
_OWN_USAGE = (("/chronos", "list the newest checkpoints"),
              ("/chronos --dry-run ID", "preview restoring ID (changes nothing)"),
              ("/chronos ID|@N|N|latest [--no-clean] [--force] [PATH...]", "preview a restore and arm it; then "
                                                                            "/chronos confirm"),
              ("/chronos ID --agent-only [--conflicts markers]", "preview taking back only what tool calls "
                                                                 "changed since ID (your edits stay)"),
              ("/chronos confirm | cancel", "run or drop what was armed"))


def _usage() -> str:
    rows = list(_OWN_USAGE)
    for cmd in COMMANDS:
        if cmd.slash and cmd.name != "restore":
            words = " ".join(a.rstrip("*").upper() + ("..." if a.endswith("*") else "") for a in cmd.slash_args)
            rows.append((f"/chronos {cmd.slash[0]} {words}".rstrip(),
                         cmd.help + ("; previewed, then /chronos confirm" if cmd.confirm else "")))
    width = max(len(u) for u, _ in rows) + 2
    return "\n".join(f"{u:<{width}}{h}" for u, h in rows)


USAGE = _usage()
_WORDS = {w: c for c in COMMANDS for w in c.slash}


def slash_params(cmd, words: list[str]) -> dict:
    """The command's arguments from the words after its name: options as on the command line
    (`--force`, `--conflicts markers`), then the words in `slash_args` order (an `x*`
    argument takes the rest); numbers and choices checked as on the command line."""
    args = {a.name: a for a in cmd.args}
    flags = {f: a for a in cmd.args if not a.positional and a.kind != "remainder"
             for f in (a.flags or ("--" + a.name.replace("_", "-"),))}
    params: dict = {}
    rest: list[str] = []
    it = iter(words)
    for w in it:
        a = flags.get(w)
        if a is not None:
            if a.kind == "bool":
                params[a.name] = True
                continue
            value = next(it, None)
            if value is None:
                raise ValueError(f"{w} needs a value")
            params[a.name] = _checked(a, value)
        elif w.startswith("--"):
            raise ValueError(f"unknown option {w}")
        else:
            rest.append(w)
    for spec in cmd.slash_args:
        name = spec.rstrip("*")
        a = args[name]
        if spec.endswith("*"):
            taken, rest = rest, []
            if taken:
                params[name] = " ".join(taken) if a.kind == "str" else taken
        elif rest:
            params[name] = _checked(a, rest.pop(0))
    if rest:
        raise ValueError(f"too many words: {' '.join(rest)}")
    for a in cmd.args:
        if a.required and a.name not in params:
            raise ValueError(f"usage: /chronos {cmd.slash[0]} "
                             + " ".join(x.rstrip('*').upper() for x in cmd.slash_args))
        params.setdefault(a.name, a.default)
    return params


def _checked(a, value: str):
    if a.kind == "int":
        if not value.isdigit() or (a.ge is not None and int(value) < a.ge):
            raise ValueError(f"{a.name} takes a number of at least {a.ge or 0}, not {value!r}")
        return int(value)
    if a.choices and value not in a.choices:
        raise ValueError(f"{a.name} is one of {', '.join(a.choices)}, not {value!r}")
    return value


class SlashCommand:
    def __init__(self, plugin):
        self.plugin = plugin
        self._armed: dict | None = None
        self._lock = threading.Lock()

    def __call__(self, raw_args: str = "") -> str:
        try:
            out = self._run(raw_args or "")
        except Exception as exc:
            out = render.text(envelope(exc)[0])
        return human(render.for_prog(out if isinstance(out, str) else render.text(out), HERMES_PROG))

    def _run(self, raw: str):
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            return f"chronos: cannot parse arguments ({exc})\n{USAGE}"
        svc = self.plugin.svc()
        cwd = self.plugin.cwd()
        if not argv:
            argv = ["list", "10"]
        head = argv[0]
        if head in ("help", "--help", "-h"):
            return USAGE
        if head in ("confirm", "--yes", "yes"):
            return self._confirm(svc)
        if head == "cancel":
            with self._lock:
                had, self._armed = self._armed, None
            return "chronos: armed restore dropped" if had else "chronos: nothing was armed"
        if head in ("--dry-run", "dry-run"):
            if len(argv) < 2:
                return "usage: /chronos --dry-run ID"
            return self._restore(svc, cwd, {"checkpoint": argv[1], "paths": argv[2:] or None, "dry_run": True})
        cmd = _WORDS.get(head)
        words = argv[1:]
        if cmd is None:                    # `/chronos ID ...`: a restore, armed
            cmd, words = COMMANDS.get("restore"), argv
        try:
            params = slash_params(cmd, words)
        except ValueError as exc:
            return f"chronos: {exc}\n{USAGE}"
        if cmd.name == "log" and len(argv) == 1:
            params["limit"] = 10
        if cmd.confirm:
            return self._arm(svc, cwd, cmd, params)
        return cmd.run(svc, self._ctx(cwd), params)

    @staticmethod
    def _ctx(cwd: str) -> Context:
        return Context("slash", actor=ACTOR, user=USER, workspace=cwd)

    def _restore(self, svc, cwd: str, params: dict):
        return COMMANDS.get("restore").run(svc, self._ctx(cwd), params)

    def _arm(self, svc, cwd: str, cmd, params: dict):
        """A time-machine operation's dry run, armed for `/chronos confirm` (its plan token kept)."""
        preview = cmd.run(svc, self._ctx(cwd), {**params, "dry_run": True})
        if preview.status == "error":
            return preview
        if cmd.name == "restore":           # the checkpoint the preview showed, whatever index named it
            params = {**params, "checkpoint": preview.restored_checkpoint}
        with self._lock:
            self._armed = {"cmd": cmd.name, "params": params, "cwd": cwd, "token": preview.plan_token,
                           "until": time.monotonic() + CONFIRM_WINDOW_S}
        return render.text(preview) + "\n\n" + _prompt(cmd.name, preview, params)

    def _confirm(self, svc):
        with self._lock:
            armed, self._armed = self._armed, None
        if not armed:
            return "chronos: nothing to confirm; preview one first (/chronos ID, /chronos undo, ...)"
        if time.monotonic() > armed["until"]:
            return "chronos: what was armed expired; preview it again"
        cmd = COMMANDS.get(armed["cmd"])
        res = cmd.run(svc, self._ctx(armed["cwd"]), {**armed["params"], "plan_token": armed["token"]})
        if res.code != PlanChanged.code:
            return res
        # the workspace changed since the preview: nothing ran; the new plan is armed instead
        with self._lock:
            self._armed = {**armed, "token": res.plan_token, "until": time.monotonic() + CONFIRM_WINDOW_S}
        return (render.text(res.model_copy(update={"status": "ok", "error": None}))   # says so once
                + f"\n\nTo run this plan instead type /chronos confirm within {CONFIRM_WINDOW_S} s; "
                  "/chronos cancel drops it.")


def _prompt(name: str, preview, params: dict) -> str:
    if name == "restore" and not params.get("agent_only"):
        what = f" ({preview.target.description})" if preview.target else ""
        act = f"restore checkpoint {preview.restored_checkpoint[:12]}{what}"
    else:
        act = {"restore": "take back what the agent changed since that checkpoint", "revert": "revert that call",
               "undo": "undo it", "redo": "redo it"}.get(name, name)
    return (f"To {act} type /chronos confirm within {CONFIRM_WINDOW_S} s; /chronos cancel drops it. "
            "A safety checkpoint is taken first.")
