"""The one service layer behind every surface (model tools, /chronos, both
CLIs, the HTTP API): protected calls, checkpoints, the journal and recovery.

Every public method returns a JSON-able dict; errors are raised as
ChronosError / JournalError subclasses with messages meant for people, and
each surface turns them into its own envelope.
"""
from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from pathlib import Path

import pygit2

from .calls import Blocked, Call, Declared, Outcome, Ticket  # noqa: F401 (the service's public types)
from .engine import diff as diff_mod
from .engine import faults, inflight, retention
from .engine import restore as restore_mod
from .engine.checkpoint import CheckpointMeta
from .engine.confine import split
from .engine.errors import (ChronosError, PlanTokenError, StoreUnwritable, UnknownWorkspace,
                            WorkspaceRefused, explain)
from .engine.store import Store
from .engine.workspace import canonical_root, system_folder
from .journal_refs import IntegrityError, Journal, JournalError, recovery
from .journal_refs.events import args_hash, canonical, fingerprint, sha256_hex
from .journal_refs.recovery import ABSENT, UNKNOWN
from .reconcile import Reconciliation
from .settings import Settings, store_location


def _progress_text(p: dict | None) -> str:
    if not p or not p.get("files_total"):
        return ""
    return f", {p['phase']} {p['files_done']}/{p['files_total']} files"


