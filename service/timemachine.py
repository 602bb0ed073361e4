"""The time machine: checkpoints of a workspace, their diffs, and restores.

A restore is a protected call of its own (tool `chronos.restore`): its safety
checkpoint is the pre-checkpoint, its plan the declared paths, and its
outcome is read back from disk (engine.restore.evidence).  A dry run issues a
plan token; the HTTP API requires it for the real restore, so no single
request rewrites a workspace blindly.  The token binds the plan it showed
(engine.restore.digest), not only the request: a restore whose plan differs
(the workspace changed since) is refused and answers the new plan.
"""
from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine import diff as diff_mod, faults, restore as restore_mod
from ..engine.chain import id_like
from ..engine.checkpoint import CheckpointMeta, roles_in_order
from ..engine.codec import canonical
from ..engine.cycles import no_cycle_collection
from ..engine.errors import ChronosError, PlanTokenError, StoreError, UnknownWorkspace, WorkspaceRefused
from ..engine.layout import canonical_root, system_folder
from ..engine.wording import plural
from ..journal_refs import JournalError, events
from ..journal_refs.events import sha256_hex
from .call_changes import CallEvents
from .calls import Call, Declared, Outcome
from .core import Core
from .errors import PlanChanged, PlanRequired
from .gate import Gate
from .results import (
    BackgroundJob,
    CheckpointInfo,
    Damage,
    DiffResult,
    LogResult,
    RestoreResult,
    ShowResult,
    SnapshotResult,
    WatcherState,
    WorkspaceInfo,
    WorkspacesResult,
)
from .transaction import ProtectedCalls

PLAN_TOKEN_TTL_S = 600.0
log = logging.getLogger("chronos_git")

MAX_LABEL = 4096          # a checkpoint's label: every listing of the timeline carries it
MAX_PATHS = 10_000        # paths named in one request (a restore, a diff, a snapshot): name folders instead


def _bounded(paths: list[str] | None) -> list[str] | None:
    """`paths` unless there are more than MAX_PATHS (each is matched against every change)."""
    if paths is not None and len(paths) > MAX_PATHS:
        raise ValueError(f"at most {MAX_PATHS:,} paths can be named at once; this request names "
                         f"{len(paths):,} (name the folders that hold them instead)")
    return paths


