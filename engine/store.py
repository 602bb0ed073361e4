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

import errno
import os
import sys
import threading
import time
from pathlib import Path

import pygit2

from . import locking, metadir
from .checkpoint import SIGNATURE_EMAIL, SIGNATURE_NAME
from .config import EngineConfig
from .errors import StoreError, StoreUnwritable, explain
from .fsutil import atomic_write, make_private_dir
from .layout import canonical_root
from .workspace import Workspace

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
    # compaction's pack builder, bounded (libgit2 reads both when a builder is made): its
    # delta cache, which libgit2 also takes as the size above which it computes no delta
    # (64m: above the default max_file_size_mb), and its delta window
    "pack.deltaCacheSize": "64m",
    "pack.windowMemory": "32m",
    "user.name": SIGNATURE_NAME,
    "user.email": SIGNATURE_EMAIL,
}


_ATTRIBUTES = b"* -text -ident -filter\n"   # store exact bytes; never unset `diff`

BASE_CONFIG = _BASE_CONFIG      # what the store audit (engine/store_audit.py) allows, and nothing more
ATTRIBUTES = _ATTRIBUTES


def ignore_user_git_config() -> None:
    """libgit2 reads no global, XDG, system or ProgramData config in this process: the store
    is configured by its own `config` only (a `~/.gitconfig` with `url.*.insteadOf`, an
    `[include]` or a `core.attributesFile` would otherwise redirect pushes or change what
    snapshots store).  Process-wide and idempotent; set before the first repository opens.
    The user's own `.git` is read by engine/usergit.py in Python, which still reads the
    user's global config for what git itself would do there (content conversion)."""
    levels = pygit2.enums.ConfigLevel
    for level in (levels.GLOBAL, levels.XDG, levels.SYSTEM, levels.PROGRAMDATA):
        try:
            if pygit2.settings.search_path[level] != "":
                pygit2.settings.search_path[level] = ""
        except (pygit2.GitError, ValueError, KeyError, AttributeError):
            pass


ignore_user_git_config()


class StoreMissing(StoreError):
    code = "store_missing"


def _config_value(cfg, key: str):
    try:
        return cfg[key]
    except KeyError:
        return None


_INIT_DIRS = {"chronos", "objects", "refs", "hooks", "info", "branches"}


def _chronos_refs(root: Path) -> bool:
    """Whether the repository at `root` has a store's own refs (checkpoints, the journal); a
    remote that stores were pushed to holds only `refs/chronos/hosts/...`, and is not a store."""
    ours = root / "refs" / "chronos"
    for top, dirs, files in os.walk(ours):
        if Path(top) == ours:
            dirs[:] = [d for d in dirs if d != "hosts"]
        if files:
            return True
    try:
        packed = (root / "packed-refs").read_bytes()
    except OSError:
        return False
    return any(line.split(b" ", 1)[-1].startswith(b"refs/chronos/")
               and not line.split(b" ", 1)[-1].startswith(b"refs/chronos/hosts/") for line in packed.splitlines())


def _no_refs_or_objects(root: Path) -> bool:
    """A repository as `git init` leaves it: no ref and no object yet."""
    if (root / "packed-refs").exists():
        return False
    return not any(files for sub in ("refs", "objects") for _, _, files in os.walk(root / sub))


def _torn_init(root: Path) -> bool:
    """Nothing but what `git init` writes (HEAD comes last) and our own folder, with no object,
    ref or file of anyone else's in it: an empty folder, or one a process was killed while
    creating the store in; safe to init again (never someone's folder: a clear error)."""
    for entry in root.iterdir():
        name = entry.name
        if entry.is_symlink():
            return False
        if name == "config" or name == "description":
            try:
                text = entry.read_bytes()[:4096].decode()
            except (OSError, UnicodeError):
                return False
            if name == "config" and not (text.startswith("[core]") and "repositoryformatversion" in text):
                return False
            if name == "description" and not text.startswith("Unnamed repository"):
                return False
            continue
        if name not in _INIT_DIRS or not entry.is_dir():
            return False
        allowed = {"chronos": None, "hooks": ".sample", "info": "exclude"}.get(name, "")
        for _, _, files in os.walk(entry):
            for f in files:
                if allowed is None or (allowed and (f.endswith(allowed) or f == allowed)):
                    continue
                return False
    return True


