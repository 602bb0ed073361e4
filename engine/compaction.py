"""Compaction without the git CLI: retention's cut carried out, reachable objects packed.

Compaction packs reachable objects with libgit2's PackBuilder (pack_builders)
and deletes what the new pack makes redundant, in three phases so tool calls
are only held up for the short bookkeeping steps:

  0 (lock only)  decide retention (retention.decide) and have it recorded
  A (exclusive)  prune, write `shallow` (retention.cut), list roots and old files
  B (no lock)    walk everything reachable from those roots (reachability); pack
                 what is not in a kept pack (pack_list)
  C (exclusive)  pack what became reachable meanwhile, delete old packs and
                 loose objects (unreachable ones only past a grace period)

The first compaction of a store (and of any pack whose content has mostly been
dropped) packs everything with deltas; later ones keep the packs pack_list
lists as they are.

A crash at any point leaves extra objects, never missing ones.
"""
from __future__ import annotations

import json
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pygit2

from . import faults, locking, metadir, retention
from .fsutil import tree_size
from .pack_builders import build_packs
from .pack_list import note_compacted_packs, packs_to_keep
from .reachability import roots, walk
from .wording import plural


def compaction_lock(store, *, ask: bool = True):
    """The lock compaction and consolidation hold for their whole run.  Who waits for it
    says so (`compact.wanted`, rewritten while it waits): a background consolidation
    waiting for a pause in the agent's calls (consolidate.Quiet) then goes on at once.
    `ask=False` (background work, the consolidation itself): waits without saying so."""
    wanted = store.meta_dir / "compact.wanted"

    def asking() -> None:
        try:
            wanted.touch(mode=0o600)       # an existing file gets a new mtime
        except OSError:
            pass        # at worst the asker waits for the pause (consolidate.DEFER_MAX_S at most)
    return locking.exclusive(metadir.lock_path(store.meta_dir, "compact"), while_waiting=asking if ask else None)


def store_size(store) -> int:
    return tree_size(store.root / "objects")


# the pack windows libgit2 maps while a compaction walks and packs the store (a process
# setting, held by one compaction at a time); the builder's own bounds are in the store's config
MAPPED_LIMIT = 128 << 20
_mapping = threading.Lock()


@contextmanager
def _bounded_mapping():
    with _mapping:
        mapped = pygit2.settings.mwindow_mapped_limit
        pygit2.settings.mwindow_mapped_limit = min(mapped, MAPPED_LIMIT)
        try:
            yield
        finally:
            pygit2.settings.mwindow_mapped_limit = mapped


@dataclass
class _Old:
    """Phase A's listing: the roots, and the store's object files before packing."""
    commits: list
    trees: list
    packs: list[Path]
    loose: list[tuple[Path, str]]


@dataclass
class _Packing:
    """Phase B's result, carried into phase C."""
    seen: set                   # every object walked
    names: dict                 # object id -> the entry name it was reached by
    reachable: list             # what phase B packed
    kept_packs: set[str]        # old packs left as they are
    kept_oids: set[bytes]       # their objects
    packed: set[str]            # the packs phase B wrote