class TimeMachine:
    def __init__(self, core: Core, gate: Gate, calls: ProtectedCalls, snapshots, start, maybe_compact):
        self.core = core
        self.gate = gate
        self.calls = calls
        self.snapshots = snapshots           # for each workspace's background job (health)
        self._start = start
        self._maybe_compact = maybe_compact
        self.events = CallEvents(core)           # the journal's call events (reverts, roles in a listing)
        self._infos: dict[str, tuple] = {}       # commit id -> (number, parent, roles), its listing entry
        self._plans: dict[str, tuple[str, str | None, float]] = {}   # token -> (request key, plan digest, expiry)
        self._plans_lock = threading.Lock()

    # ---------------------------------------------------------- workspaces
    def known(self, root) -> bool:
        return any(ws.root == root for ws in self.core.store.workspaces()) if self.core.store_exists() else False

    def known_workspace(self, path: str) -> str:
        """`path` as a workspace a remote client may name: one the store already knows (made by
        Hermes or the CLI), never `/`, a home, the store or a system folder."""
        root = canonical_root(path)
        if system_folder(root):
            raise WorkspaceRefused(f"{os.fsdecode(root)} is a system folder, `/` or a home directory: "
                                   "it is never served as a workspace")
        store = canonical_root(self.core.store_dir)
        if root == store or root.is_relative_to(store) or store.is_relative_to(root):
            raise WorkspaceRefused(f"{os.fsdecode(root)} holds or is inside the chronos-git store")
        if not self.known(root):
            raise UnknownWorkspace(f"unknown workspace {os.fsdecode(root)}: the store has no checkpoints "
                                   "for it (only workspaces made by Hermes or the chronos-git CLI are served)")
        return os.fsdecode(root)

    def existing(self, workspace: str):
        """The workspace, for a command about its history: it must exist, or the store know it."""
        ws = self.core.store.workspace(workspace)
        if not ws.root.is_dir() and not self.known(ws.root):
            raise UnknownWorkspace(f"workspace {os.fsdecode(ws.root_bytes)} {_missing(ws.root)} and the "
                                   "store has no checkpoints for it")
        return ws

    def describe(self, ws, *, detail: bool = False) -> WorkspaceInfo:
        tip = ws.tip()
        info = WorkspaceInfo(root=os.fsdecode(ws.root_bytes), id=ws.id, ref=ws.ref, gitdir=str(ws.gitdir),
                             exists=ws.root.is_dir(), latest=CheckpointInfo(**tip.summary()) if tip else None,
                             checkpoints=ws.count())
        if detail:
            bg = self.snapshots.background_state(ws)
            info.watcher = WatcherState(**ws.watcher_state())
            info.background = BackgroundJob(**bg) if bg else None
            info.first_snapshot_seconds = ws.last_bulk
            info.first_snapshot_seed = ws.last_seed
        return info

    def workspaces(self) -> WorkspacesResult:
        out = [self.describe(ws) for ws in self.core.store.workspaces()] if self.core.store_exists() else []
        out.sort(key=lambda w: -(w.latest.time if w.latest else 0))
        return WorkspacesResult(workspaces=out)

    # ---------------------------------------------------------- checkpoints
    def snapshot(self, workspace: str, message: str = "manual checkpoint", *, tool: str | None = None,
                 session_id: str | None = None, turn_id: str | None = None,
                 tool_call_id: str | None = None, paths: list[str] | None = None,
                 progress=None) -> SnapshotResult:
        """`progress(phase, done, total)`: how a first (bulk) snapshot goes, for a progress bar."""
        if len(message) > MAX_LABEL:
            raise ValueError(f"a checkpoint's label is at most {MAX_LABEL:,} characters; this one has "
                             f"{len(message):,} (put longer notes in a file of the workspace)")
        paths = _bounded(paths)
        ws = self.core.store.workspace(workspace)
        meta = CheckpointMeta(description=message, kind="manual", role="manual", tool=tool, session_id=session_id,
                              turn_id=turn_id, tool_call_id=tool_call_id)
        res = ws.snapshot(meta, paths=paths, progress=progress)
        if res.report.get("damaged_tip"):
            self._start()                    # the journal, opened as every writer opens it, hears why
        unjournaled = self.snapshots.taken(ws, res)
        self._maybe_compact(ws)
        out = SnapshotResult(workspace=os.fsdecode(ws.root_bytes), **res.to_dict(),
                             checkpoint_info=CheckpointInfo(**res.checkpoint.summary()) if res.checkpoint else None)
        if not res.created and message and message != "manual checkpoint":
            out.note = (f"the label {message!r} was not kept: a checkpoint is made only when something changed, "
                        "and the newest one keeps its own label")
        if unjournaled:
            out.note = f"the damaged checkpoint ref it replaced could not be journaled: {unjournaled}"
        return out

    def log(self, workspace: str, limit: int | None = 20, *, all: bool = False) -> LogResult:  # noqa: A002
        """The current line of the timeline, newest first: from the newest checkpoint back,
        through each branch point (a checkpoint a time-machine operation put back) to the one
        restored from; `all`: every checkpoint of the workspace, each with its parent in the
        timeline (the checkpoints of a line left behind stay kept and restorable)."""
        if limit is not None and limit < 1:
            raise ValueError(f"the limit must be at least 1, not {limit}")
        if not self.core.store_exists():
            problem = self.core.store_problem()
            if problem:
                raise StoreError(problem)
            if not os.path.isdir(workspace):
                raise UnknownWorkspace(f"workspace {workspace} {_missing(workspace)}")
            return LogResult(workspace=os.path.abspath(workspace), checkpoints=[],
                             note=f"no store at {self.core.store_dir} yet: nothing has been checkpointed")
        ws = self.existing(workspace)
        damage: list[dict] = []
        chain = ws.numbered(damage)                     # read lazily: a limit stops the walk
        shown = chain if all else _current_line(chain)
        with no_cycle_collection():
            cps = list(itertools.islice(shown, limit))
            # the journal names a checkpoint only after it was made (its time is taken before its
            # scan; an older one's is its commit's second): read it back to the oldest listed
            since = int((min((c.meta.time for c in cps), default=0) - 0.001) * 1e9)
            served = self.events.roles(os.fsdecode(ws.root_bytes), since)
            listed = [self._info(c, i, served) for i, c in enumerate(cps, 1)]
        return LogResult(workspace=os.fsdecode(ws.root_bytes), checkpoints=listed, all=all,
                         damaged=[Damage(**d) for d in damage] or None,
                         note=None if listed else self._held_by(ws.root))

    def _held_by(self, root) -> str | None:
        """For a folder with no checkpoints: the workspace above it that has some (git finds its
        repository from a subfolder; a workspace is the folder Hermes ran in, named as it is)."""
        above = [w.root for w in self.core.store.workspaces()
                 if w.root != root and root.is_relative_to(w.root) and w.has_checkpoint()]
        if not above:
            return None
        top = max(above, key=lambda p: len(p.parts))
        return f"it is inside workspace {top}, which has checkpoints: --workspace {top}"

    def _info(self, c, index: int, served: dict[str, set[str]]) -> CheckpointInfo:
        """One checkpoint of a listing.  A commit never changes, so what was made of it is kept
        and copied with its index (validating 10,000 of them again would be most of a listing);
        its number, parent in the timeline and roles are checked against the kept one.  The
        copies share their lists with what is kept: a listing is read, not edited."""
        parent = c.meta.restored_from or c.parent_id
        extra = served.get(c.id)
        key = (c.number, parent, frozenset(extra) if extra else None)
        kept = self._infos.get(c.id)
        if kept is not None and kept[0] == key:
            return kept[1].model_copy(update={"index": index})
        d = c.summary(index)
        d["parents"] = [parent] if parent else []
        d["roles"] = roles_in_order({d["role"]} | (extra or set()))
        info = CheckpointInfo(**d)                  # one validation (setting a field validates again)
        if len(self._infos) >= _INFOS_MAX:
            self._infos.clear()
        self._infos[c.id] = (key, info.model_copy())
        return info

    def show(self, workspace: str, spec: str) -> ShowResult:
        ws = self.existing(workspace)
        cp = ws.resolve(spec)
        out = ShowResult(checkpoint=CheckpointInfo(**cp.summary()))
        if cp.parent_id:
            try:
                out.changes = DiffResult.model_validate(
                    diff_mod.diff(ws, cp.parent_id, cp.id, patch=True, max_patch_chars=50_000))
            except ChronosError:
                pass
        return out

    def diff(self, workspace: str, from_spec: str | None = None, to_spec: str | None = None, *,
             patch: bool = True, max_chars: int = diff_mod.DEFAULT_MAX_PATCH_CHARS,
             paths: list[str] | None = None) -> DiffResult:
        paths = _bounded(paths)
        ws = self.existing(workspace)
        return DiffResult.model_validate(diff_mod.diff(ws, from_spec, to_spec, patch=patch,
                                                       max_patch_chars=max_chars, paths=paths))

    # --------------------------------------------------------------- restore
    def restore(self, workspace: str, spec: str, *, paths: list[str] | None = None,
                clean: bool | None = None, dry_run: bool = False, force: bool = False,
                gate: bool = True, actor: str = "cli", session_id: str | None = None,
                tool: str = "chronos.restore", plan_token: str | None = None,
                require_plan: bool = False, paths_must_exist: bool = True,
                foreign_ok: bool = False) -> RestoreResult:
        """Restore a checkpoint (engine.restore: validated, confined, undoable), journaled as
        an operation whose pre-checkpoint is the safety checkpoint.  A path in neither the
        checkpoint nor the workspace is an error (a typo), except for a recovery's rollback."""
        paths = _bounded(paths)
        self._start()
        clean = self.core.settings.clean_untracked_on_rollback if clean is None else clean
        ws = self.core.store.workspace(workspace)
        if not id_like(spec):     # a checkpoint id may go into a new folder; @N, N or latest need one's history
            ws = self.existing(workspace)
        foreign_ok = foreign_ok or self._restored_here(ws, spec)
        key = {"target": None, "paths": sorted({ws.rel(p) for p in paths}) if paths else None, "clean": clean,
               "force": force}

        def preview():
            return restore_mod.previewed(ws, spec, paths=paths, clean=clean, force=force,
                                         paths_must_exist=paths_must_exist, foreign_ok=foreign_ok)

        def prepare(meta, approve):
            return restore_mod.prepare(ws, spec, paths=paths, clean=clean, force=force, meta=meta,
                                       paths_must_exist=paths_must_exist, foreign_ok=foreign_ok, approve=approve)

        def keyed(target_id: str) -> dict:
            return {**key, "target": target_id}

        return self.operate(ws, TimeOp(tool=tool, what="restore", preview=preview, prepare=prepare, key=keyed,
                                       args=lambda target: {"checkpoint": target.id, "paths": paths, "clean": clean,
                                                            "force": force},
                                       target_id=lambda: ws.resolve(spec).id, branch=not paths),
                            dry_run=dry_run, gate=gate, actor=actor, session_id=session_id, plan_token=plan_token,
                            require_plan=require_plan)

    def operate(self, ws, op: TimeOp, *, dry_run: bool, gate: bool, actor: str, session_id: str | None,
                plan_token: str | None, require_plan: bool) -> RestoreResult:
        """One time-machine operation (a restore, a revert, an undo ...): a dry run issues a
        plan token bound to its plan; the real one checks the gate and the token, takes the
        safety checkpoint, journals the call, writes, reads every path back, and takes the
        checkpoint after it (`restored`, naming the branch point when it put one back)."""
        if dry_run:
            raw, items = op.preview()
            res = RestoreResult(**raw)
            res.plan_token = self._issue(self._plan_key(ws, op.key(res.restored_checkpoint)),
                                         restore_mod.digest(items))
            return res
        if gate:
            self.gate.check()
        shown = None
        if plan_token is not None or require_plan:
            if not plan_token:
                raise PlanRequired(f"{_a(op.what)} needs the plan_token of a dry run of the same request "
                                   "(send it with dry_run=true first, check the plan, then send it again "
                                   "with that plan_token)")
            shown = self._redeem(plan_token, self._plan_key(ws, op.key(op.target_id())))
        # outcomes written behind take this workspace's lock for their post-snapshot: they go
        # first, or the intent below (which waits for them) would wait under the lock forever
        self.calls.settle_behind()
        with ws.exclusive():
            try:
                prepared = op.prepare(CheckpointMeta(description="", session_id=session_id, tool=op.tool),
                                      None if shown is None else self._approver(ws, op, shown))
            except PlanChanged as exc:
                return exc.result
            target = prepared.target
            declared = [Declared(os.fsdecode(os.path.join(ws.root_bytes, os.fsencode(it.path))),
                                 pre_id=it.current_blob, post_id=it.blob)
                        for it in prepared.items if it.declared]
            call = Call(tool=op.tool, args=op.args(target), workspace=os.fsdecode(ws.root_bytes),
                        session_id=session_id, declared=declared, actor=actor,
                        pre_checkpoint=prepared.safety.id, snapshots=False)
            with self.calls.protect(call, gate=False) as t:
                raw, evidence = restore_mod.apply(ws, prepared)
                result = RestoreResult(**raw)
                after = self._after(ws, op, prepared, session_id)
                t.outcome = _outcome(result, evidence, target.id, after)
                t.outcome.fields["time_machine"] = op.tool      # its outcome says what it was (disk_changes)
        result.operation_id = t.ticket.operation_id
        result.after_checkpoint = after
        if t.record.outcome == "uncertain":
            result.status = "error"
            result.error = (f"the {op.what}'s outcome is unknown: {t.record.reason}. The recovery gate is "
                            "closed until an operator looks (`chronos-git journal status`); the safety "
                            f"checkpoint {str(result.safety_checkpoint)[:12]} holds the state before it")
        elif result.failed:
            failed = [i for i in result.plan if i.action == "failed"]
            result.status = "error"
            result.error = (f"{op.what} incomplete: {plural(len(failed), 'path')} could not be changed "
                            f"({'; '.join(f'{i.path}: {i.reason}' for i in failed[:5])}); everything else "
                            f"was done. Undo all of it with `chronos-git undo` or by restoring the safety "
                            f"checkpoint {str(result.safety_checkpoint)[:12]}")
        return result

    def _after(self, ws, op: TimeOp, prepared, session_id: str | None) -> str | None:
        """The checkpoint of the workspace as the operation left it (only the paths it wrote
        are read again); it names the checkpoint put back, when the workspace is now that one
        (a branch point of the timeline).  None when it could not be taken (the outcome still is)."""
        written = [os.fsdecode(os.path.join(ws.root_bytes, os.fsencode(it.path)))
                   for it in prepared.items if it.action in ("restore", "create", "delete")]
        if not written:
            return prepared.safety.id
        # a merge's target is a commit off every chain (what it put in place): not a checkpoint to name
        put_back = f" ({prepared.target.id[:12]})" if prepared.target.meta.kind != "merge" else ""
        meta = CheckpointMeta(description=f"after {op.what}{put_back}", kind="full",
                              role="restored", tool=op.tool, session_id=session_id)
        try:
            faults.hit("after_timeop_files")
            scan = ws.snapshot(meta, paths=written, commit=False)
            if op.branch_point is not None:
                meta.restored_from = op.branch_point(prepared, scan.tree_id)
            elif op.branch or scan.tree_id == prepared.target.tree_id:
                meta.restored_from = prepared.target.id
            return ws.commit_scan(scan, meta).checkpoint.id
        except (ChronosError, OSError, ValueError) as exc:
            log.warning("chronos-git: the checkpoint after a %s could not be taken: %s", op.what, exc)
            return None

    def _restored_here(self, ws, spec: str) -> bool:
        """Whether this workspace was restored from that checkpoint before (a fetched one put
        into a new folder, then more of it path by path): the journal says so.  Only asked for
        a checkpoint off the workspace's chain, which is rare."""
        try:
            target = ws.resolve(spec).id
            if ws.on_chain(target) or not self.core.store_exists():
                return False
            root = os.fsdecode(ws.root_bytes)
            return any(ev.get("workspace") == root and (ev.get("args") or {}).get("checkpoint") == target
                       for ev in self.core.journal.events(None, kinds={events.Started}))
        except (ChronosError, JournalError, ValueError, KeyError):
            return False              # the restore itself says what is wrong

    def _plan_key(self, ws, key: dict) -> str:
        return canonical({"workspace": os.fsdecode(ws.root_bytes), **key})

    def _approver(self, ws, op: TimeOp, shown: str):
        """engine.restore.prepare's `approve`: the plan about to run must be the one the dry run
        showed (`shown`, its digest), path by path and content by content; else the restore is
        refused before anything is committed or written, answering the new plan and its token."""
        def approve(target, items) -> None:
            now = restore_mod.digest(items)
            if now == shown:
                return
            res = RestoreResult(**restore_mod.preview_of(target, items, op.clean))
            res.plan_token = self._issue(self._plan_key(ws, op.key(op.target_id())), now)
            res.status, res.code = "error", PlanChanged.code
            res.error = ("the workspace changed since the preview, so nothing was restored: the plan now "
                         f"writes {plural(res.files_changed, 'file')} and removes {res.untracked_removed} "
                         "(this answer lists it, with its own plan_token); check it and confirm that one")
            raise PlanChanged(res.error, res)
        return approve

    def _issue(self, key: str, plan: str | None = None) -> str:
        """A plan token for the request `key` and the plan (engine.restore.digest) it showed."""
        token = secrets.token_urlsafe(18)
        now = time.monotonic()
        with self._plans_lock:
            for t in [t for t, entry in self._plans.items() if entry[2] < now]:
                del self._plans[t]
            self._plans[token] = (key, plan, now + PLAN_TOKEN_TTL_S)
        return token

    def _redeem(self, token: str, key: str) -> str | None:
        """The digest of the plan the token's dry run showed (used once, for the same request)."""
        with self._plans_lock:
            entry = self._plans.pop(token, None)
        if entry is None or entry[2] < time.monotonic():
            raise PlanTokenError("the plan token is unknown, used or expired: run the dry run again and "
                                 f"confirm within {int(PLAN_TOKEN_TTL_S // 60)} minutes")
        if entry[0] != key:
            raise PlanTokenError("the plan token was issued for a different request (checkpoint, paths "
                                 "or options differ) and is used up now: run the dry run of this request "
                                 "and confirm with its token")
        return entry[1]


