"""Retention and compaction without the git CLI.

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

Compaction then packs reachable objects with libgit2's PackBuilder and
deletes what the new pack makes redundant, in three phases so tool calls are
only held up for the short bookkeeping steps:

  A (exclusive)  decide retention, write `shallow`, list roots and old files
  B (no lock)    walk everything reachable from those roots; pack what is not
                 in a kept pack
  C (exclusive)  pack what became reachable meanwhile, delete old packs and
                 loose objects (unreachable ones only past a grace period)

Packing is geometric: a pack an earlier compaction wrote (or a delta pack
adopted from the user's git), at least KEEP_BYTES big or one of the parts a
big packing is split into, and still mostly reachable, is kept as it is, so a
routine compaction packs only what is new and a retention cut does not
rewrite the whole store.  The first compaction
of a store (and of any pack whose content has mostly been dropped) packs
everything with deltas.  Kept packs are listed in `chronos/packs.json`.

A crash at any point leaves extra objects, never missing ones.
"""
from __future__ import annotations

import heapq
import json
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pygit2

from . import faults, locking
from .checkpoint import CheckpointMeta, message_of
from .fsutil import atomic_write, fsync_dir, tree_size
from .packers import cores as _cores
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
    return locking.exclusive(store.meta_dir / "compact.lock", while_waiting=asking if ask else None)


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
    path = store.meta_dir / "missing.json"
    try:
        seen = json.loads(path.read_text())
        seen = {k: float(v) for k, v in seen.items()} if isinstance(seen, dict) else {}
    except (OSError, ValueError, TypeError):
        seen = {}
    now = time.time() if now is None else now
    out = {}
    for ws in store.workspaces():
        if not ws.root.is_dir():
            out[ws.id] = seen.get(ws.id, now)
    if out != seen and write:
        try:
            atomic_write(path, json.dumps(out).encode(), durable=False)   # lost: the clock restarts (later, safer)
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


def _roots(store, keep: set[str] | None = None) -> tuple[list[pygit2.Oid], list[pygit2.Oid]]:
    """(commit roots, tree roots): every ref, each workspace HEAD and index tree, and the
    checkpoints in `keep` (the journal names them) that are in the store."""
    repo = store.repo()
    commits, trees = [], []
    for name in repo.references:
        try:
            obj = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
        commits.append(obj.id)
    for ws in store.workspaces():
        if not (ws.gitdir / "commondir").exists():
            continue
        try:
            wrepo = pygit2.Repository(str(ws.gitdir))
        except pygit2.GitError:
            continue
        if not wrepo.head_is_unborn:
            commits.append(wrepo.head.target)
        if (ws.gitdir / "index").exists():
            try:
                trees.append(wrepo.index.write_tree())
            except pygit2.GitError:
                pass        # a damaged stat cache holds nothing a checkpoint lacks; the next walk drops it
    for cid in sorted(keep or ()):
        try:
            named = repo[cid]
        except (KeyError, ValueError, pygit2.GitError):
            continue
        if isinstance(named, pygit2.Commit):
            commits.append(named.id)
    return commits, trees


def _walk(repo, commits, trees, seen: set, names: dict | None = None) -> list[pygit2.Oid]:
    """Objects reachable from the roots and not yet in `seen` (which is updated).  `names`,
    if given, gets the entry name each blob and tree was first reached by (for packing)."""
    new: list[pygit2.Oid] = []
    stack_c = list(commits)
    stack_t = list(trees)
    while stack_c:
        cid = stack_c.pop()
        if cid in seen:
            continue
        seen.add(cid)
        new.append(cid)
        c = repo[cid]
        stack_t.append(c.tree_id)
        stack_c.extend(c.parent_ids)        # libgit2 honours `shallow`: boundaries have none
        while stack_t:
            tid = stack_t.pop()
            if tid in seen:
                continue
            seen.add(tid)
            new.append(tid)
            for entry in repo[tid]:
                if entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
                    continue                # gitlink: not ours to keep
                if entry.id in seen:
                    continue
                if names is not None and entry.id not in names:
                    names[entry.id] = entry.raw_name
                if entry.type_str == "tree":
                    stack_t.append(entry.id)
                else:
                    seen.add(entry.id)
                    new.append(entry.id)
    return new


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


