"""A snapshot never hangs on a FIFO.

A file that is swapped for a FIFO between the moment it is listed and the
moment it is opened makes open(2) block until a writer appears, which may be
never, while the snapshot holds the store's locks.  Our own readers open
with O_NONBLOCK and check the type; libgit2 (the work-tree diff and
`index.add`) opens with plain O_RDONLY.  While a snapshot runs, this guard
looks at the snapshotting thread every half second; when the kernel says it
waits in `wait_for_partner` (a FIFO open) on a path inside the workspace, it
opens that FIFO for writing once and closes it: the blocked open returns, the
read sees end-of-file, and the scan then skips the path as a special file.
Linux only (procfs); elsewhere it does nothing.
"""
from __future__ import annotations

import os
import stat
import threading
import time
from contextlib import contextmanager

POLL_S = 0.5
_OPEN_SYSCALLS = {"257", "2", "56"}      # openat, open (x86_64); openat (aarch64)


def _blocked_fifo_path(tid: int) -> bytes | None:
    """The path a thread is blocked opening as a FIFO, read from its own memory."""
    try:
        with open(f"/proc/self/task/{tid}/wchan") as fh:
            if fh.read().strip() not in ("wait_for_partner", "fifo_open"):
                return None
        with open(f"/proc/self/task/{tid}/syscall") as fh:
            fields = fh.read().split()
        if not fields or fields[0] not in _OPEN_SYSCALLS:
            return None
        ptr = int(fields[1 if fields[0] == "2" else 2], 16)
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            mem.seek(ptr)
            raw = mem.read(4096)
        return raw.split(b"\0", 1)[0]
    except (OSError, ValueError, IndexError, OverflowError):
        return None


def _release(path: bytes, root: bytes) -> bool:
    if not os.path.isabs(path) or not (path == root or path.startswith(root.rstrip(b"/") + b"/")):
        return False
    try:
        if not stat.S_ISFIFO(os.lstat(path).st_mode):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:                       # no reader any more (ENXIO), or it changed again
        return False
    os.close(fd)
    return True


_guarded: dict[int, bytes] = {}          # native thread id -> the workspace root it snapshots
_lock = threading.Lock()
_thread: threading.Thread | None = None


def _watch() -> None:
    while True:
        time.sleep(POLL_S)
        with _lock:
            items = list(_guarded.items())
        for tid, root in items:
            path = _blocked_fifo_path(tid)
            if path is not None:
                _release(path, root)


@contextmanager
def watching(root: bytes):
    """Guard the calling thread for the duration of the block.  One daemon thread per
    process looks at every guarded thread (starting a thread per snapshot cost ~1 ms)."""
    global _thread
    if not os.path.exists("/proc/self/task"):
        yield
        return
    tid = threading.get_native_id()
    with _lock:
        outer = _guarded.get(tid)
        _guarded[tid] = root
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_watch, name="chronos-git-fifo-guard", daemon=True)
            _thread.start()
    try:
        yield
    finally:
        with _lock:
            if outer is None:
                _guarded.pop(tid, None)
            else:
                _guarded[tid] = outer
