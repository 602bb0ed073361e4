"""The shadow store: one bare git repository per Hermes profile.

Layout (the store directory IS a bare git directory, so plain `git --git-dir`
works on it):

    <store>/                     objects, refs, config: shared by everything
    <store>/worktrees/<id>/      one linked gitdir per workspace: its own HEAD,
                                 index (stat cache) and config.worktree; libgit2
                                 takes the work tree from the `gitdir` file, so
                                 nothing is ever written into the workspace
    <store>/chronos/             our lock files and workspace scratch space

Snapshots live on `refs/chronos/snapshots/<id>`, the tool-call journal on
`refs/chronos/journal` (see journal_refs), all in one object graph.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pygit2

from . import locking
from .config import EngineConfig
from .errors import StoreError
from .fsutil import make_private_dir

SIGNATURE_NAME = "chronos-git"
SIGNATURE_EMAIL = "chronos-git@localhost"
STALE_TMP_AGE_S = 3600.0

_BASE_CONFIG = {
    "core.repositoryformatversion": "1",
    "extensions.worktreeConfig": "true",   # per-workspace excludesFile
    "core.bare": "true",
    "core.autocrlf": "false",
    "core.safecrlf": "false",
    "core.symlinks": "true",
    "core.filemode": "true",
    "core.ignorecase": "false",
    "core.logAllRefUpdates": "false",      # the journal and the checkpoint chains are the logs;
                                           # reflogs would pin checkpoints retention drops
    "core.fsync": "all",                   # for git CLI users of the store
    "gc.auto": "0",                        # never an auto-gc behind our back
    "gc.worktreePruneExpire": "never",     # our linked gitdirs have no .git to point at
    "gc.reflogExpire": "never",
    "gc.reflogExpireUnreachable": "never",
    "user.name": SIGNATURE_NAME,
    "user.email": SIGNATURE_EMAIL,
}


def signature(when: float | None = None) -> pygit2.Signature:
    t = int(when if when is not None else time.time())
    return pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL, t, 0)


class Store:
    """Opened once per process per store path; cheap to share between threads."""

    _instances: dict[str, "Store"] = {}
    _instances_guard = threading.Lock()

    def __init__(self, root: Path, config: EngineConfig):
        self.root = root
        self.config = config
        self.meta_dir = root / "chronos"
        self.maintenance = locking.ReadWriteLock(self.meta_dir / "maintenance.lock")
        self._local = threading.local()
        self._workspaces: dict[str, object] = {}
        self._ws_guard = threading.Lock()

    # ------------------------------------------------------------------ open
    @classmethod
    def open(cls, root: os.PathLike | str, config: EngineConfig | None = None) -> "Store":
        root = Path(os.path.abspath(os.fspath(root)))
        config = config or EngineConfig()
        with cls._instances_guard:
            inst = cls._instances.get(str(root))
            if inst is None or inst.config != config:
                inst = cls(root, config)
                inst._init_on_disk()
                cls._instances[str(root)] = inst
            return inst

    def _init_on_disk(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store path {self.root} exists and is not a directory")
        make_private_dir(self.root)
        make_private_dir(self.meta_dir)
        with locking.exclusive(self.meta_dir / "init.lock"):
            if not (self.root / "HEAD").exists():
                if any(p.name not in ("chronos",) for p in self.root.iterdir()):
                    raise StoreError(
                        f"store path {self.root} is not empty and is not a chronos-git store")
                pygit2.init_repository(str(self.root), bare=True)
            repo = pygit2.Repository(str(self.root))
            cfg = repo.config
            for key, value in _BASE_CONFIG.items():
                try:
                    current = cfg[key]
                except KeyError:
                    current = None
                if current != value:
                    cfg[key] = value
            info = self.root / "info"
            info.mkdir(exist_ok=True)
            attrs = info / "attributes"
            want = b"* -text -ident -filter\n"   # store exact bytes; never unset `diff`
            if not attrs.exists() or attrs.read_bytes() != want:
                attrs.write_bytes(want)
            for sub in ("objects", "refs", "worktrees"):
                make_private_dir(self.root / sub)
            os.chmod(self.root, 0o700)

    # ----------------------------------------------------------------- repos
    def repo(self) -> pygit2.Repository:
        """This thread's handle on the common repository (libgit2 objects are not thread-safe)."""
        r = getattr(self._local, "repo", None)
        if r is None:
            r = pygit2.Repository(str(self.root))
            self._local.repo = r
        return r

    def workspace(self, path: os.PathLike | str):
        from .workspace import Workspace, canonical_root
        root = canonical_root(path)
        key = os.fsdecode(root)
        with self._ws_guard:
            ws = self._workspaces.get(key)
            if ws is None:
                ws = Workspace(self, root)
                self._workspaces[key] = ws
            return ws

    def workspaces(self) -> list:
        """Every workspace that has a gitdir in this store."""
        from .workspace import Workspace
        out = []
        wt = self.root / "worktrees"
        for d in sorted(wt.iterdir()) if wt.exists() else ():
            gitdir_file = d / "gitdir"
            if not gitdir_file.exists():
                continue
            raw = gitdir_file.read_bytes().rstrip(b"\n")
            root = Path(os.fsdecode(raw)).parent
            key = os.fsdecode(root)
            with self._ws_guard:
                ws = self._workspaces.get(key)
                if ws is None:
                    ws = Workspace(self, root, verify=False)
                    self._workspaces[key] = ws
            out.append(ws)
        return out

    # ----------------------------------------------------------------- locks
    def lock(self, name: str):
        return locking.exclusive(self.meta_dir / f"{name}.lock")

    @contextmanager
    def writing(self):
        """Held (shared) by everything that writes objects; compaction takes it alone."""
        with self.maintenance.shared():
            yield

    def clear_stale_git_lock(self, lock_file: Path, *, max_age_s: float = 0.0) -> bool:
        """Remove a git `*.lock` left by a killed process.

        Callers must hold the chronos lock that every writer of that file takes,
        which proves no live writer owns it.
        """
        try:
            st = lock_file.stat()
        except FileNotFoundError:
            return False
        if max_age_s and time.time() - st.st_mtime < max_age_s:
            return False
        try:
            lock_file.unlink()
        except FileNotFoundError:
            return False
        return True

    def clear_stale_temp_objects(self) -> int:
        """Remove libgit2/git/our temp files (aborted loose objects and packs). Caller holds maintenance exclusively."""
        import shutil
        n = 0
        now = time.time()
        objects = self.root / "objects"
        for d in list(objects.iterdir()) if objects.exists() else ():
            if not d.is_dir():
                continue
            for f in d.iterdir():
                if not (f.name.startswith(("tmp_", "pack_git2_", ".tmp-", "tmp-compact-"))
                        or f.name.endswith(".tmp")):
                    continue
                try:
                    if d.name == "pack" or now - f.stat().st_mtime > STALE_TMP_AGE_S:
                        if f.is_dir():
                            shutil.rmtree(f, ignore_errors=True)
                        else:
                            f.unlink()
                        n += 1
                except FileNotFoundError:
                    pass
        return n
