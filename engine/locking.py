"""Thread- and process-wide locks built on flock(2).

flock locks die with their process, so a SIGKILLed holder never blocks the
next one; git's own `*.lock` files do not, and are cleared by the store while
it holds the matching lock here (see Store.clear_stale_git_lock).
"""
from __future__ import annotations

import errno
import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path

from . import metadir

_registry_guard = threading.Lock()
_exclusive: dict[str, _ExclusiveState] = {}
_shared: dict[str, _SharedState] = {}


class _ExclusiveState:
    def __init__(self):
        self.rlock = threading.RLock()
        self.depth = 0
        self.fd = -1


class _SharedState:
    def __init__(self):
        self.cond = threading.Condition()
        self.readers = 0
        self.reader_threads: dict[int, int] = {}
        self.writer = False
        self.writer_thread: int | None = None
        self.fd = -1


def _open(path: Path) -> int:
    """The lock file, or -1 when it neither exists nor can be made: a store nobody can
    write (read-only filesystem, full disk) needs no lock for the readers left."""
    try:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EDQUOT):
            raise
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)     # flock works on read-only fds
    except OSError:
        return -1


def _flock(fd: int, op: int) -> None:
    if fd >= 0:
        fcntl.flock(fd, op)


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


_mine = threading.local()          # how many exclusive locks this thread holds, and which (in order)


@contextmanager
def _ordered(path: Path):
    """Keeps this thread's held locks; with CHRONOS_GIT_LOCK_ORDER=strict, a lock taken after
    one that comes later in metadir.LOCK_ORDER raises LockOrderError before it waits.
    CHRONOS_GIT_LOCK_TRACE=FILE appends each (held, taken) pair of kinds (to derive the order)."""
    if not _ordering():
        yield                            # in production: nothing kept, nothing checked
        return
    held: list[tuple[int | None, str]] = _mine.__dict__.setdefault("stack", [])
    key = str(path)
    if any(k == key for _r, k in held):
        yield                            # re-entry: nothing new is waited for
        return
    rank = metadir.rank(path)
    if held and rank is not None:
        trace = os.environ.get("CHRONOS_GIT_LOCK_TRACE")
        worst = max((r for r, _k in held if r is not None), default=None)
        if trace:
            kinds = sorted({str(metadir.kind_of(k)) for _r, k in held if metadir.kind_of(k)})
            with open(trace, "a") as fh:
                fh.write("".join(f"{k} {metadir.kind_of(path)}\n" for k in kinds))
        if worst is not None and worst > rank and os.environ.get("CHRONOS_GIT_LOCK_ORDER") == "strict":
            raise metadir.LockOrderError(
                f"lock {metadir.kind_of(path)} taken while holding "
                f"{', '.join(str(metadir.kind_of(k)) for _r, k in held)}: against engine/metadir.py's LOCK_ORDER")
    held.append((rank, key))
    try:
        yield
    finally:
        held.pop()


class OwnedRLock:
    """A re-entrant thread lock that can say whether this thread holds it."""

    def __init__(self):
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self):
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._lock.release()

    def owned(self) -> bool:
        return self._owner == threading.get_ident()


def holding_exclusive() -> bool:
    """Whether this thread holds any exclusive lock (then it must not wait for a thread that
    may need one)."""
    return getattr(_mine, "held", 0) > 0


WAIT_POLL_S = 0.1


def exclusive(path: Path, *, while_waiting=None):
    """Re-entrant (per thread) exclusive lock shared by every thread and process.
    `while_waiting()`: called every WAIT_POLL_S (from a helper thread) while this thread
    waits for it; the wait itself stays a blocking one, in the kernel's order of arrival."""
    if _ordering():
        return _ordered_exclusive(path, while_waiting)
    return _Exclusive(path, while_waiting)


def _ordering() -> bool:
    return bool(os.environ.get("CHRONOS_GIT_LOCK_ORDER") or os.environ.get("CHRONOS_GIT_LOCK_TRACE"))


@contextmanager
def _ordered_exclusive(path: Path, while_waiting):
    with _ordered(path), _Exclusive(path, while_waiting):
        yield