def compact(store, *, pinned: set[str] | None = None, max_checkpoints: int | None = None,
            size_budget_bytes: int | None = None, grace_s: float | None = None,
            store_budget_bytes: int | None = None, orphan_s: float | None = None,
            dry_run: bool = False, progress=None, on_decided=None, patient: bool = False,
            keep: set[str] | None = None) -> dict:
    """`on_decided(dropped, pruned)` runs after the decision and before anything is cut
    (the service journals it there).  `patient` (background work): waits for the lock
    without asking a consolidation that waits for a pause in the agent's calls to go on.
    `keep`: checkpoints the journal names; whatever of them this decision does not drop stays
    in the store even if no ref reaches it any more (a ref moved meanwhile)."""
    cfg = store.config
    limits = {
        "max_checkpoints": cfg.max_checkpoints if max_checkpoints is None else max_checkpoints,
        "size_budget_bytes": (int(cfg.size_budget_mb * 1024 * 1024) if size_budget_bytes is None
                              else size_budget_bytes),
        "store_budget_bytes": (int(cfg.store_budget_mb * 1024 * 1024) if store_budget_bytes is None
                               else store_budget_bytes),
        "orphan_s": cfg.orphan_days * 86400 if orphan_s is None else orphan_s,
    }
    grace_s = cfg.compact_grace_s if grace_s is None else grace_s
    pinned = set(pinned or ())
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    report: dict = {"dropped": [], "pruned": [], "dry_run": dry_run, "size_before": store_size(store)}

    with compaction_lock(store, ask=not patient), _bounded_mapping():
        decision = _decide(store, pinned, limits, report)
        if dry_run:
            report["elapsed_s"] = round(time.monotonic() - t0, 3)
            return report
        named = _named(keep, decision)
        _record(store, report, on_decided)
        old = _cut(store, decision, named)
        say(f"retention decided; packing objects reachable from {len(old.commits)} refs")
        packing = _pack_reachable(store, old)
        say(f"packed {plural(len(packing.reachable), 'object')}"
            + (f", kept {plural(len(packing.kept_packs), 'pack')} as they are" if packing.kept_packs else ""))
        faults.hit("mid_compact")
        extra, ours, removed_loose = _catch_up_and_delete(store, named, old, packing, grace_s)
    report.update({
        "objects_packed": len(packing.reachable) + len(extra),
        "loose_removed": removed_loose,
        "packs_replaced": len([p for p in old.packs if p.stem not in ours and p.stem not in packing.kept_packs]),
        "packs_kept": len(packing.kept_packs),
        "size_after": store_size(store),
        "elapsed_s": round(time.monotonic() - t0, 3),
    })
    _log(store, {"time": time.time(), "phase": "done", "dropped": len(report["dropped"]),
                 "size_before": report["size_before"], "size_after": report["size_after"]})
    return report


def _decide(store, pinned: set[str], limits: dict, report: dict) -> retention.Decision:
    """Phase 0 (read-only): retention's decision, its entries added to `report`."""
    decision = retention.decide(store, pinned=pinned, now=time.time(), **limits)
    report["pruned"].extend(decision.pruned)
    if decision.store_budget_kept_bytes is not None:
        report["store_budget_kept_bytes"] = decision.store_budget_kept_bytes
    report["dropped"].extend(decision.dropped)
    return decision


def _named(keep: set[str] | None, decision: retention.Decision) -> set[str]:
    """The checkpoints the journal names that this decision neither drops nor prunes."""
    named = set(keep or ()) - {c["id"] for d in decision.dropped for c in d["checkpoints"]}
    for ws in decision.prune:
        named -= {str(c.id) for c in ws.iter_commits()}
    return named


def _record(store, report: dict, on_decided) -> None:
    """Before anything is cut: a crash from here on cannot make a drop silent."""
    if report["dropped"] or report["pruned"]:
        _log(store, {"time": time.time(), "phase": "decided", "dropped": report["dropped"],
                     "pruned": report["pruned"]})
        if on_decided is not None:
            on_decided(report["dropped"], report["pruned"])
        faults.hit("compact_decided")


def _cut(store, decision: retention.Decision, named: set[str]) -> _Old:
    """Phase A (exclusive): cut at the decided boundaries, list roots and files."""
    with store.maintenance.exclusive():
        store.clear_stale_temp_objects()
        store.clear_stale_git_lock(store.root / "packed-refs.lock")
        for ws in decision.prune:
            _prune(store, ws)
        retention.cut(store, decision.boundaries)
        store.forget_repos()     # reopen: libgit2 caches grafts
        commits, trees = roots(store, named)
        packs, loose = _odb_files(store)
    return _Old(commits, trees, packs, loose)


