"""Keeping the store in shape and saying how it is: retention and compaction,
whether protection can run, and `health`."""
from __future__ import annotations

import os
from pathlib import Path

from ..engine import retention
from ..journal_refs import IntegrityError, events
from .core import Core
from .remotes import pinned_tips
from .results import CheckpointInfo, CompactResult, HealthResult, JournalSummary, Protection

MIN_FREE_BYTES = 16 << 20        # below this a snapshot or an intent is likely to fail
BLOCK_HINT = "plugins.entries.chronos-git.settings of the profile's config.yaml"


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class Maintenance:
    def __init__(self, core: Core, start):
        self.core = core
        self._start = start

    # ------------------------------------------------------------ retention
    def compact(self, *, dry_run: bool = False, max_checkpoints: int | None = None,
                grace_s: float | None = None, progress=None) -> CompactResult:
        """Retention (never what an open or replayable operation needs), then packing."""
        self._start()
        journal = self.core.journal
        if journal.integrity != "ok":
            raise IntegrityError("refusing to compact while the journal integrity is in doubt "
                                 f"({journal.integrity}): it could drop checkpoints still needed")

        def journal_decision(dropped):
            journal.append(events.Maintenance, {
                "operation_id": None, "action": "retention",
                "dropped": [{"workspace": d["workspace"], "boundary": d["boundary"],
                             "checkpoints": [c["id"] for c in d["checkpoints"]]} for d in dropped]})

        rep = retention.compact(self.core.store, pinned=journal.pinned_checkpoints() | pinned_tips(self.core),
                                max_checkpoints=max_checkpoints, grace_s=grace_s, dry_run=dry_run,
                                progress=progress, on_decided=journal_decision)
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

    # ------------------------------------------------------------ protection
    def protection(self) -> Protection:
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
        if not core.store_exists():
            return Protection(state="ready", reason=f"no store at {core.store_dir} yet: the first protected "
                                                    "call creates it")
        return Protection(state="on")

    def health(self, workspace_info=None, *, gate_open, last_snapshot: dict | None,
               deferred: str | None) -> HealthResult:
        """The store, the journal and (with `workspace_info`) one workspace, in one answer."""
        core = self.core
        out = HealthResult(store=str(core.store_dir), store_exists=core.store_exists(),
                           protection=self.protection(), settings=core.settings.model_dump(),
                           settings_problems=core.settings_problems)
        if not out.store_exists:              # never create a store to report on it
            return out
        j = core.journal.status()
        out.store = str(core.store.root)
        out.store_bytes = retention.store_size(core.store)
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
        return out