class Store:
    """Opened once per process per store path; cheap to share between threads."""

    _instances: dict[str, Store] = {}
    _instances_guard = threading.Lock()

    def __init__(self, root: Path, config: EngineConfig, *, create: bool = True):
        """Use `Store.open` (one instance per store and process)."""
        self.root = root
        self.config = config
        self.meta_dir = root / "chronos"
        self.maintenance = locking.ReadWriteLock(metadir.lock_path(self.meta_dir, "maintenance"))
        self._local = threading.local()
        self._workspaces: dict[str, object] = {}
        self._ws_guard = threading.Lock()
        self._handles_token: str | None = None    # the compaction token the handles were opened at
        self._token_seen: tuple[tuple, str] | None = None   # (the token file's stat, its text)
        self.handles_generation = 0
        self.layout_problem: str | None = None    # an incomplete layout that could not be fixed
        self._init_on_disk(create)

    # ------------------------------------------------------------------ open
    @classmethod
    def open(cls, root: os.PathLike | str, config: EngineConfig | None = None, *,
             create: bool = True) -> Store:
        """The store at `root`.  `create=False` (read-only commands) never makes one:
        StoreMissing when there is none."""
        root = Path(os.path.abspath(os.fspath(root)))
        config = config or EngineConfig()
        with cls._instances_guard:
            inst = cls._instances.get(str(root))
            if inst is None or inst.config != config:
                inst = cls(root, config, create=create)
                cls._instances[str(root)] = inst
            return inst

    @classmethod
    def forget_instances(cls) -> None:
        """Drop the per-process cache: the next open reads the store as a new process would."""
        with cls._instances_guard:
            cls._instances.clear()

    @staticmethod
    def exists_at(root: os.PathLike | str) -> bool:
        return (Path(root) / "HEAD").exists() and (Path(root) / "chronos").is_dir()

    def _complete(self) -> bool:
        """Everything `_init_on_disk` would write is there already (no lock, no write needed)."""
        try:
            if not (self.root / "HEAD").exists() or not self.meta_dir.is_dir():
                return False
            if any(not (self.root / sub).is_dir() for sub in ("objects", "refs", "worktrees")):
                return False
            if (self.root / "info" / "attributes").read_bytes() != _ATTRIBUTES:
                return False
            cfg = pygit2.Config(str(self.root / "config"))
            return all(_config_value(cfg, k) == v for k, v in _BASE_CONFIG.items())
        except (OSError, pygit2.GitError, ValueError):
            return False

    def _init_on_disk(self, create: bool = True) -> None:
        problem = _not_a_directory(self.root)
        if problem:
            raise StoreError(problem)
        if self._complete():
            return
        if not create and not self.exists_at(self.root):
            raise StoreMissing(f"no checkpoints yet: there is no chronos-git store at {self.root} "
                               "(nothing has been checkpointed with this configuration; check --store / "
                               "store_dir)")
        try:
            self._write_layout()
        except (OSError, pygit2.GitError) as exc:
            problem = f"cannot set up the store {self.root}: {explain(exc, self.root)}"
            if not create and (self.root / "HEAD").exists():
                self.layout_problem = problem     # readers still work; health says it
                return
            raise StoreUnwritable(problem) from None

    @staticmethod
    def unusable_at(root: os.PathLike | str) -> str | None:
        """Why no store can be opened or made at `root` (None: one is there, or can be)."""
        root = Path(root)
        return _not_a_directory(root) or _not_ours(root, root / "chronos")

    def _write_layout(self) -> None:
        problem = _not_ours(self.root, self.meta_dir)
        if problem:
            raise StoreError(problem)            # before anything is created or chmodded in it
        make_private_dir(self.root)
        make_private_dir(self.meta_dir)
        with locking.exclusive(metadir.lock_path(self.meta_dir, "init")):
            # every writer of the store's config holds init.lock: a config.lock seen now was
            # left by a process killed while setting the store up
            self.clear_stale_git_lock(self.root / "config.lock")
            if not (self.root / "HEAD").exists():
                if not _torn_init(self.root):
                    raise StoreError(
                        f"store path {self.root} is not empty and is not a chronos-git store")
                pygit2.init_repository(str(self.root), bare=True)
            repo = pygit2.Repository(str(self.root))
            cfg = repo.config
            for key, value in _BASE_CONFIG.items():
                if _config_value(cfg, key) != value:
                    cfg[key] = value
            info = self.root / "info"
            info.mkdir(exist_ok=True)
            attrs = info / "attributes"
            if not attrs.exists() or attrs.read_bytes() != _ATTRIBUTES:
                attrs.write_bytes(_ATTRIBUTES)
            for sub in ("objects", "refs", "worktrees"):
                make_private_dir(self.root / sub)
            os.chmod(self.root, 0o700)

    def unwritable(self, exc: BaseException) -> str | None:
        """Why a write to the store failed, when the store cannot take writes now (full disk,
        read-only filesystem, no permission); None for any other failure."""
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        code = getattr(exc, "errno", None)
        free = st.f_bavail * st.f_frsize
        if (st.f_flag & os.ST_RDONLY or free < (1 << 20) or st.f_favail == 0
                or code in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
                or "no space" in str(exc).lower() or "read-only" in str(exc).lower()):
            return explain(exc, self.root)
        if not os.access(self.root, os.W_OK):
            return f"no permission to write {self.root}"
        return None

    # ----------------------------------------------------------------- repos
    def forget_repos(self) -> None:
        """Drop this thread's handle: the next `repo()` reopens (libgit2 caches grafts)."""
        self._local.__dict__.pop("repo", None)

    def repo(self) -> pygit2.Repository:
        """This thread's handle on the common repository (libgit2 objects are not thread-safe)."""
        r = getattr(self._local, "repo", None)
        if r is None or self._local.generation != self.handles_generation:
            r = pygit2.Repository(str(self.root))
            self._local.repo = r
            self._local.generation = self.handles_generation
        return r

    COMPACTED = "compacted"

    def compaction_token(self) -> str:
        """Changes whenever a compaction deleted objects.  A stat cache loaded before that
        may name trees that are gone (its TREE extension): it is re-read, never trusted.
        The file is only ever replaced whole (a new inode), so while its identity and times
        are the ones last read, so is its text: one stat per write instead of an open and read."""
        path = os.path.join(self.meta_dir, self.COMPACTED)
        try:
            st = os.stat(path)
        except OSError:
            return ""
        seen = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._token_seen
        if known is not None and known[0] == seen:
            return known[1]
        try:
            token = Path(path).read_text()
        except OSError:
            return ""
        self._token_seen = (seen, token)
        return token

    def note_compacted(self) -> None:
        atomic_write(self.meta_dir / self.COMPACTED, os.urandom(8).hex().encode(), mode=0o600)

    def workspace(self, path: os.PathLike | str):
        root = canonical_root(path)
        key = os.fsdecode(root)
        with self._ws_guard:
            ws = self._workspaces.get(key)
            if ws is None:
                ws = Workspace(self, root)
                self._workspaces[key] = ws
            return ws

    def forget_workspace(self, ws) -> None:
        with self._ws_guard:
            self._workspaces.pop(os.fsdecode(ws.root), None)

    def open_workspaces(self) -> list:
        """The workspaces this process has opened (their in-memory stat caches)."""
        with self._ws_guard:
            return list(self._workspaces.values())

    def workspaces(self) -> list:
        """Every workspace that has a gitdir in this store."""
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
        return locking.exclusive(metadir.lock_path(self.meta_dir, name))

    def writing(self) -> _Writing:
        """Held (shared) by everything that writes objects; compaction takes it alone.

        After a compaction (in any process) every handle is reopened before anything is
        written: libgit2 keeps a deleted pack's index in memory, so an old handle thinks
        objects of that pack still exist and skips writing them again (a tree or blob
        identical to a pruned one would then be missing from the new checkpoint)."""
        return _Writing(self)

    def check_handles(self) -> None:
        token = self.compaction_token()
        if token != self._handles_token:
            with self._ws_guard:
                if token != self._handles_token:
                    self._handles_token = token
                    self.handles_generation += 1

    def clear_stale_git_lock(self, lock_file: Path, *, max_age_s: float = 0.0) -> bool:
        """Remove a git `*.lock` left by a killed process.

        Callers must hold the chronos lock that every writer of that file takes,
        which proves no live writer owns it.
        """
        if not os.access(lock_file, os.F_OK, follow_symlinks=False):
            return False                # the usual case, without an exception (an append asks each time)
        try:
            st = lock_file.stat()
        except FileNotFoundError:
            return False
        if max_age_s and time.time() - st.st_mtime < max_age_s:
            return False
        try:
            lock_file.unlink()
        except OSError:             # gone meanwhile, or a read-only store: nothing to clear
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


