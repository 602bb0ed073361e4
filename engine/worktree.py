"""The work tree: what of a workspace's directory is the user's files, and the one walk of it.

libgit2 walks the work tree for a snapshot (engine/scan.py's diff, engine/bulk.py's listing);
every walk of ours goes through `walk`, so the rules are written once and agree with git's:

* nothing named `.git` is part of the work tree: a `.git` directory is never listed, and a
  `.git` file or link at the top of a walk (a worktree's or submodule's pointer) is left out;
* a directory holding a `.git` of any kind (directory, `gitdir:` file, link) is a nested
  repository: reported, never listed (its files are its own repository's);
* a directory the caller's `prune` names (the ignore rules: `ignored_dirs`) is not listed;
* a directory too deep to name (`max_path`) is reported, not listed (libgit2 skips it silently);
* links are never followed: a link to a directory is an entry like a file;
* a directory that cannot be listed (unreadable, vanished, a file now) is reported with its
  error, and so is an entry whose kind cannot be told.  What to make of a report is the
  caller's: the scan lists it as skipped, a refresh and the watcher pass over it.

The walk lists one directory at a time (os.scandir; the kind comes from d_type, so no file is
stat'ed) and yields it whole: callers loop over a directory's batch, never a call per entry.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from pygit2 import GitError

from .ignore import Candidates, is_ignored
from .usergit import common_dir

GIT = b".git"
_DOTGIT = b"/" + GIT
IGNORE_FILE = b".gitignore"
PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096


class Listing:
    """One directory as the walk found it (paths relative to the walk's root, as bytes): each
    entry sorted by its kind (d_type, or the walk's own lstat where the file system gives
    none) in the one pass that lists it."""
    __slots__ = ("rel", "files", "specials", "gitignore", "dirs", "nested", "too_deep", "errors", "error")

    def __init__(self, rel: bytes, files: list[os.DirEntry[bytes]], specials: list[os.DirEntry[bytes]],
                 gitignore: bool, dirs: list[bytes], nested: list[bytes], too_deep: list[bytes],
                 errors: list[tuple[bytes, OSError]], error: OSError | None = None):
        self.rel = rel                  # the directory (b"" is the root)
        self.files = files              # regular files and links (never followed)
        self.specials = specials        # FIFOs, sockets and devices: what no snapshot holds
        self.gitignore = gitignore      # it holds a `.gitignore` (a file or a link: libgit2 follows one)
        self.dirs = dirs                # its subdirectories the walk lists next
        self.nested = nested            # subdirectories that are nested repositories
        self.too_deep = too_deep        # subdirectories whose full names reach `max_path`
        self.errors = errors            # (path, error) of entries whose kind could not be told
        self.error = error              # the directory could not be listed (all else empty)

    @property
    def entries(self) -> list[os.DirEntry[bytes]]:
        """What is not a directory: files, links, special files."""
        return self.files + self.specials


def walk(root: bytes, top: bytes = b"", *, prune: Callable[[str], bool] | None = None,
         max_path: int | None = PATH_MAX) -> Iterator[Listing]:
    """Every directory below `root` from `top` (itself listed whatever it is: the caller chose
    it), depth first, each yielded before its subdirectories are listed (the watcher watches
    them first).  `prune(rel)` (decoded, no trailing "/") says which directories not to list.

    `max_path`: a directory whose full name reaches it is reported in `too_deep`, not listed,
    since libgit2's walk skips it silently and the scan must name it.  None lists it anyway and
    lets the system refuse: the watcher needs its refused watch to stop trusting itself (then
    snapshots walk, and the scan names the directory), and a refresh of a directory stays as
    it always was (its too-deep files are reported one by one as they fail)."""
    join = os.path.join
    limit = None if max_path is None else max_path - 1 - len(root) - 1
    stack = [top]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(join(root, rel) if rel else root) as it:
                entries = list(it)
        except OSError as exc:
            yield Listing(rel, [], [], False, [], [], [], [], exc)
            continue
        # one pass, files first (most entries are): a million of them at 1M files
        files: list[os.DirEntry[bytes]] = []
        specials: list[os.DirEntry[bytes]] = []
        subdirs: list[os.DirEntry[bytes]] = []
        errors: list[tuple[bytes, OSError]] = []
        rules = None
        for e in entries:
            try:
                if e.is_file(follow_symlinks=False):
                    files.append(e)
                elif e.is_dir(follow_symlinks=False):
                    subdirs.append(e)
                    continue
                elif e.is_symlink():
                    files.append(e)
                else:
                    specials.append(e)
            except OSError as exc:
                errors.append((join(rel, e.name) if rel else e.name, exc))
                continue
            if e.name == IGNORE_FILE:
                rules = e
        if rel == top:
            # below the top a `.git` makes its directory nested (never listed): only here
            files = [e for e in files if e.name != GIT]
            specials = [e for e in specials if e.name != GIT]
        seen = getattr(prune, "listed", None)
        if seen is not None and rules is not None:
            seen(rel, [rules.path])    # before its subdirectories are judged (IgnoredDirs)
        dirs: list[bytes] = []
        nested: list[bytes] = []
        too_deep: list[bytes] = []
        for e in subdirs:
            name = e.name
            if name == GIT:
                continue
            sub = rel + b"/" + name if rel else name
            if is_nested(e.path):
                nested.append(sub)
            elif prune is not None and prune(os.fsdecode(sub)):
                continue
            elif limit is not None and len(sub) >= limit:
                too_deep.append(sub)
            else:
                dirs.append(sub)
        stack.extend(dirs)
        yield Listing(rel, files, specials, rules is not None and rules not in specials, dirs, nested, too_deep,
                      errors)


def within(root: bytes, entries: int, size: int) -> bool:
    """Whether the tree below `root` holds at most `entries` entries (files, links, folders,
    special files; its top `.git` not counted, a nested repository counted, not entered) and
    `size` bytes in its files and links.  Read entry by entry and given up as soon as a bound
    is passed, so a huge folder costs no more than a small tree: a first snapshot that small
    costs less than starting a child."""
    seen = total = 0
    stack = [root]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                for e in it:
                    if top == root and e.name == GIT:
                        continue
                    seen += 1
                    if seen > entries:
                        return False
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if not is_nested(e.path):
                                stack.append(e.path)
                            continue
                        total += e.stat(follow_symlinks=False).st_size     # lstat: never opened
                    except OSError:
                        continue
                    if total > size:
                        return False
        except OSError:
            continue
    return True


def ignored_dirs(repo) -> Callable[[str], bool]:
    """`prune` for `walk`: the directories `repo`'s ignore rules ignore (engine/ignore.py)."""
    return lambda rel: is_ignored(repo, rel + "/")


def exclude_files(repo) -> list[str]:
    """The ignore files libgit2 reads for `repo` besides the work tree's `.gitignore` files:
    `info/exclude` (of its git dir and of the common dir) and `core.excludesFile` (git's
    default under XDG_CONFIG_HOME when unset)."""
    files = [os.path.join(repo.path, "info", "exclude")]
    common = os.fsdecode(common_dir(os.fsencode(repo.path)))
    if os.path.normpath(common) != os.path.normpath(repo.path):
        files.append(os.path.join(common, "info", "exclude"))
    try:
        files.append(os.path.expanduser(repo.config["core.excludesFile"]))
    except (KeyError, ValueError, GitError):
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        files.append(os.path.join(xdg, "git", "ignore"))
    return files


class IgnoredDirs:
    """`prune` for a `walk` of the whole work tree: `ignored_dirs`, asking libgit2 only about a
    directory a rule could ignore (ignore.Candidates) of the repository's exclude files and of
    the `.gitignore` files the walk has listed above it.  A depth-first walk lists a
    directory's ancestors (and the directory itself, `listed`) before it judges the
    directory's subdirectories, so these are all the rules that can apply there, and more:
    libgit2 answers.  At a million files that is some 75,000 calls of 12 us saved per full scan."""

    def __init__(self, repo):
        self.repo = repo
        self._found = Candidates()
        self._found.add(b"", exclude_files(repo))

    def listed(self, rel: bytes, rules: list[bytes]) -> None:
        """The `.gitignore` (full path) of directory `rel`, before its subdirectories are judged."""
        self._found.add(rel, rules)

    def __call__(self, rel: str) -> bool:
        return self._found.could(os.fsencode(rel)) and is_ignored(self.repo, rel + "/")


def is_nested(path: bytes) -> bool:
    """Whether the directory at `path` (absolute) is a nested repository: it holds a `.git`
    of any kind, as git itself tells one (a dangling link counts: git would not descend).
    `os.path.lexists` without its join: the walk asks it of every directory."""
    try:
        os.lstat(path + _DOTGIT)
    except (OSError, ValueError):
        return False
    return True


def nested_ancestor(root: bytes, parts: list[str]) -> str | None:
    """The nearest directory above `parts` (a path's components) that is a nested repository."""
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if is_nested(os.path.join(root, os.fsencode(d))):
            return d
    return None


def in_git_dir(rel: str | bytes) -> bool:
    """Whether a work-tree path is a `.git` or lies inside one (never part of the work tree)."""
    if isinstance(rel, str):
        return "/.git/" in f"/{rel}/"
    return b"/.git/" in b"/" + rel + b"/"


def special_kind(mode: int) -> str:
    """What a non-regular, non-link, non-directory file is (for `skipped` reasons)."""
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISBLK(mode):
        return "block_device"
    if stat.S_ISCHR(mode):
        return "char_device"
    return "unknown"
