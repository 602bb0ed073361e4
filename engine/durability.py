"""fsync of git writes is a process-global libgit2 switch; share it by reference count.
And the objects a durable record links to must be durable too, whoever wrote them."""
from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from collections.abc import Callable, MutableMapping
from contextlib import contextmanager
from pathlib import Path

import pygit2

from .fsutil import fsync_dir

_guard = threading.Lock()
_users = 0


@contextmanager
def fsync_scope(enabled: bool = True):
    """While any scope is open, libgit2 fsyncs objects, refs and their directories."""
    global _users
    if not enabled:
        yield
        return
    with _guard:
        _users += 1
        if _users == 1:
            pygit2.settings.enable_fsync_gitdir(True)
    try:
        yield
    finally:
        with _guard:
            _users -= 1
            if _users == 0:
                pygit2.settings.enable_fsync_gitdir(False)


def fsync_on() -> bool:
    """Whether a scope is open: our own git writes (engine.loose) fsync like libgit2's then."""
    return _users > 0


# the pack files this process fsynced, as (path, device, inode, ctime): a pack never changes, but
# a path can be deleted (compaction) and written again, not durably, with the same bytes and name
# (and, freed, the same inode)
_synced_packs: set[tuple[str, int, int, int]] = set()


def fsync_file(path: Path) -> bool:
    """fsync the file at `path`; False if it is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _pack_key(path: str) -> tuple[str, int, int, int] | None:
    """`path` as `_synced_packs` knows it, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path, st.st_dev, st.st_ino, st.st_ctime_ns


def note_durable_pack(pack_dir: Path, stem: str) -> None:
    """A pack this process wrote and fsynced: `settle_objects` need not fsync it again."""
    for suffix in (".pack", ".idx"):
        key = _pack_key(os.path.join(pack_dir, stem + suffix))
        if key is not None:
            _synced_packs.add(key)


# Objects this process packed and fsynced itself (the journal's sync), per objects folder, while
# no pack was deleted since (the store's compaction token: compaction and consolidation change
# it).  A file call's pre-image is most often an earlier call's post-image, packed by that sync:
# then no pack needs looking for (listing and stat'ing every pack was ~0.4 ms at 200 packs).
_packed_durable: dict[str, tuple[str, set[str]]] = {}
_PACKED_DURABLE_MAX = 200_000


def note_durable_objects(objects_dir: Path, oids, token: str) -> None:
    """`oids` are in a pack this process wrote and fsynced; `token`: the store's compaction
    token read before that pack was written."""
    key = str(objects_dir)
    have = _packed_durable.get(key)
    if have is None or have[0] != token or len(have[1]) >= _PACKED_DURABLE_MAX:
        have = _packed_durable[key] = (token, set())
    have[1].update(oids)


def settle_objects(objects_dir: Path, oids, token: str | None = None) -> None:
    """fsync the files that hold `oids` (loose objects, else the packs).

    libgit2 does not write an object that already exists, so a blob a fast
    (non-durable) snapshot wrote first stays in the page cache even when a
    journal event, fsynced, links it: a power cut would leave the event
    pointing at nothing.  Each pack is fsynced once per process.  With `token`
    (the store's compaction token now), objects noted durable under that token
    are left as they are."""
    known = _packed_durable.get(str(objects_dir)) if token is not None else None
    if known is not None and known[0] == token:
        oids = [oid for oid in oids if oid not in known[1]]
    dirs, packed = set(), False
    for oid in oids:
        p = objects_dir / oid[:2] / oid[2:]
        if fsync_file(p):
            dirs.add(p.parent)
        else:
            packed = True
    for d in dirs:
        fsync_dir(d)
    if packed:
        _settle_packs(objects_dir / "pack", token)


_settled_dirs: dict[str, tuple[int, int, int]] = {}
# A directory changed this recently may change again within the same mtime.  A local file
# system that keeps nanoseconds stamps with the kernel's coarse clock, a tick (<= 10 ms) behind,
# more if the timekeeping CPU stalls: 200 ms is well past that.  Anything else (whole seconds,
# FAT's two, a network file system stamped by another machine's clock): 3 s.  A file call's
# intent asks every time and the outcome writer adds a pack every few calls, so with 2 s for all
# most calls listed and stat'ed every pack (~0.2 ms at 60 packs, ~1.5 ms at 300).
RACY_NS = 3_000_000_000
RACY_FINE_NS = 200_000_000
# statfs f_type of local file systems with nanosecond stamps: ext2/3/4, XFS, Btrfs, tmpfs,
# overlayfs, F2FS
_FINE_FS = frozenset({0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0x794C7630, 0xF2F52010})
_fs_fine: dict[int, bool] = {}


