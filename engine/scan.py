"""Bringing a workspace's persistent index up to date with the files on disk.

The index is the stat cache: a diff of the index against the work tree lists
only the paths whose stat data changed, and each of them is then added to or
removed from the index on its own.  That is where we skip what must not be
captured (nested repositories, oversize files, FIFOs) and where a snapshot
budget can stop the work.

We deliberately do not call libgit2's `git_index_add_all`.  It walks the same
diff with `git_diff_foreach`, which loads every changed file through mmap(2):
a file truncated by another process meanwhile (any in-place rewrite) kills
ours with SIGBUS.  The work-tree diff hashes with read(2) and
`git_index_add_bypath` streams the file, so a file changing or vanishing under
us costs at most that one entry (skipped and reported, or picked up by the
next snapshot), never the snapshot and never the process.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field

import pygit2
from pygit2 import Diff, GitError
from pygit2.enums import DeltaStatus, DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from .ignore import is_ignored
from .index_entry import Seen, add_file
from .paths import delta_path, within
from .worktree import IGNORE_FILE, IgnoredDirs, ignored_dirs, in_git_dir, is_nested, nested_ancestor, special_kind, walk

DIFF_FLAGS = DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
RETRIES = 3


@dataclass
class ScanReport:
    skipped: list[dict] = field(default_factory=list)
    nested_repos: list[str] = field(default_factory=list)
    ignore_files: list[str] = field(default_factory=list)   # .gitignore files find_omissions saw
    added_bytes: int = 0
    aborted: bool = False          # the deadline stopped the scan: the result is partial
    fallback: bool = False         # the work tree changed under the scan (the diff was retried)
    whole_dirs: bool = False       # update_paths walked or dropped a directory (no tree patching)
    perms: dict = field(default_factory=dict)   # path (dirs end in "/") -> permission bits seen
    _seen_skip: set = field(default_factory=set)

    def skip(self, path: str, reason: str, size: int | None = None) -> None:
        if path in self._seen_skip:
            return
        self._seen_skip.add(path)
        item: dict = {"path": path, "reason": reason}
        if size is not None:
            item["size"] = size
        self.skipped.append(item)

    def nested(self, path: str) -> None:
        if path not in self.nested_repos:
            self.nested_repos.append(path)

    def omit(self, path: str, exc: OSError) -> None:
        """A path that could not be looked at or read: listed, never silently dropped."""
        if exc.errno == errno.ENAMETOOLONG:
            self.skip(path, "path_too_long")
        else:
            self.skip(path, f"unreadable: {exc.strerror or exc}")


def note_perms(report: ScanReport, root: bytes, rel: str, st: os.stat_result) -> None:
    """Remember a file's permission bits, and those of its directories not seen yet."""
    perms = report.perms
    perms[rel] = stat.S_IMODE(st.st_mode)
    cut = rel.rfind("/")
    if cut < 0 or rel[:cut + 1] in perms:
        return                          # its directory is known already (the common case)
    parts = rel.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        d = "/".join(parts[:i]) + "/"
        if d in perms:
            break
        try:
            dst = os.lstat(os.path.join(root, os.fsencode(d)))
        except OSError:
            break
        perms[d] = stat.S_IMODE(dst.st_mode)