_INFOS_MAX = 50_000           # listing entries kept (a long-lived host lists the same checkpoints again)

# paths the restore decided not to write (new bytes since its plan, or something in the way)
LEFT_UNTOUCHED = ("keep", "skip")


def _current_line(chain):
    """The chain (newest first) as the line the workspace is on: a checkpoint restored from an
    older one continues from there, so the stretch in between is a line left behind."""
    skip_to: str | None = None
    for c in chain:
        if skip_to is not None and c.id != skip_to:
            continue
        skip_to = None
        yield c
        if c.meta.restored_from and c.meta.restored_from != c.parent_id:
            skip_to = c.meta.restored_from


@dataclass
class TimeOp:
    """What differs between time-machine operations; `operate` does the rest the same way."""
    tool: str                                  # journaled as the call's tool
    what: str                                  # for people: "restore", "revert", "undo" ...
    preview: Callable[[], tuple[dict, list]]   # (a dry run's result, its items)
    prepare: Callable                          # (safety meta, approve) -> engine.restore.Prepared
    key: Callable[[str], dict]                 # the plan token's request key, given the target id
    args: Callable                             # the call's journaled args, given the target
    target_id: Callable[[], str]               # the target id, as the dry run named it
    branch: bool = False                       # it puts a checkpoint back: the after-checkpoint says which
    branch_point: Callable | None = None       # (prepared, tree after) -> the checkpoint put back, or None
    clean: bool = True