def _insert(pb, oid: pygit2.Oid, name: bytes | None) -> None:
    """Add one object, with the name it was reached by where pygit2's binding allows: the
    delta search then tries files of the same name first, as git does (pygit2's add() passes
    none, and a nameless search is slower and finds worse deltas)."""
    handle = getattr(pb, "_packbuilder", None)
    if name and handle is not None and _native is not None:
        ffi, lib = _native
        c_oid = ffi.new("git_oid *")
        ffi.buffer(c_oid)[:] = oid.raw
        if lib.git_packbuilder_insert(handle, c_oid, ffi.new("char[]", name)) == 0:
            return
    pb.add(oid)


try:                                          # feature-detected: a private part of pygit2
    from pygit2._libgit2 import ffi as _ffi, lib as _lib
    _native = (_ffi, _lib) if hasattr(_lib, "git_packbuilder_insert") else None
except ImportError:
    _native = None


# A big compaction packs in parts, two builders at once.  libgit2's builder searches for deltas
# on every core but writes on one (it compresses, recomputes the deltas it did not cache, hashes
# and indexes every object there): on the first compaction of a kernel tree that was 69 of
# 113 s.  The parts are runs of the delta search's own order, so they lose almost no delta.
PART_MIN_BYTES = 64 << 20          # below this much content: one pack from one builder
# each builder has its own delta cache and window (the bounds in the store's config are per
# builder) and holds a big object, its base and their delta index: two at most, and one
# where an object is big (two builders with 48 MiB files peaked at 506 MB, one at 377 MB;
# the kernel tree's 24 MB header packs in parts at 392 MB)
MAX_BUILDERS = 2
SOLO_OBJECT_BYTES = 32 << 20
_SPACE = frozenset(b" \t\n\v\f\r")


def _name_hash(name: bytes | None) -> int:
    """git's pack name hash (the last characters of the name count most): the delta search
    sorts by it, so objects of the same name end up side by side."""
    h = 0
    for c in name or b"":
        if c not in _SPACE:
            h = ((h >> 2) + (c << 24)) & 0xFFFFFFFF
    return h


def _shares(workers: int) -> list[float]:
    """The share of bytes of each part: one big part per builder, then smaller ones that
    whichever builder is free takes, so the builders finish close together."""
    if workers <= 1:
        return [1.0]
    return [0.3 / workers * 2] * workers + [0.15 / workers * 2] * workers + [0.05 / workers * 2] * workers


def _parts(repo, oids: list, names: dict, shares: list[float]) -> list[list]:
    """`oids` as runs of about `shares` of their bytes, in the delta search's order (type, then
    name hash), each cut where that key changes: a delta is only sought between neighbours in
    that order, so the parts lose almost no delta.  One run below PART_MIN_BYTES in all, or
    when an object is above SOLO_OBJECT_BYTES."""
    if len(shares) <= 1:
        return [oids]
    odb = repo.odb
    keyed, total = [], 0
    for oid in oids:
        kind, size = odb.read_header(oid)
        if size > SOLO_OBJECT_BYTES:
            return [oids]
        keyed.append((int(kind), _name_hash(names.get(oid)), size, oid))
        total += size
    if total < PART_MIN_BYTES:
        return [oids]
    keyed.sort(key=lambda k: (k[0], k[1]), reverse=True)
    group: dict = {}                    # bytes per (type, name hash): what a cut cannot split
    for kind, h, size, _ in keyed:
        group[kind, h] = group.get((kind, h), 0) + size
    goals = [share * total for share in shares]
    parts: list[tuple[int, list]] = []
    run: list = []
    run_bytes = 0
    for i, (kind, h, size, oid) in enumerate(keyed):
        if run and len(parts) < len(goals) - 1 and (kind, h) != keyed[i - 1][:2]:
            # the size of this run decides, not the running total: a name bigger than its
            # share makes one part of its own (cut before it once the run is half full), and
            # the next part still gets its own share; the last part takes the rest
            goal = goals[len(parts)]
            if run_bytes >= goal or (run_bytes >= goal / 2 and run_bytes + group[kind, h] > 1.5 * goal):
                parts.append((run_bytes, run))
                run, run_bytes = [], 0
        run.append(oid)
        run_bytes += size
    parts.append((run_bytes, run))
    if len(parts) > 1 and parts[-1][0] < min(goals) / 2:      # a crumb: into its neighbour
        crumb = parts.pop()
        parts[-1] = (parts[-1][0] + crumb[0], parts[-1][1] + crumb[1])
    return [run for _, run in parts]


