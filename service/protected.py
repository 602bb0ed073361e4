"""Protected paths: chronos-git's own record and code, out of reach of the calls it records.

The threat (issue 32): a prompt-injected agent, running tools as the user who owns the store,
uses chronos-git's own protected tools to damage chronos-git.  Two rules, both here:

* **Refusal** (`ProtectedSet.hits`): a call that declares its paths (write_file, patch, a
  replay, `chronos-git write`, a restore) is refused before anything runs when a target,
  resolved (symlinks followed, a path that does not exist yet by its parent; a hard link by
  its inode), is inside the protected set:
    - the store (its real folder),
    - the journal's witness and every other sidecar `<store>.*` beside the store (also beside
      a symlink that names the store),
    - the plugin's own files: the package folder of the running code and, when it is another
      folder, `$HERMES_HOME/plugins/chronos-git` (resolved).  In development that is the whole
      checkout the host loads: an agent protected by a checkout cannot edit that checkout.
      Run it against a separate install, or start the host with
      CHRONOS_GIT_ALLOW_PLUGIN_EDITS=1 (read once, from the host's own environment).
  Writes elsewhere, `$HERMES_HOME/config.yaml` included, are not this module's business.
* **Detection** (`Fingerprint`): a call without declared paths (a shell command, an unknown
  tool) cannot be refused by its target.  A stat fingerprint of the files chronos-git writes
  only when it creates the store (its `config`, `HEAD`, `info/`, `hooks/`, `refs/heads`,
  `objects/info/`, each workspace's `gitdir`/`config.worktree`, ...) and of `shallow` and
  `packed-refs`, with a mark in an inotify watch of the plugin's code folders (`CodeWatch`;
  stats of every code file where inotify cannot watch), is taken after the call's intent and
  compared right after it returns.  What chronos-git itself moves during a call (objects,
  `refs/chronos/`, the witness, the stat caches, `chronos/`), from this thread or any other,
  is not in it.  A change to `config`, `shallow` or `packed-refs` while a chronos-git
  maintenance event (retention, an orphan prune, a remote added or removed) was journaled,
  or while a compaction was running at the call's start, is chronos-git's, not the call's.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..engine import inotify
from ..engine.fsutil import realpath
from ..engine.inotify import (
    HEADER,
    IN_ATTRIB,
    IN_CLOEXEC,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_NONBLOCK,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
)

PACKAGE_DIR = Path(__file__).resolve().parent.parent     # the running code: the repository root in development
PLUGIN_NAME = "chronos-git"
ALLOW_PLUGIN_EDITS = "CHRONOS_GIT_ALLOW_PLUGIN_EDITS"
CODE_SUFFIXES = (".py", ".yaml", ".j2", ".js", ".json")
NOT_CODE = ("tests", "bench")        # in a checkout, not loaded by the plugin

# beside the store's files: written only when the store is created (or by the events named)
STORE_FILES = ("config", "HEAD", "description", "packed-refs", "shallow", "commondir",
               "objects/info/alternates", "objects/info/http-alternates")
STORE_DIRS = ("info", "hooks", "refs", "refs/heads", "refs/tags", "branches", "objects/info")
MAINTAINED = ("config", "packed-refs", "shallow")     # chronos-git changes them, journaling it first
WORKTREE_FILES = ("gitdir", "commondir", "config.worktree", "locked")
MAX_WORKTREES = 256
CODE = "\0code"                      # a fingerprint's key for the plugin code's inotify mark


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Hit:
    path: str           # as declared
    resolved: str       # where a write to it would land
    what: str           # "store" | "witness" | "plugin"


WHAT = {"store": "inside chronos-git's store", "witness": "the journal's witness (or another file "
        "chronos-git keeps beside its store)", "plugin": "one of chronos-git's own files (the plugin "
        "that records this agent's calls)"}


def plugin_roots(hermes_home: Path | None) -> list[Path]:
    """The folders of chronos-git's own code: the running package and the Hermes plugin folder
    (the same one when the latter is a symlink to it); none when the host allows edits."""
    if os.environ.get(ALLOW_PLUGIN_EDITS, "").strip() not in ("", "0"):
        return []
    roots = [PACKAGE_DIR]
    if hermes_home is not None:
        d = Path(realpath(hermes_home / "plugins" / PLUGIN_NAME))
        if d.is_dir() and d not in roots:
            roots.append(d)
    return roots


def _code_files(root: Path) -> list[str]:
    """The plugin's code below `root`: its top-level files and its Python packages (folders
    with an __init__.py, and dashboard/, desktop/, templates), not tests, docs or a venv.
    Files only: a folder's mtime also moves for an editor's swap file or a new __pycache__,
    and a file replaced by a rename has a new inode."""
    out: list[str] = []
    try:
        top = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    for e in top:
        if e.is_file(follow_symlinks=False) and e.name.endswith(CODE_SUFFIXES):
            out.append(e.path)
        elif (e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and e.name not in NOT_CODE
              and (os.path.exists(os.path.join(e.path, "__init__.py")) or e.name in ("dashboard", "desktop"))):
            for top_dir, dirs, files in os.walk(e.path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                out.extend(os.path.join(top_dir, f) for f in sorted(files) if f.endswith(CODE_SUFFIXES))
    return out


NOT_LOADED_DIRS = NOT_CODE + ("docs", "scripts")
NOT_LOADED_SUFFIXES = (".md", ".txt", ".png")


def _loaded_code(resolved: str, root: str | Path) -> bool:
    """Whether a path below a plugin folder may be loaded by Python or the plugin: everything but
    a checkout's hidden folders (.venv, .git, the benchmark's .bench-cache/), its tests, bench,
    docs and scripts, and top-level text.  A new top-level folder (`settings/__init__.py`
    shadows `settings.py`), `__pycache__/*.pyc` or an extension module (`settings.abi3.so`,
    imported before `settings.py`) is code, so it is all protected."""
    parts = Path(os.path.relpath(resolved, root)).parts
    if not parts or parts == (".",):
        return True
    if len(parts) == 1:
        return not parts[0].endswith(NOT_LOADED_SUFFIXES) or (Path(root) / parts[0]).is_dir()
    return not (parts[0].startswith(".") or parts[0] in NOT_LOADED_DIRS)


def _stamp(path: str):
    """What a change to `path` changes: inode, mode, size and times (a folder: inode, mode,
    mtime; folders we create are chmodded again at store opens, which moves only ctime)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return (st.st_ino, st.st_mode, st.st_mtime_ns)
    return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# ------------------------------------------------------------------ the plugin's code, watched
_WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
               | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
_KEPT_EVENTS = 4096


class CodeWatch:
    """An inotify watch on the folders of the plugin's code: what changed there since a mark.
    Two non-blocking reads per shell call instead of a stat of every code file (~2 us each
    on the test VM: 0.2 ms per fingerprint).  A write's event is queued before the write
    returns, so a call that has returned cannot have changes not yet readable.  One per
    process per set of folders (a few kept: an evicted one is closed, and
    its marks then name the folders).  Only a long-lived host (Hermes) watches: inotify
    instances are few per user (128 by default), and a CLI process makes one call."""

    _cache: OrderedDict[tuple[str, ...], CodeWatch] = OrderedDict()
    _cache_guard = threading.Lock()

    def __init__(self, dirs: tuple[str, ...]):
        lib = inotify.lib()
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available here")
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._fd, self._wds = fd, {}
        self._lock = threading.Lock()
        self._seq = 0
        self._events: deque[tuple[int, str]] = deque(maxlen=_KEPT_EVENTS)
        for d in dirs:
            wd = lib.inotify_add_watch(fd, os.fsencode(d), _WATCH_MASK)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {d}")
            self._wds[wd] = d

    @classmethod
    def get(cls, dirs: tuple[str, ...]) -> CodeWatch | None:
        """The watch of these folders, or None where inotify cannot watch them (stat instead)."""
        with cls._cache_guard:
            w = cls._cache.get(dirs)
            if w is None:
                try:
                    w = cls(dirs)
                except OSError:
                    return None
                cls._cache[dirs] = w
                while len(cls._cache) > 4:            # a host has one set; tests make many
                    cls._cache.popitem(last=False)[1].close()
            return w

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:       # noqa: BLE001 (interpreter shutdown)
            pass

    def _drain(self) -> None:
        while self._fd >= 0:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            off = 0
            while off + HEADER.size <= len(buf):
                wd, mask, _cookie, length = HEADER.unpack_from(buf, off)
                name = buf[off + HEADER.size: off + HEADER.size + length].rstrip(b"\0")
                off += HEADER.size + length
                self._seq += 1
                if mask & IN_Q_OVERFLOW:
                    self._events.append((self._seq, "*"))
                    continue
                d = self._wds.get(wd)
                if d is None or mask & IN_IGNORED:
                    continue
                if not name:
                    if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                        self._events.append((self._seq, d))          # the folder itself went
                    continue
                text = os.fsdecode(name)
                if text.endswith(CODE_SUFFIXES):       # not an editor's swap file, not __pycache__
                    self._events.append((self._seq, os.path.join(d, text)))

    def mark(self) -> int:
        with self._lock:
            self._drain()
            return self._seq

    def since(self, mark: int) -> list[str] | None:
        """Code files changed since `mark`; None when that cannot be told (the queue overflowed,
        or more events came than are kept): the caller names the folders."""
        with self._lock:
            self._drain()
            if self._fd < 0 or (self._events and self._events[0][0] > mark + 1
                                and len(self._events) == self._events.maxlen):
                return None
            out = {p for seq, p in self._events if seq > mark}
        if "*" in out:
            return None
        return sorted(out)