class _Exclusive:
    """The lock as a plain context manager: a call's intent takes it on every append, and the
    generator-based one with its ordering layer cost several times the flock calls."""
    __slots__ = ("path", "st", "while_waiting")

    def __init__(self, path: Path, while_waiting):
        key = str(path)
        st = _exclusive.get(key)
        if st is None:
            with _registry_guard:
                st = _exclusive.setdefault(key, _ExclusiveState())
        self.path, self.st, self.while_waiting = path, st, while_waiting

    def __enter__(self) -> None:
        st = self.st
        if not st.rlock.acquire(blocking=False):
            with _asking(self.while_waiting):
                st.rlock.acquire()
        try:
            if st.depth == 0:
                st.fd = _open(self.path)
                try:
                    if self.while_waiting is None:
                        _flock(st.fd, fcntl.LOCK_EX)
                    else:
                        try:
                            _flock(st.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            with _asking(self.while_waiting):
                                _flock(st.fd, fcntl.LOCK_EX)
                except BaseException:     # a Ctrl-C while waiting: no fd left behind
                    _close(st.fd)
                    st.fd = -1
                    raise
        except BaseException:
            st.rlock.release()
            raise
        st.depth += 1
        _mine.held = getattr(_mine, "held", 0) + 1

    def __exit__(self, *exc) -> None:
        st = self.st
        _mine.held -= 1
        st.depth -= 1
        try:
            if st.depth == 0:
                _flock(st.fd, fcntl.LOCK_UN)
                _close(st.fd)
                st.fd = -1
        finally:
            st.rlock.release()


@contextmanager
def _asking(while_waiting):
    """Calls `while_waiting()` at once and then every WAIT_POLL_S until the block ends."""
    if while_waiting is None:
        yield
        return
    stop = threading.Event()

    def ask() -> None:
        while True:
            try:
                while_waiting()
            except Exception:                # noqa: BLE001 (asking is a courtesy; the wait goes on)
                pass
            if stop.wait(WAIT_POLL_S):
                return
    threading.Thread(target=ask, name="chronos-git-asking", daemon=True).start()
    try:
        yield
    finally:
        stop.set()


class _Shared:
    """ReadWriteLock.shared as a plain context manager (every append takes it: store.writing)."""
    __slots__ = ("st", "path", "tid", "nested", "in_writer")

    def __init__(self, st: _SharedState, path: Path):
        self.st, self.path = st, path

    def __enter__(self) -> None:
        st = self.st
        self.tid = tid = threading.get_ident()
        with st.cond:
            self.in_writer = st.writer_thread == tid      # the exclusive holder reads too: already alone
            if self.in_writer:
                return
            if st.reader_threads.get(tid):
                st.reader_threads[tid] += 1          # re-entry by the same thread
                self.nested = True
                return
            while st.writer:
                st.cond.wait()
            if st.readers == 0:
                st.fd = _open(self.path)
                _flock(st.fd, fcntl.LOCK_SH)
            st.readers += 1
            st.reader_threads[tid] = 1
            self.nested = False

    def __exit__(self, *exc) -> None:
        if self.in_writer:
            return
        st, tid = self.st, self.tid
        with st.cond:
            st.reader_threads[tid] -= 1
            if st.reader_threads[tid] == 0:
                del st.reader_threads[tid]
            if not self.nested:
                st.readers -= 1
                if st.readers == 0:
                    _flock(st.fd, fcntl.LOCK_UN)
                    _close(st.fd)
                    st.fd = -1
                st.cond.notify_all()


class ReadWriteLock:
    """Many writers of objects share it; compaction takes it alone."""

    def __init__(self, path: Path):
        self.path = path
        key = str(path)
        with _registry_guard:
            self._st = _shared.setdefault(key, _SharedState())

    def shared(self):
        if _ordering():
            return self._ordered_shared()
        return _Shared(self._st, self.path)

    @contextmanager
    def _ordered_shared(self):
        with _ordered(self.path), _Shared(self._st, self.path):
            yield

    def held_here(self) -> bool:
        """True when this thread holds it shared (taking it exclusively would wait forever)."""
        with self._st.cond:
            return bool(self._st.reader_threads.get(threading.get_ident()))

    @contextmanager
    def exclusive(self):
        with _ordered(self.path), self._exclusive():
            yield

    @contextmanager
    def _exclusive(self):
        st = self._st
        with st.cond:
            while st.writer or st.readers:
                st.cond.wait()
            st.writer = True
            st.writer_thread = threading.get_ident()
            st.fd = _open(self.path)
        try:
            _flock(st.fd, fcntl.LOCK_EX)
            yield
        finally:
            with st.cond:
                _flock(st.fd, fcntl.LOCK_UN)
                _close(st.fd)
                st.fd = -1
                st.writer = False
                st.writer_thread = None
                st.cond.notify_all()