def _build(repo_path: str, oids: list, names: dict, scratch: Path, threads: int) -> None:
    repo = pygit2.Repository(repo_path)        # a builder per thread, each on its own handle
    pb = pygit2.PackBuilder(repo)
    pb.set_threads(threads)
    for oid in oids:
        _insert(pb, oid, names.get(oid))
    pb.write(str(scratch))


def _write_pack(repo, oids, pack_dir: Path, entry_names: dict | None = None) -> set[str]:
    """Pack `oids` into pack_dir; returns the pack names (stems) that now hold them.

    Each pack is built in a scratch directory first, so we know its name even
    when an identical pack already exists (same content, same name).  `entry_names`
    (object id -> the tree entry name it was reached by) guides the delta search.
    """
    if not oids:
        return set()
    import tempfile
    cores = _cores()
    workers = min(cores, MAX_BUILDERS)
    entry_names = entry_names or {}
    parts = _parts(repo, list(oids), entry_names, _shares(workers))
    scratch = Path(tempfile.mkdtemp(prefix="tmp-compact-", dir=pack_dir))
    try:
        if len(parts) == 1:
            _build(repo.path, parts[0], entry_names, scratch, cores)   # its delta search on every core
        else:
            todo = list(enumerate(parts))          # the biggest shares first
            failed: list[BaseException] = []
            lock = threading.Lock()

            def work() -> None:
                while not failed:
                    with lock:
                        if not todo:
                            return
                        i, part = todo.pop(0)
                    try:
                        (scratch / str(i)).mkdir()
                        _build(repo.path, part, entry_names, scratch / str(i), 1)
                    except BaseException as exc:     # re-raised below, on the caller's thread
                        failed.append(exc)
            # daemon threads: a builder cannot be stopped inside libgit2, and a Ctrl-C must not
            # wait for it.  One left running takes no further part and writes only into the
            # scratch directory, which is deleted below; nothing is renamed into place but here.
            threads = [threading.Thread(target=work, name=f"chronos-pack-{i}", daemon=True)
                       for i in range(workers)]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    t.join()
            except BaseException as exc:
                failed.append(exc)
                raise
            if failed:
                raise failed[0]
        names = set()
        # .pack before .idx: an index is never in place without its pack
        for f in sorted(scratch.rglob("pack-*"), key=lambda f: (f.suffix != ".pack", f.name)):
            target = pack_dir / f.name
            if not target.exists():
                # durable before anything it replaces is deleted: the loose journal
                # objects were fsynced, their pack copy must be too
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
                os.replace(f, target)
                if f.suffix == ".pack":
                    faults.hit("compact_pack_before_idx")
            names.add(f.stem)
        fsync_dir(pack_dir)
        return names
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


KEEP_BYTES = 16 << 20        # smaller packs are merged into the next one,
PART_KEEP_BYTES = 1 << 20    # unless one of the parts of a big packing (and not a crumb)
KEEP_REACHABLE = 0.8         # below this share of reachable objects a pack is rewritten


def _packs_list(store) -> Path:
    return store.meta_dir / "packs.json"


def _listed(store, key: str) -> set[str]:
    try:
        names = json.loads(_packs_list(store).read_text()).get(key, [])
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(names, list):
        return set()                # a damaged list keeps nothing: the packs are packed again
    return {n for n in names if isinstance(n, str) and n.startswith("pack-") and "/" not in n}


SMALL_PACKS_DUE = 50         # like git's gc.autoPackLimit: this many small packs call for a compaction


def small_packs(store) -> int:
    """Packs under PART_KEEP_BYTES that no compaction wrote (the journal's syncs write one
    every few calls): each is one more index every object lookup may search."""
    pack_dir = store.root / "objects" / "pack"
    listed, n = compacted_packs(store), 0
    for pack in pack_dir.glob("pack-*.pack") if pack_dir.is_dir() else ():
        try:
            n += pack.stem not in listed and pack.stat().st_size < PART_KEEP_BYTES
        except FileNotFoundError:
            pass
    return n


def compacted_packs(store) -> set[str]:
    """Packs written by a compaction (or adopted delta packs): candidates to keep."""
    return _listed(store, "compacted")


