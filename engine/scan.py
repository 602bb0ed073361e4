"""Bringing a workspace's persistent index up to date with the files on disk.

libgit2's `git_index_add_all` walks the work tree against the index's stat
cache and calls us back only for paths that changed, which is where we skip
what must not be captured (nested repositories, oversize files, FIFOs) and
where a snapshot budget can stop the work.  pygit2 does not pass a callback,
so we call the C function through pygit2's own cffi handle.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

import pygit2
from pygit2 import GitError

try:  # pygit2 internals, checked once; without them we fall back to plain add_all
    from pygit2 import C as _C, ffi as _ffi
    from pygit2.errors import check_error as _check_error
    from pygit2.utils import StrArray as _StrArray
    _HAVE_CALLBACK = hasattr(_C, "git_index_add_all")
except Exception:  # pragma: no cover - depends on pygit2 build
    _HAVE_CALLBACK = False

ADD_DISABLE_PATHSPEC_MATCH = 4
TRANSIENT_MARKERS = (
    "changed before we could read it", "could not find", "failed to read", "error reading",
    "failed to stat", "no such file", "not found", "unable to", "invalid path",
    "index is locked", "failed to open",
)
RETRIES = 3


@dataclass
class ScanReport:
    skipped: list[dict] = field(default_factory=list)
    nested_repos: list[str] = field(default_factory=list)
    added_bytes: int = 0
    aborted: bool = False          # the deadline stopped the scan: the result is partial
    fallback: bool = False         # per-path fallback was needed
    _seen_skip: set = field(default_factory=set)

    def skip(self, path: str, reason: str, size: int | None = None) -> None:
        if path in self._seen_skip:
            return
        self._seen_skip.add(path)
        item = {"path": path, "reason": reason}
        if size is not None:
            item["size"] = size
        self.skipped.append(item)

    def nested(self, path: str) -> None:
        if path not in self.nested_repos:
            self.nested_repos.append(path)


class Scanner:
    def __init__(self, root: bytes, max_file_bytes: int, deadline: float | None):
        self.root = root
        self.cap = max_file_bytes
        self.deadline = deadline
        self.report = ScanReport()

    def _full(self, rel: str) -> bytes:
        return os.path.join(self.root, os.fsencode(rel))

    def visit(self, rel: str) -> int:
        """0 = let libgit2 add/remove the path, 1 = skip it, -1 = stop (budget)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.report.aborted = True
            return -1
        if rel.endswith("/"):
            d = rel[:-1]
            if os.path.lexists(os.path.join(self._full(d), b".git")):
                self.report.nested(d)
                return 1
            return 0
        full = self._full(rel)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return 0                       # a deletion: libgit2 removes the entry
        mode = st.st_mode
        if stat.S_ISREG(mode):
            if self.cap and st.st_size > self.cap:
                self.report.skip(rel, "too_large", st.st_size)
                return 1
            self.report.added_bytes += st.st_size
            return 0
        if stat.S_ISLNK(mode):
            return 0
        if stat.S_ISDIR(mode):
            if os.path.lexists(os.path.join(full, b".git")):
                self.report.nested(rel)
                return 1
            return 0
        self.report.skip(rel, "not_a_regular_file")
        return 1


def _add_all_with_callback(index: pygit2.Index, scanner: Scanner, pathspecs: list[str] | None,
                           literal: bool) -> None:
    if not _HAVE_CALLBACK:
        index.add_all(pathspecs or [])
        return

    error: list[BaseException] = []

    @_ffi.callback("git_index_matched_path_cb")
    def cb(path, _spec, _payload):
        try:
            return scanner.visit(os.fsdecode(_ffi.string(path)))
        except BaseException as exc:  # never let an exception cross the C boundary
            error.append(exc)
            return -1

    flags = ADD_DISABLE_PATHSPEC_MATCH if literal else 0
    with _StrArray(pathspecs or None) as arr:
        err = _C.git_index_add_all(index._index, arr.ptr, flags, cb, _ffi.NULL)
    if error:
        raise error[0]
    if scanner.report.aborted:
        return
    _check_error(err, io=True)


def _transient(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return any(m in msg for m in TRANSIENT_MARKERS)


def update_all(repo: pygit2.Repository, index: pygit2.Index, scanner: Scanner,
               pathspecs: list[str] | None = None) -> ScanReport:
    """Bring the whole index (or the given paths) up to date; never raises for one bad file."""
    last: BaseException | None = None
    for attempt in range(RETRIES + 1):
        try:
            _add_all_with_callback(index, scanner, pathspecs, literal=bool(pathspecs))
            last = None
            break
        except (GitError, OSError) as exc:
            if scanner.report.aborted:
                break
            last = exc
            if not _transient(exc):
                break
            time.sleep(0.01 * (attempt + 1) ** 2)
    if last is not None:
        _per_path(repo, index, scanner, pathspecs)
    _drop_uncapturable(index, scanner.report)
    return scanner.report


def _per_path(repo, index, scanner: Scanner, pathspecs) -> None:
    """Last resort: one path at a time, skipping (and reporting) what fails."""
    scanner.report.fallback = True
    flags = (pygit2.enums.DiffOption.INCLUDE_UNTRACKED
             | pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS)
    diff = None
    for _ in range(3):
        try:
            diff = index.diff_to_workdir(flags=flags)
            break
        except (GitError, OSError):
            time.sleep(0.02)
    if diff is None:
        scanner.report.skip(".", "workspace_unreadable")
        return
    prefixes = [p.rstrip("/") for p in pathspecs] if pathspecs else None
    for delta in diff.deltas:
        if delta.status == pygit2.enums.DeltaStatus.DELETED:
            rel = delta.old_file.path
        else:
            rel = delta.new_file.path
        if prefixes and not any(rel == p or rel.startswith(p + "/") for p in prefixes):
            continue
        if scanner.deadline is not None and time.monotonic() > scanner.deadline:
            scanner.report.aborted = True
            return
        try:
            if delta.status == pygit2.enums.DeltaStatus.DELETED:
                index.remove(rel)
                continue
            verdict = scanner.visit(rel)
            if verdict != 0:
                continue
            if rel.endswith("/"):
                continue
            index.add(rel)
        except (GitError, OSError) as exc:
            if not os.path.lexists(scanner._full(rel.rstrip("/"))):
                try:
                    index.remove(rel)
                except (GitError, OSError):
                    pass
                continue
            scanner.report.skip(rel, f"unreadable: {exc}")


def _drop_uncapturable(index: pygit2.Index, report: ScanReport) -> None:
    """Skipped paths must not linger in the index with stale content."""
    for item in report.skipped:
        if item["reason"] == "too_large" and item["path"] in index:
            index.remove(item["path"])
    for d in report.nested_repos:
        try:
            index.remove_directory(d)
        except (GitError, OSError):
            pass
