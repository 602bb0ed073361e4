"""Moving a ref the way git does (its `<ref>.lock` protocol), with Python's GIL let go.

pygit2's `Reference.set_target` holds the GIL through all of libgit2's update, its
fsyncs included: 0.4-0.9 ms per move on this project's machine, twice per protected
call on the outcome writer's thread, time in which the host's (Hermes') own thread
cannot run.  `move` takes the same steps as plain system calls, each of which lets the
GIL go: create `<ref>.lock` exclusively, write the new id, fsync it when durable, compare
the ref's value with the expected one, rename the lock over the ref, fsync the folder
when durable.  git and libgit2 take the same lock file, so every writer still excludes
the others; a lock a killed process leaves is cleared by its caller under the matching
chronos lock (Store.clear_stale_git_lock), as for libgit2's.
"""
from __future__ import annotations

import os
from pathlib import Path

import pygit2
from pygit2 import GitError

from . import faults
from .fsutil import fsync_dir


def move(repo: pygit2.Repository, root: Path, name: str, old: str, new: str, *, durable: bool) -> None:
    """Compare-and-swap the existing ref `name` of the repository at `root` from `old` to
    `new` (hex ids).  GitError "does not match" when it is not at `old` (it moved), GitError
    "failed to lock" when another writer holds its lock; OSError when the disk fails."""
    path = Path(root) / name
    lock = path.parent / (path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError:
        raise GitError(f"failed to lock file '{lock}' for writing: another writer holds it") from None
    try:
        try:
            data = f"{new}\n".encode()
            while data:
                data = data[os.write(fd, data):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        faults.hit("ref_locked")
        ref = repo.references.get(name)          # loose or packed; a torn file raises "corrupted"
        if ref is None or str(ref.target) != old:
            raise GitError(f"old reference value does not match: {name} is at "
                           f"{'nothing' if ref is None else str(ref.target)[:12]}, expected {old[:12]}")
        os.rename(lock, path)
    except BaseException:
        try:
            os.unlink(lock)
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)