def _pack_reachable(store, old: _Old) -> _Packing:
    """Phase B (no lock held): pack what is reachable and not in a pack kept as it is."""
    repo = pygit2.Repository(str(store.root))
    seen: set = set()
    names: dict = {}
    reachable = walk(repo, old.commits, old.trees, seen, names)
    kept_packs, kept_oids = packs_to_keep(store, old.packs, reachable)
    if kept_oids:
        reachable = [o for o in reachable if o.raw not in kept_oids]
    pack_dir = store.root / "objects" / "pack"
    pack_dir.mkdir(exist_ok=True)
    packed = build_packs(repo, reachable, pack_dir, names)
    return _Packing(seen, names, reachable, kept_packs, kept_oids, packed)


def _catch_up_and_delete(store, named: set[str], old: _Old, packing: _Packing,
                         grace_s: float) -> tuple[list, set[str], int]:
    """Phase C (exclusive): pack what became reachable meanwhile, then delete the redundant;
    (the objects caught up, every pack this compaction wrote, loose objects removed)."""
    pack_dir = store.root / "objects" / "pack"
    with store.maintenance.exclusive():
        store.forget_repos()
        commits_c, trees_c = roots(store, named)
        repo = pygit2.Repository(str(store.root))
        extra = [o for o in walk(repo, commits_c, trees_c, packing.seen, packing.names)
                 if o.raw not in packing.kept_oids]
        extra_packed = build_packs(repo, extra, pack_dir, packing.names)
        ours = packing.packed | extra_packed
        # before anything is deleted; several packs from one packing are its parts
        parts = {n for p in (packing.packed, extra_packed) if len(p) > 1 for n in p}
        note_compacted_packs(store, packing.kept_packs | ours, only=True, parts=parts)
        removed_loose = _delete_loose(old.loose, packing.seen, grace_s)
        _delete_packs(old.packs, ours | packing.kept_packs)
        for d in (store.root / "objects").iterdir():
            if len(d.name) == 2 and d.is_dir():
                try:
                    d.rmdir()
                except OSError:
                    pass
        store.note_compacted()          # stat caches loaded before this are re-read
        store.forget_repos()
    return extra, ours, removed_loose


def _delete_loose(old_loose: list[tuple[Path, str]], seen: set, grace_s: float) -> int:
    """Loose objects now packed, and unreachable ones older than `grace_s`; how many."""
    now = time.time()
    removed = 0
    for path, hexid in old_loose:
        oid = pygit2.Oid(hex=hexid)
        try:
            if oid in seen or now - path.stat().st_mtime > grace_s:
                path.unlink()
                removed += 1
                if removed == 1:
                    faults.hit("compact_mid_delete")
        except FileNotFoundError:
            pass
    return removed


def _delete_packs(old_packs: list[Path], keep: set[str]) -> None:
    """The old packs not in `keep` (kept as they are, or a new pack of the same name: the
    same content), with their .idx, .rev and .bitmap; a .keep stays."""
    for pack in old_packs:
        if pack.stem in keep:
            continue
        for sibling in (pack, pack.with_suffix(".idx"), pack.with_suffix(".rev"),
                        pack.with_suffix(".bitmap"), pack.with_suffix(".keep")):
            if sibling.suffix != ".keep":
                sibling.unlink(missing_ok=True)


def _odb_files(store) -> tuple[list[Path], list[tuple[Path, str]]]:
    objects = store.root / "objects"
    packs = sorted((objects / "pack").glob("pack-*.pack")) if (objects / "pack").exists() else []
    loose = []
    for d in objects.iterdir():
        if len(d.name) == 2 and d.is_dir():
            for f in d.iterdir():
                if len(f.name) == 38:
                    loose.append((f, d.name + f.name))
    return packs, loose


def _prune(store, ws) -> None:
    """A workspace whose folder is gone for good: its chain ref, then its gitdir.  A crash
    between the two leaves a gitdir without checkpoints, pruned again next time."""
    repo = store.repo()
    if repo.references.get(ws.ref) is not None:
        repo.references.delete(ws.ref)
    shutil.rmtree(ws.gitdir, ignore_errors=True)
    store.forget_workspace(ws)


def _log(store, record: dict) -> None:
    with open(store.meta_dir / "retention.log", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
