"""Loose objects written the way git itself writes them: the temp file beside the final one.

libgit2 creates each loose object's temp file in `objects/` and links it into
`objects/xx/`.  On this project's ext4 test machine that create costs 0.4-0.5 ms
while the store is being written to (against 0.01-0.1 ms in `objects/xx/`),
three times per journal append and again per checkpoint: a large part of what a
protected call adds.  git's own writer creates the temp file in `objects/xx/`, as
this one does.  Like libgit2's writes, these are fsynced (file and directory)
only inside a `durability.fsync_scope` (durable_snapshots); the journal's
witness carries the objects it links to (journal_refs.carried).
A temp file a crash leaves behind (`.*.tmp`) is removed by
`Store.clear_stale_temp_objects` like git's and libgit2's.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import threading
import weakref
from pathlib import Path

import pygit2

from .durability import changed_since_listed, fsync_on
from .fsutil import atomic_write
from .pack_writer import deflate, stored

_NAMES = {pygit2.GIT_OBJECT_COMMIT: b"commit", pygit2.GIT_OBJECT_TREE: b"tree",
          pygit2.GIT_OBJECT_BLOB: b"blob", pygit2.GIT_OBJECT_TAG: b"tag"}
KIND_OF = {name: kind for kind, name in _NAMES.items()}     # b"commit" -> its object type
BLOB_MODE = b"100644"
_LEVEL = 1                    # git's default for loose objects (core.looseCompression)
_serial = itertools.count()    # temp names unique within a process (threads included)


def _framed(kind: int, data: bytes) -> bytes:
    """The object as git hashes it: "<type> <size>\\0<data>"."""
    return _NAMES[kind] + b" %d\0" % len(data) + data


def loose_bytes(kind: int, data: bytes) -> bytes:
    """The object as git stores it loose: its framed bytes, deflated."""
    return deflate(_framed(kind, data), _LEVEL)


def write(objects_dir: Path, kind: int, data: bytes, *, repo: pygit2.Repository | None = None,
          relist: bool = True) -> tuple[str, bytes | None]:
    """Store one object; returns (its id, its loose bytes, or None when `repo` already had it:
    given a repository, an object it holds, packed or loose, is not written again).
    `relist` as for `held`."""
    raw = _framed(kind, data)
    oid = hashlib.sha1(raw).hexdigest()
    if repo is not None and held(repo, oid, objects_dir, relist=relist):
        return oid, None
    packed = deflate(raw, _LEVEL)
    written = put(objects_dir, oid, packed)
    if written is not None and kind == pygit2.GIT_OBJECT_COMMIT:
        vouch(written, packed)
    return oid, packed


def held(repo: pygit2.Repository, oid: str, objects_dir, *, relist: bool = True) -> bool:
    """Whether `repo` holds object `oid`.  `oid in repo.odb` lists the pack folder again on
    every miss (libgit2 refreshes its packs: 0.16 ms at 140 packs), and a miss is the usual
    answer here (a file call's new images); this lists it only when the folder changed since
    this handle last did (durability.changed_since_listed), and not at all without `relist`:
    for content that is almost always new (a file call's post-image), where the outcome
    writer's last pack moved the folder and a miss costs only a loose copy compaction drops."""
    key = pygit2.Oid(hex=oid)
    backends = list(repo.odb.backends)
    if any(b.exists(key) is True for b in backends):     # a backend without `exists` answers NotImplemented
        return True
    if not relist:
        return False
    listed = changed_since_listed(_listed, repo, os.path.join(objects_dir, "pack"))
    if listed is None:
        return False
    for b in backends:
        b.refresh()
    listed()
    return any(b.exists(key) is True for b in backends)


_listed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # handle -> its pack folder as it last listed it


_RECENT = 16                  # loose blobs this process wrote last, kept for the journal to carry
_RECENT_BYTES = 128 * 1024    # each at most this big (what the journal carries: journal_refs/carried.py)
_recent: dict[tuple[int, int, str], tuple[int, bytes]] = {}
_recent_guard = threading.Lock()


def _folder(objects_dir) -> tuple[int, int] | None:
    """The objects folder's identity (a store reached through a symlink is the same store)."""
    try:
        st = os.stat(objects_dir)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _remember(objects_dir, oid: str, size: int, packed: bytes) -> None:
    folder = _folder(objects_dir)
    if folder is not None and len(packed) <= _RECENT_BYTES:
        with _recent_guard:
            _recent[(*folder, oid)] = (size, packed)
            while len(_recent) > _RECENT:
                del _recent[next(iter(_recent))]


def recent(objects_dir, oid: str) -> tuple[int, bytes] | None:
    """(size, loose bytes) of blob `oid` if this process wrote it into `objects_dir` lately (a
    file call's images, which its journal event carries right after: not read back and inflated)."""
    folder = _folder(objects_dir)
    if folder is None:
        return None
    with _recent_guard:
        return _recent.get((*folder, oid))


STORED_MAX = 2 * 1024         # a journal object up to this size is not compressed (prepare)


def prepare(kind: int, data: bytes) -> tuple[str, bytes]:
    """(id, loose bytes) of an object, nothing written (the journal writes them after its
    witness: journal_refs/publish.py).  An object of up to STORED_MAX bytes (an event's
    commit, tree and state with an open call or two: about 1.5 KB together) goes into a zlib
    stream of stored blocks, as git's core.looseCompression=0 writes it: setting up deflate
    for them was a seventh of a call's intent.  A larger one (the state of many open calls)
    is deflated: the witness carries it and is hashed and rewritten whole on each append.
    Loose copies last until the journal's next sync, which packs them compressed
    (journal_refs/carried.py)."""
    raw = _framed(kind, data)
    return hashlib.sha1(raw).hexdigest(), stored(raw) if len(raw) <= STORED_MAX else deflate(raw, _LEVEL)


def put(objects_dir: Path | str, oid: str, packed: bytes) -> str | None:
    """Write the loose bytes `packed` of object `oid` unless a file of that name exists;
    the file's path if this call wrote it."""
    fan = os.path.join(objects_dir, oid[:2])
    path = os.path.join(fan, oid[2:])
    if os.path.exists(path):       # never replaced: the file there may be durable already
        return None
    durable = fsync_on()
    try:
        _put(path, packed, durable)
    except FileNotFoundError:
        os.makedirs(fan, exist_ok=True)
        _put(path, packed, durable)
    return path


def _put(path: str, packed: bytes, durable: bool) -> None:
    """Outside a durable scope: a temp file named as git names its own (`.<name>.<pid>.<n>.tmp`,
    swept like them), written with one syscall each for create, write, close and rename."""
    if durable:
        atomic_write(Path(path), packed, mode=0o444, durable=True)
        return
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.{next(_serial)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o444)
    try:
        view = memoryview(packed)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# Loose files known to be whole, by path: the stamp (inode, size, mtime, ctime) they had then;
# ctime because an edit in place can put size and mtime back, never ctime.  A commit this
# process wrote is whole while it is that file (power-cut damage shows in the next process);
# engine/powercut.py adds those it inflated and checked.  A chain's tip, written by one call,
# is checked by the next: without this it was read and inflated again (0.1 ms a call).
WHOLE: dict[str, tuple[int, int, int, int]] = {}
WHOLE_MAX = 200_000


def stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def vouch(path: str, packed: bytes) -> None:
    """`path` was just written with `packed`: known whole while its stamp is the one now, if
    it still holds those bytes (read back from the page cache: nothing slipped in meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        same = st.st_size == len(packed) and os.pread(fd, len(packed) + 1, 0) == packed
    finally:
        os.close(fd)
    if same:
        know_whole(path, stamp(st))


def know_whole(path: str, at: tuple[int, int, int, int]) -> None:
    if len(WHOLE) >= WHOLE_MAX:
        WHOLE.clear()
    WHOLE[path] = at


def blob(objects_dir: Path, data: bytes, *, repo: pygit2.Repository | None = None,
         relist: bool = True) -> str:
    """Store a blob (the only objects a journal event links: kept for `recent`)."""
    oid, packed = write(objects_dir, pygit2.GIT_OBJECT_BLOB, data, repo=repo, relist=relist)
    if packed is not None:
        _remember(objects_dir, oid, len(data), packed)
    return oid


def staged_blob(objects_dir: Path, data: bytes, *, repo: pygit2.Repository, most: int) -> tuple[str, bytes | None]:
    """(id, loose bytes) of a blob for the journal to write after its witness, which carries
    it (a file call's post-image: journal_refs/batch.py); bytes None when the store holds it
    already, or when it is bigger than `most` (what the journal carries) or its fan-out folder
    is one this process cannot write to: then it is written here, as `blob` writes it (and
    fails here).  Creating a 12 KB blob's loose file took 0.2-0.3 ms of a call's
    path.  (Stored blocks instead of deflate saved 0.08 ms more there, and cost about as much
    in every witness record that carried the bigger bytes until the next sync.)"""
    if len(data) > most:
        return blob(objects_dir, data, repo=repo, relist=False), None
    raw = _framed(pygit2.GIT_OBJECT_BLOB, data)
    oid = hashlib.sha1(raw).hexdigest()
    if held(repo, oid, objects_dir, relist=False):
        return oid, None
    fan = os.path.join(objects_dir, oid[:2])
    if not os.access(fan, os.W_OK) and os.path.isdir(fan):      # a folder left to another user
        return blob(objects_dir, data, repo=repo, relist=False), None
    return oid, deflate(raw, _LEVEL)


def flat_tree(entries: dict[str, str]) -> bytes:
    """The tree object of blobs only (name -> blob id), 100644 each, in git's order."""
    out = []
    for name in sorted(entries, key=os.fsencode):
        out.append(BLOB_MODE + b" " + os.fsencode(name) + b"\0" + bytes.fromhex(entries[name]))
    return b"".join(out)


def commit_data(tree: str, parents, sig: pygit2.Signature, message: str) -> bytes:
    """A commit's bytes as libgit2's create_commit writes them (one signature for both)."""
    who = f"{sig.name} <{sig.email}> {sig.time} {'-' if sig.offset < 0 else '+'}" \
          f"{abs(sig.offset) // 60:02d}{abs(sig.offset) % 60:02d}"
    head = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents)
    return (head + f"author {who}\ncommitter {who}\n\n").encode() + message.encode()