def _not_a_directory(root: Path) -> str | None:
    return f"store path {root} exists and is not a directory" if root.exists() and not root.is_dir() else None


def _not_ours(root: Path, meta_dir: Path) -> str | None:
    """Why the folder at the store path must never become a store, decided before anything
    is written to it (None: missing, empty, a store, or one whose creation was cut)."""
    if not root.is_dir():
        return None
    if not ((root / "HEAD").exists() or (root / "HEAD").is_symlink()):
        if meta_dir.is_dir():
            return None     # a creation of ours (chronos/ comes first) in progress or cut: decided locked
        if not _torn_init(root):
            return f"store path {root} is not empty and is not a chronos-git store"
        return None
    try:
        cfg = pygit2.Config(str(root / "config"))
        email, bare = _config_value(cfg, "user.email"), _config_value(cfg, "core.bare")
    except (pygit2.GitError, OSError, ValueError):
        email = bare = None
    if str(bare).lower() not in ("false", "no", "off", "0"):
        if email == SIGNATURE_EMAIL or _chronos_refs(root):
            return None     # ours (its chronos/ folder, only locks and scratch, may be gone)
        if meta_dir.is_dir() and _no_refs_or_objects(root):
            return None     # a creation of ours cut before its config was written
    # someone's repository (a project's .git, a bare remote): its config would be rewritten
    return (f"store path {root} is a git repository that chronos-git did not create; it is never "
            "taken over (choose an empty or new folder for --store / store_dir)")


class _Writing:
    """Store.writing as a plain context manager (a call's intent takes it on every append)."""
    __slots__ = ("store", "held")

    def __init__(self, store: Store):
        self.store, self.held = store, None

    def __enter__(self) -> None:
        store = self.store
        if store.maintenance.held_here():
            return          # nested in this thread's own: no compaction ran since its check
        held = store.maintenance.shared()
        held.__enter__()
        try:
            store.check_handles()
        except BaseException:
            held.__exit__(*sys.exc_info())
            raise
        self.held = held

    def __exit__(self, *exc) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.__exit__(*exc)
