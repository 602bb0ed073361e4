"""`/chronos` for the Hermes REPL, TUI and gateway.

Slash handlers cannot prompt, so a restore is two steps: `/chronos 3` runs
the dry run and arms it (keeping its plan token), `/chronos confirm` runs
exactly that restore within two minutes: if the workspace changed since, its
plan differs and nothing runs; the new plan is shown and armed instead.  Text comes from cli/render.py.
"""
from __future__ import annotations

import os
import shlex
import threading
import time
from pathlib import Path

from ..cli import render
from ..engine.codec import human
from ..service.errors import PlanChanged, envelope
from .shell import HERMES_PROG

CONFIRM_WINDOW_S = 120

USAGE = """/chronos                         list the newest checkpoints
/chronos --list N                list N checkpoints
/chronos --diff ID               what a checkpoint recorded (vs the one before it)
/chronos --dry-run ID            preview restoring ID (changes nothing)
/chronos ID|N|latest [--no-clean] [--force] [PATH...]
                                 preview a restore and arm it; then /chronos confirm
/chronos confirm | cancel        run or drop the armed restore
/chronos status                  journal integrity, unresolved operations, gate
/chronos verify                  verify the whole journal
/chronos recover                 settle crashed file operations by evidence
/chronos resolve OP completed|not_applied EVIDENCE...
/chronos --compact               apply retention and pack the store
/chronos report [PATH]           write the HTML forensic report (default: a folder beside the store)"""


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
        if not argv or argv[0] in ("--list", "list", "ls"):
            limit = 10
            if len(argv) > 1:
                if not argv[1].isdigit() or int(argv[1]) < 1:
                    return "chronos: --list takes a number of at least 1"
                limit = int(argv[1])
            return svc.log(cwd, limit)
        head = argv[0]
        if head in ("help", "--help", "-h"):
            return USAGE
        if head == "status":
            return svc.journal_status()
        if head == "verify":
            return svc.journal_verify()
        if head == "recover":
            return svc.recover(argv[1] if len(argv) > 1 else None)
        if head == "resolve":
            if len(argv) < 4:
                return "usage: /chronos resolve OP completed|not_applied EVIDENCE..."
            return svc.resolve(argv[1], argv[2], " ".join(argv[3:]), actor="operator (/chronos)")
        if head == "report":
            from ..report import written       # jinja2 only when a report is asked for
            where = Path(os.path.join(cwd, os.path.expanduser(argv[1]))) if len(argv) > 1 else None
            return written(svc, where, workspace=cwd)      # default: report.default_folder, beside the store
        if head in ("--compact", "compact"):
            return svc.compact()
        if head in ("--diff", "diff"):
            if len(argv) < 2:
                return "usage: /chronos --diff ID"
            return svc.show(cwd, argv[1])
        if head in ("--dry-run", "dry-run"):
            if len(argv) < 2:
                return "usage: /chronos --dry-run ID"
            return svc.restore(cwd, argv[1], dry_run=True, paths=argv[2:] or None)
        if head in ("confirm", "--yes", "yes"):
            return self._confirm(svc)
        if head == "cancel":
            with self._lock:
                had, self._armed = self._armed, None
            return "chronos: armed restore dropped" if had else "chronos: nothing was armed"
        if head == "restore":
            argv = argv[1:]
            if not argv:
                return "usage: /chronos restore ID|N|latest"
        return self._arm(svc, cwd, argv)

    def _arm(self, svc, cwd, argv: list[str]) -> str:
        clean = False if "--no-clean" in argv else None
        force = "--force" in argv
        argv = [a for a in argv if a not in ("--no-clean", "--force")]
        if not argv or argv[0].startswith("-"):
            return f"chronos: unknown option {argv[0] if argv else ''}\n{USAGE}"
        spec, paths = argv[0], argv[1:] or None
        preview = svc.restore(cwd, spec, dry_run=True, paths=paths, clean=clean, force=force)
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
        res = svc.restore(armed["cwd"], armed["id"], paths=armed["paths"], clean=armed["clean"],
                          force=armed["force"], plan_token=armed["token"], actor="user (/chronos confirm)")
        if res.code != PlanChanged.code:
            return res
        # the workspace changed since the preview: nothing ran; the new plan is armed instead
        with self._lock:
            self._armed = {**armed, "token": res.plan_token, "until": time.monotonic() + CONFIRM_WINDOW_S}
        return (render.text(res.model_copy(update={"status": "ok", "error": None}))   # says so once
                + f"\n\nTo restore this plan instead type /chronos confirm within {CONFIRM_WINDOW_S} s; "
                  "/chronos cancel drops it.")
