"""Knowing what changed without walking the tree: an inotify dirty set.

A full scan of a 78k-file tree costs ~0.5 s of lstat calls even when nothing
changed.  The watcher keeps the set of paths touched since the last scan, so
a snapshot only refreshes those.  It is trusted only when that is provably
complete; otherwise the caller falls back to a full scan:

* the watcher must have been watching before the previous scan started;
* no queue overflow (IN_Q_OVERFLOW), no directory moved (its watch
  descriptors would name the old path), no .gitignore change, no error;
* the kernel queue is drained synchronously before every take(): events of a
  write are queued before the write syscall returns, so a tool that has
  returned cannot have changes we have not seen.

New directories get a watch and are reported whole (files created in them
before the watch existed are then found by scanning the directory).
Linux only; elsewhere `available()` is False and every snapshot is a full scan.

The per-user watch limit (fs.inotify.max_user_watches) is not an error but a degraded mode:
the watches made stay, a directory refused one (ENOSPC) is remembered with everything below
it (`walks`: those subtrees), and a snapshot refreshes the dirty set plus a stat-cache walk of
just those subtrees (engine/scan.py's update_subtrees).  A refused directory's own creation,
removal or rename is an event of its watched parent; nothing inside it needs one.  `state()`
says so, with the sysctl command that ends it (docs/performance.md, "The watch limit").
"""
from __future__ import annotations

import ctypes
import errno
import heapq
import os
import select
import threading

from .inotify import (
    HEADER as _HDR,
    IN_ATTRIB,
    IN_CLOEXEC,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_EXCL_UNLINK,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_NONBLOCK,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    lib as _lib,
)
from .worktree import in_git_dir, walk

LIMIT_FILE = "/proc/sys/fs/inotify/max_user_watches"
CAP: int | None = None       # tests only: refuse watches beyond this many (the sysctl is machine-wide)

MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
MAX_DIRTY = 50_000           # beyond this a full scan is cheaper than the bookkeeping


def available() -> bool:
    try:
        return _lib() is not None
    except OSError:
        return False


