"""`/chronos` for the Hermes REPL, TUI and gateway.

Slash handlers cannot prompt, so a restore is two steps: `/chronos 3`
previews and arms it, `/chronos confirm` runs it (within two minutes).
"""
from __future__ import annotations

import shlex
import threading
import time

from .cli import render, status_text
from .engine.codec import human
from .engine.errors import ChronosError
from .journal_refs import JournalError

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
/chronos --compact               apply retention and pack the store"""


class SlashCommand:
    def __init__(self, plugin):
        self.plugin = plugin
        self._armed: dict | None = None
        self._lock = threading.Lock()

    def __call__(self, raw_args: str = "") -> str:
        try:
            text = self._run(raw_args or "")
        except (ChronosError, JournalError) as exc:
            text = f"chronos: error: {exc}"
        except Exception as exc:
            text = f"chronos: error: {type(exc).__name__}: {exc}"
        return human(text)

    def _run(self, raw: str) -> str:
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            return f"chronos: cannot parse arguments ({exc})\n{USAGE}"
        svc = self.plugin.svc()
        cwd = self.plugin.cwd()
        if not argv or argv[0] in ("--list", "list", "ls"):
            limit = 10
            if len(argv) > 1:
                if not argv[1].isdigit():
                    return "chronos: --list takes a number"
                limit = int(argv[1])
            return render(svc.log(cwd, limit))
        head = argv[0]
        if head in ("help", "--help", "-h"):
            return USAGE
        if head in ("status",):
            return status_text(svc.journal_status())
        if head == "verify":
            return render(svc.journal_verify())
        if head == "recover":
            res = svc.recover(argv[1] if len(argv) > 1 else None)
            lines = [f"settled {len(res['settled'])} operation(s) by evidence"]
            lines += [f"  {s['operation_id'][:12]} {s['tool']}: {s['result']}" for s in res["settled"]]
            lines.append(f"gate: {res['gate']}; unresolved: {len(res['unresolved'])}")
            return "\n".join(lines)
        if head == "resolve":
            if len(argv) < 4:
                return "usage: /chronos resolve OP completed|not_applied EVIDENCE..."
            res = svc.resolve(argv[1], argv[2], " ".join(argv[3:]), actor="operator (/chronos)")
            return f"resolved {res['operation_id'][:12]} as {res['outcome']}; gate {res['gate']}"
        if head in ("--compact", "compact"):
            res = svc.compact()
            dropped = sum(len(d["checkpoints"]) for d in res["dropped"])
            return (f"compacted: {dropped} checkpoint(s) dropped by retention, "
                    f"{res['size_before']} -> {res['size_after']} bytes")
        if head in ("--diff", "diff"):
            if len(argv) < 2:
                return "usage: /chronos --diff ID"
            shown = svc.show(cwd, argv[1])
            if "changes" not in shown:
                return f"checkpoint {shown['checkpoint']['short_id']} is the first one: nothing before it"
            return render(shown["changes"])
        if head in ("--dry-run", "dry-run"):
            if len(argv) < 2:
                return "usage: /chronos --dry-run ID"
            return render(svc.restore(cwd, argv[1], dry_run=True, paths=argv[2:] or None))
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
        clean = None
        if "--no-clean" in argv:
            clean = False
            argv = [a for a in argv if a != "--no-clean"]
        force = "--force" in argv
        argv = [a for a in argv if a != "--force"]
        if not argv or argv[0].startswith("-"):
            return f"chronos: unknown option {argv[0] if argv else ''}\n{USAGE}"
        spec, paths = argv[0], argv[1:] or None
        cp = svc.store.workspace(cwd).resolve(spec)
        preview = svc.restore(cwd, cp.id, dry_run=True, paths=paths, clean=clean, force=force)
        with self._lock:
            self._armed = {"id": cp.id, "paths": paths, "clean": clean, "force": force, "cwd": cwd,
                           "until": time.monotonic() + CONFIRM_WINDOW_S}
        return (render(preview) + f"\n\nTo restore checkpoint {cp.id[:8]} ({cp.meta.description}) type "
                f"/chronos confirm within {CONFIRM_WINDOW_S} s; /chronos cancel drops it. "
                "A safety checkpoint is taken first.")

    def _confirm(self, svc) -> str:
        with self._lock:
            armed, self._armed = self._armed, None
        if not armed:
            return "chronos: nothing to confirm; arm a restore first with /chronos ID"
        if time.monotonic() > armed["until"]:
            return "chronos: the armed restore expired; arm it again with /chronos ID"
        res = svc.restore(armed["cwd"], armed["id"], paths=armed["paths"], clean=armed["clean"],
                          force=armed["force"], actor="user (/chronos confirm)")
        return render(res)
