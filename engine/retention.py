"""Retention: which checkpoints a store keeps, and the cut that drops the others.

Retention keeps, per workspace, the newest `max_checkpoints` checkpoints whose
new bytes fit the size budget, and never one that is pinned (an unresolved
journal operation refers to it).  Older checkpoints are cut off git-natively:
the oldest kept commit goes into `<store>/shallow`, so git and libgit2 treat
it as a root and `git fsck` stays clean.  Checkpoint ids never change.

Across workspaces, a store budget drops the oldest checkpoints of any
workspace first (each keeps its newest), and a workspace whose folder has been
gone for the orphan period is pruned whole (never one an unresolved operation
still refers to).  When a folder was first seen missing is kept in
`<store>/chronos/missing.json`.

Here the decision only, and the `shallow` file that records the cut;
compaction (engine/compaction.py) carries it out and packs what is left.
"""
from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import faults
from .checkpoint import CheckpointMeta, message_of
from .fsutil import atomic_write
from .state_file import StateFile


def _shallow_path(store) -> Path:
    return store.root / "shallow"


def read_shallow(store) -> set[str]:
    """The ids of the commits retention made roots (the `shallow` file)."""
    try:
        return {line.strip() for line in _shallow_path(store).read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        return set()


def plan_retention(ws, *, max_checkpoints: int, size_budget_bytes: int,
                   pinned: set[str]) -> tuple[list[pygit2.Commit], list[pygit2.Commit]]:
    """(kept, dropped) commits of one workspace chain, newest first."""
    chain = list(ws.iter_commits())
    if not chain:
        return [], []
    keep_n = len(chain)
    if max_checkpoints and max_checkpoints > 0:
        keep_n = min(keep_n, max_checkpoints)
    if size_budget_bytes and size_budget_bytes > 0:
        total = 0
        for i, c in enumerate(chain[:keep_n]):
            total += CheckpointMeta.from_message(message_of(c)).added_bytes
            if total > size_budget_bytes and i > 0:
                keep_n = i
                break
    for i, c in enumerate(chain):
        if str(c.id) in pinned:
            keep_n = max(keep_n, i + 1)
    return chain[:keep_n], chain[keep_n:]


def added_bytes(c: pygit2.Commit) -> int:
    return CheckpointMeta.from_message(message_of(c)).added_bytes or 0


def note_missing(store, now: float | None = None, *, write: bool = True) -> dict[str, float]:
    """Workspace id -> when its folder was first seen missing (updated and returned; with
    `write=False`, for read-only commands, only returned)."""
    record = StateFile(store.meta_dir, "missing.json")
    try:
        seen = {k: float(v) for k, v in record.read({}, expect=dict).items()}
    except (ValueError, TypeError):
        seen = {}                    # missing or damaged: every clock starts now
    now = time.time() if now is None else now
    out = {}
    for ws in store.workspaces():
        if not ws.root.is_dir():
            out[ws.id] = seen.get(ws.id, now)
    if out != seen and write:
        try:
            record.write(out)        # not synced (metadir.JSON_FILES): lost, the clock restarts (later, safer)
        except OSError:
            pass                     # a read-only or full store: noted next time
    return out


def fit_store_budget(plans: dict, pinned: set[str], budget: int) -> int:
    """Move checkpoints from kept to dropped, oldest first across workspaces, until the
    bytes new in every kept checkpoint fit `budget`.  Each workspace keeps its newest
    checkpoint and everything from its oldest pinned one on.  Returns the bytes kept."""
    total = sum(added_bytes(c) for _ws, kept, _d in plans.values() for c in kept)
    heap: list[tuple[int, str]] = []
    floor: dict[str, int] = {}
    for wid, (_ws, kept, _d) in plans.items():
        f = 1
        for i, c in enumerate(kept):
            if str(c.id) in pinned:
                f = max(f, i + 1)
        floor[wid] = f
        if len(kept) > f:
            heapq.heappush(heap, (kept[-1].commit_time, wid))
    while total > budget and heap:
        _, wid = heapq.heappop(heap)
        _ws, kept, dropped = plans[wid]
        c = kept.pop()
        dropped.insert(0, c)
        total -= added_bytes(c)
        if len(kept) > floor[wid]:
            heapq.heappush(heap, (kept[-1].commit_time, wid))
    return total



@dataclass
class Decision:
    """What one compaction cuts, as `decide` found it."""
    plans: dict = field(default_factory=dict)        # workspace id -> (workspace, kept, dropped), newest first
    prune: list = field(default_factory=list)        # workspaces whose folder is gone for good
    boundaries: dict[str, str] = field(default_factory=dict)   # workspace id -> oldest kept checkpoint
    dropped: list[dict] = field(default_factory=list)          # the report's entries, per workspace
    pruned: list[dict] = field(default_factory=list)
    store_budget_kept_bytes: int | None = None       # with a store budget: the bytes it keeps


def decide(store, *, pinned: set[str], max_checkpoints: int, size_budget_bytes: int,
           store_budget_bytes: int, orphan_s: float, now: float) -> Decision:
    """Which checkpoints of every workspace are dropped and which workspaces are pruned
    whole (read-only but for the missing-folder ledger)."""
    out = Decision()
    missing = note_missing(store, now)
    for ws in store.workspaces():
        kept, dropped = plan_retention(ws, max_checkpoints=max_checkpoints,
                                       size_budget_bytes=size_budget_bytes, pinned=pinned)
        since = missing.get(ws.id)
        if (since is not None and orphan_s and orphan_s > 0 and now - since >= orphan_s
                and not any(str(c.id) in pinned for c in kept)):
            out.prune.append(ws)
            out.pruned.append({"workspace": os.fsdecode(ws.root_bytes), "workspace_id": ws.id,
                               "missing_since": since, "checkpoints": len(kept) + len(dropped)})
            continue
        out.plans[ws.id] = (ws, kept, dropped)
    if store_budget_bytes and store_budget_bytes > 0:
        out.store_budget_kept_bytes = fit_store_budget(out.plans, pinned, store_budget_bytes)
    for ws, kept, dropped in out.plans.values():
        if dropped:
            out.boundaries[ws.id] = str(kept[-1].id)
            out.dropped.append({
                "workspace": os.fsdecode(ws.root_bytes), "workspace_id": ws.id,
                "kept": len(kept), "boundary": str(kept[-1].id),
                "checkpoints": [{"id": str(c.id),
                                 "description": CheckpointMeta.from_message(message_of(c)).description,
                                 "time": c.commit_time} for c in dropped],
            })
    return out


def cut(store, boundaries: dict[str, str]) -> None:
    """Write the cut into `shallow`: the boundaries still in use stay, the new ones
    (`boundaries`: workspace id -> its oldest kept checkpoint) are added, and entries that
    are not chronos checkpoints are left as they are."""
    shallow = read_shallow(store)
    kept_ids: set[str] = set()
    new_boundaries: set[str] = set()
    for ws in store.workspaces():
        boundary = boundaries.get(ws.id)
        for c in ws.iter_commits():
            kept_ids.add(str(c.id))
            if str(c.id) == boundary:
                new_boundaries.add(boundary)
                break
    # keep boundaries still in use, add the new ones; foreign entries stay
    still_cut = {s for s in shallow if s in kept_ids}
    foreign = {s for s in shallow if s not in kept_ids and not _is_chronos_commit(store, s)}
    want = sorted(still_cut | new_boundaries | foreign)
    if set(want) != shallow:
        if want:
            atomic_write(_shallow_path(store), ("\n".join(want) + "\n").encode(), mode=0o600)
            faults.hit("retention_after_shallow")
        else:
            _shallow_path(store).unlink(missing_ok=True)


def _is_chronos_commit(store, hexid: str) -> bool:
    try:
        obj = store.repo()[hexid]
    except (KeyError, ValueError):
        return True          # gone: it was ours and is no longer needed
    return isinstance(obj, pygit2.Commit) and message_of(obj).startswith("chronos checkpoint:")
