"""Small filesystem helpers with explicit durability."""
from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

from . import faults


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TEMP_SUFFIX = ".tmp"


def left_temps(path: Path) -> list[Path]:
    """The temp files `atomic_write(path, ...)` leaves when it is killed before its rename
    (only the caller knows whether none is being written right now)."""
    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*{_TEMP_SUFFIX}"))


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True,
                 fault: str | None = None) -> None:
    """Write `data` to `path` so readers see the old or the new content, never a mix.
    `fault` names the fault point between the temp file and the rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if fault:
            faults.hit(fault)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def make_private_dir(path: Path) -> None:
    """Create `path` (and parents) and make the leaf 0700."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


# open a work-tree file to read it: never through a link in its last component, and never
# waiting on a FIFO put in its place (the caller's fstat then says what it is)
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_all(fd: int, size_hint: int = 0) -> bytes:
    """Everything left in an open file, read in 1 MiB chunks (one allocation at the end).
    With `size_hint` (the file's size as fstat gave it) a file of up to 1 MiB takes one
    read: asked for one byte more, it returns exactly its size only at its end (any other
    short read, as some file systems give, reads on)."""
    chunks: list[bytes] = []
    want = size_hint + 1 if 0 < size_hint < 1 << 20 else 1 << 20
    while True:
        chunk = os.read(fd, want)
        if not chunk:
            return b"".join(chunks)
        if not chunks and want == size_hint + 1 and len(chunk) == size_hint:
            return chunk                # the first read, and the whole file
        chunks.append(chunk)
        want = 1 << 20


def tree_size(root) -> int:
    """Bytes of the files below `root` (links not followed; files vanishing meanwhile skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


_PROC_FD = "/proc/self/fd/%d"
_O_PATH = getattr(os, "O_PATH", None)
_DELETED = " (deleted)"


def realpath(path):
    """`os.path.realpath(path)` (not strict), for an existing path in three system calls: the
    kernel resolves it (an `O_PATH` open) and /proc names what it reached.  Python's own walks
    the path one `lstat` per component in Python (~30 µs for a file four folders down, asked
    several times per protected call).  Anything else (a missing or dangling path, a loop, no
    /proc, a name /proc cannot spell back) takes `os.path.realpath`.  Text is first spelled as
    the name it encodes (a surrogate-escaped UTF-8 name as its UTF-8 text), on both ways, so a
    name has one answer whichever way it was written."""
    raw = os.fspath(path)
    if isinstance(raw, str):        # one spelling per name: "jos\udcc3\udca9" is "josé" on disk
        raw = os.fsdecode(os.fsencode(raw))
    if _O_PATH is None:
        return os.path.realpath(raw)
    try:
        fd = os.open(raw, _O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return os.path.realpath(raw)
    try:
        got = os.readlink(_PROC_FD % fd)
    except OSError:
        got = ""
    finally:
        os.close(fd)
    if not got.startswith("/") or got.endswith(_DELETED):
        return os.path.realpath(raw)
    return os.fsencode(got) if isinstance(raw, bytes) else got