def _a(what: str) -> str:
    """`what` with its article: "a restore", "an undo"."""
    return ("an " if what[:1] in "aeiou" else "a ") + what


def _outcome(result: RestoreResult, evidence: list[dict], target_id: str, after: str | None = None) -> Outcome:
    """A restore's outcome, read back from disk: every path at its post-image (ok), the ones
    that failed or that it left untouched not there (partial: known, the gate stays open), or
    a path it wrote at neither image (uncertain: the gate closes until an operator looks).
    A path it left untouched may be at neither image: someone else changed it, not the restore."""
    unknown = [e for e in evidence if not e["at_post"] and not e["at_pre"] and e["action"] not in LEFT_UNTOUCHED]
    if unknown:
        return Outcome(status="error", post_checkpoint=target_id, fields={"evidence": unknown},
                       uncertain_reason=f"{plural(len(unknown), 'path')} of the restore "
                                        f"{'is' if len(unknown) == 1 else 'are'} at neither their old "
                                        "nor their restored content")
    not_done = [{"path": e["path"], "now": e["now"]} for e in evidence if not e["at_post"]]
    fields: dict = {"not_restored": not_done} if not_done else {}
    if after:
        fields["after_checkpoint"] = after
    return Outcome(status="partial" if not_done else "ok", post_checkpoint=target_id,
                   result_hash=sha256_hex(canonical([i.model_dump(exclude_none=True) for i in result.plan])),
                   fields=fields)


def _missing(path) -> str:
    """Why a workspace path is no folder: it is something else, or nothing."""
    return "is not a folder" if os.path.lexists(path) else "does not exist"