def compaction_running(store: str) -> bool:
    """Whether a compaction (or consolidation) holds the store's compaction lock now: a probe,
    never a wait (held for a few microseconds when free)."""
    try:
        fd = os.open(os.path.join(store, "chronos", "compact.lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class ProtectedSet:
    """The protected set of one store, resolved once per service."""

    def __init__(self, store_root: Path, witness: Path, plugin: Iterable[Path] = (), *, watch: bool = False):
        given = Path(os.path.abspath(store_root))
        real = Path(realpath(store_root))
        self.store = str(real)
        self.witness = realpath(witness)
        # sidecars: <store>.* beside the real folder and beside a link that names it
        self.sidecars = {(str(real.parent), real.name + "."), (realpath(given.parent), given.name + ".")}
        self.plugin = [str(Path(realpath(p))) for p in plugin]
        self._code = [f for root in self.plugin for f in _code_files(Path(root))]
        dirs = tuple(sorted({os.path.dirname(f) for f in self._code} | set(self.plugin)))
        self._watch = CodeWatch.get(dirs) if self._code and watch else None
        self._store_keys = [os.path.join(self.store, f) for f in STORE_FILES]
        self._store_dirs = [os.path.join(self.store, d) for d in STORE_DIRS]
        self._maintained = {os.path.join(self.store, f) for f in MAINTAINED}

    # ------------------------------------------------------------ refusal
    def classify(self, resolved: str) -> str | None:
        if within(resolved, self.store):
            return "store"
        if resolved == self.witness:
            return "witness"
        parent, name = os.path.split(resolved)
        if any(parent == d and name.startswith(prefix) for d, prefix in self.sidecars):
            return "witness"
        if any(within(resolved, root) and _loaded_code(resolved, root) for root in self.plugin):
            return "plugin"
        return None

    def hits(self, paths: Iterable[str]) -> list[Hit]:
        """The declared paths a call may not write, with where each would land."""
        out = []
        inodes = None
        for p in paths:
            resolved = realpath(p)
            what = self.classify(resolved)
            if what is None:
                try:
                    st = os.stat(resolved)
                except OSError:
                    st = None
                if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    # a hard link of a protected file: writing it in place writes that file
                    if inodes is None:
                        inodes = self._inodes()
                    what = inodes.get((st.st_dev, st.st_ino))
            if what is not None:
                out.append(Hit(p, resolved, what))
        return out

    def _inodes(self) -> dict[tuple[int, int], str]:
        out: dict[tuple[int, int], str] = {}
        for what, files in (("store", self._store_keys + self._dir_entries()), ("witness", [self.witness]),
                            ("plugin", self._code)):
            for f in files:
                try:
                    st = os.stat(f)
                except OSError:
                    continue
                out[(st.st_dev, st.st_ino)] = what
        return out

    # ---------------------------------------------------------- detection
    def _dir_entries(self) -> list[str]:
        out: list[str] = []
        for d in ("info", "hooks"):
            try:
                out.extend(e.path for e in os.scandir(os.path.join(self.store, d)))
            except OSError:
                pass
        return out

    def _worktree_files(self) -> list[str]:
        base = os.path.join(self.store, "worktrees")
        try:
            ids = sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
        except OSError:
            return []
        return [os.path.join(base, i, f) for i in ids[:MAX_WORKTREES] for f in WORKTREE_FILES]

    def fingerprint(self) -> dict[str, object]:
        """Path -> stamp of everything the detection watches (see the module docstring)."""
        fp = {p: _stamp(p) for p in self._store_keys}
        fp.update((p, _stamp(p)) for p in self._store_dirs)
        fp.update((p, _stamp(p)) for p in self._dir_entries())
        if self._watch is not None:
            fp[CODE] = self._watch.mark()
        else:
            fp.update((p, _stamp(p)) for p in self._code)
        fp.update((p, ("wt", _stamp(p))) for p in self._worktree_files())
        return fp

    def code_stamps(self) -> dict[str, object]:
        return {p: _stamp(p) for p in self._code}

    def changed(self, before: dict[str, object], after: dict[str, object]) -> tuple[list[str], list[str]]:
        """(paths that changed, of those the ones chronos-git's maintenance may change)."""
        out, maintained = [], []
        if CODE in before:
            code = self._watch.since(before[CODE]) if self._watch is not None else None  # type: ignore[arg-type]
            out.extend(code if code is not None else self.plugin)   # overflowed: the folders, unknown what
        for p in sorted((set(before) | set(after)) - {CODE}):
            a, b = before.get(p), after.get(p)
            if a == b:
                continue
            if a is None and isinstance(b, tuple) and b[:1] == ("wt",):
                continue                # a workspace registered meanwhile (another thread's call)
            out.append(p)
            if p in self._maintained or (b in (None, ("wt", None)) and isinstance(a, tuple) and a[:1] == ("wt",)):
                maintained.append(p)    # ... or an orphan workspace pruned (journaled first)
        return out, maintained