class Scanner:
    def __init__(self, root: bytes, max_file_bytes: int, deadline: float | None, objects=None):
        self.root = root
        self.cap = max_file_bytes
        self.deadline = deadline
        self.report = ScanReport()
        self.objects = objects       # the store's objects folder: files added by one read (index_entry)
        self.seen = Seen()           # what those reads found

    def full(self, rel: str) -> bytes:
        return os.path.join(self.root, os.fsencode(rel))

    def visit(self, rel: str) -> int:
        """0 = bring the index entry up to date, 1 = skip the path, -1 = stop (budget)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.report.aborted = True
            return -1
        if rel.endswith("/"):
            d = rel[:-1]
            if is_nested(self.full(d)):
                self.report.nested(d)
                return 1
            return 0
        full = self.full(rel)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return 0                       # a deletion: the entry is removed
        except OSError as exc:
            self.report.omit(rel, exc)
            return 1
        mode = st.st_mode
        if stat.S_ISREG(mode):
            if self.cap and st.st_size > self.cap:
                self.report.skip(rel, "too_large", st.st_size)
                return 1
            self.report.added_bytes += st.st_size
            note_perms(self.report, self.root, rel, st)
            return 0
        if stat.S_ISLNK(mode):
            return 0
        if stat.S_ISDIR(mode):
            if is_nested(full):
                self.report.nested(rel)
                return 1
            return 0
        self.report.skip(rel, f"special_file: {special_kind(mode)}")
        return 1


def find_omissions(repo: pygit2.Repository, root: bytes, report: ScanReport) -> None:
    """What libgit2's walk leaves out without a word: FIFOs, sockets and devices (its work-tree
    iterator skips them) and directories too deep to name (it skips those too), from the work
    tree's walk of non-ignored directories (engine/worktree.py: no regular file is stat'ed).
    It notes the `.gitignore` files it passes (a self-ignoring one is in no tree diff)."""
    for d in walk(root, prune=IgnoredDirs(repo)):
        if d.error is not None:
            report.omit(os.fsdecode(d.rel) or ".", d.error)
            continue
        if d.gitignore:                # engine/narrowing.py: did the rules change?
            report.ignore_files.append(os.fsdecode(os.path.join(d.rel, IGNORE_FILE)))
        for sub, exc in d.errors:
            report.omit(os.fsdecode(sub), exc)
        for sub in d.too_deep:
            report.skip(os.fsdecode(sub), "path_too_long")
        for sub in d.nested:           # a tracked folder may be one now: update_all drops its entries
            report.nested(os.fsdecode(sub))
        for e in d.specials:
            name = os.fsdecode(os.path.join(d.rel, e.name))
            try:
                st = e.stat(follow_symlinks=False)
                if not is_ignored(repo, name):
                    report.skip(name, f"special_file: {special_kind(st.st_mode)}")
            except OSError as exc:
                report.omit(name, exc)


def update_all(repo: pygit2.Repository, index: pygit2.Index, scanner: Scanner,
               pathspecs: list[str] | None = None) -> ScanReport:
    """Bring the whole index (or the given paths) up to date; never raises for one bad file."""
    diff = _workdir_diff(index, scanner.report)
    if diff is not None:
        links = _apply(index, scanner, diff, pathspecs)
        if links:                               # tracked folders that are links now: as links
            _update_paths(repo, index, scanner, links, False)
    _drop_uncapturable(index, scanner.report)
    return scanner.report


def update_subtrees(repo: pygit2.Repository, index: pygit2.Index, scanner: Scanner, dirs) -> list[str]:
    """Bring the index up to date below `dirs` only (the subtrees the watcher could not watch):
    the same stat-cache diff as `update_all`, its walk limited to them by libgit2 itself.
    Returns the paths it found changed (a checkpoint's tree is patched along them)."""
    if not dirs:
        return []
    if "" in dirs:
        update_all(repo, index, scanner)
        scanner.report.whole_dirs = True          # the whole tree: no patching
        return []
    diff = _workdir_diff(index, scanner.report, sorted(dirs))
    changed: list[str] = []
    if diff is not None:
        changed = [delta_path(d) for d in diff.deltas]
        if any(p.endswith("/") for p in changed):
            scanner.report.whole_dirs = True      # a directory as one entry (a nested repository)
        _apply(index, scanner, diff, None)
    _drop_uncapturable(index, scanner.report)
    return changed


def _diff_below(index: pygit2.Index, dirs: list[str]) -> Diff:
    """index.diff_to_workdir with its walk limited to `dirs` (pygit2 takes no path list): a
    literal path list (DISABLE_PATHSPEC_MATCH), so libgit2 enters no other directory."""
    repo = index._repo          # pygit2's own handles: what its diff_to_workdir passes
    if repo is None:
        raise ValueError("diff needs an associated repository")
    return diff_index(repo, index, DIFF_FLAGS | DiffOption.DISABLE_PATHSPEC_MATCH, dirs)


def diff_index(repo: pygit2.Repository, index: pygit2.Index, flags: int, dirs: list[str] | None = None) -> Diff:
    """`index` against `repo`'s work tree, the index any (one not of `repo` too: a first
    snapshot's adopted copy of the user's, engine/adopt.py); `dirs`: a pathspec."""
    copts = ffi.new("git_diff_options *")
    check_error(C.git_diff_options_init(copts, 1))
    copts.flags = int(flags)
    if dirs:
        names = [ffi.new("char[]", os.fsencode(d)) for d in dirs]
        strings = ffi.new("char *[]", names)
        copts.pathspec.strings, copts.pathspec.count = strings, len(names)
    out = ffi.new("git_diff **")
    check_error(C.git_diff_index_to_workdir(out, repo._repo, index._index, copts))
    return Diff.from_c(bytes(ffi.buffer(out)[:]), repo)


def _workdir_diff(index: pygit2.Index, report: ScanReport, dirs: list[str] | None = None):
    """Index vs work tree (stat cache first, read(2)-hashing where stat data changed)."""
    last: BaseException | None = None
    for attempt in range(RETRIES + 1):
        try:
            return index.diff_to_workdir(flags=DIFF_FLAGS) if dirs is None else _diff_below(index, dirs)
        except (GitError, OSError) as exc:    # a directory vanished mid-walk, and the like
            last = exc
            report.fallback = True
            time.sleep(0.01 * (attempt + 1) ** 2)
    report.skip(".", f"workspace_unreadable: {last}")
    return None


def _apply(index: pygit2.Index, scanner: Scanner, diff, pathspecs) -> list[str]:
    """One path at a time, skipping (and reporting) what fails; returns the folders above a
    path that are symbolic links now (libgit2 follows them: their files are not ours)."""
    prefixes = [p.rstrip("/") for p in pathspecs] if pathspecs else None
    seen: dict[str, str | None] = {}
    links: list[str] = []
    for delta in diff.deltas:                 # deltas only: no content is loaded here
        rel = delta_path(delta)
        if not within(rel, prefixes):
            continue
        link = link_above(scanner.root, rel, seen)
        if link is not None:
            forget(index, rel)
            if link not in links:
                links.append(link)
            continue
        verdict = scanner.visit(rel)
        if verdict < 0:
            return links
        if verdict > 0 or rel.endswith("/"):
            continue
        full = scanner.full(rel)
        try:
            try:
                mode = os.lstat(full).st_mode
            except (FileNotFoundError, NotADirectoryError):
                mode = None
            if mode is not None and (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                index.add(rel)
                still_a_file(index, scanner.report, rel, full)
            elif rel in index:                # gone, or a directory now (its files come as own deltas)
                index.remove(rel)
        except (GitError, OSError) as exc:
            forget(index, rel)     # never keep stale content under a name we could not read now
            if os.path.lexists(full):
                scanner.report.skip(rel, f"unreadable: {exc}")
    return links


def link_above(root: bytes, rel: str, seen: dict[str, str | None]) -> str | None:
    """The nearest folder above `rel` that is a symbolic link now (a tracked folder replaced
    by a link: the files below it are the link target's, not the workspace's); `seen` caches
    each folder's answer, so a folder is looked at once."""
    d = rel.rstrip("/").rpartition("/")[0]
    return _link_at(root, d, seen) if d else None


def _link_at(root: bytes, d: str, seen: dict[str, str | None]) -> str | None:
    if d in seen:
        return seen[d]
    up = d.rpartition("/")[0]
    hit = _link_at(root, up, seen) if up else None
    if hit is None:
        try:
            hit = d if stat.S_ISLNK(os.lstat(os.path.join(root, os.fsencode(d))).st_mode) else None
        except OSError:
            hit = None
    seen[d] = hit
    return hit


def still_a_file(index: pygit2.Index, report: ScanReport, rel: str, full: bytes) -> None:
    """After `index.add`: a path swapped for a FIFO or device meanwhile (the fifo guard let
    libgit2's blocked open go) must not stay in the index as an empty file."""
    try:
        mode = os.lstat(full).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
        forget(index, rel)
        report.skip(rel, f"special_file: {special_kind(mode)}")


def align(index: pygit2.Index, tree) -> int:
    """Make the in-memory stat cache hold `tree` exactly (never written back).

    The cache file may be older than the newest checkpoint (a declared snapshot leaves it
    unsaved; another process may have written an older one), missing, or just dropped
    as damaged.  Entries that differ
    from `tree` get its blob with no stat data, so libgit2 hashes those files; the rest
    keep their stat data.  Then index-to-workdir alone is `tree` against the files, and a
    declared snapshot (which refreshes only its paths) builds on `tree`, never on a
    stale cache that would drop files from the checkpoint.  Returns how many entries changed."""
    n = 0
    for delta in index.diff_to_tree(tree).deltas:   # old: the tree, new: the cache
        n += 1
        old, new = delta.old_file, delta.new_file
        if delta.status == DeltaStatus.ADDED:
            index.remove(new.raw_path)   # type: ignore[arg-type]  # pygit2 takes bytes paths (os.fsencode); its hints say str
        else:
            if delta.status == DeltaStatus.TYPECHANGE and new.raw_path:
                index.remove(new.raw_path)   # type: ignore[arg-type]  # as above
            index.add(pygit2.IndexEntry(old.raw_path, old.id, old.mode))   # type: ignore[arg-type]  # as above
    return n


def align_paths(index: pygit2.Index, tree, rels) -> bool:
    """`align` for a few paths only (those a restore just wrote, which the index took): each
    back to its entry in `tree`, or out.  False when one cannot be looked up (then `align`)."""
    try:
        for rel in rels:
            try:
                e = tree[rel]
            except KeyError:
                e = None
            if e is None or e.type_str == "tree":
                forget(index, rel)
            else:
                index.add(pygit2.IndexEntry(os.fsencode(rel), e.id, e.filemode))   # type: ignore[arg-type]
    except (ValueError, UnicodeError, GitError):
        return False
    return True


def forget(index: pygit2.Index, rel: str) -> None:
    try:
        if rel in index:
            index.remove(rel)
    except (GitError, OSError):
        pass


def _drop_uncapturable(index: pygit2.Index, report: ScanReport) -> None:
    """Skipped paths must not linger in the index with stale content."""
    for item in report.skipped:
        if item["path"] in index:
            forget(index, item["path"])
    for d in report.nested_repos:
        try:
            index.remove_directory(d)
        except (GitError, OSError):
            pass


def update_paths(repo: pygit2.Repository, index: pygit2.Index, scanner: Scanner, rels: list[str], *,
                 watched: bool = False, subtrees=()) -> None:
    """Bring just these entries up to date: a file call's declared paths, or the watcher's
    dirty set (`watched`: paths it saw change, reported only when they are omitted).
    `subtrees` (the watcher's unwatched ones, the watch limit) are walked after them, and the
    paths found changed there are appended to `rels` (the snapshot's tree is patched along it)."""
    _update_paths(repo, index, scanner, rels, watched)
    if subtrees and not scanner.report.aborted:
        rels += update_subtrees(repo, index, scanner, subtrees)


def _update_paths(repo, index, scanner: Scanner, rels: list[str], watched: bool) -> None:
    root = scanner.root
    todo: list[str] = []
    seen: dict[str, str | None] = {}
    for rel in rels:
        link = link_above(root, rel, seen)
        if link is not None:                  # below a folder that is a link now: the link
            _forget_tree(index, rel)
            if link not in todo:
                _forget_tree(index, link)
                todo.append(link)
            continue
        if in_git_dir(rel):
            if not watched:
                scanner.report.skip(rel, "inside_git_dir")
            continue
        nested = nested_ancestor(root, rel.split("/"))
        if nested:
            scanner.report.nested(nested)
            if not watched:
                scanner.report.skip(rel, "inside_nested_repo")
            continue
        todo.append(rel)
    for rel in todo:
        if scanner.deadline is not None and time.monotonic() > scanner.deadline:
            scanner.report.aborted = True
            return
        full = scanner.full(rel)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            _forget_tree(index, rel)
            continue
        except OSError as exc:
            scanner.report.omit(rel, exc)
            _forget_tree(index, rel)
            continue
        if stat.S_ISDIR(st.st_mode):
            scanner.report.whole_dirs = True
            if is_nested(full):
                scanner.report.nested(rel)
                _forget_tree(index, rel)
                continue
            _update_dir(repo, index, scanner, rel)
            continue
        if rel in index:
            try:
                index.remove_directory(rel)      # a directory became a file
            except (GitError, OSError):
                pass
        _update_file(repo, index, scanner, rel, full, report_ignored=not watched)


def _update_file(repo, index, scanner: Scanner, rel: str, full: bytes, *, report_ignored: bool = False) -> None:
    if rel not in index and is_ignored(repo, rel):
        if report_ignored:
            scanner.report.skip(rel, "ignored")
        return
    if scanner.visit(rel) != 0:
        forget(index, rel)
        return
    try:
        if scanner.objects is None or not add_file(repo, index, rel, full, scanner.objects, scanner.seen):
            index.add(rel)
        still_a_file(index, scanner.report, rel, full)
    except (GitError, OSError) as exc:
        forget(index, rel)        # never keep stale content under a name we could not read now
        if os.path.lexists(full):
            scanner.report.skip(rel, f"unreadable: {exc}")


def _update_dir(repo, index, scanner: Scanner, rel: str) -> None:
    """A directory that appeared or changed as a whole: walk just that subtree.  It reports
    the nested repositories it meets (the full scan has libgit2's diff name them); what it
    cannot list was either removed meanwhile or is reported by the next full scan."""
    if is_ignored(repo, rel + "/"):
        return
    seen = set()
    for d in walk(scanner.root, os.fsencode(rel), prune=ignored_dirs(repo), max_path=None):
        for repo_dir in d.nested:
            scanner.report.nested(os.fsdecode(repo_dir))
        cur = os.fsdecode(d.rel)
        for e in d.entries:
            sub = f"{cur}/{os.fsdecode(e.name)}"
            seen.add(sub)
            _update_file(repo, index, scanner, sub, e.path)
    prefix = rel + "/"
    for entry in [e.path for e in index if e.path.startswith(prefix)]:
        if entry not in seen and not os.path.lexists(scanner.full(entry)):
            index.remove(entry)


def _forget_tree(index, rel: str) -> None:
    try:
        if rel in index:
            index.remove(rel)
        index.remove_directory(rel)
    except (GitError, OSError):
        pass
