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
              ("/chronos ID|N|latest [--no-clean] [--force] [PATH...]", "preview a restore and arm it; then "
                                                                         "/chronos confirm"),
              ("/chronos confirm | cancel", "run or drop the armed restore"))


def _usage() -> str:
    rows = list(_OWN_USAGE)
    for cmd in COMMANDS:
        if cmd.slash and cmd.name != "restore":
            words = " ".join(a.rstrip("*").upper() + ("..." if a.endswith("*") else "") for a in cmd.slash_args)
            rows.append((f"/chronos {cmd.slash[0]} {words}".rstrip(), cmd.help))
    width = max(len(u) for u, _ in rows) + 2
    return "\n".join(f"{u:<{width}}{h}" for u, h in rows)


USAGE = _usage()
_WORDS = {w: c for c in COMMANDS for w in c.slash}


def slash_params(cmd, words: list[str]) -> dict:
    """The command's arguments from the words after its name, in `slash_args` order (an
    `x*` argument takes the rest); numbers checked as on the command line."""
    args = {a.name: a for a in cmd.args}
    params: dict = {}
    rest = list(words)
    for spec in cmd.slash_args:
        name = spec.rstrip("*")
        a = args[name]
        if spec.endswith("*"):
            taken, rest = rest, []
            if taken:
                params[name] = " ".join(taken) if a.kind == "str" else taken
            continue
        if not rest:
            continue
        value = rest.pop(0)
        if a.kind == "int":
            if not value.isdigit() or (a.ge is not None and int(value) < a.ge):
                raise ValueError(f"{name} takes a number of at least {a.ge or 0}, not {value!r}")
            params[name] = int(value)
        elif a.choices and value not in a.choices:
            raise ValueError(f"{name} is one of {', '.join(a.choices)}, not {value!r}")
        else:
            params[name] = value
    if rest:
        raise ValueError(f"too many words: {' '.join(rest)}")
    for a in cmd.args:
        if a.required and a.name not in params:
            raise ValueError(f"usage: /chronos {cmd.slash[0]} "
                             + " ".join(x.rstrip('*').upper() for x in cmd.slash_args))
        params.setdefault(a.name, a.default)
    return params


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
        if cmd is None:                    # `/chronos ID ...`: a restore, armed
            return self._arm(svc, cwd, argv)
        if cmd.name == "restore":
            if len(argv) < 2:
                return "usage: /chronos restore ID|N|latest"
            return self._arm(svc, cwd, argv[1:])
        try:
            params = slash_params(cmd, argv[1:])
        except ValueError as exc:
            return f"chronos: {exc}"
        if cmd.name == "log" and len(argv) == 1:
            params["limit"] = 10
        return cmd.run(svc, self._ctx(cwd), params)

    @staticmethod
    def _ctx(cwd: str) -> Context:
        return Context("slash", actor=ACTOR, user=USER, workspace=cwd)

    def _restore(self, svc, cwd: str, params: dict):
        return COMMANDS.get("restore").run(svc, self._ctx(cwd), params)

    def _arm(self, svc, cwd, argv: list[str]) -> str:
        clean = False if "--no-clean" in argv else None
        force = "--force" in argv
        argv = [a for a in argv if a not in ("--no-clean", "--force")]
        if not argv or argv[0].startswith("-"):
            return f"chronos: unknown option {argv[0] if argv else ''}\n{USAGE}"
        spec, paths = argv[0], argv[1:] or None
        preview = self._restore(svc, cwd, {"checkpoint": spec, "paths": paths, "clean": clean, "force": force,
                                           "dry_run": True})
        target = preview.restored_checkpoint
        with self._lock:
            self._armed = {"id": target, "paths": paths, "clean": clean, "force": force, "cwd": cwd,
                           "token": preview.plan_token, "until": time.monotonic() + CONFIRM_WINDOW_S}
        what = f" ({preview.target.description})" if preview.target else ""
        return (render.text(preview) + f"\n\nTo restore checkpoint {target[:8]}{what} type /chronos confirm "
                f"within {CONFIRM_WINDOW_S} s; /chronos cancel drops it. A safety checkpoint is taken first.")

    def _confirm(self, svc):
        with self._lock:
            armed, self._armed = self._armed, None
        if not armed:
            return "chronos: nothing to confirm; arm a restore first with /chronos ID"
        if time.monotonic() > armed["until"]:
            return "chronos: the armed restore expired; arm it again with /chronos ID"
        res = self._restore(svc, armed["cwd"], {"checkpoint": armed["id"], "paths": armed["paths"],
                                                "clean": armed["clean"], "force": armed["force"],
                                                "plan_token": armed["token"]})
        if res.code != PlanChanged.code:
            return res
        # the workspace changed since the preview: nothing ran; the new plan is armed instead
        with self._lock:
            self._armed = {**armed, "token": res.plan_token, "until": time.monotonic() + CONFIRM_WINDOW_S}
        return (render.text(res.model_copy(update={"status": "ok", "error": None}))   # says so once
                + f"\n\nTo restore this plan instead type /chronos confirm within {CONFIRM_WINDOW_S} s; "
                  "/chronos cancel drops it.")
