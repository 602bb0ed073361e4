"""The checkpoints protected calls get: before and after each call, at turn start,
and the first one of a workspace (in the background in a long-lived host)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

from ..engine import offload, worktree
from ..engine.checkpoint import CheckpointMeta
from ..engine.errors import ChronosError
from ..journal_refs import JournalError, events
from . import capture
from .calls import Call
from .core import Core
from .jobs import Job
from .watch_limit import WatchLimit

# A tree this small gets its first snapshot on the caller's thread even in a long-lived host
# (tens of ms, measured 37 ms at 2,000 files): starting a child costs more, and a busy machine
# can make it seconds, during which a new workspace's first calls would go without a checkpoint.
SMALL_TREE_ENTRIES = 2000             # files, links and folders (engine/worktree.py `within`)
SMALL_TREE_BYTES = 16 << 20


def _progress_text(p: dict | None) -> str:
    if not p or not p.get("files_total"):
        return ""
    return f", {p['phase']} {p['files_done']}/{p['files_total']} files"


class Snapshots:
    def __init__(self, core: Core):
        self.core = core
        self.last: dict | None = None              # this process's newest snapshot record
        self.after_import: Callable[[], None] | None = None   # called after a first (bulk) import (Chronos wires it)
        self.watch = WatchLimit(core)              # watchers degraded by the inotify watch limit, published

    def taken(self, ws, res) -> str | None:
        """A snapshot done (engine result): a ref that named no checkpoint that could serve was
        replaced (on the HEAD's checkpoint, else a fresh chain), so the chain moved without a
        call: journaled (the service is started by then); ignore rules that changed are journaled
        with what they now ignore (service/capture.py).  Never raises: returns why it could not be
        journaled (a journal in doubt hears nothing until an operator looks)."""
        self.imported(res.report.get("scan"))
        if self.core.background:
            self.watch.publish(ws)
        why = capture.noted(self.core, ws, res)
        tip = res.report.get("damaged_tip")
        if not tip or res.checkpoint is None:
            return why
        try:
            self.core.journal.append(events.Maintenance, {
                "operation_id": None, "action": "damaged_tip", "workspace": os.fsdecode(ws.root_bytes),
                "checkpoint": res.checkpoint.id, **tip})
        except (JournalError, ChronosError, OSError) as exc:
            return str(exc)            # the new checkpoint stands; health names what is still damaged
        return None

    def imported(self, scan: str | None) -> None:
        """A snapshot finished (`scan`: how, from its report): if it was a first import, what
        it left to do can start."""
        if scan == "bulk" and self.after_import is not None:
            self.after_import()

    def for_call(self, call: Call, when: str, budget_s: float | None) -> dict:
        """The checkpoint before or after `call` (a record, never raises): the declared paths of
        a file call, else the whole workspace bounded by the snapshot budget."""
        settings = self.core.settings
        if not settings.auto_snapshot:
            return {"kind": "none", "note": "auto_snapshot is off"}
        ws = self.core.store.workspace(call.workspace)
        meta = CheckpointMeta(description=f"{when} {call.tool}", tool=call.tool, session_id=call.session_id,
                              turn_id=call.turn_id, tool_call_id=call.tool_call_id,
                              role="before_call" if when == "before" else "after_call")
        budget = budget_s if budget_s is not None else settings.snapshot_budget_s
        try:
            if self.core.background:
                ws.enable_watcher(on_ready=lambda: self.watch.publish(ws))
                self.watch.publish(ws)
                waited = self._wait_for_baseline(ws, call, budget)
                if waited is not None:
                    return self._note(ws, waited)
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
            return self._note(ws, {"kind": "failed", "error": f"{type(exc).__name__}: {exc}"})
        self.taken(ws, res)
        return self._note(ws, {"checkpoint": res.checkpoint.id if res.checkpoint else None,
                               "kind": res.report["kind"], "partial": res.partial, "created": res.created,
                               "scan": res.report.get("scan"),
                               "skipped_count": len(res.report.get("skipped", ())),
                               **({"ignore_change": {k: res.report["ignore_change"][k] for k in ("count", "large")}}
                                  if res.report.get("ignore_change") else {})})

    def _note(self, ws, out: dict) -> dict:
        self.last = {"time": time.time(), "workspace": os.fsdecode(ws.root_bytes), **out}
        return out

    # ---------------------------------------------------------- background
    def _wait_for_baseline(self, ws, call: Call, budget: float) -> dict | None:
        """In a long-lived host the first snapshot runs in the background: never block a
        call on it beyond the budget.  Returns a no-checkpoint record when the call must
        go ahead without one (it is still journaled)."""
        if self._first_here(ws):
            return None                    # for_call takes it here
        if not ws.has_checkpoint():
            self._start(ws, "baseline")
        job = self.core.jobs.get(_key(ws))
        if job is None or job.kind != "baseline":
            return None
        if call.declared is None:
            job.join(budget)
        if not job.running:
            return None
        return {"kind": "none", "pending_baseline": True, "progress": ws.progress,
                "note": (f"the first checkpoint of this workspace is still being taken in the background "
                         f"(running for {time.time() - job.started:.1f} s{_progress_text(ws.progress)}); "
                         + ("declared paths are protected by their pre-images in the journal"
                            if call.declared is not None else "this call has no checkpoint"))}

    def _start(self, ws, kind: str, meta: CheckpointMeta | None = None) -> None:
        """A first snapshot (`baseline`) or a turn checkpoint in the background (service/jobs.py),
        unless one of this workspace's is running."""
        first = meta or CheckpointMeta(
            description="first checkpoint of the workspace" if kind == "baseline" else "turn start",
            role="baseline" if kind == "baseline" else "turn_start")

        def work(job: Job) -> None:
            if kind == "baseline" and self._first_in_child(ws, first, job):
                return
            self.taken(ws, ws.snapshot(first, force_scan=True))
        self.core.jobs.start(_key(ws), kind, work)

    def _first_in_child(self, ws, meta: CheckpointMeta, job: Job) -> bool:
        """The first snapshot (a bulk import of the whole tree) in a child process at low
        priority, so that it does not hold up the agent's calls on the GIL; False when no
        child could run it (the caller takes it here)."""
        params = {"workspace": os.fsdecode(ws.root_bytes),
                  "meta": {k: getattr(meta, k) for k in ("description", "kind", "tool", "session_id",
                                                         "turn_id", "tool_call_id", "time", "role")}}
        ws.hand_over_watch()
        try:
            res = job.offloaded("first_snapshot", self.core, params, progress=ws.note_progress, here=lambda: None)
        except BaseException as exc:
            ws.walk_lost("the first import in a child process did not finish")
            if not isinstance(exc, offload.Failed):
                raise
            job.error = str(exc)
            return True
        if res is None:
            return False             # no child here: the caller takes it on this thread
        ws.progress = res.get("progress") or ws.progress
        ws.last_bulk, ws.last_seed = res.get("last_bulk"), res.get("last_seed")
        self.imported(res.get("scan"))
        return True

    def _first_here(self, ws) -> bool:
        """Whether the workspace's first snapshot is taken on the caller's thread: it has none,
        none is being taken in the background, and the tree is small."""
        job = self.core.jobs.get(_key(ws))
        return (not ws.has_checkpoint() and (job is None or not job.running)
                and worktree.within(ws.root_bytes, SMALL_TREE_ENTRIES, SMALL_TREE_BYTES))

    def wait(self, ws, timeout: float | None = None) -> bool:
        """Wait for this workspace's background snapshot; True when none is running."""
        return self.core.jobs.wait(_key(ws), timeout)

    def background_state(self, ws) -> dict | None:
        job = self.core.jobs.get(_key(ws))
        if job is None:
            return None
        return {**job.state().model_dump(), "progress": ws.progress}

    def turn_checkpoint(self, workspace: str, *, session_id: str | None = None,
                        turn_id: str | None = None) -> dict:
        """A full scan at the start of each user turn: edits made between turns get a
        checkpoint of their own, and the declared-path fast path starts from a fresh index."""
        if not self.core.settings.auto_snapshot:
            return {"kind": "none"}
        ws = self.core.store.workspace(workspace)
        meta = CheckpointMeta(description="at turn start", tool="turn start", session_id=session_id,
                              turn_id=turn_id, role="turn_start")
        if self.core.background:
            # overlaps the model's thinking; the turn's first tool call waits on the workspace lock
            ws.enable_watcher(on_ready=lambda: self.watch.publish(ws))
            self.watch.publish(ws)
            if not self._first_here(ws):
                self._start(ws, "turn" if ws.has_checkpoint() else "baseline", meta)
                return {"kind": "background"}
        res = ws.snapshot(meta, force_scan=True)
        self.taken(ws, res)
        return {"checkpoint": res.checkpoint.id if res.checkpoint else None, "created": res.created}

    def flush(self) -> None:
        """Write stat caches that declared-path snapshots left in memory (at exit)."""
        if not self.core.store_exists():
            return
        self.watch.close()
        for ws in self.core.store.open_workspaces():
            try:
                ws.flush_index()
            except Exception:
                pass


def _key(ws) -> str:
    return f"snapshot:{ws.id}"