def _fine_stamps(path: str, dev: int) -> bool:
    """Whether the file system holding `path` (device `dev`) is a local one with fine stamps."""
    known = _fs_fine.get(dev)
    if known is None:
        buf = ctypes.create_string_buffer(256)      # struct statfs; f_type is its first word
        try:
            ok = ctypes.CDLL(None, use_errno=True).statfs(os.fsencode(path), buf) == 0
        except (OSError, AttributeError):
            ok = False
        known = _fs_fine[dev] = ok and (struct.unpack_from("l", buf)[0] & 0xFFFFFFFF) in _FINE_FS
    return known


def racy(path: str, st: os.stat_result, now_ns: int, stamp_ns: int | None = None) -> bool:
    """Whether `path` (stat'ed as `st` at `now_ns`, before it was listed or read) could still
    have changed after that without its mtime (or the stamp `stamp_ns`, its ctime) moving."""
    t = st.st_mtime_ns if stamp_ns is None else stamp_ns
    fine = t % 1_000_000_000 != 0 and _fine_stamps(path, st.st_dev)
    return now_ns - t <= (RACY_FINE_NS if fine else RACY_NS)


def changed_since_listed(memo: MutableMapping, key, path: str) -> Callable[[], None] | None:
    """Whether the folder `path` must be listed again: None while it is as `memo[key]` saw it
    at its last listing (inode, mtime, ctime; files are only added or removed, which moves
    them), or when it cannot be stat'ed; else a function to call once it has been listed,
    which keeps its stamp, taken before that listing, unless a later change could share it
    (`racy`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    now = time.time_ns()            # before the listing (what follows it can take long)
    seen = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    if memo.get(key) == seen:
        return None

    def listed() -> None:
        if not racy(path, st, now):
            memo[key] = seen
    return listed


# pack folder -> (the compaction token, (name, inode) of its pack files known durable under it):
# while the token is the same no pack was deleted, and a file put in place over one (a rename)
# has another inode, which the listing gives without a stat
_durable_names: dict[str, tuple[str, set[tuple[str, int]]]] = {}


def _settle_packs(pack_dir: Path, token: str | None = None) -> None:
    """fsync every pack this process has not synced yet: nothing to list while the folder is
    as it was when every pack was last synced (a file call's packed pre-image asks each call).
    With `token` (the store's compaction token, read under its shared lock) only pack files
    new since the last listing under that token, by name and inode, are stat'ed: compaction
    and consolidation, which delete packs, change it (a file deleted and written again may
    get the freed inode back: then only its ctime tells, which a stat reads).  The one other
    deleter, the first import's linking of the user's packs, removes a copy it failed to
    finish, which never had its .idx."""
    listed = changed_since_listed(_settled_dirs, str(pack_dir), str(pack_dir))
    if listed is None:
        return
    try:
        with os.scandir(pack_dir) as it:
            names = sorted((e.name, e.inode()) for e in it)
    except OSError:
        return
    prior = _durable_names.get(str(pack_dir))
    known = prior[1] if token is not None and prior is not None and prior[0] == token else set()
    synced, durable = [], set()
    for name, ino in names:
        if not (name.startswith("pack-") and name.endswith((".pack", ".idx"))):
            continue
        if (name, ino) in known:
            durable.add((name, ino))
            continue
        key = _pack_key(os.path.join(pack_dir, name))
        if key is None:
            continue
        if key in _synced_packs:
            durable.add((name, ino))
        elif fsync_file(Path(key[0])):
            synced.append((key, name, ino))
    if synced:
        fsync_dir(pack_dir)           # then they count as synced (a failure here raises: not kept)
        _synced_packs.update(key for key, _, _ in synced)
        durable.update((name, ino) for _, name, ino in synced)
    if token is not None:
        _durable_names[str(pack_dir)] = (token, durable)
    listed()
