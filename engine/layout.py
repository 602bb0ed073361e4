"""Where a workspace lives in the store, and which folders may never be one.

Each workspace has a linked gitdir, `<store>/worktrees/<id>/` (docs/design.md, the store's
layout): its own index (the stat cache), HEAD and exclude file, with `commondir` pointing at
the store.  libgit2 takes the work tree from the `gitdir` file's folder, so nothing is written
into the workspace and the user's `.git` is never opened.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pygit2

from .confine import EXCLUDE_PATTERN
from .errors import WorkspaceRefused
from .fsutil import atomic_write, realpath

UNBORN_HEAD = b"ref: refs/heads/chronos-unborn\n"
REPORT_NAME_GLOB = "chronos-git-report-*.html"     # `chronos-git report` names its files so: never checkpointed


def canonical_root(path: os.PathLike | str) -> Path:
    if not os.fspath(path):        # abspath("") would silently mean the current directory
        raise ValueError("no workspace given: an empty path names no folder")
    if "\0" in os.fsdecode(path):     # no Linux file name holds one (else: "lstat: embedded null")
        raise ValueError(f"the workspace path {os.fsdecode(path)!r} contains a NUL character, "
                         "which no file name on Linux can hold")
    p = os.fsencode(os.path.abspath(os.fsdecode(path)))
    return Path(os.fsdecode(realpath(p)))


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


def refuse_bad_root(root: Path, store_root: Path) -> None:
    """Raise WorkspaceRefused for a folder no snapshot may capture (whoever names it)."""
    if root in _refused_roots() or root in SYSTEM_ROOTS:
        raise WorkspaceRefused(
            f"refusing to use {root} as a workspace: snapshotting the filesystem root, a home "
            "directory or a shared top-level folder would capture far more than a project")
    if any(part.lower() == ".git" for part in root.parts):
        raise WorkspaceRefused(f"refusing to use {root} as a workspace: it is inside a `.git` folder, "
                               "whose hooks and config git would run (nothing is ever written there)")
    if any(root == t or root.is_relative_to(t) for t in PSEUDO_TREES):
        raise WorkspaceRefused(f"refusing to use {root} as a workspace: it is inside a kernel or runtime "
                               "pseudo-filesystem (/dev, /proc, /run, /sys), not a project")
    store = canonical_root(store_root)
    if store == root or root.is_relative_to(store):
        raise WorkspaceRefused(f"workspace {root} lies inside the chronos store {store}")


def workspace_id(root_bytes: bytes) -> str:
    return hashlib.sha256(root_bytes).hexdigest()[:16]


def _glob_escape(rel: str) -> str:
    """A literal path inside a gitignore pattern (callers anchor it with a leading `/`)."""
    return "".join("\\" + ch if ch in "\\*?[" else ch for ch in rel)


class GitDir:
    """A workspace's linked gitdir in the store, made whole or not at all (a temp folder renamed)."""

    def __init__(self, store, root: Path, ws_id: str):
        self.store = store
        self.root = root
        self.root_bytes = os.fsencode(root)
        self.path = store.root / "worktrees" / ws_id
        self.id = ws_id

    def exclude_lines(self) -> list[str]:
        lines = ["# written by chronos-git: restore temp names, forensic reports, then settings ignored_patterns",
                 EXCLUDE_PATTERN, "/**/" + REPORT_NAME_GLOB]
        lines += list(self.store.config.ignored_patterns)
        store = canonical_root(self.store.root)
        if store.is_relative_to(self.root):
            rel = _glob_escape(os.fsdecode(os.path.relpath(os.fsencode(store), self.root_bytes)))
            lines.append("/" + rel + "/")
            lines.append("/" + rel + ".*")     # the store's sidecar files (kept beside it on purpose)
        return lines

    def ensure(self) -> bool:
        """Make the gitdir if it is missing, else bring its exclude file up to date; True when
        an existing exclude file was rewritten (a repository handle opened before reads the old)."""
        if (self.path / "commondir").exists():
            return self._sync_exclude()
        tmp_parent = self.store.meta_dir / "tmp"
        tmp_parent.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"ws-{self.id}-", dir=tmp_parent))
        try:
            (tmp / "commondir").write_bytes(b"../..\n")
            (tmp / "gitdir").write_bytes(os.path.join(self.root_bytes, b".git") + b"\n")
            (tmp / "HEAD").write_bytes(UNBORN_HEAD)
            (tmp / "locked").write_text("chronos-git shadow workspace: keep (never prune)\n")
            exclude = self.path / "exclude"
            cfg = pygit2.Config(str(tmp / "config.worktree"))
            cfg["core.excludesFile"] = str(exclude)
            del cfg
            (tmp / "exclude").write_text("\n".join(self.exclude_lines()) + "\n")
            (tmp / "chronos-workspace").write_bytes(self.root_bytes + b"\n")
            try:
                os.rename(tmp, self.path)
            except OSError:
                if not (self.path / "commondir").exists():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return False

    def _sync_exclude(self) -> bool:
        want = ("\n".join(self.exclude_lines()) + "\n").encode()
        path = self.path / "exclude"
        try:
            if path.read_bytes() == want:
                return False
        except FileNotFoundError:
            pass
        atomic_write(path, want, durable=False)
        return True

    def exclude_rewritten(self) -> bool:
        """Whether the exclude file changed after its gitdir was made (settings `ignored_patterns`:
        `ensure`); written with the gitdir, it is newer than a first checkpoint's start."""
        try:
            made = os.lstat(self.path / "commondir").st_ctime_ns
            return os.lstat(self.path / "exclude").st_ctime_ns > made + 1_000_000_000
        except OSError:
            return False