def kernel_limit() -> int | None:
    try:
        with open(LIMIT_FILE) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def limit_fix(in_use: int, missing: int, limit: int | None) -> dict:
    """The sysctl that ends a degraded mode: the limit (which this user's other programs share:
    it was reached, so they hold about `limit - in_use`) plus the directories not watched, 25 %
    headroom, rounded up to a multiple of 8192."""
    need = max(limit or 0, in_use) + missing
    n = -(-need * 5 // 4 // 8192) * 8192
    setting = f"fs.inotify.max_user_watches={n}"
    return {"max_user_watches": limit, "suggested": n, "fix": f"sudo sysctl {setting}",
            "fix_permanent": f"echo {setting} | sudo tee /etc/sysctl.d/60-chronos-git.conf"}


class Watcher:
    def __init__(self, root: bytes, skip_dir=None, max_watches: int | None = None):
        """`skip_dir(rel: str) -> bool` says which directories not to watch (ignored ones; the
        walk never watches `.git` or nested repositories below a watched directory).
        `max_watches` (tests only, else CAP): refuse watches beyond it as the kernel's limit would."""
        self.root = root.rstrip(b"/") or b"/"
        self.skip_dir = skip_dir or (lambda rel: False)
        self._cap = max_watches if max_watches is not None else CAP
        self._ready = threading.Event()         # the first watches are all added
        self.on_ready = None                    # called (on the watcher's thread) once they are
        self._unwatched: dict[bytes, int] = {}  # refused a watch (ENOSPC) -> directories in its subtree
        self._walks: tuple[str, ...] = ()      # the refused subtrees at the last take()
        self._lock = threading.RLock()
        self._fd = -1
        self._wd: dict[int, bytes] = {}        # watch descriptor -> relative dir path (b"" = root)
        self._dirty: dict[str, int] = {}      # path -> number of its latest event
        self._seq = 0                          # events numbered in arrival order (see mark)
        self._trusted = False                  # complete since the last take()?
        self._why = "not started"
        self._rewatch = False                  # ignore rules changed: directories may need watches
        self._thread: threading.Thread | None = None
        self._stop = False
        self.stats = {"events": 0, "overflows": 0, "watches": 0, "untrusted_takes": 0}

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Watcher:
        lib = _lib()
        if lib is None:
            self._why = "inotify is not available on this platform"
            return self
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            self._why = f"inotify_init1 failed: {os.strerror(ctypes.get_errno())}"
            return self
        with self._lock:
            self._fd = fd
            self._trusted = False
            self._why = "adding watches"
        # the watches are added on the watcher's thread: at a million files (75,000 folders)
        # that takes seconds, which a caller (a first call, its turn checkpoint) must not wait
        # for; whatever needs the dirty set (take, mark) waits on the lock the setup holds
        self._thread = threading.Thread(target=self._setup_then_run, name="chronos-git-watcher", daemon=True)
        self._thread.start()
        return self

    def ready(self, timeout: float | None = None) -> bool:
        """Wait until the first watches are added (tests, the benchmark)."""
        return self._ready.wait(timeout)

    def _setup_then_run(self) -> None:
        with self._lock:
            if self._fd >= 0:
                ok = self._watch_tree(b"")
                # Until the first take() the set is incomplete by definition: the
                # caller's first snapshot after start must be a full scan.
                self._trusted = False
                self._why = "watching; waiting for the first full scan" if ok else self._why
            self._ready.set()
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception:                   # noqa: BLE001 - a notice must not stop the watcher
                pass
        self._run()

    def stop(self) -> None:
        self._stop = True
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._trusted = False
            self._why = "stopped"

    @property
    def trusted(self) -> bool:
        """Whether the dirty set is provably complete since the last take()."""
        return self._trusted

    @property
    def why(self) -> str:
        """Why it is (not) trusted, for `health`."""
        return self._why

    @property
    def running(self) -> bool:
        return self._fd >= 0

    @property
    def walks(self) -> tuple[str, ...]:
        """The subtrees no watch covered during the period the last take() ended: a snapshot
        that trusts that take walks them (degraded mode; empty when every directory is watched)."""
        return self._walks

    def state(self) -> dict:
        """For `health` and `status`: the mode, the watches, what is not watched and the fix
        (while the watches are being added: how many so far, without waiting for them)."""
        if not self._ready.is_set() and self._fd >= 0:
            return {"mode": "starting", "running": True, "trusted": False, "why": self._why,
                    **self.stats, "watches": len(self._wd), "unwatched_dirs": 0, "unwatched": []}
        with self._lock:
            unwatched = sum(self._unwatched.values())
            mode = ("off" if self._fd < 0 else "degraded: watch limit" if self._unwatched else "watching")
            out = {"mode": mode, "running": self._fd >= 0, "trusted": self._trusted, "why": self._why,
                   **self.stats, "watches": len(self._wd), "unwatched_dirs": unwatched,
                   "unwatched": [os.fsdecode(r) or "." for r in heapq.nsmallest(5, self._unwatched)]}
            if self._unwatched:
                out.update(limit_fix(len(self._wd), unwatched, max(kernel_limit() or 0, self._cap or 0) or None))
            return out

    # ----------------------------------------------------------------- public
    def take(self) -> tuple[bool, set[str], str]:
        """(trusted, dirty paths relative to root, why-not) and start a new period.

        After an untrusted take the caller must do a full scan; the period
        that starts now is trusted unless something breaks it again.
        """
        with self._lock:
            self._drain()
            trusted, dirty, why = self._trusted, set(self._dirty), self._why
            self._dirty = {}
            self._walks = tuple(sorted(os.fsdecode(r) for r in self._unwatched))
            if self._unwatched and self._fd >= 0 and not self._rewatch:
                self._heal()
            if self._rewatch and self._fd >= 0:
                # before the caller's full walk: a directory that stopped being
                # ignored is watched from now on, and the walk covers the gap
                self._rewatch = False
                self._unwatched.clear()         # the walk finds the refused ones again
                self._watch_tree(b"")
            if self._fd >= 0:
                self._trusted, self._why = True, "ok"
            if not trusted:
                self.stats["untrusted_takes"] += 1
            return trusted, dirty, why

    def quiet(self) -> bool:
        """Trusted, and nothing changed since the last take() (the kernel queue drained
        first).  Unlike take() it starts no new period."""
        with self._lock:
            self._drain()
            return self._trusted and not self._dirty and not self._rewatch and not self._unwatched

    def mark(self) -> int:
        """The kernel queue drained: every event so far is numbered at most this.  A refresh
        that reads some paths after its mark holds what those events announced."""
        with self._lock:
            self._drain()
            return self._seq

    def covered(self, rels, mark: int) -> bool:
        """A refresh that read `rels` after `mark` made a checkpoint: their events up to the
        mark need no second refresh (a later event keeps its path dirty).  Returns quiet()."""
        with self._lock:
            self._drain()
            for rel in rels:
                if self._dirty.get(rel, mark + 1) <= mark:
                    del self._dirty[rel]
            return self._trusted and not self._dirty and not self._rewatch and not self._unwatched

    def untrust(self, why: str) -> None:
        with self._lock:
            self._trusted = False
            self._why = why

    # --------------------------------------------------------------- internals
    def _full(self, rel: bytes) -> bytes:
        return os.path.join(self.root, rel) if rel else self.root

    def _add_watch(self, rel: bytes) -> bool:
        """Watch one directory.  Refused for the watch limit (ENOSPC), it joins the refused
        subtrees (True: degraded, not untrusted); any other refusal makes the watcher untrusted."""
        if self._cap is not None and len(self._wd) >= self._cap and rel not in self._wd.values():
            wd, err = -1, errno.ENOSPC
        else:
            wd = _lib().inotify_add_watch(self._fd, self._full(rel), MASK)
            err = ctypes.get_errno() if wd < 0 else 0
        if wd < 0:
            if err in (errno.ENOENT, errno.ENOTDIR):
                return True                     # gone already: its parent's event covers it
            if err == errno.ENOSPC:
                self._unwatched[rel] = 1        # walked by every snapshot until a watch is had
                return True
            self._trusted = False
            self._why = f"cannot watch {os.fsdecode(self._full(rel))}: {os.strerror(err)}"
            return False
        self._unwatched.pop(rel, None)
        self._wd[wd] = rel
        self.stats["watches"] = len(self._wd)
        return True

    def _watch_tree(self, rel: bytes) -> bool:
        """Watch `rel` and every directory below it the work tree's walk lists (engine/worktree.py),
        each before it is listed.  No depth limit: a directory too deep to watch makes the
        watcher untrusted, and snapshots walk (and name it) instead.  Below a directory refused
        for the watch limit nothing is asked of the kernel: its directories are only counted."""
        if not self._add_watch(rel):
            return False
        ok = True
        below: dict[bytes, bytes] = {rel: rel} if rel in self._unwatched else {}   # dir -> its refused root
        for d in walk(self.root, rel, prune=self.skip_dir, max_path=None):
            top = below.pop(d.rel, None)
            for sub in d.dirs:
                if top is not None:
                    below[sub] = top
                    self._unwatched[top] += 1
                    continue
                ok = self._add_watch(sub) and ok
                if sub in self._unwatched:
                    below[sub] = sub
            if not ok:
                break
        return ok

    def _heal(self) -> None:
        """At a take(): try the refused subtrees again (watches may have been freed); the first
        refusal ends the attempt (one syscall while the limit holds).  The take's `walks` still
        hold them: the snapshot walks them after their new watches exist, so nothing falls through."""
        for rel in sorted(self._unwatched):
            count = self._unwatched.get(rel)
            if count is None:
                continue                        # counted below another one retried just now
            del self._unwatched[rel]
            if not self._add_watch(rel) or rel in self._unwatched:
                self._unwatched[rel] = count
                return
            self._watch_tree(rel)

    def _forget_unwatched(self, rel: bytes) -> None:
        """`rel` is gone or moved: no refused subtree at or below it remains."""
        if rel == b"":
            self._unwatched.clear()
            return
        prefix = rel + b"/"
        for r in [r for r in self._unwatched if r == rel or r.startswith(prefix)]:
            del self._unwatched[r]

    def _run(self) -> None:
        while not self._stop:
            fd = self._fd
            if fd < 0:
                return
            try:
                r, _, _ = select.select([fd], [], [], 1.0)
            except (OSError, ValueError):
                return
            if r:
                with self._lock:
                    self._drain()

    def _drain(self) -> None:
        if self._fd < 0:
            self._trusted = False
            return
        while True:
            try:
                buf = os.read(self._fd, 256 * 1024)
            except BlockingIOError:
                return
            except OSError as exc:
                self._trusted = False
                self._why = f"inotify read failed: {exc}"
                return
            if not buf:
                return
            self._parse(buf)

    def _parse(self, buf: bytes) -> None:
        off = 0
        n = len(buf)
        while off + _HDR.size <= n:
            wd, mask, _cookie, length = _HDR.unpack_from(buf, off)
            name = buf[off + _HDR.size: off + _HDR.size + length].rstrip(b"\0")
            off += _HDR.size + length
            self.stats["events"] += 1
            if mask & IN_Q_OVERFLOW:
                self.stats["overflows"] += 1
                self._trusted, self._why = False, "inotify queue overflowed"
                continue
            if mask & IN_IGNORED:
                self._wd.pop(wd, None)
                continue
            base = self._wd.get(wd)
            if base is None:
                continue
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                if base == b"":
                    self._trusted, self._why = False, "the workspace directory itself was moved or deleted"
                continue
            if not name:                # the watched directory itself (a chmod): its own path
                if not base:
                    continue            # the workspace root: not a path of the tree
                rel = base
            else:
                rel = os.path.join(base, name) if base else name
            if in_git_dir(rel):
                continue
            srel = os.fsdecode(rel)
            if name == b".gitignore":
                self._trusted, self._why = False, f"{srel} changed (ignore rules)"
                self._rewatch = True
            if mask & IN_ISDIR:
                if mask & (IN_DELETE | IN_MOVED_FROM) and self._unwatched:
                    self._forget_unwatched(rel)
                if mask & (IN_MOVED_FROM | IN_MOVED_TO):
                    # watch descriptors below a moved directory still carry the old path
                    self._trusted, self._why = False, f"directory {srel} was moved"
                    self._rewatch_after_move(rel)
                elif mask & IN_CREATE and not self.skip_dir(srel):
                    self._watch_tree(rel)
            self._seq += 1
            self._dirty[srel] = self._seq
            if len(self._dirty) > MAX_DIRTY:
                self._trusted, self._why = False, "too many changes since the last scan"
                self._dirty.clear()

    def _rewatch_after_move(self, rel: bytes) -> None:
        prefix = rel + b"/"
        for wd, p in list(self._wd.items()):
            if p == rel or p.startswith(prefix):
                _lib().inotify_rm_watch(self._fd, wd)
                self._wd.pop(wd, None)
        self._forget_unwatched(rel)
        if os.path.isdir(self._full(rel)) and not self.skip_dir(os.fsdecode(rel)):
            self._watch_tree(rel)
