"""A workspace: a directory whose states are kept as checkpoints in the store."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pygit2
from pygit2 import GitError
from pygit2.enums import ReferenceType

from . import faults, fifo_guard, locking, narrowing, perms
from .checkpoint import Checkpoint, CheckpointMeta, message_of, signature, write_commit
from .confine import EXCLUDE_PATTERN
from .durability import fsync_scope
from .errors import CheckpointNotFound, PathError, StoreError, StoreUnwritable, WorkspaceRefused
from .fsutil import atomic_write
from .ignore import is_ignored
from .powercut import loose_object_ok
from .scan import Scanner, align, find_omissions, forget, nested_ancestor, update_all, update_paths
from .treepatch import patched_tree

if TYPE_CHECKING:
    from .watcher import Watcher  # imported where the watcher starts

PATCH_CHECK_EVERY = 64          # every 64th patched tree is checked against the index's own

UNBORN_HEAD = b"ref: refs/heads/chronos-unborn\n"
MIN_PREFIX = 7
REPORT_NAME_GLOB = "chronos-git-report-*.html"     # `chronos-git report` names its files so: never checkpointed


def canonical_root(path: os.PathLike | str) -> Path:
    if not os.fspath(path):        # abspath("") would silently mean the current directory
        raise ValueError("no workspace given: an empty path names no folder")
    p = os.fsencode(os.path.abspath(os.fsdecode(path)))
    return Path(os.fsdecode(os.path.realpath(p)))


def _refused_roots() -> set[Path]:
    roots = {Path("/")}
    for home in (os.environ.get("HOME"), os.path.expanduser("~")):
        if home and home != "/":
            roots.add(canonical_root(home))
    return roots


# Folders no remote client may name as a workspace: the trees the system lives in
# (and everything below them), and the shared top-level folders themselves.
SYSTEM_TREES = tuple(Path(p) for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64",
                                       "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr"))
SYSTEM_ROOTS = tuple(Path(p) for p in ("/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp",
                                       "/var", "/var/tmp"))


# Never a workspace, whoever names it: kernel and runtime pseudo-filesystems, whose files are
# endless or change as they are read (`/proc/self` had a snapshot read until memory ran out).
PSEUDO_TREES = tuple(Path(p) for p in ("/dev", "/proc", "/run", "/sys"))


def system_folder(root: Path) -> bool:
    """True for `/`, a home directory, a system tree or a shared top-level folder."""
    if root in _refused_roots() or root in SYSTEM_ROOTS:
        return True
    return any(root == t or root.is_relative_to(t) for t in SYSTEM_TREES)


def _glob_escape(rel: str) -> str:
    """A literal path inside a gitignore pattern (callers anchor it with a leading `/`)."""
    return "".join("\\" + ch if ch in "\\*?[" else ch for ch in rel)


@dataclass
class SnapshotResult:
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


def _kind(meta: CheckpointMeta, paths) -> str:
    """A declared-path snapshot is not a full picture: other entries may be stale."""
    return "declared" if paths is not None and meta.kind in ("full", "manual") else meta.kind


class Tip(NamedTuple):
    commit: pygit2.Commit | None     # the newest checkpoint that can serve
    problem: str | None              # why the ref names none (then `commit` is HEAD's, or None)
    target: object                   # what the ref named (compared before it is moved)


class Workspace:
    def __init__(self, store, root: Path, verify: bool = True):
        self.store = store
        self.root = root
        self.root_bytes = os.fsencode(root)
        self.id = hashlib.sha256(self.root_bytes).hexdigest()[:16]
        self.gitdir = store.root / "worktrees" / self.id
        self.ref = f"refs/chronos/snapshots/{self.id}"
        self._lock_path = store.meta_dir / "ws" / f"{self.id}.lock"
        self._repo: pygit2.Repository | None = None
        self._watcher: Watcher | None = None
        self._index_unsaved = False
        self._index_tree: str | None = None     # the tree the in-memory index holds, when known
        self._index_stamp = None                # ... as of this stat of the index file
        self._patches = 0                       # snapshots whose tree was patched (treepatch)
        self._patching = True                   # off for good if a check ever disagreed
        self._settled: str | None = None        # checkpoint that held the whole workspace as of
                                                # the watcher's last take (see _unchanged)
        self._repo_generation = -1
        self._narrow_seen: tuple | None = None   # the last ignore change counted (engine/narrowing.py)
        self._rules_base: tuple | None = None    # (a tip, the checkpoint that last saw all its ignore files)
        self.last_bulk: dict | None = None
        self.last_seed: dict | None = None      # what the user's git index vouched for
        self.progress: dict | None = None      # the first snapshot's progress, for `health`
        if verify:
            self._refuse_bad_roots()

    # -------------------------------------------------------------- identity
    def _refuse_bad_roots(self) -> None:
        if self.root in _refused_roots() or self.root in SYSTEM_ROOTS:
            raise WorkspaceRefused(
                f"refusing to use {self.root} as a workspace: snapshotting the filesystem root, a home "
                "directory or a shared top-level folder would capture far more than a project")
        if any(part.lower() == ".git" for part in self.root.parts):
            raise WorkspaceRefused(f"refusing to use {self.root} as a workspace: it is inside a `.git` folder, "
                                   "whose hooks and config git would run (nothing is ever written there)")
        if any(self.root == t or self.root.is_relative_to(t) for t in PSEUDO_TREES):
            raise WorkspaceRefused(f"refusing to use {self.root} as a workspace: it is inside a kernel or runtime "
                                   "pseudo-filesystem (/dev, /proc, /run, /sys), not a project")
        store = canonical_root(self.store.root)
        if store == self.root or self.root.is_relative_to(store):
            raise WorkspaceRefused(f"workspace {self.root} lies inside the chronos store {store}")

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
        parent = os.path.realpath(parent)
        rel = os.path.relpath(os.path.join(parent, leaf), self.root_bytes)
        if rel == b"." or rel.startswith(b"../") or rel == b"..":
            raise PathError(f"{os.fsdecode(path)} is outside the workspace {self.root}")
        return os.fsdecode(rel)

    def contains(self, path: os.PathLike | str) -> bool:
        try:
            self.rel(path)
            return True
        except PathError:
            return False

    # ---------------------------------------------------------------- gitdir
    def _exclude_lines(self) -> list[str]:
        lines = ["# written by chronos-git: restore temp names, forensic reports, then settings ignored_patterns",
                 EXCLUDE_PATTERN, "/**/" + REPORT_NAME_GLOB]
        lines += list(self.store.config.ignored_patterns)
        store = canonical_root(self.store.root)
        if store.is_relative_to(self.root):
            rel = _glob_escape(os.fsdecode(os.path.relpath(os.fsencode(store), self.root_bytes)))
            lines.append("/" + rel + "/")
            lines.append("/" + rel + ".*")     # the store's sidecar files (kept beside it on purpose)
        return lines

    def _ensure_gitdir(self) -> None:
        if (self.gitdir / "commondir").exists():
            self._sync_exclude()
            return
        tmp_parent = self.store.meta_dir / "tmp"
        tmp_parent.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"ws-{self.id}-", dir=tmp_parent))
        try:
            (tmp / "commondir").write_bytes(b"../..\n")
            (tmp / "gitdir").write_bytes(os.path.join(self.root_bytes, b".git") + b"\n")
            (tmp / "HEAD").write_bytes(UNBORN_HEAD)
            (tmp / "locked").write_text("chronos-git shadow workspace: keep (never prune)\n")
            exclude = self.gitdir / "exclude"
            cfg = pygit2.Config(str(tmp / "config.worktree"))
            cfg["core.excludesFile"] = str(exclude)
            del cfg
            (tmp / "exclude").write_text("\n".join(self._exclude_lines()) + "\n")
            (tmp / "chronos-workspace").write_bytes(self.root_bytes + b"\n")
            try:
                os.rename(tmp, self.gitdir)
            except OSError:
                if not (self.gitdir / "commondir").exists():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _sync_exclude(self) -> None:
        want = ("\n".join(self._exclude_lines()) + "\n").encode()
        path = self.gitdir / "exclude"
        try:
            if path.read_bytes() == want:
                return
        except FileNotFoundError:
            pass
        atomic_write(path, want, durable=False)
        self._repo = None

    def repo(self) -> pygit2.Repository:
        """The workspace's own repository handle (its index, ignore rules); under the workspace lock."""
        return self._open_repo()

    def _open_repo(self) -> pygit2.Repository:
        if self._repo is not None and self._repo_generation != self.store.handles_generation:
            self._repo = None               # a compaction deleted packs: reopen (Store.writing)
            if self._index_unsaved and self._watcher is not None:
                # watched refreshes the cache file never saw are dropped with the handle:
                # the next snapshot walks (a declared one re-aligns to the tip itself)
                self._watcher.untrust("the stat cache was reloaded after a compaction")
            self._index_unsaved = False
        if self._repo is None:
            self._index_tree = None             # a new handle: a new in-memory index
            self._repo_generation = self.store.handles_generation
            self._ensure_gitdir()
            self._repo = pygit2.Repository(str(self.gitdir))
            if os.fsencode(self._repo.workdir).rstrip(b"/") != self.root_bytes.rstrip(b"/"):
                raise StoreError(f"workspace gitdir {self.gitdir} points at {self._repo.workdir}, "
                                 f"expected {self.root}")
        return self._repo

    # ------------------------------------------------------------- snapshots
    def snapshot(self, meta: CheckpointMeta, *, paths: list[str] | None = None,
                 deadline: float | None = None, commit: bool = True,
                 force_scan: bool = False, progress=None) -> SnapshotResult:
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
        try:
            res = self._snapshot(meta, paths=paths, deadline=deadline, commit=commit, force_scan=force_scan,
                                 progress=progress)
        except BaseException as exc:
            self._changes_lost(paths, "a snapshot that took the watcher's changes failed")
            why = self.store.unwritable(exc) if isinstance(exc, (GitError, OSError)) else None
            if why:
                raise StoreUnwritable(f"cannot take a checkpoint of {self.root}: {why}") from None
            raise
        if res.partial:
            self._changes_lost(paths, "a snapshot that took the watcher's changes ran out of its budget")
        return res

    def hand_over_watch(self) -> None:
        """Another process is about to walk the whole tree (a first import in a child): it
        covers what the watcher saw so far, so a new watch period starts now.  `walk_lost`
        when that walk does not finish: the next snapshot walks again."""
        if self._watcher is not None:
            self._watcher.take()
            faults.hit("watcher_handoff")

    def walk_lost(self, why: str) -> None:
        self._changes_lost(None, why)

    def _changes_lost(self, paths, why: str) -> None:
        """The watcher's dirty set was taken (every snapshot that is not declared takes it)
        but not all of it reached a checkpoint: only a walk finds those paths again."""
        if paths is None and self._watcher is not None:
            self._watcher.untrust(why)

    def _snapshot(self, meta: CheckpointMeta, *, paths, deadline, commit, force_scan,
                  progress=None) -> SnapshotResult:
        with self.store.writing(), self.lock(), fsync_scope(self.store.config.durable_snapshots):
            repo = self._open_repo()
            self._clear_stale_git_locks()
            try:
                index = repo.index
                index.read(False)      # another process may have written it
            except GitError as exc:
                if not self.drop_damaged_index(exc):
                    raise
                repo = self._open_repo()
                index = repo.index     # empty: this walk re-hashes every file once
            tip = self._tip_commit(repo)
            known = self._known_tree()
            whole_before = tip is not None and self._settled == str(tip.id)
            if commit and not force_scan and self._unchanged(tip, known):
                return self._unchanged_result(tip, paths, meta)
            scanner = Scanner(self.root_bytes, self.store.config.max_file_bytes, deadline)
            if paths is not None and tip is None:
                paths = None           # undeclared entries come from the index: no baseline yet, scan all
            elif paths is not None and tip is not None and (known or str(index.write_tree())) != str(tip.tree_id):
                # undeclared entries come from the index: it must hold the tip
                if align(index, tip.tree):
                    # it held refreshed entries no checkpoint has (a diff's or a refused
                    # restore's, which took the watcher's dirty set): only a walk sees them again
                    self._changes_lost(None, "the stat cache was aligned to the newest checkpoint")
                known = str(tip.tree_id)
            how, rels, same, mark = "declared", None, False, None
            with fifo_guard.watching(self.root_bytes):
                if paths is None:
                    how, rels = self._refresh_all(repo, index, scanner, force_scan=force_scan, first=tip is None,
                                                  progress=progress)
                    repo = self._open_repo()          # a bulk import swapped the index file
                    index = repo.index
                else:
                    rels = [self.rel(p) for p in paths]
                    mark = self._watcher.mark() if self._watcher is not None else None
                    before = _entries(index, rels)
                    update_paths(repo, index, scanner, rels)
                    same = _entries(index, rels) == before
            report = scanner.report
            if how == "scan" and not report.aborted:      # a bulk import looked for them itself
                find_omissions(repo, self.root_bytes, report)
            tree = None
            if (rels is not None and tip is not None and known == str(tip.tree_id)
                    and not report.whole_dirs and not report.aborted):
                if same:
                    # the usual pre-call checkpoint of a file call: the previous post-checkpoint
                    # already holds its paths (or they do not exist): the tip's tree, nothing to build
                    tree = tip.tree_id
                elif self._patching:
                    tree = patched_tree(repo, tip.tree, index, rels, self.store.root / "objects")
                    if tree is not None:
                        self._patches += 1
                        if (self._patches - 1) % PATCH_CHECK_EVERY == 0:
                            full = index.write_tree()     # now and then: the index itself must agree
                            if full != tree:
                                self._patching, tree = False, full
            if tree is None:
                tree = index.write_tree()   # before index.write(): the TREE cache lands in the file
            faults.hit("mid_snapshot")
            self._index_tree = str(tree)
            if how in ("scan", "bulk"):
                index.write()
                self._index_unsaved = False
                faults.hit("snapshot_index_written")
            else:
                # declared or watched: the commit holds the change, and rewriting a
                # 78k-entry cache file per call would cost more than the rest; the
                # next walk (turn start) or exit writes it, a crash only costs re-hashing
                self._index_unsaved = True
            self._index_stamp = self._stamp()
            partial = report.aborted
            meta.kind = _kind(meta, paths)
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
                    "files": len(index), "kind": meta.kind, "scan": how}
            if report.fallback:
                info["fallback"] = True
            result = SnapshotResult(None, str(tree), False, partial, info)
            if not commit:
                return result
            result = self.commit_scan(result, meta)
            if tip is not None and how != "bulk":
                change = self._ignore_change(repo, index, tip, tree, rels, report.ignore_files)
                if change is not None:
                    result.report["ignore_change"] = change.to_dict()
            done = not partial and result.checkpoint is not None
            if how == "declared":
                # the watcher need not send the next snapshot back to paths this one read; when
                # they were all it saw since a whole checkpoint, this one is whole too
                quiet = (done and mark is not None and self._watcher is not None
                         and self._watcher.covered(rels, mark))
                whole = whole_before and quiet
            else:
                # a refresh that took the watcher's dirty set and finished: this checkpoint is
                # the whole workspace until the watcher sees a change
                whole = done
            self._settled = result.checkpoint.id if whole and result.checkpoint is not None else None
            return result

    def _ignore_change(self, repo, index, tip, tree, rels, seen: list[str]) -> narrowing.IgnoreChange | None:
        """Ignore rules changed since the checkpoint `tip` (engine/narrowing.py): what of the
        index they now ignore; None when no ignore file changed (the usual case: a few stats)."""
        sources = narrowing.named(rels) + narrowing.tree_sources(tip.tree, repo[tree])
        store_files = [os.fsencode(self.store.root / "info" / "exclude")]
        if self._exclude_rewritten():
            store_files.append(os.fsencode(self.gitdir / "exclude"))
        candidates = [os.path.join(self.root_bytes, os.fsencode(r)) for r in seen] + store_files
        base = self._looked_at_rules(repo, tip)
        hits = narrowing.changed_since(candidates, base.commit_time)      # whole seconds: a cheap floor
        if hits:
            hits = narrowing.changed_since(hits, CheckpointMeta.from_message(base.message).time)
        for h in hits:
            sources.append(os.fsdecode(h) if h in store_files else os.fsdecode(os.path.relpath(h, self.root_bytes)))
        if not sources:
            return None
        seen_key = (str(base.id), str(tree), tuple(sorted((src, self._ctime(src)) for src in set(sources))))
        if seen_key == self._narrow_seen:
            return None         # counted already for this tree (a scan that made no checkpoint)
        self._narrow_seen = seen_key
        return narrowing.reach(repo, [e.path for e in index], sources)

    def _looked_at_rules(self, repo, tip, limit: int = 256):
        """The newest checkpoint from `tip` back that saw every ignore file: a walk, or a watched
        refresh (a `.gitignore` event makes the watcher walk).  A declared or partial one read
        only some paths, so a self-ignoring `.gitignore` written before it is still news."""
        c, known = tip, self._rules_base
        for _ in range(limit):
            if known is not None and known[0] == str(c.id):
                c = known[1]           # the last answer (a long-lived process walks a step or two)
                break
            kind = next((ln[6:] for ln in c.message.split("\n", 8) if ln.startswith("Kind: ")), "")
            if kind not in ("declared", "partial") or not c.parent_ids:
                break
            parent = self._commit_at(repo, c.parent_ids[0])[0]
            if parent is None:
                break
            c = parent
        self._rules_base = (str(tip.id), c)
        return c

    def _ctime(self, src: str) -> int | None:
        try:
            return os.lstat(os.path.join(self.root_bytes, os.fsencode(src))).st_ctime_ns
        except OSError:
            return None

    def _exclude_rewritten(self) -> bool:
        """Whether the exclude file changed after its gitdir was made (settings `ignored_patterns`:
        `_sync_exclude`); written with the gitdir, it is newer than a first checkpoint's start."""
        try:
            made = os.lstat(self.gitdir / "commondir").st_ctime_ns
            return os.lstat(self.gitdir / "exclude").st_ctime_ns > made + 1_000_000_000
        except OSError:
            return False

    def ignore_reach(self, sources: list[str]) -> narrowing.IgnoreChange:
        """What of the stat cache the current rules under `sources` ignore (a recheck of a
        narrowing reported earlier; its ignore files changed)."""
        with self.lock():
            repo = self._open_repo()
            index = repo.index
            index.read(False)
            return narrowing.reach(repo, [e.path for e in index], sources)

    def _unchanged(self, tip, known: str | None) -> bool:
        """Nothing can have changed since the newest checkpoint: it is the one a refresh that
        took the watcher's dirty set committed, the in-memory index still holds its tree,
        and the watcher, trusted throughout, has seen no event since (its kernel queue is
        drained first: a write's events are queued before the write returns)."""
        w = self._watcher
        return (w is not None and tip is not None and self._settled == str(tip.id)
                and known == str(tip.tree_id) and w.quiet())

    def _unchanged_result(self, tip, paths, meta: CheckpointMeta) -> SnapshotResult:
        """The newest checkpoint, as a snapshot that found nothing to record (no walk)."""
        cp = Checkpoint.from_commit(tip)
        info = {"skipped": cp.meta.skipped, "nested_repos": cp.meta.nested_repos,
                "files": cp.meta.files, "kind": _kind(meta, paths), "scan": "unchanged"}
        return SnapshotResult(cp, cp.tree_id, False, False, info)

    def commit_scan(self, result: SnapshotResult, meta: CheckpointMeta) -> SnapshotResult:
        """Make a `commit=False` snapshot a checkpoint (the newest one if its tree is unchanged)."""
        with self.store.writing(), self.lock(), fsync_scope(self.store.config.durable_snapshots):
            repo = self._open_repo()
            state = self._tip(repo)
            tip = state.commit
            if tip is not None and str(tip.tree_id) == result.tree_id and state.problem is None:
                return SnapshotResult(Checkpoint.from_commit(tip), result.tree_id, False, result.partial,
                                      result.report)
            cid = self._commit(repo, pygit2.Oid(hex=result.tree_id), meta, state)
            report = result.report
            if state.problem:          # the service journals it: the chain moved without a call
                report = {**report, "damaged_tip": {"reason": state.problem, "parent": str(tip.id) if tip else None,
                                                    "was": str(state.target) if state.target else None}}
            return SnapshotResult(Checkpoint.from_commit(repo[cid]),   # type: ignore[arg-type]  # the commit just written
                                  result.tree_id, True, result.partial, report)

    def _refresh_all(self, repo, index, scanner: Scanner, *, force_scan: bool, first: bool,
                     progress=None) -> tuple[str, list[str] | None]:
        """Bring the whole index up to date; returns (how: bulk | watched | scan, the paths a
        watched refresh touched)."""
        watcher = self._watcher
        trusted, dirty, why = watcher.take() if watcher is not None else (False, set[str](), "no watcher")
        if watcher is not None:
            faults.hit("watcher_handoff")
        if first and len(index) == 0 and scanner.deadline is None and self._bulk_import(repo, scanner, progress):
            return "bulk", None
        if trusted and not force_scan:
            rels = sorted(dirty)
            update_paths(repo, index, scanner, rels, watched=True)
            return "watched", rels
        update_all(repo, index, scanner)
        return "scan", None

    def _bulk_import(self, repo, scanner: Scanner, progress=None) -> bool:
        """First snapshot: one pack and a complete index, verified against libgit2."""
        from . import consolidate
        from .bulk import import_tree

        def tell(phase: str, done: int, total: int) -> None:
            self.note_progress(phase, done, total)          # for `health`
            if progress is not None:
                progress(phase, done, total)            # for whoever asked (a CLI progress bar)

        tmp_index = str(self.gitdir / "index.chronos-bulk")
        try:
            res = import_tree(repo, self.root_bytes, tmp_index, str(self.store.root / "objects" / "pack"),
                              cap=self.store.config.max_file_bytes,
                              durable=self.store.config.durable_snapshots, progress=tell,
                              use_git=self.store.config.seed_from_git)
        except (OSError, pygit2.GitError, ValueError):
            try:
                os.unlink(tmp_index)
            except FileNotFoundError:
                pass
            return False
        os.replace(tmp_index, self.gitdir / "index")
        self._repo = None
        fresh = self._open_repo()
        if str(fresh.index.write_tree()) != res.tree:     # never trust our own writer blindly
            os.unlink(self.gitdir / "index")
            self._repo = None
            return False
        scanner.report.skipped.extend(res.report.skipped)
        scanner.report.perms.update(res.report.perms)
        for d in res.report.nested_repos:
            scanner.report.nested(d)
        scanner.report.added_bytes += res.bytes
        self.last_bulk = res.seconds
        self.last_seed = {"seeded_files": res.seeded, "linked_packs": len(res.linked), "note": res.seed_note}
        consolidate.mark(self.store, fast=res.packs, linked=res.linked)    # compressed and self-owned in the background
        faults.hit("bulk_before_ref")
        return True

    def _stamp(self):
        try:
            st = os.stat(self.gitdir / "index")
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _known_tree(self) -> str | None:
        """The tree the in-memory index holds, if nothing reloaded or changed it since we
        knew (another process writing the index file changes its stamp)."""
        if self._index_tree is not None and self._index_stamp == self._stamp():
            return self._index_tree
        return None

    def note_progress(self, phase: str, done: int, total: int) -> None:
        self.progress = {"phase": phase, "files_done": done, "files_total": total, "time": time.time()}

    def note_restored(self, removed: list[str], written: list[str]) -> None:
        """Bring the stat cache up to date with what a restore changed (no walk)."""
        index = self._open_repo().index
        self._index_tree = None         # it no longer holds a checkpoint's tree we know
        self._settled = None
        for rel in removed:
            forget(index, rel)
        for rel in written:
            try:
                index.add(rel)
            except (GitError, OSError):
                pass                    # the next snapshot re-hashes it
        self._index_unsaved = True      # like a declared snapshot: the next walk writes the cache file

    def write_files(self, files: list[tuple[str, bytes | None]], *, fault: str | None = None) -> None:
        """write_file semantics inside the workspace, confined (engine.confine): parents
        created, each path replaced whole (bytes) or removed (None).  A file keeps its
        permission bits; a new one gets the default ones."""
        from . import inflight
        from .confine import Confined
        rels = [(self.rel(p) if os.path.isabs(p) else p, data) for p, data in files]
        dirs = {os.path.dirname(rel) for rel, _ in rels}
        with inflight.writing(self.store, self.root_bytes, dirs), \
                Confined(self.root_bytes, token=inflight.TOKEN) as disk:
            for i, (rel, data) in enumerate(rels):
                if i and fault:
                    faults.hit(fault)          # some paths written, the rest not
                if data is None:
                    disk.unlink(rel)
                    continue
                now = disk.entry(rel)
                bits = stat.S_IMODE(now.st.st_mode) if now.kind == "file" else 0o666 & ~perms.umask()
                disk.write(rel, data, bits, dir_perm=lambda _rel: 0o777 & ~perms.umask())

    def drop_damaged_index(self, exc: Exception) -> bool:
        """A stat cache libgit2 cannot parse (torn by a power cut, edited) is only a cache:
        delete it so the next walk re-hashes; True when `exc` was that."""
        if "index" not in str(exc).lower():
            return False
        try:
            os.unlink(self.gitdir / "index")
        except FileNotFoundError:
            pass
        self._repo = None
        self._index_unsaved = False
        return True

    def flush_index(self) -> None:
        """Write the in-memory index (stat cache) if declared snapshots left it unsaved."""
        with self.store.writing(), self.lock():
            if self._index_unsaved and self._repo is not None \
                    and self._repo_generation == self.store.handles_generation:
                known = self._known_tree()
                self._repo.index.write()    # (after a compaction its tree cache may name deleted trees)
                if known:
                    self._index_stamp = self._stamp()   # the same content, now on disk too
            self._index_unsaved = False

    # ---------------------------------------------------------------- watcher
    def enable_watcher(self) -> bool:
        """Start the inotify dirty set (long-lived processes only)."""
        from . import watcher as watcher_mod
        if self._watcher is not None:
            return self._watcher.running
        if not watcher_mod.available() or not self.root.is_dir():
            return False
        self._ensure_gitdir()
        ignore_repo = pygit2.Repository(str(self.gitdir))   # the watcher thread's own handle

        def skip_dir(rel: str) -> bool:
            return is_ignored(ignore_repo, rel + "/") or os.path.lexists(
                os.path.join(self.root_bytes, os.fsencode(rel), b".git"))

        self._watcher = watcher_mod.Watcher(self.root_bytes, skip_dir).start()
        return self._watcher.running

    def watcher_state(self) -> dict:
        w = self._watcher
        if w is None:
            return {"enabled": False}
        return {"enabled": True, "running": w.running, "trusted": w.trusted, "why": w.why, **w.stats}

    def _clear_stale_git_locks(self) -> None:
        """git `*.lock` files of everything this workspace writes, left by a killed process.

        Only called under the workspace lock, which every writer of these files
        holds: a lock file seen here has no live owner.
        """
        for lock_file in (self.gitdir / "index.lock", self.gitdir / "HEAD.lock",
                          self.store.root / (self.ref + ".lock")):
            self.store.clear_stale_git_lock(lock_file)

    def _commit(self, repo, tree, meta: CheckpointMeta, state: Tip) -> pygit2.Oid:
        """Commit on the tip (a fresh chain when the ref names nothing that can serve: the
        HEAD's checkpoint, else none) and move the ref, only from the value `state` read."""
        sig = signature(meta.time)
        parents = [state.commit.id] if state.commit is not None else []
        # not create_commit: it freshens the tree's pack (write_commit says why)
        cid = write_commit(self.store.root / "objects", tree, parents, sig, meta.to_message())
        try:
            ref = repo.references.get(self.ref)
            if ref is None:
                repo.references.create(self.ref, cid, force=False)
            elif state.target is None or str(ref.target) != str(state.target):
                raise GitError(f"the checkpoint ref {self.ref} moved underneath the workspace lock")
            elif state.problem:                 # symbolic, or naming no checkpoint: replaced whole
                repo.references.create(self.ref, cid, force=True)
            else:
                ref.set_target(cid)          # compare-and-swap against the value just read
        except GitError as exc:
            if "corrupted" not in str(exc):
                raise
            # a torn ref file (its tip came from HEAD, see _tip_commit): replace it whole
            (self.store.root / self.ref).unlink(missing_ok=True)
            repo.references.create(self.ref, cid, force=True)
        faults.hit("snapshot_after_commit")
        repo.set_head(cid)             # detached at the newest checkpoint: restore baseline, fsck-clean
        return cid

    def nested_ancestor(self, parts: list[str]) -> str | None:
        """The nearest directory above `parts` that holds a `.git` (a nested repository)."""
        return nested_ancestor(self.root_bytes, parts)

    # ---------------------------------------------------------------- history
    def _commit_at(self, repo, oid) -> tuple[pygit2.Commit | None, str | None]:
        """(the commit `oid`, None), or (None, why it cannot serve as a checkpoint).  A damaged
        loose object is never handed to libgit2 (it loops inflating a truncated one)."""
        hexid = str(oid)
        if len(hexid) != 40 or not all(ch in "0123456789abcdef" for ch in hexid):
            return None, f"{hexid[:60]!r} is not an object id"
        if not loose_object_ok(self.store.root / "objects" / hexid[:2] / hexid[2:]):
            return None, f"object {hexid[:12]} is damaged (a torn or altered file)"
        try:
            obj = repo[hexid]
        except KeyError:
            return None, f"object {hexid[:12]} is not in the store"
        except (GitError, ValueError) as exc:
            return None, f"object {hexid[:12]} cannot be read ({exc})"
        if not isinstance(obj, pygit2.Commit):
            return None, f"{hexid[:12]} is a {obj.type_str}, not a checkpoint"
        return obj, None

    def _tip(self, repo) -> Tip:
        """The newest checkpoint, and what is wrong with the ref when it names none that can
        serve.  Then the tip is the gitdir's HEAD (detached at the newest checkpoint too), or
        None: the next snapshot starts a fresh chain, and replaces the ref either way."""
        try:
            ref = repo.references.get(self.ref)
        except GitError as exc:            # torn by a power cut or edited
            return Tip(self._head_checkpoint(repo), f"the checkpoint ref {self.ref} is damaged ({exc})", None)
        if ref is None:
            return Tip(None, None, None)
        if ref.type != ReferenceType.DIRECT:
            return Tip(self._head_checkpoint(repo), f"the checkpoint ref {self.ref} is symbolic "
                                                    f"(it names {str(ref.target)[:80]!r})", ref.target)
        c, why = self._commit_at(repo, ref.target)
        if c is None:
            return Tip(self._head_checkpoint(repo), f"the checkpoint ref {self.ref} names no readable "
                                                    f"checkpoint: {why}", ref.target)
        return Tip(c, None, ref.target)

    def _tip_commit(self, repo) -> pygit2.Commit | None:
        return self._tip(repo).commit

    def _head_checkpoint(self, repo) -> pygit2.Commit | None:
        try:
            text = (self.gitdir / "HEAD").read_text("ascii", "replace").strip()
        except OSError:
            return None
        return self._commit_at(repo, text)[0]

    def has_checkpoint(self) -> bool:
        """Whether a baseline exists (one ref lookup; tip() also parses the metadata)."""
        repo = self.store.repo()
        try:
            return repo.references.get(self.ref) is not None
        except GitError:           # a torn or edited ref: as _tip_commit, the HEAD says (the snapshot mends it)
            return self._head_checkpoint(repo) is not None

    def tip(self) -> Checkpoint | None:
        c = self._tip_commit(self.store.repo())
        return Checkpoint.from_commit(c) if c is not None else None

    def iter_commits(self, damage: list[dict] | None = None):
        """The checkpoint chain, newest first.  It ends where a commit cannot be read (or
        below a retention cut); `damage` hears why, and about a ref that names none."""
        repo = self.store.repo()
        tip = self._tip(repo)
        if tip.problem and damage is not None:
            damage.append({"ref": self.ref, "id": str(tip.target) if tip.target else None, "reason": tip.problem})
        c = tip.commit
        while c is not None:
            yield c
            if not c.parent_ids:
                return
            parent, why = self._commit_at(repo, c.parent_ids[0])
            if why is not None and damage is not None and not (
                    why.endswith("not in the store") and str(c.id) in self._cuts()):
                damage.append({"id": str(c.parent_ids[0]), "reason": f"the parent of {str(c.id)[:12]}: {why}"})
            c = parent

    def _cuts(self) -> set[str]:
        """The commits retention made roots (its `shallow` file), read now: a handle opened
        before a compaction in another process still sees their parents."""
        try:
            return set((self.store.root / "shallow").read_text().split())
        except OSError:
            return set()

    def damage(self) -> list[dict]:
        """What in this workspace's history cannot serve, and why: its ref, commits that
        cannot be read, checkpoints whose metadata is damaged (still listed and restorable)."""
        out: list[dict] = []
        for c in self.iter_commits(out):
            cp = Checkpoint.from_commit(c)
            if cp.damage:
                out.append({"id": cp.id, "reason": cp.damage})
        return out

    def on_chain(self, checkpoint_id: str) -> bool:
        """Whether the checkpoint is one of this workspace's (not fetched, not another's)."""
        return any(str(c.id) == checkpoint_id for c in self.iter_commits())

    def checkpoints(self, limit: int | None = None, damage: list[dict] | None = None) -> list[Checkpoint]:
        out = []
        for c in self.iter_commits(damage):
            out.append(Checkpoint.from_commit(c))
            if limit is not None and len(out) >= limit:
                break
        return out

    def resolve(self, spec: str) -> Checkpoint:
        """A full id, a unique prefix (>= 7 hex digits), a 1-based index (1 = newest) or `latest`."""
        spec = (spec or "").strip()
        if not spec:
            raise CheckpointNotFound("no checkpoint given")
        low = spec.lower()
        if low in ("latest", "head", "newest"):
            tip = self.tip()
            if tip is None:
                raise CheckpointNotFound(f"workspace {self.root} has no checkpoints yet")
            return tip
        if spec.isdigit() and len(spec) < MIN_PREFIX:
            n = int(spec)
            if n < 1:
                raise CheckpointNotFound("checkpoint indexes start at 1 (1 = newest)")
            for i, c in enumerate(self.iter_commits(), 1):
                if i == n:
                    return Checkpoint.from_commit(c)
            raise CheckpointNotFound(f"there is no checkpoint #{n} (the workspace has fewer)")
        if not all(ch in "0123456789abcdef" for ch in low):
            raise CheckpointNotFound(
                f"{spec!r} is not a checkpoint: use a full id, a prefix of at least {MIN_PREFIX} hex "
                "digits, an index (1 = newest) or 'latest'")
        if len(low) < MIN_PREFIX:
            raise CheckpointNotFound(f"checkpoint prefix {spec!r} is too short (need {MIN_PREFIX}+ hex digits)")
        matches = [c for c in self.iter_commits() if str(c.id).startswith(low)]
        if not matches:
            # a checkpoint of this workspace that fell off the chain (e.g. referenced by the journal)
            try:
                repo = self.store.repo()
                obj = self._commit_at(repo, low)[0] if len(low) == 40 else repo.revparse_single(low)
                if isinstance(obj, pygit2.Commit) and message_of(obj).startswith("chronos checkpoint:"):
                    owner = self._other_owner(obj.id)
                    if owner is not None:     # restoring it here would swap in another project's files
                        raise CheckpointNotFound(
                            f"checkpoint {spec!r} belongs to workspace {owner}, not {self.root}")
                    if obj.tree_id not in repo.odb:
                        raise CheckpointNotFound(f"checkpoint {spec!r} was dropped by retention: its "
                                                 "files are no longer in the store")
                    return Checkpoint.from_commit(obj)
            except (KeyError, ValueError, GitError):
                pass
            raise CheckpointNotFound(f"no checkpoint {spec!r} in workspace {self.root}")
        if len(matches) > 1:
            raise CheckpointNotFound(f"checkpoint prefix {spec!r} is ambiguous ({len(matches)} matches)")
        return Checkpoint.from_commit(matches[0])

    def _other_owner(self, oid: pygit2.Oid) -> str | None:
        """The root of another workspace whose checkpoint chain holds `oid`, if any."""
        repo = self.store.repo()
        for other in self.store.workspaces():
            if other.id == self.id:
                continue
            try:
                ref = repo.references.get(other.ref)
                if ref is None:
                    continue
                if ref.target == oid or repo.descendant_of(ref.target, oid):
                    return os.fsdecode(other.root_bytes)
            except (GitError, KeyError, ValueError):
                continue
        return None

    def lookup_commit(self, checkpoint_id: str) -> pygit2.Commit:
        try:
            obj = self.store.repo()[checkpoint_id]
        except (KeyError, ValueError):
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id} is not in the store (dropped by retention?)") from None
        if not isinstance(obj, pygit2.Commit):
            raise CheckpointNotFound(f"{checkpoint_id} is not a checkpoint")
        return obj

    def count(self) -> int:
        return sum(1 for _ in self.iter_commits())


def _entries(index, rels: list[str]) -> list:
    """What the index holds for `rels` (and its size: a directory's entries removed show)."""
    out: list = [len(index)]
    for rel in rels:
        try:
            e = index[rel]
        except (KeyError, ValueError):
            out.append(None)
        else:
            out.append((e.id, e.mode))
    return out