def note_compacted_packs(store, stems: set[str], *, only: bool = False,
                         parts: set[str] | frozenset[str] = frozenset()) -> None:
    """Record packs as compacted (`only`: the list becomes exactly these).  `parts`: packs
    written as the parts of one big packing, kept later down to PART_KEEP_BYTES."""
    names = set(stems) if only else compacted_packs(store) | set(stems)
    pack_dir = store.root / "objects" / "pack"
    names = {n for n in names if (pack_dir / f"{n}.idx").exists()}
    doc = {"compacted": sorted(names), "parts": sorted((_listed(store, "parts") | set(parts)) & names)}
    atomic_write(_packs_list(store), json.dumps(doc).encode(), mode=0o600)


def _packs_to_keep(store, old_packs: list[Path], reachable: list[pygit2.Oid]) -> tuple[set[str], set[bytes]]:
    """(stems, their object ids) of the old packs this compaction leaves as they are."""
    from .usergit import Unusable, read_idx
    listed, parts = compacted_packs(store), _listed(store, "parts")
    candidates = []
    for pack in old_packs:
        try:
            size = pack.stat().st_size
            if pack.stem in listed and (size >= KEEP_BYTES or pack.stem in parts and size >= PART_KEEP_BYTES):
                candidates.append(pack)
        except FileNotFoundError:
            pass
    if not candidates:
        return set(), set()
    reach = {o.raw for o in reachable}
    keep, ids = set(), set()
    for pack in candidates:
        try:
            held = read_idx(os.fsencode(pack.with_suffix(".idx")))
        except (OSError, Unusable):
            continue
        if held and len(held & reach) >= KEEP_REACHABLE * len(held):
            keep.add(pack.stem)
            ids |= held
    return keep, ids


