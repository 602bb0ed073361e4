"""A work-tree file's index entry from one read of it.

libgit2's `git_index_add_bypath` streams the file through deflate into a temp loose object
before it knows the blob's id, and throws the temp file away when the store already holds
the blob, as it does for a file an agent edits again: 0.3 ms for a 20 KB source file and
1.4 ms for 150 KB, on every pre-call checkpoint of a file call, with two attribute lookups
(a readlink per folder) besides; `git_index_add_from_buffer` creates and deletes that temp
file too (0.2 ms).  Here the file is read once, hashed, written loose only when the store
lacks it (engine/loose.py), and its entry added with the stat data taken before the read,
as libgit2 and git take it (libgit2 checks the blob is there: 20-40 us).  Anything unusual
(not a regular file, over MAX_BYTES, a time the index cannot hold, a file that changed
between its stat and its open) is left to libgit2's own add.

What was read is also noted (`Seen`): a file call's pre-image, which its checkpoint has just
read, is not read a second time while the file's stat data is what it was then.
"""
from __future__ import annotations

import os
import stat
import time

import pygit2
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from . import loose
from .durability import racy
from .fsutil import O_READ, read_all

MAX_BYTES = 8 << 20          # larger files: libgit2's add, which streams (memory stays bounded)
_M32 = 0xFFFFFFFF
_S32 = 0x7FFFFFFF            # an entry's seconds, as pygit2 declares them (int32_t): up to 2038


Stamp = tuple[int, int, int, int, int, int]


def _stamp(st: os.stat_result) -> Stamp:
    """What a change to a file moves: any write its mtime and ctime, a replacement its inode."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns


class Seen(dict):
    """rel -> (stamp, blob id) of the files a snapshot read whole, each stat'ed before its read
    when its mtime and ctime were older than a change that could share them (durability.racy,
    as git treats a racily clean entry): while a file's stamp is the same, it holds that blob."""

    def blob(self, rel: str, full: bytes) -> str | None:
        got = self.get(rel)
        if got is None:
            return None
        try:
            st = os.lstat(full)
        except OSError:
            return None
        return got[1] if _stamp(st) == got[0] else None


def add_file(repo: pygit2.Repository, index: pygit2.Index, rel: str, full: bytes, objects_dir,
             seen: Seen | None = None) -> bool:
    """Add or update the entry of the regular file `full` (as `rel`), noted in `seen`; False
    where it declined (the caller adds it the usual way).  OSError and GitError as libgit2's
    add raises them."""
    stat_at = time.time_ns()
    try:
        st = os.lstat(full)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
        return False
    cs, cns = divmod(st.st_ctime_ns, 1_000_000_000)
    ms, mns = divmod(st.st_mtime_ns, 1_000_000_000)
    if not (0 <= cs <= _S32 and 0 <= ms <= _S32):
        return False             # libgit2's add wraps such a time
    try:
        fd = os.open(full, O_READ)
    except OSError:
        return False
    try:
        if _stamp(os.fstat(fd)) != _stamp(st):
            return False                # another file, or this one changed, since the stat
        data = read_all(fd, st.st_size)
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        return False                    # written to while read: libgit2 reads it again
    # unless the store has it; a new one is kept for the journal, which carries it as a pre-image
    oid = loose.blob(objects_dir, data, repo=repo)
    entry = ffi.new("git_index_entry *")
    entry.ctime.seconds, entry.ctime.nanoseconds = cs, cns
    entry.mtime.seconds, entry.mtime.nanoseconds = ms, mns
    entry.dev, entry.ino = st.st_rdev & _M32, st.st_ino & _M32       # st_rdev, as libgit2 sets it
    entry.mode = 0o100755 if st.st_mode & stat.S_IXUSR else 0o100644     # git's two (libgit2 takes no other)
    entry.uid, entry.gid = st.st_uid & _M32, st.st_gid & _M32
    entry.file_size = st.st_size & _M32
    ffi.buffer(ffi.addressof(entry, "id"))[:] = bytes.fromhex(oid)
    name = ffi.new("char[]", os.fsencode(rel))
    entry.path = name
    check_error(C.git_index_add(index._index, entry), io=True)       # checks the blob is there
    if seen is not None and _settled(os.fsdecode(full), st, stat_at):
        seen[rel] = (_stamp(st), oid)
    return True


def _settled(path: str, st: os.stat_result, at_ns: int) -> bool:
    """Whether no later change could share `st`'s stamps: its mtime and its ctime both older
    than the racy window at `at_ns` (a file copied with its mtime kept has a new ctime, and a
    file system may keep ctime coarser than mtime)."""
    return not racy(path, st, at_ns) and not racy(path, st, at_ns, st.st_ctime_ns)
