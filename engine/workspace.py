"""A workspace: a directory whose states are kept as checkpoints in the store.

Its rooms: engine/layout.py (its gitdir in the store, the folders never taken),
engine/snapshot_plan.py (which way a snapshot reads it), engine/chain.py (its checkpoints),
engine/narrowing.py (ignore rules that narrowed).  This module carries a plan out.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2 import GitError

from . import adopt, faults, fifo_guard, file_writes, first_import, locking, metadir, narrowing, perms
from .chain import Chain, Tip
from .checkpoint import Checkpoint, CheckpointMeta
from .durability import fsync_scope
from .errors import PathError, StoreError, StoreUnwritable, WorkspaceRefused
from .fsutil import realpath
from .ignore import is_ignored
from .index_entry import Seen
from .layout import GitDir, refuse_bad_root, workspace_id
from .scan import Scanner, align, align_paths, find_omissions, nested_ancestor, update_all, update_paths
from .snapshot_plan import CacheFacts, SnapshotPlan, Strategy, TakenSnapshot, choose, snapshot_kind
from .stat_cache import StatCache, entries_of
from .treepatch import patched_tree
from .worktree import is_nested

if TYPE_CHECKING:
    from .watcher import Watcher  # imported where the watcher starts

PATCH_CHECK_EVERY = 64          # every 64th patched tree is checked against the index's own


class Workspace:
    def __init__(self, store, root: Path, verify: bool = True):
        self.store = store
        self.root = root
        self.root_bytes = os.fsencode(root)
        self.id = workspace_id(self.root_bytes)
        self._layout = GitDir(store, root, self.id)
        self.gitdir = self._layout.path
        self.ref = f"refs/chronos/snapshots/{self.id}"
        self._chain = Chain(store, root, self.ref, self.gitdir)
        self._rules = narrowing.RulesWatch(self._layout)
        self._lock_path = metadir.lock_path(store.meta_dir, "ws", self.id)
        # git's lock files of what this workspace writes (asked before every snapshot)
        self._git_locks = (self.gitdir / "index.lock", self.gitdir / "HEAD.lock", store.root / (self.ref + ".lock"))
        self._objects = str(store.root / "objects")
        self._seen = Seen()                     # what the last snapshot read whole (its pre-images)
        self._repo: pygit2.Repository | None = None
        self._watcher: Watcher | None = None
        self._cache = StatCache(self.gitdir)    # what the in-memory index is known to hold
        self._patches = 0                       # snapshots whose tree was patched (treepatch)
        self._patching = True                   # off for good if a check ever disagreed
        self._settled: str | None = None        # held the whole workspace at the watcher's last take
        self._repo_generation = -1
        self.last_bulk: dict | None = None
        self._adopted_as_is = False          # the first snapshot adopted git's index and changed nothing
        self.last_seed: dict | None = None      # what the user's git index vouched for
        self.progress: dict | None = None      # the first snapshot's progress, for `health`
        if verify:
            refuse_bad_root(self.root, self.store.root)

    # -------------------------------------------------------------- identity
    def lock(self):
        return locking.exclusive(self._lock_path)

    @contextmanager
    def exclusive(self):
        """This workspace to oneself (objects may be written, nobody else snapshots it)."""
        with self.store.writing(), self.lock():
            yield

    def rel(self, path: os.PathLike | str) -> str:
        """Path relative to the root (as libgit2 wants it); raises if outside."""
        raw = os.fsencode(path)
        if not os.path.isabs(raw):
            raw = os.path.join(self.root_bytes, raw)
        norm = os.path.normpath(raw)
        # resolve symlinked parents but not the leaf: the leaf may itself be a link we store
        parent, leaf = os.path.split(norm)
        parent = realpath(parent)
        rel = os.path.relpath(os.path.join(parent, leaf), self.root_bytes)
        if rel == b".":
            said = repr(os.fsdecode(path)) if os.fsencode(path) else "an empty path"
            raise PathError(f"{said} names the workspace {self.root} itself, not a path in it")
        if rel.startswith(b"../") or rel == b"..":
            raise PathError(f"{os.fsdecode(path)} is outside the workspace {self.root}")
        return os.fsdecode(rel)

    def current_blob(self, path: os.PathLike | str) -> str | None:
        """The blob id the last snapshot read for the regular file `path` while its stat data is
        what it was then (engine/index_entry.py, `Seen`): a file call's pre-image, which its
        checkpoint has just read, without reading it again.  None: read the file to know."""
        try:
            rel = self.rel(path)
        except PathError:
            return None
        return self._seen.blob(rel, os.path.join(self.root_bytes, os.fsencode(rel)))

    def contains(self, path: os.PathLike | str) -> bool:
        try:
            self.rel(path)
            return True
        except PathError:
            return False

    # ---------------------------------------------------------------- gitdir
    def _ensure_gitdir(self) -> None:
        if self._layout.ensure():
            self._repo = None           # its exclude file was rewritten: a new handle reads it

    def repo(self) -> pygit2.Repository:
        """The workspace's own repository handle (its index, ignore rules); under the workspace lock."""
        return self._open_repo()

    def _open_repo(self) -> pygit2.Repository:
        if self._repo is not None and self._repo_generation != self.store.handles_generation:
            self._repo = None               # a compaction deleted packs: reopen (Store.writing)
            if self._cache.unsaved and self._watcher is not None:
                # watched refreshes the cache file never saw are dropped with the handle:
                # the next snapshot walks (a declared one re-aligns to the tip itself)
                self._watcher.untrust("the stat cache was reloaded after a compaction")
            self._cache.unsaved = False
        if self._repo is None:
            self._ensure_gitdir()
            self._install(pygit2.Repository(str(self.gitdir)))
        assert self._repo is not None
        return self._repo

    def _install(self, repo: pygit2.Repository) -> None:
        """`repo` (opened on this workspace's gitdir) as the handle snapshots go on with."""
        if os.fsencode(repo.workdir).rstrip(b"/") != self.root_bytes.rstrip(b"/"):
            raise StoreError(f"workspace gitdir {self.gitdir} points at {repo.workdir}, expected {self.root}")
        self._cache.new_handle()
        self._repo_generation = self.store.handles_generation
        self._repo = repo

    # ------------------------------------------------------------- snapshots
    def snapshot(self, meta: CheckpointMeta, *, paths: list[str] | None = None,
                 deadline: float | None = None, commit: bool = True,
                 force_scan: bool = False, progress=None) -> TakenSnapshot:
        """Commit the workspace (or just `paths`) as a checkpoint.

        `paths` is the declared-path fast path: only those entries are refreshed,
        everything else comes from the persistent index (kept in memory; its
        file is written by the next full snapshot).  A full snapshot refreshes
        only what the inotify watcher saw change when it can prove that list
        complete, else it walks the tree (`force_scan` always walks).  The first
        snapshot of a workspace is a bulk import into one pack.  `deadline`
        (time.monotonic) bounds a walk: past it what was done so far becomes a
        checkpoint marked partial.  With `commit=False` the tree is written but
        no checkpoint: `commit_scan` makes it one later (a restore validates its
        plan in between, so a refused restore leaves the history as it was).
        `progress(phase, done, total)` hears how a bulk first import goes (a CLI bar).
        """
        if not self.root.is_dir():
            raise WorkspaceRefused(f"workspace {self.root} does not exist or is not a directory")
        took: list[bool] = []       # _snapshot: its plan took the watcher's dirty set (a declared
        try:                        # one with no checkpoint yet does too: a whole refresh)
            res = self._snapshot(meta, paths=paths, deadline=deadline, commit=commit, force_scan=force_scan,
                                 progress=progress, took=took)
        except BaseException as exc:
            self._changes_lost(paths is None or any(took), "a snapshot that took the watcher's changes failed")
            why = self.store.unwritable(exc) if isinstance(exc, (GitError, OSError)) else None
            if why:
                raise StoreUnwritable(f"cannot take a checkpoint of {self.root}: {why}") from None
            raise
        if res.partial:
            self._changes_lost(paths is None or any(took),
                               "a snapshot that took the watcher's changes ran out of its budget")
        return res

    def hand_over_watch(self) -> None:
        """Another process is about to walk the whole tree (a first import in a child): it
        covers what the watcher saw so far, so a new watch period starts now.  `walk_lost`
        when that walk does not finish: the next snapshot walks again."""
        if self._watcher is not None:
            self._watcher.take()
            faults.hit("watcher_handoff")

    def walk_lost(self, why: str) -> None:
        self._changes_lost(True, why)

    def _changes_lost(self, taken: bool, why: str) -> None:
        """The watcher's dirty set was `taken` (SnapshotPlan.took_watch: every whole refresh
        takes it) but not all of it reached a checkpoint: only a walk finds those paths again."""
        if taken and self._watcher is not None:
            self._watcher.untrust(why)

    def _snapshot(self, meta: CheckpointMeta, *, paths, deadline, commit, force_scan,
                  progress=None, took: list[bool] | None = None) -> TakenSnapshot:
        with self.store.writing(), self.lock(), fsync_scope(self.store.config.durable_snapshots):
            self._seen = Seen()           # only ever what this snapshot read, once it is committed
            repo, index = self._read_index()
            at = self._chain.tip(repo)
            tip = at.commit
            known = self._cache.known()
            settled = tip is not None and self._settled == str(tip.id)
            facts = CacheFacts(commit=commit, force_scan=force_scan, declared=paths is not None,
                               has_tip=tip is not None, settled=settled,
                               index_holds_tip=tip is not None and known == str(tip.tree_id),
                               index_empty=len(index) == 0, budgeted=deadline is not None)
            plan = choose(facts, self._watcher)
            if took is not None:
                took.append(plan.took_watch)
            if plan.strategy is Strategy.UNCHANGED:
                return self._unchanged_result(tip, paths, meta)
            if plan.took_watch:
                faults.hit("watcher_handoff")
            scanner = Scanner(self.root_bytes, self.store.config.max_file_bytes, deadline, self._objects)
            rels, same, mark = None, False, None
            if plan.strategy is Strategy.DECLARED:
                known = self._hold_tip(index, tip, known)
            with fifo_guard.watching(self.root_bytes):
                if plan.strategy is Strategy.DECLARED:
                    rels = [self.rel(p) for p in paths]
                    mark = self._watcher.mark() if self._watcher is not None else None
                    before = entries_of(index, rels)
                    update_paths(repo, index, scanner, rels)
                    same = entries_of(index, rels) == before
                else:
                    plan, rels, repo, index = self._refresh_all(plan, repo, index, scanner, progress)
            report = scanner.report
            if plan.strategy is Strategy.SCAN and not report.aborted:   # a bulk import looked for them itself
                find_omissions(repo, self.root_bytes, report)
            tree = self._tree(repo, index, tip, known, rels, same, report)
            faults.hit("mid_snapshot")
            if plan.strategy in (Strategy.SCAN, Strategy.BULK):
                if not self._adopted_as_is:     # else the file in place holds these entries already
                    index.write()
                self._adopted_as_is = False
                self._cache.unsaved = False
                faults.hit("snapshot_index_written")
            else:
                # declared or watched: the commit holds the change, and rewriting a
                # 78k-entry cache file per call would cost more than the rest; the
                # next walk (turn start) or exit writes it, a crash only costs re-hashing
                self._cache.unsaved = True
            self._cache.learn(str(tree))
            result = self._result(meta, plan, tip, repo, index, tree, rels, report, commit)
            if not commit:
                return result
            result = self.commit_scan(result, meta, at)
            if plan.strategy is Strategy.DECLARED:
                self._seen = scanner.seen      # in the tree just committed (or the tip's, the same)
            if tip is not None and plan.strategy is not Strategy.BULK:
                try:        # the checkpoint is made: a failure to judge the rules must not undo it
                    change = self._rules.change(repo, index, tip, tree, rels, report.ignore_files)
                except Exception as exc:                      # noqa: BLE001
                    change, result.report["ignore_change_error"] = None, f"{type(exc).__name__}: {exc}"
                if change is not None:
                    result.report["ignore_change"] = change.to_dict()
            done = not report.aborted and result.checkpoint is not None
            if plan.strategy is Strategy.DECLARED:
                # the watcher need not send the next snapshot back to paths this one read; when
                # they were all it saw since a whole checkpoint, this one is whole too
                quiet = (done and mark is not None and self._watcher is not None
                         and self._watcher.covered(rels, mark))
                whole = settled and quiet
            else:
                # a refresh that took the watcher's dirty set and finished: this checkpoint is
                # the whole workspace until the watcher sees a change
                whole = done
            self._settled = result.checkpoint.id if whole and result.checkpoint is not None else None
            return result

    def _read_index(self):
        """The workspace's handle and its index, read again (another process may have written
        it); a damaged index file is dropped (the walk then re-hashes every file once)."""
        if adopt.drop_unfinished(self.gitdir):     # a first snapshot cut off: it starts again
            self._repo = None
        repo = self._open_repo()
        self._clear_stale_git_locks()
        try:
            index = repo.index
            index.read(False)
        except GitError as exc:
            if not self.drop_damaged_index(exc):
                raise
            repo = self._open_repo()
            index = repo.index
        return repo, index

    def _hold_tip(self, index, tip, known: str | None) -> str | None:
        """A declared snapshot takes undeclared entries from the index: it must hold the tip (a
        restore's writes, which the index took, are put back to the tip's path by path)."""
        over, self._cache.restored = self._cache.restored, None
        if known is None and over and over[0] == str(tip.tree_id) and align_paths(index, tip.tree, over[1]):
            return over[0]
        now = known or str(index.write_tree())
        if now == str(tip.tree_id):
            return now
        if align(index, tip.tree):
            # it held refreshed entries no checkpoint has (a diff's or a refused
            # restore's, which took the watcher's dirty set): only a walk sees them again
            self._changes_lost(True, "the stat cache was aligned to the newest checkpoint")
        return str(tip.tree_id)

    def _refresh_all(self, plan: SnapshotPlan, repo, index, scanner: Scanner,
                     progress=None) -> tuple[SnapshotPlan, list[str] | None, pygit2.Repository, pygit2.Index]:
        """Bring the whole index up to date; returns the plan carried out (a failed bulk
        import's fallback), the paths a watched refresh touched, and the handle and index
        that hold the refresh (the snapshot's tree and stat cache file are theirs)."""
        if plan.strategy is Strategy.BULK:
            if self._bulk_import(repo, scanner, progress):
                repo = self._open_repo()          # the import put its index file in place
                return plan, None, repo, repo.index
            plan = plan.fall_back()
            # a check that failed deleted the import's index file and dropped the handle: the
            # fallback fills the empty index of the handle the snapshot goes on with
            repo = self._open_repo()
            index = repo.index
        if plan.strategy is Strategy.WATCHED:
            rels = list(plan.paths)
            update_paths(repo, index, scanner, rels, watched=True, subtrees=plan.walk)   # + the unwatched
            return plan, rels, repo, index
        update_all(repo, index, scanner)
        return plan, None, repo, index

    def _tree(self, repo, index, tip, known: str | None, rels, same: bool, report) -> pygit2.Oid:
        """The snapshot's tree.  When the index is known to hold the tip's and only `rels` were
        refreshed: the tip's own if they are as they were, else the tip's patched along them
        (engine/treepatch.py; every PATCH_CHECK_EVERY-th checked).  Otherwise the index's."""
        if (rels is not None and tip is not None and known == str(tip.tree_id)
                and not report.whole_dirs and not report.aborted):
            if same:
                # the usual pre-call checkpoint of a file call: the previous post-checkpoint
                # already holds its paths (or they do not exist): the tip's tree, nothing to build
                return tip.tree_id
            if self._patching:
                tree = patched_tree(repo, tip.tree, index, rels, self.store.root / "objects")
                if tree is not None:
                    self._patches += 1
                    if (self._patches - 1) % PATCH_CHECK_EVERY == 0:
                        full = index.write_tree()     # now and then: the index itself must agree
                        if full != tree:
                            self._patching, tree = False, full
                    return tree
        return index.write_tree()   # before index.write(): the TREE cache lands in the file

    def _result(self, meta: CheckpointMeta, plan: SnapshotPlan, tip, repo, index, tree, rels, report,
                commit: bool) -> TakenSnapshot:
        """The checkpoint's metadata (in `meta`) and the snapshot's result, not yet committed."""
        partial = report.aborted
        meta.kind = snapshot_kind(meta, rels if plan.strategy is Strategy.DECLARED else None)
        if partial:
            meta.kind = "partial"
            meta.note = meta.note or ("snapshot budget exhausted; unchanged-since-last entries come from "
                                      "the previous checkpoint")
        meta.skipped = report.skipped
        meta.nested_repos = report.nested_repos
        meta.added_bytes = report.added_bytes
        meta.files = len(index)
        if not commit or tip is None or str(tree) != str(tip.tree_id):   # else no checkpoint is made
            meta.modes = perms.record(perms.carried(tip, index, self.root_bytes), report.perms,
                                      index, repo[tree], rels)      # None after a walk: all
        info = {"skipped": report.skipped, "nested_repos": report.nested_repos,
                "files": len(index), "kind": meta.kind, "scan": plan.strategy.value}
        if report.fallback:
            info["fallback"] = True
        return TakenSnapshot(None, str(tree), False, partial, info)

    def ignore_reach(self, sources: list[str]) -> narrowing.IgnoreChange:
        """What of the stat cache the current rules under `sources` ignore (a recheck of a
        narrowing reported earlier; its ignore files changed)."""
        with self.lock():
            repo = self._open_repo()
            index = repo.index
            index.read(False)
            return narrowing.reach(repo, [e.path for e in index], sources)

    def _unchanged_result(self, tip, paths, meta: CheckpointMeta) -> TakenSnapshot:
        """The newest checkpoint, as a snapshot that found nothing to record (no walk)."""
        cp = Checkpoint.from_commit(tip)
        info = {"skipped": cp.meta.skipped, "nested_repos": cp.meta.nested_repos,
                "files": cp.meta.files, "kind": snapshot_kind(meta, paths), "scan": "unchanged"}
        return TakenSnapshot(cp, cp.tree_id, False, False, info)

    def commit_scan(self, result: TakenSnapshot, meta: CheckpointMeta, state: Tip | None = None) -> TakenSnapshot:
        """Make a `commit=False` snapshot a checkpoint (the newest one if its tree is unchanged).
        `state`: the tip as read under the workspace lock still held (a snapshot's own commit),
        else it is read here; the ref moves only from that value either way (Chain.advance)."""
        with self.store.writing(), self.lock(), fsync_scope(self.store.config.durable_snapshots):
            repo = self._open_repo()
            if state is None:
                state = self._chain.tip(repo)
            tip = state.commit
            if tip is not None and str(tip.tree_id) == result.tree_id and state.problem is None:
                return TakenSnapshot(Checkpoint.from_commit(tip), result.tree_id, False, result.partial,
                                      result.report)
            cid = self._chain.advance(repo, pygit2.Oid(hex=result.tree_id), meta, state)
            report = result.report
            if state.problem:          # the service journals it: the chain moved without a call
                report = {**report, "damaged_tip": {"reason": state.problem, "parent": str(tip.id) if tip else None,
                                                    "was": str(state.target) if state.target else None}}
            return TakenSnapshot(Checkpoint.from_commit(repo[cid]),   # type: ignore[arg-type]  # the commit just written
                                  result.tree_id, True, result.partial, report)

    def _bulk_import(self, repo, scanner: Scanner, progress=None) -> bool:
        """First snapshot: the user's git index adopted (engine/adopt.py), else one pack and a
        complete index (engine/first_import.py), verified against libgit2."""
        from . import consolidate

        def tell(phase: str, done: int, total: int) -> None:
            self.note_progress(phase, done, total)          # for `health`
            if progress is not None:
                progress(phase, done, total)            # for whoever asked (a CLI progress bar)

        adopt_note = None
        if self.store.config.seed_from_git:
            got = adopt.run(repo, self.gitdir, self.root_bytes, str(self.store.root / "objects"),
                            cap=self.store.config.max_file_bytes,
                            durable=self.store.config.durable_snapshots, say=tell)
            if not isinstance(got, str):
                self._repo = None
                if got.handle is not None:          # placed early: its index already loaded
                    self._install(got.handle)
                self.last_bulk, self.last_seed, dirty = adopt.read_changed(self._open_repo(), scanner, got)
                self._adopted_as_is = not dirty
                consolidate.mark(self.store, fast=[], linked=got.linked)
                faults.hit("bulk_before_ref")
                return True
            adopt_note = got
        res = first_import.run(repo, self.gitdir, self.root_bytes, self.store, tell)
        if res is None:
            return False
        self._repo = None
        fresh = self._open_repo()
        if str(fresh.index.write_tree()) != res.tree:     # never trust our own writer blindly
            os.unlink(self.gitdir / "index")
            self._repo = None
            return False
        first_import.fold(scanner.report, res)
        self.last_bulk = res.seconds
        self.last_seed = {"seeded_files": res.seeded, "linked_packs": len(res.linked), "note": res.seed_note,
                          "adopted": False, "adopt_note": adopt_note}
        consolidate.mark(self.store, fast=res.packs, linked=res.linked)    # compressed and self-owned in the background
        faults.hit("bulk_before_ref")
        return True

    def note_progress(self, phase: str, done: int, total: int) -> None:
        self.progress = {"phase": phase, "files_done": done, "files_total": total, "time": time.time()}

    def note_restored(self, removed: list[str], written: list[str]) -> None:
        """Bring the stat cache up to date with what a restore changed (no walk)."""
        self._cache.took_restore(self._open_repo().index, removed, written)
        self._settled = None

    def write_files(self, files: list[tuple[str, bytes | None]], *, fault: str | None = None) -> None:
        """write_file semantics inside the workspace (engine/file_writes.py)."""
        rels = [(self.rel(p) if os.path.isabs(p) else p, data) for p, data in files]
        file_writes.write_files(self.store, self.root_bytes, rels, fault=fault)

    def drop_damaged_index(self, exc: Exception) -> bool:
        """A stat cache libgit2 cannot parse (torn by a power cut, edited) is only a cache:
        delete it so the next walk re-hashes; True when `exc` was that."""
        if "index" not in str(exc).lower():
            return False
        self._cache.drop_file()
        self._repo = None
        return True

    def flush_index(self) -> None:
        """Write the in-memory index (stat cache) if declared snapshots left it unsaved."""
        with self.store.writing(), self.lock():
            if self._cache.unsaved and self._repo is not None \
                    and self._repo_generation == self.store.handles_generation:
                known = self._cache.known()
                self._repo.index.write()    # (after a compaction its tree cache may name deleted trees)
                if known:
                    self._cache.learn(known)            # the same content, now on disk too
            self._cache.unsaved = False

    # ---------------------------------------------------------------- watcher
    def enable_watcher(self, on_ready=None) -> bool:
        """Start the inotify dirty set (long-lived processes only); `on_ready()` is called once
        its watches are added (in the background: seconds at a million files)."""
        from . import watcher as watcher_mod
        if self._watcher is not None:
            return self._watcher.running
        if not watcher_mod.available() or not self.root.is_dir():
            return False
        self._ensure_gitdir()
        ignore_repo = pygit2.Repository(str(self.gitdir))   # the watcher thread's own handle

        def skip_dir(rel: str) -> bool:
            return is_ignored(ignore_repo, rel + "/") or is_nested(os.path.join(self.root_bytes, os.fsencode(rel)))

        w = watcher_mod.Watcher(self.root_bytes, skip_dir)
        w.on_ready = on_ready
        self._watcher = w.start()
        return self._watcher.running

    def watcher_state(self) -> dict:
        w = self._watcher
        if w is None:
            return {"enabled": False}
        return {"enabled": True, **w.state()}

    def _clear_stale_git_locks(self) -> None:
        """git `*.lock` files of everything this workspace writes, left by a killed process.

        Only called under the workspace lock, which every writer of these files
        holds: a lock file seen here has no live owner.
        """
        for lock_file in self._git_locks:
            self.store.clear_stale_git_lock(lock_file)

    def nested_ancestor(self, parts: list[str]) -> str | None:
        """The nearest directory above `parts` that holds a `.git` (a nested repository)."""
        return nested_ancestor(self.root_bytes, parts)

    # ---------------------------------------------------------------- history (engine/chain.py)
    def has_checkpoint(self) -> bool:
        return self._chain.has_checkpoint()

    def tip(self) -> Checkpoint | None:
        return self._chain.newest()

    def damage(self) -> list[dict]:
        return self._chain.damage()

    def on_chain(self, checkpoint_id: str) -> bool:   # one of this workspace's (not fetched, not another's)
        return any(str(c.id) == checkpoint_id for c in self.iter_commits())

    def checkpoints(self, limit: int | None = None, damage: list[dict] | None = None) -> list[Checkpoint]:
        return self._chain.checkpoints(limit, damage)

    def iter_commits(self, damage: list[dict] | None = None):
        return self._chain.iter_commits(damage)

    def numbered(self, damage: list[dict] | None = None):    # newest first, numbered, read as consumed
        return (cp for _c, cp in self._chain.numbered(damage))

    def resolve(self, spec: str) -> Checkpoint:
        return self._chain.resolve(spec)

    def lookup_commit(self, checkpoint_id: str) -> pygit2.Commit:
        return self._chain.lookup_commit(checkpoint_id)

    def count(self) -> int:
        return sum(1 for _ in self.iter_commits())
