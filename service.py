"""The one service layer behind every surface (model tools, /chronos, both
CLIs, the HTTP API): protected calls, checkpoints, the journal and recovery.

Every public method returns a JSON-able dict; errors are raised as
ChronosError / JournalError subclasses with messages meant for people, and
each surface turns them into its own envelope.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

from .calls import Blocked, Call, Declared, Outcome, Ticket  # noqa: F401 (the service's public types)
from .engine import diff as diff_mod
from .engine import faults, retention
from .engine import restore as restore_mod
from .engine.checkpoint import CheckpointMeta
from .engine.errors import ChronosError
from .engine.fsutil import write_atomically
from .engine.store import Store
from .journal_refs import IntegrityError, Journal, recovery
from .journal_refs.events import args_hash, canonical, fingerprint, sha256_hex
from .journal_refs.recovery import ABSENT, UNKNOWN
from .reconcile import Reconciliation
from .settings import Settings


def _progress_text(p: dict | None) -> str:
    if not p or not p.get("files_total"):
        return ""
    return f", {p['phase']} {p['files_done']}/{p['files_total']} files"


def default_store_dir() -> Path:
    env = os.environ.get("CHRONOS_GIT_STORE")
    if env:
        return Path(env)
    home = os.environ.get("HERMES_HOME") or os.path.join(os.path.expanduser("~"), ".hermes")
    return Path(home) / "plugin-data" / "chronos-git"


class Chronos(Reconciliation):
    _instances: dict[str, "Chronos"] = {}
    _guard = threading.Lock()

    def __init__(self, store_dir: Path, settings: Settings):
        self.settings = settings
        self.store = Store.open(store_dir, settings.engine_config())
        self.journal = Journal(self.store)
        self._started = False
        self._start_lock = threading.Lock()
        self.startup: dict = {}
        self._completed: dict[tuple[str, str], dict] = {}   # (session, fingerprint) -> op info
        self.last_snapshot: dict | None = None
        self.background = False        # long-lived host (Hermes): watchers, background first snapshot
        self._bg: dict[str, dict] = {} # workspace id -> {"thread", "kind", "started"}
        self._bg_lock = threading.Lock()

    @classmethod
    def get(cls, store_dir: os.PathLike | str | None = None, settings: Settings | None = None) -> "Chronos":
        store_dir = Path(os.path.abspath(store_dir or settings and settings.store_dir or default_store_dir()))
        settings = settings or Settings()
        with cls._guard:
            inst = cls._instances.get(str(store_dir))
            if inst is None or inst.settings != settings:
                inst = cls(store_dir, settings)
                cls._instances[str(store_dir)] = inst
            return inst

    # --------------------------------------------------------------- startup
    def start(self) -> dict:
        """Open the journal and settle crashed file operations by evidence (once per process)."""
        with self._start_lock:
            if self._started:
                return self.startup
            self.journal.open()
            settled = []
            if self.journal.integrity == "ok":
                settled = self.settle_by_evidence()
            self.startup = {"integrity": self.journal.integrity, "healed": self.journal.healed,
                            "settled": settled}
            self._started = True
            return self.startup

    # ------------------------------------------------------------------ gate
    def gate(self) -> dict | None:
        """None when protected calls may run, else the structured refusal."""
        self.start()
        j = self.journal
        j.refresh()
        reasons = []
        ops = []
        if j.integrity != "ok":
            reasons.append(f"journal integrity: {j.integrity}")
        elif j.poisoned:
            reasons.append(f"an outcome could not be recorded in this process: {j.poisoned}")
        else:
            ops = j.unresolved()
        if not reasons and not ops:
            return None
        lines = []
        for op in ops:
            what = "outcome unknown (uncertain)" if op["state"] == "uncertain" else "cut off by a crash (pending)"
            lines.append(f"{op['operation_id'][:12]} {op['tool']} {what}"
                         + (f": {op['reason']}" if op.get("reason") else ""))
        msg = ("chronos-git recovery gate is closed: "
               + "; ".join(reasons + lines)
               + ". Protected tool calls are refused until an operator reconciles: "
                 "`chronos-git journal status`, then `chronos-git journal resolve <op> --outcome "
                 "completed|not_applied --evidence <text>` or `chronos-git journal recover <op> --rollback`"
                 " (in Hermes: `hermes chronos-git journal ...` or /chronos resolve). Read-only tools still work.")
        return {"status": "error", "error": "chronos_blocked", "blocked": True,
                "operation_ids": [o["operation_id"] for o in ops], "operations": ops,
                "integrity": j.integrity, "message": msg,
                "mode": self.settings.gate_mode}

    def check_gate(self) -> dict | None:
        """Raise Blocked in block mode; return the warning in warn mode."""
        g = self.gate()
        if g is None:
            return None
        if self.settings.gate_mode == "block" or g["integrity"] != "ok":
            exc = Blocked(g["message"])
            exc.details = dict(g)         # g holds "message" too: not passable as **kwargs
            raise exc
        return g

    # ------------------------------------------------------- protected calls
    def begin(self, call: Call, *, gate: bool = True, budget_s: float | None = None) -> Ticket:
        """Gate, pre-snapshot, durable intent.  After this returns the call may run."""
        self.start()
        warning = self.check_gate() if gate else None
        ws = self.store.workspace(call.workspace)
        snap = self._snapshot_for(ws, call, "before", budget_s)
        repo = self.store.repo()
        declared_fields = []
        blobs = {}
        if call.declared is not None:
            for i, d in enumerate(call.declared):
                pre = recovery.content_id(d.path, store_in=repo)
                if isinstance(d.post, bytes):
                    post = str(repo.create_blob(d.post))
                else:
                    post = d.post              # None (deleted) or UNKNOWN
                declared_fields.append({"path": d.path, "pre": pre, "post": post})
                if recovery.is_blob_id(pre):
                    blobs[f"pre-{i:04d}"] = pre
                if post not in (ABSENT, UNKNOWN):
                    blobs[f"post-{i:04d}"] = post
        op = uuid.uuid4().hex
        fp = fingerprint(call.tool, call.args)
        fields = {
            "operation_id": op, "tool": call.tool, "args_hash": args_hash(call.args),
            "fingerprint": fp, "session_id": call.session_id, "tool_call_id": call.tool_call_id,
            "turn_id": call.turn_id, "owner": self.journal.me.to_dict(),
            "workspace": os.fsdecode(ws.root_bytes), "pre_checkpoint": snap.get("checkpoint"),
            "snapshot": {k: snap[k] for k in ("kind", "partial", "created", "error", "skipped_count")
                         if k in snap},
        }
        if call.declared is not None:
            fields["declared"] = declared_fields
            fields["args"] = self._file_args(call)
        elif self.settings.store_args:
            fields["args"] = call.args
        if call.replay_of:
            fields["replay_of"] = call.replay_of
        if call.actor:
            fields["actor"] = call.actor
        self.journal.append("started", fields, blobs=blobs)
        faults.hit("after_intent")
        t = Ticket(op, call, snap.get("checkpoint"), snap, time.time_ns(), fp)
        if warning:
            t.extra["gate_warning"] = warning["message"]
        return t

    def finish(self, ticket: Ticket, outcome: Outcome) -> dict:
        """Post-snapshot and outcome.  Never raises: a failure poisons the gate instead."""
        faults.hit("after_dispatch")
        call = ticket.call
        post = {}
        try:
            ws = self.store.workspace(call.workspace)
            post = self._snapshot_for(ws, call, "after", None)
        except Exception as exc:      # the outcome must still be recorded
            post = {"error": str(exc)}
        info = {"operation_id": ticket.operation_id, "pre_checkpoint": ticket.pre_checkpoint,
                "post_checkpoint": post.get("checkpoint"), "snapshot": ticket.snapshot,
                "recorded": True}
        try:
            strict = self.settings.strict_errors and outcome.status == "error"
            if outcome.uncertain_reason or strict:
                reason = outcome.uncertain_reason or "error result (strict_errors)"
                self.journal.append("uncertain", {"operation_id": ticket.operation_id, "reason": reason,
                                                  "post_checkpoint": post.get("checkpoint")})
                info["outcome"] = "uncertain"
                info["reason"] = reason
            else:
                fields = {"operation_id": ticket.operation_id, "status": outcome.status,
                          "result_hash": outcome.result_hash, "post_checkpoint": post.get("checkpoint"),
                          "duration_ms": round((time.time_ns() - ticket.started_ns) / 1e6, 3)}
                if outcome.exit_code is not None:
                    fields["exit_code"] = outcome.exit_code
                self.journal.append("returned", fields)
                info["outcome"] = "returned"
                info["status"] = outcome.status
                if outcome.status == "ok" and call.session_id:
                    self._completed[(call.session_id, ticket.fingerprint)] = {
                        "operation_id": ticket.operation_id, "post_checkpoint": post.get("checkpoint"),
                        "tool": call.tool}
        except Exception as exc:
            self.journal.poisoned = (f"recording the outcome of {ticket.operation_id[:12]} "
                                     f"({call.tool}) failed: {exc}")
            info.update(recorded=False, outcome_unknown=True, error=self.journal.poisoned)
        return info

    def completed_before(self, session_id: str | None, tool: str, args: dict) -> dict | None:
        if not session_id:
            return None
        return self._completed.get((session_id, fingerprint(tool, args)))

    def _snapshot_for(self, ws, call: Call, when: str, budget_s: float | None) -> dict:
        if not self.settings.auto_snapshot:
            return {"kind": "none", "note": "auto_snapshot is off"}
        meta = CheckpointMeta(description=f"{when} {call.tool}", tool=call.tool,
                              session_id=call.session_id, turn_id=call.turn_id,
                              tool_call_id=call.tool_call_id)
        budget = budget_s if budget_s is not None else self.settings.snapshot_budget_s
        try:
            if self.background:
                ws.enable_watcher()
                waited = self._wait_for_baseline(ws, call, budget)
                if waited is not None:
                    return self._note_snapshot(ws, waited)
            baseline = ws.has_checkpoint()
            if call.declared is not None and baseline:
                # the rest of the tree comes from the persistent index, so a baseline must exist
                inside = [d.path for d in call.declared if ws.contains(d.path)]
                if not inside:
                    return {"kind": "none", "note": "declared paths are outside the workspace; "
                                                    "their pre-images are kept in the journal"}
                res = ws.snapshot(meta, paths=inside)
            elif not baseline:
                res = ws.snapshot(meta)          # the first snapshot: one bulk import, no budget walk
            else:
                res = ws.snapshot(meta, deadline=time.monotonic() + budget if budget else None)
        except Exception as exc:
            return self._note_snapshot(ws, {"kind": "failed", "error": f"{type(exc).__name__}: {exc}"})
        out = {"checkpoint": res.checkpoint.id if res.checkpoint else None, "kind": res.report["kind"],
               "partial": res.partial, "created": res.created, "scan": res.report.get("scan"),
               "skipped_count": len(res.report.get("skipped", ()))}
        return self._note_snapshot(ws, out)

    def _note_snapshot(self, ws, out: dict) -> dict:
        self.last_snapshot = {"time": time.time(), "workspace": os.fsdecode(ws.root_bytes), **out}
        return out

    # ------------------------------------------------- background snapshots
    def _wait_for_baseline(self, ws, call: Call, budget: float) -> dict | None:
        """In a long-lived host the first snapshot runs in the background: never
        block a call on it beyond the budget.  Returns a no-checkpoint record
        when the call must go ahead without one (it is still journaled)."""
        if not ws.has_checkpoint():
            self._start_background(ws, "baseline")
        with self._bg_lock:
            job = self._bg.get(ws.id)
        if job is None or job["kind"] != "baseline":
            return None
        if call.declared is None:
            job["thread"].join(budget)
        if not job["thread"].is_alive():
            return None
        return {"kind": "none", "pending_baseline": True,
                "progress": ws.progress,
                "note": (f"the first checkpoint of this workspace is still being taken in the background "
                         f"(running for {time.time() - job['started']:.1f} s{_progress_text(ws.progress)}); "
                         + ("declared paths are protected by their pre-images in the journal"
                            if call.declared is not None else "this call has no checkpoint"))}

    def _start_background(self, ws, kind: str, meta: CheckpointMeta | None = None) -> None:
        with self._bg_lock:
            job = self._bg.get(ws.id)
            if job is not None and job["thread"].is_alive():
                return

            def run():
                try:
                    ws.snapshot(meta or CheckpointMeta(description="first checkpoint of the workspace"
                                                       if kind == "baseline" else "turn start"),
                                force_scan=True)
                except Exception as exc:
                    job["error"] = f"{type(exc).__name__}: {exc}"
                finally:
                    job["finished"] = time.time()

            job = {"kind": kind, "started": time.time(), "thread": threading.Thread(
                target=run, name=f"chronos-git-{kind}", daemon=True)}
            self._bg[ws.id] = job
            job["thread"].start()

    def flush(self) -> None:
        """Write stat caches that declared-path snapshots left in memory (at exit)."""
        for ws in list(self.store._workspaces.values()):
            try:
                ws.flush_index()
            except Exception:
                pass

    def background_state(self, ws) -> dict | None:
        with self._bg_lock:
            job = self._bg.get(ws.id)
        if job is None:
            return None
        return {"kind": job["kind"], "running": job["thread"].is_alive(), "started": job["started"],
                "finished": job.get("finished"), "error": job.get("error"), "progress": ws.progress}

    def turn_checkpoint(self, workspace: str, *, session_id: str | None = None,
                        turn_id: str | None = None) -> dict:
        """A full scan at the start of each user turn: edits made between turns get a
        checkpoint of their own, and the declared-path fast path starts from a fresh index."""
        if not self.settings.auto_snapshot:
            return {"kind": "none"}
        ws = self.store.workspace(workspace)
        meta = CheckpointMeta(description="at turn start", tool="turn start", session_id=session_id,
                              turn_id=turn_id)
        if self.background:
            # overlaps the model's thinking; the turn's first tool call waits on the workspace lock
            ws.enable_watcher()
            self._start_background(ws, "turn" if ws.has_checkpoint() else "baseline", meta)
            return {"kind": "background"}
        res = ws.snapshot(meta, force_scan=True)
        return {"checkpoint": res.checkpoint.id if res.checkpoint else None, "created": res.created}

    @staticmethod
    def _file_args(call: Call) -> dict:
        """File-tool args as journaled: the content lives in the post-image blob; long
        strings (old/new strings, patches) are kept as hashes."""
        out = {}
        for k, v in call.args.items():
            if k == "content" and isinstance(v, str):
                out[k] = {"sha256": sha256_hex(v), "chars": len(v), "stored_as": "post-image blob"}
            elif isinstance(v, str) and len(v) > 512:
                out[k] = {"sha256": sha256_hex(v), "chars": len(v)}
            else:
                out[k] = v
        return out

    # ------------------------------------------------------- standalone runs
    def run_command(self, workspace: str, argv: list[str], *, tool: str = "terminal",
                    stdout=None, stderr=None) -> tuple[int | None, dict]:
        """A protected shell call: gate, snapshot, intent, run, outcome, post-snapshot."""
        import subprocess
        call = Call(tool=tool, args={"argv": argv, "cwd": workspace}, workspace=workspace,
                    session_id=os.environ.get("CHRONOS_GIT_SESSION"), actor="cli")
        if self.settings.is_read_only(tool):
            rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
            return rc, {"journaled": False, "read_only": True, "exit_code": rc}
        ticket = self.begin(call)
        try:
            rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
        except BaseException as exc:
            info = self.finish(ticket, Outcome(status="error", uncertain_reason=f"exception: {type(exc).__name__}"))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return None, {**info, "error": f"could not run {argv[0]}: {exc}"}
        info = self.finish(ticket, Outcome(status="ok" if rc == 0 else "error",
                                           result_hash=sha256_hex(str(rc)), exit_code=rc))
        return rc, {**info, "exit_code": rc}

    def write_file(self, workspace: str, path: str, content: bytes, *, tool: str = "write_file",
                   session_id: str | None = None, gate: bool = True, replay_of: str | None = None,
                   actor: str | None = "cli") -> dict:
        """A protected declared-path write with write_file semantics (parents created, replaced whole)."""
        abspath = path if os.path.isabs(path) else os.path.join(workspace, path)
        abspath = os.path.normpath(abspath)
        call = Call(tool=tool, args={"path": abspath, "content": content.decode("utf-8", "replace")},
                    workspace=workspace, session_id=session_id, declared=[Declared(abspath, content)],
                    replay_of=replay_of, actor=actor)
        ticket = self.begin(call, gate=gate)
        try:
            write_atomically(abspath, content)
        except OSError as exc:
            info = self.finish(ticket, Outcome(status="error", uncertain_reason=f"exception: {type(exc).__name__}"))
            raise ChronosError(f"could not write {abspath}: {exc}", **info) from None
        info = self.finish(ticket, Outcome(status="ok", result_hash=sha256_hex(str(len(content)))))
        return {**info, "path": abspath, "bytes_written": len(content)}

    # ------------------------------------------------------------ time machine
    def snapshot(self, workspace: str, message: str = "manual checkpoint", *, tool: str | None = None,
                 session_id: str | None = None, turn_id: str | None = None,
                 tool_call_id: str | None = None, paths: list[str] | None = None) -> dict:
        ws = self.store.workspace(workspace)
        meta = CheckpointMeta(description=message, kind="manual", tool=tool, session_id=session_id,
                              turn_id=turn_id, tool_call_id=tool_call_id)
        res = ws.snapshot(meta, paths=paths)
        self.maybe_compact(ws)
        return {"status": "ok", "workspace": os.fsdecode(ws.root_bytes), **res.to_dict(),
                "checkpoint_info": res.checkpoint.summary() if res.checkpoint else None}

    def log(self, workspace: str, limit: int | None = 20) -> dict:
        ws = self.store.workspace(workspace)
        cps = ws.checkpoints(limit)
        return {"status": "ok", "workspace": os.fsdecode(ws.root_bytes),
                "checkpoints": [c.summary(i) for i, c in enumerate(cps, 1)]}

    def show(self, workspace: str, spec: str) -> dict:
        ws = self.store.workspace(workspace)
        cp = ws.resolve(spec)
        out = {"status": "ok", "checkpoint": cp.summary()}
        if cp.parent_id:
            try:
                out["changes"] = diff_mod.diff(ws, cp.parent_id, cp.id, patch=True, max_patch_chars=50_000)
            except ChronosError:
                pass
        return out

    def diff(self, workspace: str, from_spec: str | None = None, to_spec: str | None = None, *,
             patch: bool = True, max_chars: int = diff_mod.DEFAULT_MAX_PATCH_CHARS,
             paths: list[str] | None = None) -> dict:
        ws = self.store.workspace(workspace)
        return {"status": "ok", **diff_mod.diff(ws, from_spec, to_spec, patch=patch,
                                                max_patch_chars=max_chars, paths=paths)}

    def restore(self, workspace: str, spec: str, *, paths: list[str] | None = None,
                clean: bool | None = None, dry_run: bool = False, gate: bool = True,
                actor: str = "cli", session_id: str | None = None, tool: str = "chronos.restore") -> dict:
        """Restore a checkpoint, journaled as an operation of its own (safety checkpoint = pre)."""
        self.start()
        clean = self.settings.clean_untracked_on_rollback if clean is None else clean
        ws = self.store.workspace(workspace)
        if dry_run:
            return {"status": "ok", **restore_mod.restore(ws, spec, paths=paths, clean=clean, dry_run=True)}
        if gate:
            self.check_gate()
        holder: dict = {}

        def on_plan(items, safety, target):
            declared = []
            blobs = {}
            for i, it in enumerate(x for x in items if x.action != "skip"):
                full = os.fsdecode(os.path.join(ws.root_bytes, os.fsencode(it.path)))
                post = it.blob if it.action in ("restore", "create") else ABSENT
                pre = it.current_blob if it.action in ("restore", "delete") else ABSENT
                declared.append({"path": full, "pre": pre, "post": post})
                if pre:
                    blobs[f"pre-{i:04d}"] = pre
                if post:
                    blobs[f"post-{i:04d}"] = post
            op = uuid.uuid4().hex
            args = {"checkpoint": target.id, "paths": paths, "clean": clean}
            self.journal.append("started", {
                "operation_id": op, "tool": tool, "args_hash": args_hash(args), "args": args,
                "fingerprint": fingerprint(tool, args), "session_id": session_id, "actor": actor,
                "owner": self.journal.me.to_dict(), "workspace": os.fsdecode(ws.root_bytes),
                "pre_checkpoint": safety.id, "declared": declared,
                "snapshot": {"kind": "safety"}}, blobs=blobs)
            holder.update(op=op, t=time.time_ns())

        try:
            result = restore_mod.restore(ws, spec, paths=paths, clean=clean, on_plan=on_plan,
                                         meta=CheckpointMeta(description="", session_id=session_id,
                                                             tool=tool))
        except BaseException as exc:
            if holder:      # files may be half restored: that is an unknown outcome, not a failure
                self.journal.append("uncertain", {"operation_id": holder["op"],
                                                  "reason": f"exception: {type(exc).__name__}"})
            raise
        if holder:
            faults.hit("after_dispatch")
            self.journal.append("returned", {"operation_id": holder["op"], "status": "ok",
                                             "result_hash": sha256_hex(canonical(result["plan"])),
                                             "post_checkpoint": result["restored_checkpoint"],
                                             "duration_ms": round((time.time_ns() - holder["t"]) / 1e6, 3)})
            result["operation_id"] = holder["op"]
        return {"status": "ok", **result}

    def compact(self, *, dry_run: bool = False, max_checkpoints: int | None = None,
                grace_s: float | None = None, progress=None) -> dict:
        self.start()
        pinned = self.journal.pinned_checkpoints() if self.journal.integrity == "ok" else None
        if pinned is None:
            raise IntegrityError("refusing to compact while the journal integrity is in doubt "
                                 f"({self.journal.integrity}): it could drop checkpoints still needed")

        def journal_decision(dropped):
            self.journal.append("maintenance", {
                "operation_id": None, "action": "retention",
                "dropped": [{"workspace": d["workspace"], "boundary": d["boundary"],
                             "checkpoints": [c["id"] for c in d["checkpoints"]]} for d in dropped]})

        rep = retention.compact(self.store, pinned=pinned, max_checkpoints=max_checkpoints,
                                grace_s=grace_s, dry_run=dry_run, progress=progress,
                                on_decided=journal_decision)
        if not dry_run:
            self.journal.append("maintenance", {
                "operation_id": None, "action": "compact", "size_before": rep["size_before"],
                "size_after": rep["size_after"], "objects_packed": rep["objects_packed"]})
        return {"status": "ok", **rep}

    def needs_compaction(self, ws) -> bool:
        limit = self.settings.max_checkpoints
        if not limit:
            return False
        slack = max(10, limit // 10)
        n = 0
        for _ in ws.iter_commits():
            n += 1
            if n > limit + slack:
                return True
        return False

    def maybe_compact(self, ws) -> dict | None:
        if self.needs_compaction(ws):
            return self.compact()
        return None

    def workspaces(self) -> dict:
        out = []
        for ws in self.store.workspaces():
            d = ws.describe()
            d["checkpoints"] = ws.count()
            out.append(d)
        out.sort(key=lambda d: -(d["latest"]["time"] if d["latest"] else 0))
        return {"status": "ok", "workspaces": out}

    def health(self, workspace: str | None = None) -> dict:
        self.start()
        j = self.journal.status()
        out = {"status": "ok", "store": str(self.store.root),
               "store_bytes": retention.store_size(self.store),
               "journal": {k: j[k] for k in ("integrity", "events", "head", "healed")},
               "gate": "open" if self.gate() is None else "closed",
               "unresolved": len(j["unresolved"]),
               "settings": self.settings.model_dump(),
               "last_snapshot": self.last_snapshot,
               "workspaces": len(self.store.workspaces())}
        if workspace:
            ws = self.store.workspace(workspace)
            out["workspace"] = ws.describe()
            out["workspace"]["checkpoints"] = ws.count()
            out["workspace"]["watcher"] = ws.watcher_state()
            out["workspace"]["background"] = self.background_state(ws)
            if ws.last_bulk:
                out["workspace"]["first_snapshot_seconds"] = ws.last_bulk
        return out
