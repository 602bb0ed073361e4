"""Changing files inside a workspace without ever leaving it.

Every write, create, delete and mkdir of a restore, a replay or `write` goes
through `Confined`: the workspace root is opened once as a directory file
descriptor and each path is walked one component at a time with
`openat(O_DIRECTORY | O_NOFOLLOW)`, so a symlink anywhere on the way (a
directory swapped for a link to `/etc`, say) stops the walk instead of being
followed, and nothing is created outside the root or inside any `.git`.

Names are checked the way `git fsck` checks tree entries: empty, `.`, `..`,
anything holding `/` or NUL, and `.git` in any spelling that some filesystem
folds to it (case, trailing dots and spaces, NTFS short name, HFS+ ignorable
code points) are refused with `UnsafePath`.

New file contents are written to an unnamed `O_TMPFILE` inode, linked under
a temporary name (`.chronos-tmp-*`, which snapshots never capture) and
renamed over the target, so a crash mid-write leaves nothing behind and one
between link and rename leaves a temp file that `sweep` removes at the next
start.  What remains is the race no path-based API closes: a directory
renamed out of the workspace while a restore writes into it.
"""
from __future__ import annotations

import errno
import hashlib
import itertools
import os
import stat
from dataclasses import dataclass

from . import faults
from .codec import display
from .errors import ChronosError, UnsafePath

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_TMPFILE = getattr(os, "O_TMPFILE", 0)
TEMP_PREFIX = b".chronos-tmp-"
EXCLUDE_PATTERN = "/**/.chronos-tmp-*"          # in every workspace's exclude file
_HFS_IGNORABLE = ("\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                  "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff")
_counter = itertools.count()
NAME_MAX = 255
ABSENT = "absent"               # an expectation: nothing is at the path


def signature(st: os.stat_result | None):
    """What a path holds, cheaply: a later stat that differs means it was changed meanwhile."""
    if st is None:
        return ABSENT
    return (stat.S_IFMT(st.st_mode), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class PathBlocked(ChronosError):
    """Something on disk stands where the checkpoint needs a path (reason in the message)."""
    code = "path_blocked"

    def __init__(self, message: str, at: str | None = None):
        super().__init__(message)
        self.at = at                # the relative path of what stands in the way


class LinkInTheWay(PathBlocked):
    """A component of the path is a symbolic link: never followed."""


class FileInTheWay(PathBlocked):
    """A component of the path is a file where a directory is needed."""


class ChangedMeanwhile(PathBlocked):
    """The path changed between the plan and the write: its new bytes are not captured."""


def is_dotgit(name: bytes) -> bool:
    """`.git` as any filesystem might fold it (git's own `is_hfs_dotgit` / `is_ntfs_dotgit`)."""
    text = name.decode("utf-8", "ignore")
    for ch in _HFS_IGNORABLE:
        text = text.replace(ch, "")
    folded = text.lower().rstrip(". ")
    return folded in (".git", "git~1")


def bad_name(name: bytes) -> str | None:
    """Why git's fsck would reject `name` as a tree entry, or None."""
    if not name:
        return "an empty name"
    if name in (b".", b".."):
        return f"{name.decode()!r}"
    if b"/" in name:
        return "a name holding '/'"
    if b"\0" in name:
        return "a name holding NUL"
    if is_dotgit(name):
        return f"{display(os.fsdecode(name))!r} (a .git directory)"
    if len(name) > NAME_MAX:
        return f"a name longer than {NAME_MAX} bytes (no filesystem here can hold it)"
    return None


def split(rel: str) -> list[bytes]:
    """The components of a workspace-relative path; UnsafePath for any that must not be written."""
    raw = os.fsencode(rel)
    parts = raw.split(b"/")
    for part in parts:
        why = bad_name(part)
        if why:
            raise UnsafePath(f"refusing the path {display(rel)!r}: it holds {why}")
    return parts


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Entry:
    """What a workspace path holds now (never following a link on the way)."""
    kind: str                       # file | link | dir | special | absent | blocked | unreadable
    st: os.stat_result | None = None
    why: str | None = None          # for blocked: the link or file on the way
    blocker: str | None = None      # ... and its relative path


class Confined:
    """A workspace root held open; paths are relative to it (as git stores them)."""

    def __init__(self, root: bytes, *, token: str | None = None):
        """`token` prefixes this writer's temp names (engine.inflight records it for the sweep)."""
        self.root = root
        self.fd = os.open(root, O_DIR)
        self.token = (token or str(os.getpid())).encode()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ walk
    def _walk(self, dirs: list[bytes], *, create: bool = False, dir_perm=None) -> list[int]:
        """Open each directory of `dirs` below the root: the list of fds, root first.

        The caller closes them (`_close`).  `dir_perm(rel)` gives the permission
        bits of a directory this walk creates."""
        fds = [self.fd]
        try:
            for i, name in enumerate(dirs):
                prefix = b"/".join(dirs[:i + 1])
                try:
                    fd = os.open(name, O_DIR, dir_fd=fds[-1])
                except FileNotFoundError:
                    if not create:
                        raise
                    perm = dir_perm(os.fsdecode(prefix)) if dir_perm else 0o755
                    try:
                        os.mkdir(name, perm, dir_fd=fds[-1])
                    except FileExistsError:
                        pass
                    fd = os.open(name, O_DIR, dir_fd=fds[-1])
                    os.chmod(fd, perm)               # mkdir's mode went through the umask
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
                    at = os.fsdecode(prefix)
                    if stat.S_ISLNK(st.st_mode):
                        raise LinkInTheWay(f"{display(at)} is a symbolic link (never followed)", at) from None
                    raise FileInTheWay(f"{display(at)} is a file where a directory is needed", at) from None
                fds.append(fd)
                try:
                    os.stat(b".git", dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    raise PathBlocked(f"{display(os.fsdecode(prefix))} is a nested git repository "
                                      "(never written)", os.fsdecode(prefix))
            return fds
        except BaseException:
            self._close(fds)
            raise

    def _close(self, fds: list[int]) -> None:
        for fd in fds[1:]:
            os.close(fd)

    # ----------------------------------------------------------------- reads
    def entry(self, rel: str) -> Entry:
        parts = split(rel)
        try:
            fds = self._walk(parts[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return Entry("absent")
        except PathBlocked as exc:
            return Entry("blocked", why=str(exc), blocker=exc.at)
        except OSError as exc:              # a directory on the way cannot be entered
            return Entry("unreadable", why=f"{display(rel)} cannot be examined ({exc.strerror or exc})")
        try:
            st = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return Entry("absent")
        except OSError as exc:
            return Entry("unreadable", why=f"{display(rel)} cannot be examined ({exc.strerror or exc})")
        finally:
            self._close(fds)
        mode = st.st_mode
        kind = ("file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode)
                else "dir" if stat.S_ISDIR(mode) else "special")
        return Entry(kind, st)

    def content_id(self, rel: str) -> str | None:
        """Blob id of a file's bytes or a link's text; None if absent; 'special:…' otherwise."""
        parts = split(rel)
        try:
            fds = self._walk(parts[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return None
        except PathBlocked as exc:
            # below a link or a file there is no such path in the workspace (as git sees it)
            return None if isinstance(exc, (LinkInTheWay, FileInTheWay)) else "special:blocked"
        except OSError:
            return "special:unreadable"
        try:
            try:
                st = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if stat.S_ISLNK(st.st_mode):
                return blob_id(os.readlink(parts[-1], dir_fd=fds[-1]))
            if not stat.S_ISREG(st.st_mode):
                return "special:" + ("dir" if stat.S_ISDIR(st.st_mode) else "other")
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=fds[-1])
            except OSError:
                return "special:unreadable"
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode):
                    return "special:other"
                h = hashlib.sha1(b"blob %d\0" % fst.st_size)
                n = 0
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    h.update(chunk)
                    n += len(chunk)
                if n != fst.st_size:              # changed while read: not what it was
                    return "special:changing"
                return h.hexdigest()
            finally:
                os.close(fd)
        finally:
            self._close(fds)

    # ---------------------------------------------------------------- writes
    def write(self, rel: str, data: bytes, perm: int, *, dir_perm=None, expect=None) -> None:
        """Replace `rel` with a regular file holding `data` (atomically: temp + rename).
        `expect` (a `signature`) must still describe what is there right before the rename:
        bytes written meanwhile by someone else are never replaced."""
        parts = split(rel)
        fds = self._walk(parts[:-1], create=True, dir_perm=dir_perm)
        try:
            parent, leaf = fds[-1], parts[-1]
            self._clear_dir(parent, leaf, rel)
            fd, tmp = self._temp_file(parent, parts[:-1], perm)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.chmod(fd, perm)                 # the open mode went through the umask
                faults.hit("mid_restore_file")     # written, not linked: nothing has a name yet
                if tmp is None:
                    tmp = self._link_temp(fd, parent, parts[:-1])
            finally:
                os.close(fd)
            self._commit_temp(parent, tmp, leaf, expect, rel)
        finally:
            self._close(fds)

    def symlink(self, rel: str, target: bytes, *, dir_perm=None, expect=None) -> None:
        parts = split(rel)
        fds = self._walk(parts[:-1], create=True, dir_perm=dir_perm)
        try:
            parent, leaf = fds[-1], parts[-1]
            self._clear_dir(parent, leaf, rel)
            tmp = self._temp_name(parts[:-1])
            os.symlink(target, tmp, dir_fd=parent)
            self._commit_temp(parent, tmp, leaf, expect, rel)
        finally:
            self._close(fds)

    def unlink(self, rel: str, *, expect=None) -> bool:
        """Remove a file or link, then any parent directory this left empty.  False if absent.
        `expect` as for `write`: a path changed meanwhile is left alone (PathBlocked)."""
        parts = split(rel)
        try:
            fds = self._walk(parts[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            try:
                _still(fds[-1], parts[-1], expect, rel)
                os.unlink(parts[-1], dir_fd=fds[-1])
            except FileNotFoundError:
                return False
            except IsADirectoryError:
                raise PathBlocked(f"{display(rel)} became a directory") from None
            for i in range(len(fds) - 1, 0, -1):      # prune emptied parents, deepest first
                try:
                    os.rmdir(parts[i - 1], dir_fd=fds[i - 1])
                except OSError:
                    break
            return True
        finally:
            self._close(fds)

    def chmod_dir(self, rel: str, perm: int) -> None:
        parts = split(rel)
        fds = self._walk(parts)
        try:
            os.chmod(fds[-1], perm)
        finally:
            self._close(fds)

    # ------------------------------------------------------------- internals
    def _clear_dir(self, parent: int, leaf: bytes, rel: str) -> None:
        """An empty directory where the file goes is removed; a full one is a conflict."""
        try:
            st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            try:
                os.rmdir(leaf, dir_fd=parent)
            except OSError:
                raise PathBlocked(f"{display(rel)} is a non-empty directory") from None

    def _temp_name(self, dir_parts: list[bytes]) -> bytes:
        return TEMP_PREFIX + self.token + b"-%d" % next(_counter)

    def _temp_file(self, parent: int, dir_parts: list[bytes], perm: int) -> tuple[int, bytes | None]:
        """(fd, name): an unnamed O_TMPFILE inode (name None) where the filesystem allows it."""
        if O_TMPFILE:
            try:
                return os.open(b".", O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, perm, dir_fd=parent), None
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                    raise
        name = self._temp_name(dir_parts)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm,
                     dir_fd=parent)
        return fd, name

    def _link_temp(self, fd: int, parent: int, dir_parts: list[bytes]) -> bytes:
        name = self._temp_name(dir_parts)
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=parent, follow_symlinks=True)
        return name

    @staticmethod
    def _commit_temp(parent: int, tmp: bytes, leaf: bytes, expect=None, rel: str = "") -> None:
        try:
            faults.hit("file_before_rename")
            _still(parent, leaf, expect, rel)
            os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass
            raise

    def signature(self, rel: str):
        """`signature` of what is at `rel` now (ABSENT when nothing, None when it cannot be told)."""
        e = self.entry(rel)
        if e.kind == "absent":
            return ABSENT
        return signature(e.st) if e.st is not None else None

    # ----------------------------------------------------------------- sweep
    def sweep(self, dir_rel: str, token: str) -> int:
        """Remove the temp names a dead writer (its `token`) left in `dir_rel`; returns how many."""
        try:
            parts = split(dir_rel) if dir_rel else []
            fds = self._walk(parts)
        except (OSError, ChronosError):
            return 0
        n = 0
        mine = TEMP_PREFIX + token.encode() + b"-"
        try:
            for name in map(os.fsencode, os.listdir(fds[-1])):
                if name.startswith(mine):
                    try:
                        os.unlink(name, dir_fd=fds[-1])
                        n += 1
                    except OSError:
                        pass
        finally:
            self._close(fds)
        return n


def _still(parent: int, leaf: bytes, expect, rel: str) -> None:
    """PathBlocked unless `leaf` still matches `expect` (None: no expectation)."""
    if expect is None:
        return
    try:
        now = signature(os.stat(leaf, dir_fd=parent, follow_symlinks=False))
    except FileNotFoundError:
        now = ABSENT
    if now != expect and not (expect != ABSENT and expect[0] == stat.S_IFDIR and now == ABSENT):
        raise ChangedMeanwhile(f"{display(rel)} changed after the restore was planned (someone wrote "
                               "it meanwhile), so the safety checkpoint does not hold it", rel)
