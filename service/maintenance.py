"""Keeping the store in shape and saying how it is: retention and compaction,
whether protection can run, and `health`."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .. import deployment
from ..engine import compaction, consolidate, locking, offload, pack_list, retention
from ..engine.checkpoint import Checkpoint
from ..engine.wording import plural
from ..journal_refs import IntegrityError, checkpoints, events
from ..journal_refs.witness import witness_path_for
from . import capture
from .core import Core
from .jobs import Job
from .remote_record import pinned_tips
from .results import (
    CheckpointInfo,
    CompactResult,
    ConsolidateResult,
    Consolidation,
    Damage,
    HealthResult,
    JournalSummary,
    Protection,
    StoreBudget,
)

MIN_FREE_BYTES = 16 << 20        # below this a snapshot or an intent is likely to fail
BLOCK_HINT = ("plugins.entries.chronos-git.settings of the profile's config.yaml (or CHRONOS_GIT_SETTINGS, "
              "for the standalone tools)")


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class Upkeep:
    def __init__(self, core: Core, start):
        self.core = core
        self._start = start

    # ------------------------------------------------------------ retention
    def compact(self, *, dry_run: bool = False, max_checkpoints: int | None = None,
                grace_s: float | None = None, progress=None, patient: bool = False) -> CompactResult:
        """Retention (never what an open or replayable operation needs), then packing.
        `patient`: a background run, which lets a consolidation wait for the agent's pause."""
        self._start()
        journal = self.core.journal
        if journal.integrity != "ok":
            raise IntegrityError("refusing to compact while the journal integrity is in doubt "
                                 f"({journal.integrity}): it could drop checkpoints still needed")

        def journal_decision(dropped, pruned):
            if dropped:
                journal.append(events.Maintenance, {
                    "operation_id": None, "action": "retention",
                    "dropped": [{"workspace": d["workspace"], "boundary": d["boundary"],
                                 "checkpoints": [c["id"] for c in d["checkpoints"]]} for d in dropped]})
            if pruned:
                journal.append(events.Maintenance, {
                    "operation_id": None, "action": "prune_orphans",
                    "pruned": [{"workspace": p["workspace"], "workspace_id": p["workspace_id"],
                                "missing_since": p["missing_since"], "checkpoints": p["checkpoints"]}
                               for p in pruned]})

        # the checkpoints the journal names must all be where it says before anything is cut, and
        # none of them is pruned unless this decision journals its drop (journal_refs/checkpoints.py;
        # from the last checked head on, as at a start: a compaction runs every few dozen calls)
        trust = checkpoints.check(journal)
        if trust.problems:
            journal.alarm(trust.problems)
            raise IntegrityError(f"refusing to compact: {trust.problems[0]}")
        checkpoints.note_checked(self.core.store, trust)
        rep = compaction.compact(self.core.store, pinned=journal.pinned_checkpoints() | pinned_tips(self.core),
                                 max_checkpoints=max_checkpoints, grace_s=grace_s, dry_run=dry_run,
                                 progress=progress, on_decided=journal_decision, patient=patient,
                                 keep=trust.live)
        if not dry_run:
            journal.append(events.Maintenance, {
                "operation_id": None, "action": "compact", "size_before": rep["size_before"],
                "size_after": rep["size_after"], "objects_packed": rep["objects_packed"]})
        return CompactResult(**rep)

    def needs_compaction(self, ws) -> bool:
        limit = self.core.settings.max_checkpoints
        if not limit:
            return False
        slack = max(10, limit // 10)
        held = pinned_tips(self.core)       # a --snapshots remote's newest checkpoint is kept (remotes)
        n, floor = 0, limit
        for n, c in enumerate(ws.iter_commits(), 1):
            if str(c.id) in held:
                floor = max(floor, n)
            elif not held and n > limit + slack:
                return True
        return n > floor + slack

    def maybe_compact(self, ws) -> CompactResult | None:
        return self.compact() if self.needs_compaction(ws) else None

    def budget_use(self) -> tuple[int, int]:
        """(bytes new in every kept checkpoint of every workspace, the store budget; 0 = none)."""
        used = sum(Checkpoint.from_commit(c).meta.added_bytes        # damaged metadata counts 0
                   for ws in self.core.store.workspaces() for c in ws.iter_commits())
        return used, int(self.core.settings.store_budget_mb * 1024 * 1024)

    def store_due(self) -> str | None:
        """Why the whole store needs a compaction now (over its budget, an orphan past its
        days, a workspace past its count, too many small packs), or None."""
        store = self.core.store
        used, budget = self.budget_use()
        if budget and used > budget * 1.05:
            return f"the store holds {used} new bytes, over its budget of {budget}"
        days = self.core.settings.orphan_days
        if days:
            missing = retention.note_missing(store)
            if any(time.time() - since >= days * 86400 for since in missing.values()):
                return "a workspace folder has been gone longer than orphan_days"
        if any(self.needs_compaction(ws) for ws in store.workspaces() if ws.root.is_dir()):
            return "a workspace has more checkpoints than max_checkpoints allows"
        small = pack_list.small_packs(store)
        if small >= pack_list.SMALL_PACKS_DUE:
            return f"{small} small packs since the last compaction"
        return None

    def compact_in_background_if_due(self) -> bool:
        """After a turn in a long-lived host: budgets are enforced without an operator, off
        every call's path (compaction holds calls up only for its short bookkeeping phases).
        Even the check (it reads every kept checkpoint) runs in the job (service/jobs.py), so
        the turn's end does not wait for it; True when a check was started.  A failure is the
        job's error (`health`); the next turn tries again."""
        if not self.core.store_exists() or self.core.journal.integrity != "ok":
            return False

        def work(job: Job) -> None:
            consolidate.lower_priority()
            if self.store_due() is not None:
                self.compact(patient=True)
        return self.core.jobs.start("compact", "compact", work) is not None

    # --------------------------------------------------------- consolidation
    def consolidate(self, progress=None) -> ConsolidateResult:
        """Compress what a first import wrote for speed and drop packs linked from the user's
        git; waits for a background consolidation of this process first.  Needs no journal
        (it changes no checkpoint), so a snapshot-only store stays without one."""
        job = self.core.jobs.get("consolidate")
        if job is not None and job.thread is not threading.current_thread():
            while job.running:           # asking for its lock: it waits for no pause in the calls
                with compaction.compaction_lock(self.core.store):
                    pass
                job.join(locking.WAIT_POLL_S)
        return ConsolidateResult(**consolidate.consolidate(self.core.store, progress=progress))

    def consolidate_in_background(self) -> bool:
        """Start consolidating when something is pending (in a child process, else on the
        job's thread: service/jobs.py); True if started.  A process that exits first leaves
        the list: the next one resumes it."""
        if not self.core.store_exists() or not consolidate.pending(self.core.store):
            return False

        def work(job: Job):
            consolidate.lower_priority()     # the agent's own work goes first

            def tell(phase, done, total):
                job.progress = {"phase": phase, "objects_done": done, "objects_total": total}
            # phase B waits for pauses in the agent's calls: each of them rewrites the witness
            activity = witness_path_for(self.core.store.root)
            try:
                return job.offloaded("consolidate", self.core, {"quiet": os.fsdecode(activity)}, progress=tell,
                                     here=lambda: consolidate.consolidate(
                                         self.core.store, progress=tell,
                                         quiet=consolidate.quiet_for(self.core.store, activity)))
            except offload.Failed as exc:    # reported by health; the list stays for a retry
                job.error = str(exc)
                return None
        return self.core.jobs.start("consolidate", "consolidate", work) is not None

    def wait_consolidated(self, timeout: float | None = None) -> bool:
        return self.core.jobs.wait("consolidate", timeout)

    def consolidation(self) -> Consolidation | None:
        pending = len(consolidate.pending(self.core.store))
        job = self.core.jobs.get("consolidate")
        if not pending and job is None:
            return None
        if job is None:
            return Consolidation(pending_packs=pending)
        return Consolidation(pending_packs=pending, running=job.running, progress=job.progress,
                             last=ConsolidateResult(**job.result) if job.result else None,
                             error=job.error, runs_in=job.runs_in)

    # ------------------------------------------------------------ protection
    def protection(self, last_snapshot: dict | None = None) -> Protection:
        """Whether protected calls can be protected right now, and the one fix when not:
        `on`, `ready` (no store yet: the first call makes it), `degraded` (protected, but
        something is off), `off` (protected calls are refused: no durable intent possible)."""
        core = self.core
        probe = core.store_dir if core.store_exists() else _existing_parent(core.store_dir)
        try:
            st = os.statvfs(probe)
        except OSError as exc:
            return Protection(state="off", reason=f"the store {core.store_dir} cannot be examined: {exc}",
                              fix=f"check that {core.store_dir} is reachable")
        free = st.f_bavail * st.f_frsize
        if st.f_flag & os.ST_RDONLY:
            return Protection(state="off", reason=f"the store {core.store_dir} is on a read-only filesystem",
                              fix=f"remount it writable, or set store_dir to a writable folder ({BLOCK_HINT})")
        if free < MIN_FREE_BYTES or st.f_favail == 0:
            return Protection(state="off", free_bytes=free,
                              reason=f"the disk holding the store {core.store_dir} is full ({free} bytes free)",
                              fix=f"free space on the filesystem of {core.store_dir}")
        layout = core.store.layout_problem if core.store_exists() else None
        if layout:
            return Protection(state="off", reason=layout,
                              fix=f"make {core.store_dir} writable, then run `chronos-git journal status`")
        journal = core.journal_opened()
        if journal is not None and journal.unwritable:
            return Protection(state="off", reason=f"the last journal write failed: {journal.unwritable}",
                              fix=f"make {core.store_dir} writable, then run `chronos-git journal status`")
        notes = list(core.settings_problems)
        if not core.settings.auto_snapshot:
            notes.append("auto_snapshot is off: calls are journaled but not checkpointed")
        if notes:
            return Protection(state="degraded", reason="; ".join(notes), fix=f"fix the settings in {BLOCK_HINT}")
        if last_snapshot and last_snapshot.get("kind") == "failed":      # until a later one succeeds
            where = last_snapshot.get("workspace") or "the workspace"
            return Protection(state="degraded",
                              reason=f"the last checkpoint of {where} failed ({last_snapshot.get('error')}): "
                                     "calls there run without a checkpoint to roll back to",
                              fix=f"run `chronos-git snapshot --workspace {where}` to see why, and "
                                  "`chronos-git journal verify`")
        if not core.store_exists():
            problem = core.store_problem()
            if problem:
                return Protection(state="off", reason=f"{problem}: protected calls cannot be checkpointed",
                                  fix="point --store / CHRONOS_GIT_STORE / store_dir at an empty or new folder")
            return Protection(state="ready", reason=f"no store at {core.store_dir} yet: the first protected "
                                                    "call creates it")
        return Protection(state="on")

    def health(self, workspace_info=None, *, gate_open, last_snapshot: dict | None,
               deferred: str | None) -> HealthResult:
        """The store, the journal and (with `workspace_info`) one workspace, in one answer."""
        core = self.core
        out = HealthResult(store=str(core.store_dir), store_exists=core.store_exists(),
                           protection=self.protection(last_snapshot), settings=core.settings.model_dump(),
                           settings_problems=core.settings_problems,
                           deployment=deployment.for_profile(core.store_dir))
        if not out.store_exists:              # never create a store to report on it
            return out
        j = core.journal.status()
        out.store = str(core.store.root)
        out.store_bytes = compaction.store_size(core.store)
        out.journal = JournalSummary(**{k: j[k] for k in ("integrity", "events", "head", "healed")})
        out.gate = "open" if gate_open() else "closed"
        out.unresolved = len(j["unresolved"])
        out.workspaces = len(core.store.workspaces())
        out.deferred = deferred
        out.workspace = workspace_info
        if last_snapshot is None and workspace_info is not None and workspace_info.latest is not None:
            latest: CheckpointInfo = workspace_info.latest
            last_snapshot = {"time": latest.time, "workspace": workspace_info.root, "checkpoint": latest.id,
                             "kind": latest.kind, "source": "the workspace's newest checkpoint"}
        out.last_snapshot = last_snapshot
        out.consolidation = self.consolidation()
        used, budget = self.budget_use()
        out.store_budget = StoreBudget(used_bytes=used, budget_bytes=budget or None,
                                       orphans=len(retention.note_missing(core.store, write=False)))
        out.damaged = self.damage() or None
        if out.damaged and out.protection.state in ("on", "degraded"):
            first = out.damaged[0]
            what = f"checkpoint {first.id[:12]} of " if first.id and not first.ref else ""
            out.protection = out.protection.degraded(
                f"{plural(len(out.damaged), 'damaged entry', 'damaged entries')} in the checkpoint "
                f"history ({what}{first.workspace}: {first.reason})",
                "`chronos-git log` marks them; intact checkpoints still restore, the next snapshot replaces "
                "a ref that names nothing usable, and `chronos-git journal verify` says whether the "
                "checkpoints the journal names are intact")
        narrowed = capture.reported(core)
        if narrowed:
            out.capture_narrowed = narrowed
            out.protection = capture.degraded(out.protection, narrowed)
        return out

    def damage(self) -> list[Damage]:
        """What in each workspace's history cannot serve (engine Workspace.damage), by workspace."""
        return [Damage(workspace=os.fsdecode(ws.root_bytes), **d)
                for ws in self.core.store.workspaces() for d in ws.damage()]
