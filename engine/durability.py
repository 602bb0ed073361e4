"""fsync of git writes is a process-global libgit2 switch; share it by reference count.
And the objects a durable record links to must be durable too, whoever wrote them."""
from __future__ import annotations

import os
import threading
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


_synced_packs: set[tuple[str, int]] = set()


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


def note_durable_pack(pack_dir: Path, stem: str) -> None:
    """A pack this process wrote and fsynced: `settle_objects` need not fsync it again."""
    for suffix in (".pack", ".idx"):
        try:
            _synced_packs.add((stem + suffix, (pack_dir / (stem + suffix)).stat().st_size))
        except FileNotFoundError:
            pass


def settle_objects(objects_dir: Path, oids) -> None:
    """fsync the files that hold `oids` (loose objects, else the packs).

    libgit2 does not write an object that already exists, so a blob a fast
    (non-durable) snapshot wrote first stays in the page cache even when a
    journal event, fsynced, links it: a power cut would leave the event
    pointing at nothing.  Each pack is fsynced once per process."""
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
        pack_dir = objects_dir / "pack"
        synced = False
        for f in sorted(pack_dir.glob("pack-*")):
            if f.suffix not in (".pack", ".idx"):
                continue
            try:
                key = (f.name, f.stat().st_size)
            except FileNotFoundError:
                continue
            if key not in _synced_packs and fsync_file(f):
                _synced_packs.add(key)
                synced = True
        if synced:
            fsync_dir(pack_dir)