PLAN_TOKEN_TTL_S = 600.0
MIN_FREE_BYTES = 16 << 20        # below this a snapshot or an intent is likely to fail
BLOCK_HINT = "plugins.entries.chronos-git.settings of the profile's config.yaml"


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class Chronos(Reconciliation):
    _instances: dict[str, "Chronos"] = {}
    _guard = threading.Lock()

    def __init__(self, store_dir: Path, settings: Settings, *, create: bool = True,
                 problems: list[str] | None = None):
        self.settings = settings
        self.settings_problems = list(problems or [])
        self.store_dir = store_dir
        self.create = create
        self._store: Store | None = None
        self._journal: Journal | None = None
        self._started = False
        self._start_lock = threading.Lock()
        self.startup: dict = {}
        self._completed: dict[tuple[str, str], dict] = {}   # (session, fingerprint) -> op info
        self.last_snapshot: dict | None = None
        self.background = False        # long-lived host (Hermes): watchers, background first snapshot
        self._bg: dict[str, dict] = {} # workspace id -> {"thread", "kind", "started"}
        self._bg_lock = threading.Lock()
        self._plans: dict[str, tuple[str, float]] = {}   # plan token -> (request key, expiry)
        self._plans_lock = threading.Lock()

    @classmethod
    def get(cls, store_dir: os.PathLike | str | None = None, settings: Settings | None = None, *,
            create: bool = True, problems: list[str] | None = None) -> "Chronos":
        """The service of one store (cached per process).  `create=False` (read-only
        commands) never makes a store where there is none."""
        settings = settings or Settings()
        store_dir = Path(os.path.abspath(store_location(settings, store_dir)))
        with cls._guard:
            inst = cls._instances.get(str(store_dir))
            if inst is None or inst.settings != settings:
                inst = cls(store_dir, settings, create=create, problems=problems)
                cls._instances[str(store_dir)] = inst
            inst.create = inst.create or create
            if problems is not None:
                inst.settings_problems = list(problems)
            return inst

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.open(self.store_dir, self.settings.engine_config(), create=self.create)
        return self._store

    @property
    def journal(self) -> Journal:
        if self._journal is None:
            self._journal = Journal(self.store)
        return self._journal

    def store_exists(self) -> bool:
        return self._store is not None or Store.exists_at(self.store_dir)

    # --------------------------------------------------------------- startup
    def start(self) -> dict:
        """Open the journal and settle crashed file operations by evidence (once per process)."""
        with self._start_lock:
            if self._started:
                return self.startup
            self.journal.open()
            settled, deferred = [], None
            if self.journal.integrity == "ok":
                try:
                    settled = self.settle_by_evidence()
                except (JournalError, ChronosError, OSError) as exc:    # a full or read-only store
                    deferred = f"crashed calls could not be settled now: {exc}"
            try:
                swept = inflight.sweep(self.store)
            except OSError:
                swept = 0
            self.startup = {"integrity": self.journal.integrity, "healed": self.journal.healed,
                            "settled": settled}
            if deferred:
                self.startup["deferred"] = deferred
            if swept:
                self.startup["temp_files_removed"] = swept
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
        try:
            declared_fields, blobs = self._images(call)
        except (pygit2.GitError, OSError) as exc:
            raise StoreUnwritable(f"could not keep the pre- and post-images of this {call.tool} call in "
                                  f"the store {self.store.root}: {explain(exc, self.store.root)}; it was "
                                  "not run") from None
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
        t = Ticket(op, call, snap.get("checkpoint"), snap, time.time_ns(), fp, declared=declared_fields)
        if warning:
            t.extra["gate_warning"] = warning["message"]
        return t

    def _images(self, call: Call) -> tuple[list[dict], dict[str, str]]:
        """Per declared path its pre-image (stored now) and post-image (stored if known)."""
        repo = self.store.repo()
        declared_fields: list[dict] = []
        blobs: dict[str, str] = {}
        for i, d in enumerate(call.declared or ()):
            pre = recovery.content_id(d.path, store_in=repo)
            post = str(repo.create_blob(d.post)) if isinstance(d.post, bytes) else d.post
            declared_fields.append({"path": d.path, "pre": pre, "post": post})
            if recovery.is_blob_id(pre):
                blobs[f"pre-{i:04d}"] = pre
            if post not in (ABSENT, UNKNOWN):
                blobs[f"post-{i:04d}"] = post
        return declared_fields, blobs

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
        """A protected declared-path write with write_file semantics (parents created, replaced
        whole), confined to the workspace: never through a symlink, never into a `.git`."""
        ws = self.store.workspace(workspace)
        abspath = os.path.normpath(path if os.path.isabs(path) else os.path.join(workspace, path))
        split(ws.rel(abspath))                    # outside the workspace or into a .git: refused now
        call = Call(tool=tool, args={"path": abspath, "content": content.decode("utf-8", "replace")},
                    workspace=workspace, session_id=session_id, declared=[Declared(abspath, content)],
                    replay_of=replay_of, actor=actor)
        ticket = self.begin(call, gate=gate)
        try:
            ws.write_files([(abspath, content)])
        except (OSError, ChronosError) as exc:
            info = self.finish(ticket, self._failed_write(ticket, exc))
            raise ChronosError(f"could not write {abspath}: {explain(exc, self.store.root)}", **info) from None
        info = self.finish(ticket, Outcome(status="ok", result_hash=sha256_hex(str(len(content)))))
        return {**info, "path": abspath, "bytes_written": len(content)}

    @staticmethod
    def _failed_write(ticket: Ticket, exc: BaseException) -> Outcome:
        """A write that raised: a known error when every path is still at its pre-image
        (temp + rename never half-replaces a file), else an unknown outcome."""
        untouched = all(recovery.content_id(d["path"]) == d["pre"] for d in ticket.declared)
        reason = None if untouched else f"exception: {type(exc).__name__}"
        return Outcome(status="error", result_hash=sha256_hex(str(exc)), uncertain_reason=reason)

    # ------------------------------------------------------------ workspaces
    def known_workspace(self, path: str) -> str:
        """`path` as a workspace a remote client may name: one the store already
        knows (made by Hermes or the CLI), never `/`, a home, the store or a system folder."""
        root = canonical_root(path)
        if system_folder(root):
            raise WorkspaceRefused(f"{os.fsdecode(root)} is a system folder, `/` or a home directory: "
                                   "it is never served as a workspace")
        store = canonical_root(self.store.root)
        if root == store or root.is_relative_to(store) or store.is_relative_to(root):
            raise WorkspaceRefused(f"{os.fsdecode(root)} holds or is inside the chronos-git store")
        if not any(ws.root == root for ws in self.store.workspaces()):
            raise UnknownWorkspace(f"unknown workspace {os.fsdecode(root)}: the store has no checkpoints "
                                   "for it (only workspaces made by Hermes or the chronos-git CLI are served)")
        return os.fsdecode(root)

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
        if not self.store_exists():
            return {"status": "ok", "workspace": os.path.abspath(workspace), "checkpoints": [],
                    "note": f"no store at {self.store_dir} yet: nothing has been checkpointed"}
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

    def _plan_key(self, ws, target_id: str, paths, clean: bool, force: bool) -> str:
        rels = sorted({ws.rel(p) for p in paths}) if paths else None
        return canonical({"workspace": os.fsdecode(ws.root_bytes), "target": target_id,
                               "paths": rels, "clean": clean, "force": force})

    def _issue_plan_token(self, key: str) -> str:
        token = secrets.token_urlsafe(18)
        now = time.monotonic()
        with self._plans_lock:
            for t in [t for t, (_, exp) in self._plans.items() if exp < now]:
                del self._plans[t]
            self._plans[token] = (key, now + PLAN_TOKEN_TTL_S)
        return token

    def _redeem_plan_token(self, token: str, key: str) -> None:
        with self._plans_lock:
            entry = self._plans.pop(token, None)
        if entry is None or entry[1] < time.monotonic():
            raise PlanTokenError("the plan token is unknown, used or expired: run the dry run again and "
                                 f"confirm within {int(PLAN_TOKEN_TTL_S // 60)} minutes")
        if entry[0] != key:
            raise PlanTokenError("the plan token was issued for a different restore (checkpoint, paths "
                                 "or options differ): run the dry run of this request first")

    def restore(self, workspace: str, spec: str, *, paths: list[str] | None = None,
                clean: bool | None = None, dry_run: bool = False, force: bool = False,
                gate: bool = True, actor: str = "cli", session_id: str | None = None,
                tool: str = "chronos.restore", plan_token: str | None = None,
                require_plan: bool = False) -> dict:
        """Restore a checkpoint, journaled as an operation of its own (safety checkpoint = pre).

        A dry run returns a `plan_token`; with `require_plan` (the HTTP API) a real
        restore needs the token of a dry run of the same request, so no single
        request rewrites a workspace blindly."""
        self.start()
        clean = self.settings.clean_untracked_on_rollback if clean is None else clean
        ws = self.store.workspace(workspace)
        if dry_run:
            res = restore_mod.restore(ws, spec, paths=paths, clean=clean, dry_run=True)
            key = self._plan_key(ws, res["restored_checkpoint"], paths, clean, force)
            return {"status": "ok", **res, "plan_token": self._issue_plan_token(key)}
        if gate:
            self.check_gate()
        if plan_token is not None or require_plan:
            if not plan_token:
                raise PlanTokenError("a restore needs the plan_token of a dry run of the same request "
                                     "(POST the request with dry_run=true first)")
            self._redeem_plan_token(plan_token, self._plan_key(ws, ws.resolve(spec).id, paths, clean, force))
        holder: dict = {}

        def on_plan(items, safety, target):
            declared = []
            blobs = {}
            for i, it in enumerate(x for x in items if x.declared):
                full = os.fsdecode(os.path.join(ws.root_bytes, os.fsencode(it.path)))
                declared.append({"path": full, "pre": it.current_blob, "post": it.blob})
                if it.current_blob:
                    blobs[f"pre-{i:04d}"] = it.current_blob
                if it.blob:
                    blobs[f"post-{i:04d}"] = it.blob
            op = uuid.uuid4().hex
            args = {"checkpoint": target.id, "paths": paths, "clean": clean, "force": force}
            self.journal.append("started", {
                "operation_id": op, "tool": tool, "args_hash": args_hash(args), "args": args,
                "fingerprint": fingerprint(tool, args), "session_id": session_id, "actor": actor,
                "owner": self.journal.me.to_dict(), "workspace": os.fsdecode(ws.root_bytes),
                "pre_checkpoint": safety.id, "declared": declared,
                "snapshot": {"kind": "safety"}}, blobs=blobs)
            holder.update(op=op, t=time.time_ns())

        try:
            result = restore_mod.restore(ws, spec, paths=paths, clean=clean, force=force, on_plan=on_plan,
                                         meta=CheckpointMeta(description="", session_id=session_id,
                                                             tool=tool))
        except BaseException as exc:
            if holder:      # files may be half restored: that is an unknown outcome, not a failure
                self.journal.append("uncertain", {"operation_id": holder["op"],
                                                  "reason": f"exception: {type(exc).__name__}"})
            raise
        evidence = result.pop("evidence", [])
        if holder:
            result["operation_id"] = holder["op"]
            self._record_restore(holder, result, evidence)
        if result["failed"]:
            failed = [i for i in result["plan"] if i["action"] == "failed"]
            return {"status": "error", **result,
                    "error": (f"restore incomplete: {len(failed)} path(s) could not be changed "
                              f"({'; '.join(i['path'] + ': ' + i['reason'] for i in failed[:5])}); "
                              f"everything else was restored. Undo all of it by restoring the safety "
                              f"checkpoint {result['safety_checkpoint'][:12]}")}
        return {"status": "ok", **result}

    def _record_restore(self, holder: dict, result: dict, evidence: list[dict]) -> None:
        """The restore's outcome, read back from disk: every path at its post-image (ok), the
        ones that failed still at their pre-image (partial: known, the gate stays open), or
        some at neither (uncertain: the gate closes until an operator looks)."""
        faults.hit("after_dispatch")
        unknown = [e for e in evidence if not e["at_post"] and not e["at_pre"]]
        not_done = [e for e in evidence if not e["at_post"]]
        if unknown:
            self.journal.append("uncertain", {"operation_id": holder["op"], "evidence": unknown,
                                              "reason": f"{len(unknown)} path(s) of the restore are at "
                                                        "neither their old nor their restored content"})
            return
        self.journal.append("returned", {
            "operation_id": holder["op"], "status": "partial" if not_done else "ok",
            "result_hash": sha256_hex(canonical(result["plan"])),
            "post_checkpoint": result["restored_checkpoint"],
            "duration_ms": round((time.time_ns() - holder["t"]) / 1e6, 3),
            **({"not_restored": [{"path": e["path"], "now": e["now"]} for e in not_done]} if not_done else {})})

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

    def protection(self) -> dict:
        """Whether protected calls can be protected right now, and the one fix when not.

        `on`; `degraded` (calls are protected, something is off); `off` (protected
        calls are refused: durable intent is impossible)."""
        probe = self.store_dir if self.store_exists() else _existing_parent(self.store_dir)
        try:
            st = os.statvfs(probe)
        except OSError as exc:
            return {"state": "off", "reason": f"the store {self.store_dir} cannot be examined: {exc}",
                    "fix": f"check that {self.store_dir} is reachable"}
        free = st.f_bavail * st.f_frsize
        if st.f_flag & os.ST_RDONLY:
            return {"state": "off", "reason": f"the store {self.store_dir} is on a read-only filesystem",
                    "fix": f"remount it writable, or set store_dir to a writable folder ({BLOCK_HINT})"}
        if free < MIN_FREE_BYTES or st.f_favail == 0:
            return {"state": "off", "free_bytes": free,
                    "reason": f"the disk holding the store {self.store_dir} is full ({free} bytes free)",
                    "fix": f"free space on the filesystem of {self.store_dir}"}
        if self._journal is not None and self._journal.unwritable:
            return {"state": "off", "reason": f"the last journal write failed: {self._journal.unwritable}",
                    "fix": f"make {self.store_dir} writable, then run `chronos-git journal status`"}
        notes = list(self.settings_problems)
        if not self.settings.auto_snapshot:
            notes.append("auto_snapshot is off: calls are journaled but not checkpointed")
        if notes:
            return {"state": "degraded", "reason": "; ".join(notes),
                    "fix": f"fix the settings in {BLOCK_HINT}"}
        if not self.store_exists():
            return {"state": "ready", "reason": f"no store at {self.store_dir} yet: the first protected "
                                                "call creates it"}
        return {"state": "on"}

    def health(self, workspace: str | None = None) -> dict:
        if not self.store_exists():          # never create a store to report on it
            return {"status": "ok", "store": str(self.store_dir), "store_exists": False,
                    "protection": self.protection(), "settings_problems": self.settings_problems,
                    "settings": self.settings.model_dump()}
        self.start()
        j = self.journal.status()
        out = {"status": "ok", "store": str(self.store.root), "store_exists": True,
               "store_bytes": retention.store_size(self.store),
               "protection": self.protection(),
               "journal": {k: j[k] for k in ("integrity", "events", "head", "healed")},
               "gate": "open" if self.gate() is None else "closed",
               "unresolved": len(j["unresolved"]),
               "settings": self.settings.model_dump(),
               "settings_problems": self.settings_problems,
               "last_snapshot": self.last_snapshot,
               "workspaces": len(self.store.workspaces())}
        if self.startup.get("deferred"):
            out["deferred"] = self.startup["deferred"]
        if workspace:
            ws = self.store.workspace(workspace)
            out["workspace"] = ws.describe()
            out["workspace"]["checkpoints"] = ws.count()
            out["workspace"]["watcher"] = ws.watcher_state()
            out["workspace"]["background"] = self.background_state(ws)
            if ws.last_bulk:
                out["workspace"]["first_snapshot_seconds"] = ws.last_bulk
        return out