def store_size(store) -> int:
    return tree_size(store.root / "objects")


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
    max_checkpoints = cfg.max_checkpoints if max_checkpoints is None else max_checkpoints
    size_budget_bytes = (int(cfg.size_budget_mb * 1024 * 1024) if size_budget_bytes is None
                         else size_budget_bytes)
    store_budget_bytes = (int(cfg.store_budget_mb * 1024 * 1024) if store_budget_bytes is None
                          else store_budget_bytes)
    orphan_s = cfg.orphan_days * 86400 if orphan_s is None else orphan_s
    grace_s = cfg.compact_grace_s if grace_s is None else grace_s
    pinned = set(pinned or ())
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    report: dict = {"dropped": [], "pruned": [], "dry_run": dry_run, "size_before": store_size(store)}

    with compaction_lock(store, ask=not patient), _bounded_mapping():
        # ---- phase 0: decide (read-only) and have the decision recorded -----
        now = time.time()
        missing = note_missing(store, now)
        plans: dict = {}
        prune: list = []
        for ws in store.workspaces():
            kept, dropped = plan_retention(ws, max_checkpoints=max_checkpoints,
                                           size_budget_bytes=size_budget_bytes, pinned=pinned)
            since = missing.get(ws.id)
            if (since is not None and orphan_s and orphan_s > 0 and now - since >= orphan_s
                    and not any(str(c.id) in pinned for c in kept)):
                prune.append(ws)
                report["pruned"].append({"workspace": os.fsdecode(ws.root_bytes), "workspace_id": ws.id,
                                         "missing_since": since, "checkpoints": len(kept) + len(dropped)})
                continue
            plans[ws.id] = (ws, kept, dropped)
        if store_budget_bytes and store_budget_bytes > 0:
            report["store_budget_kept_bytes"] = fit_store_budget(plans, pinned, store_budget_bytes)
        boundaries: dict[str, str] = {}            # workspace id -> oldest kept checkpoint
        for ws, kept, dropped in plans.values():
            if dropped:
                boundaries[ws.id] = str(kept[-1].id)
                report["dropped"].append({
                    "workspace": os.fsdecode(ws.root_bytes), "workspace_id": ws.id,
                    "kept": len(kept), "boundary": str(kept[-1].id),
                    "checkpoints": [{"id": str(c.id),
                                     "description": CheckpointMeta.from_message(message_of(c)).description,
                                     "time": c.commit_time} for c in dropped],
                })
        if dry_run:
            report["elapsed_s"] = round(time.monotonic() - t0, 3)
            return report
        named = set(keep or ()) - {c["id"] for d in report["dropped"] for c in d["checkpoints"]}
        for ws in prune:
            named -= {str(c.id) for c in ws.iter_commits()}
        if report["dropped"] or report["pruned"]:
            # before anything is cut: a crash from here on cannot make a drop silent
            _log(store, {"time": time.time(), "phase": "decided", "dropped": report["dropped"],
                         "pruned": report["pruned"]})
            if on_decided is not None:
                on_decided(report["dropped"], report["pruned"])
            faults.hit("compact_decided")

        # ---- phase A: cut at the decided boundaries, list roots and files ----
        with store.maintenance.exclusive():
            store.clear_stale_temp_objects()
            store.clear_stale_git_lock(store.root / "packed-refs.lock")
            for ws in prune:
                _prune(store, ws)
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
            store.forget_repos()     # reopen: libgit2 caches grafts
            commits_a, trees_a = _roots(store, named)
            old_packs, old_loose = _odb_files(store)
        say(f"retention decided; packing objects reachable from {len(commits_a)} refs")

        # ---- phase B: pack what is reachable (no lock held) ----------------
        repo = pygit2.Repository(str(store.root))
        seen: set = set()
        names: dict = {}
        reachable = _walk(repo, commits_a, trees_a, seen, names)
        kept_packs, kept_oids = _packs_to_keep(store, old_packs, reachable)
        if kept_oids:
            reachable = [o for o in reachable if o.raw not in kept_oids]
        pack_dir = store.root / "objects" / "pack"
        pack_dir.mkdir(exist_ok=True)
        packed = _write_pack(repo, reachable, pack_dir, names)
        ours = set(packed)
        say(f"packed {plural(len(reachable), 'object')}"
            + (f", kept {plural(len(kept_packs), 'pack')} as they are" if kept_packs else ""))
        faults.hit("mid_compact")

        # ---- phase C: catch up, delete the redundant ------------------------
        with store.maintenance.exclusive():
            store.forget_repos()
            commits_c, trees_c = _roots(store, named)
            repo = pygit2.Repository(str(store.root))
            extra = [o for o in _walk(repo, commits_c, trees_c, seen, names) if o.raw not in kept_oids]
            extra_packed = _write_pack(repo, extra, pack_dir, names)
            ours |= extra_packed
            # before anything is deleted; several packs from one packing are its parts
            parts = {n for p in (packed, extra_packed) if len(p) > 1 for n in p}
            note_compacted_packs(store, kept_packs | ours, only=True, parts=parts)
            now = time.time()
            removed_loose = 0
            for path, hexid in old_loose:
                oid = pygit2.Oid(hex=hexid)
                try:
                    if oid in seen or now - path.stat().st_mtime > grace_s:
                        path.unlink()
                        removed_loose += 1
                        if removed_loose == 1:
                            faults.hit("compact_mid_delete")
                except FileNotFoundError:
                    pass
            for pack in old_packs:
                if pack.stem in ours or pack.stem in kept_packs:
                    continue                # kept as it is, or our new pack has its name: same content
                for sibling in (pack, pack.with_suffix(".idx"), pack.with_suffix(".rev"),
                                pack.with_suffix(".bitmap"), pack.with_suffix(".keep")):
                    if sibling.suffix != ".keep":
                        sibling.unlink(missing_ok=True)
            for d in (store.root / "objects").iterdir():
                if len(d.name) == 2 and d.is_dir():
                    try:
                        d.rmdir()
                    except OSError:
                        pass
            store.note_compacted()          # stat caches loaded before this are re-read
            store.forget_repos()
    report.update({
        "objects_packed": len(reachable) + len(extra),
        "loose_removed": removed_loose,
        "packs_replaced": len([p for p in old_packs if p.stem not in ours and p.stem not in kept_packs]),
        "packs_kept": len(kept_packs),
        "size_after": store_size(store),
        "elapsed_s": round(time.monotonic() - t0, 3),
    })
    _log(store, {"time": time.time(), "phase": "done", "dropped": len(report["dropped"]),
                 "size_before": report["size_before"], "size_after": report["size_after"]})
    return report


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


def _is_chronos_commit(store, hexid: str) -> bool:
    try:
        obj = store.repo()[hexid]
    except (KeyError, ValueError):
        return True          # gone: it was ours and is no longer needed
    return isinstance(obj, pygit2.Commit) and message_of(obj).startswith("chronos checkpoint:")
