"""How a snapshot reads the workspace: one of five strategies, chosen in one place from what
the workspace knows of its stat cache (docs/design.md, "Snapshots").

  unchanged  the newest checkpoint, as is: it was committed by a refresh that took the
             watcher's dirty set and finished, the in-memory index still holds its tree, and the
             watcher, trusted throughout, has seen nothing since (no walk, no refresh, no commit)
  declared   only the paths a file call named; the rest comes from the index, which must hold
             the newest checkpoint's tree (it is aligned to it first)
  bulk       the first snapshot of a workspace: one pack and a complete index (no budget: the
             import cannot stop midway); when it fails, `fallback` runs instead
  watched    only the paths the watcher saw change, when it can prove that list complete, plus a
             walk of the subtrees no watch covers (`walk`: the watch limit was reached)
  scan       the whole tree walked (stat first, hashing where stat data changed)

Every strategy but unchanged and declared takes the watcher's dirty set (`choose` does, the only
place that does): a snapshot that took it and does not finish must make the next one walk
(`SnapshotPlan.took_watch`), or the changes it held are lost.  Four lost-change bugs were in
this logic (docs/performance.md); tests/engine/test_snapshot_differential.py compares every
strategy's tree with a full scan of the same files.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .checkpoint import Checkpoint, CheckpointMeta


class Strategy(enum.StrEnum):
    UNCHANGED = "unchanged"
    DECLARED = "declared"
    BULK = "bulk"
    WATCHED = "watched"
    SCAN = "scan"


@dataclass(frozen=True)
class CacheFacts:
    """What the choice reads, all known before anything is refreshed."""
    commit: bool               # a checkpoint is wanted (False: a diff's or a restore plan's tree)
    force_scan: bool           # the caller wants a walk whatever the cache says
    declared: bool             # the caller named the paths that changed
    has_tip: bool              # the workspace has a checkpoint to start from
    settled: bool              # ... committed by a whole refresh that finished (Workspace._settled)
    index_holds_tip: bool      # the in-memory index is known to hold the tip's tree
    index_empty: bool          # the stat cache holds nothing (no index file, or a dropped one)
    budgeted: bool             # a deadline bounds the walk


@dataclass(frozen=True)
class SnapshotPlan:
    strategy: Strategy
    why: str
    paths: tuple[str, ...] = ()           # watched: the dirty set (and a bulk's, for its fallback)
    fallback: Strategy | None = None      # bulk: watched or scan, when the import fails
    took_watch: bool = False              # the watcher's dirty set was taken for this snapshot
    walk: tuple[str, ...] = ()            # watched: subtrees no watch covered, walked (the watch limit)

    @property
    def whole(self) -> bool:
        """It refreshes the whole workspace (a finished one is a whole picture of it)."""
        return self.strategy in (Strategy.BULK, Strategy.WATCHED, Strategy.SCAN)

    def fall_back(self) -> SnapshotPlan:
        """A bulk import that failed: the strategy chosen for after it."""
        assert self.fallback is not None
        return SnapshotPlan(self.fallback, f"the bulk import failed; {self.why}", self.paths, None, self.took_watch,
                            self.walk)


class Watch(Protocol):
    """What `choose` asks of the watcher (engine/watcher.py's Watcher is one)."""
    def quiet(self) -> bool: ...
    def take(self) -> tuple[bool, set[str], str]: ...
    @property
    def walks(self) -> tuple[str, ...]: ...


def choose(facts: CacheFacts, watcher: Watch | None) -> SnapshotPlan:
    """The strategy, and why.  Asks the watcher only what the decision needs: `quiet()` (it
    drains the kernel queue) when nothing else rules out unchanged, and `take()` exactly when
    the plan refreshes the whole workspace."""
    if (facts.commit and not facts.force_scan and facts.settled and facts.index_holds_tip
            and watcher is not None and watcher.quiet()):
        return SnapshotPlan(Strategy.UNCHANGED, "the watcher saw nothing since a whole checkpoint")
    if facts.declared and facts.has_tip:
        return SnapshotPlan(Strategy.DECLARED, "the caller named its paths; the rest is the newest checkpoint's")
    trusted, dirty, why = watcher.take() if watcher is not None else (False, set[str](), "no watcher")
    took = watcher is not None
    # the watcher's list is complete only against a stat cache that holds the last whole picture:
    # refreshed into an empty one (a dropped index), it would commit the changed paths alone
    after = Strategy.WATCHED if trusted and not facts.force_scan and not facts.index_empty else Strategy.SCAN
    after_why = ("the watcher's list of changes is complete" if after is Strategy.WATCHED
                 else "a walk was asked for" if facts.force_scan and trusted
                 else "the stat cache is empty: only a walk sees every file" if trusted
                 else f"the watcher cannot vouch: {why}")
    paths = tuple(sorted(dirty)) if after is Strategy.WATCHED else ()
    walk = tuple(watcher.walks) if after is Strategy.WATCHED and watcher is not None else ()
    if walk:
        after_why += f"; {len(walk)} unwatched subtrees walked (the inotify watch limit)"
    if not facts.has_tip and facts.index_empty and not facts.budgeted:
        return SnapshotPlan(Strategy.BULK, "the first snapshot: " + after_why, paths, after, took, walk)
    if facts.declared:
        after_why = "declared paths, but no checkpoint to take the rest from; " + after_why
    return SnapshotPlan(after, after_why, paths, None, took, walk)


@dataclass
class TakenSnapshot:
    checkpoint: Checkpoint | None      # None only for commit=False
    tree_id: str
    created: bool
    partial: bool
    report: dict

    def to_dict(self) -> dict:
        out = {"checkpoint": self.checkpoint.id if self.checkpoint else None,
               "created": self.created, "partial": self.partial, "tree": self.tree_id}
        out.update(self.report)
        return out


def snapshot_kind(meta: CheckpointMeta, paths) -> str:
    """A declared-path snapshot is not a full picture: other entries may be stale."""
    return "declared" if paths is not None and meta.kind in ("full", "manual") else meta.kind
