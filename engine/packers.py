"""The first import's blobs read, hashed and packed by forked children, one per core
(or, where no child can be forked, on threads).

Why processes: in one interpreter the readers, the pack writer and the thread that
collects their results take turns at the GIL 4-5 times per file; on the kernel tree
the import kept only 1.4-1.6 of 2 cores busy.  A forked child has the listing in its
memory already (nothing is sent to it), reads and hashes its share of the chunks and
writes its own packs; only blob ids and stat data come back.  Blobs are dealt out in
chunks round-robin, so the children finish together; a blob that two children both
meet (identical files) lands in both their packs, which git allows.

Forking is safe only where no thread but our own runs (a host thread inside OpenSSL
or malloc at the fork leaves the child a lock nobody releases), so `usable()` says
no in a process with foreign threads (Hermes' own: it runs the import in a child
process of its own instead, engine/offload.py) and the chunks are packed on threads
(`on_threads`).  The children use nothing but os, zlib and hash objects copied from
one the parent made.

A child that fails reports its error (errno kept: a full disk stays ENOSPC) and the
import fails as it would in-process; one that dies or stalls fails it too.  A child
dies with the import's thread (PR_SET_PDEATHSIG).  Its temp pack is garbage the next
compaction sweeps.  A fault injected into a child (engine/faults.py) kills the
import's process as well: the crash it simulates is the machine's, not the child's.
"""
from __future__ import annotations

import errno
import gc
import os
import pickle
import select
import signal
import struct
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import faults
from .scan import ScanReport

WINDOW_CHUNKS = 64               # on threads: at most ~64 MiB read ahead
STALL_S = 600.0                  # a child silent this long over one chunk (~1 MiB, or one big file) is stuck
CHILD_POINTS = ("bulk_mid_pack", "bulk_before_idx")     # fault points a child can reach
_LEN = struct.Struct(">I")
OURS = ("chronos-git-", "chronos-pack-")


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable(n: int) -> bool:
    """Fork `n` children only if n >= 2 and no thread but ours runs."""
    if n < 2 or not hasattr(os, "fork"):
        return False
    me = threading.current_thread()
    return all(t is me or t.name.startswith(OURS) for t in threading.enumerate())


def _send(fd: int, msg) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class _Child:
    def __init__(self, pid: int, fd: int):
        self.pid, self.fd, self.buf, self.done = pid, fd, bytearray(), False
        self.packs: list[str] = []
        self.heard = time.monotonic()

    def frames(self, data: bytes):
        self.buf += data
        while len(self.buf) >= 4:
            n = _LEN.unpack_from(self.buf)[0]
            if len(self.buf) < 4 + n:
                return
            msg = pickle.loads(bytes(self.buf[4:4 + n]))
            del self.buf[:4 + n]
            yield msg


def run(chunks: list, n: int, make_writer, pack_one, on_chunk) -> list[str]:
    """Pack `chunks` in `n` children.  In a child, `pack_one(chunk, writer, report)` packs
    one chunk into the child's own `make_writer()` and returns its rows; in the parent,
    `on_chunk(k, rows, report)` takes them.  Returns the names of the children's packs."""
    kids: list[_Child] = []
    parent = os.getpid()
    try:
        for i in range(n):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                   # the child: never returns
                os.close(r)
                _child(w, parent, chunks[i::n], range(i, len(chunks), n), make_writer, pack_one)
            os.close(w)
            kids.append(_Child(pid, r))
        return _collect(kids, on_chunk)
    finally:
        for kid in kids:
            _reap(kid)


def _child(fd: int, parent: int, mine: list, ks: range, make_writer, pack_one) -> None:
    code = 1
    try:
        gc.disable()        # a collection would walk, and so copy, every object inherited from the parent
        die_with_parent(parent)
        writer = make_writer()
        for k, chunk in zip(ks, mine, strict=True):      # ks and mine are both every n-th chunk from i
            report = ScanReport()
            rows = pack_one(chunk, writer, report)
            _send(fd, ("chunk", k, rows, report.skipped, report.perms))
        _send(fd, ("done", writer.finish()))
        code = 0
    except BaseException as exc:          # the parent turns it back into the same error
        try:
            _send(fd, ("error", getattr(exc, "errno", None), f"{type(exc).__name__}: {exc}"))
        except BaseException:
            pass
    finally:
        os._exit(code)


def die_with_parent(parent: int) -> None:
    """SIGKILL when the thread that started this process ends (Linux); a no-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:                                 # it ended before prctl took
        os._exit(1)


def _collect(kids: list[_Child], on_chunk) -> list[str]:
    live = {kid.fd: kid for kid in kids}
    while live:
        ready, _, _ = select.select(list(live), [], [], 1.0)
        now = time.monotonic()
        for fd in ready:
            kid = live[fd]
            data = os.read(fd, 1 << 16)
            kid.heard = now
            if not data:
                del live[fd]
                if not kid.done:
                    _fail(kid)
                continue
            for msg in kid.frames(data):
                if msg[0] == "chunk":
                    report = ScanReport(skipped=msg[3], perms=msg[4])
                    on_chunk(msg[1], msg[2], report)
                elif msg[0] == "done":
                    kid.done, kid.packs = True, msg[1]
                else:
                    raise OSError(msg[1] or errno.EIO, f"a packing child failed: {msg[2]}")
        for kid in list(live.values()):
            if now - kid.heard > STALL_S:
                raise OSError(errno.ETIMEDOUT, f"a packing child sent nothing for {STALL_S:.0f} s")
    return [name for kid in kids for name in kid.packs]


def _fail(kid: _Child) -> None:
    """A child that closed its pipe without finishing: how it ended."""
    _, status = os.waitpid(kid.pid, 0)
    kid.pid = 0
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL and faults.armed() in CHILD_POINTS:
            os.kill(os.getpid(), signal.SIGKILL)       # an injected crash is the whole machine's
        raise OSError(errno.EIO, f"a packing child ended with signal {sig}")
    raise OSError(errno.EIO, f"a packing child exited with status {os.WEXITSTATUS(status)}")


def _reap(kid: _Child) -> None:
    try:
        os.close(kid.fd)
    except OSError:
        pass
    if kid.pid:
        if not kid.done:
            try:
                os.kill(kid.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(kid.pid, 0)
        except ChildProcessError:
            pass


def on_threads(chunks: list, workers: int, writer, pack_one, take, report: ScanReport) -> None:
    """Where no child can be forked: the chunks on a thread pool (read, hash, frame
    release the GIL), a window of them in flight, the packs written by `writer` (a
    pack_writer.PackWriter).  `pack_one` and `take` as for run()."""
    class _Here:                       # pack_one's writer: the entry comes back to this thread
        def __init__(self):
            self.rows = []

        def add(self, sha, packed):
            self.rows.append(packed)

    def work(chunk):
        here = _Here()
        return pack_one(chunk, here, report), here.rows

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chronos-git-reader") as pool:
        inflight: deque = deque()
        nxt = 0
        while nxt < len(chunks) or inflight:
            while nxt < len(chunks) and len(inflight) < WINDOW_CHUNKS:
                inflight.append((nxt, pool.submit(work, chunks[nxt])))
                nxt += 1
            k, fut = inflight.popleft()
            rows, packed = fut.result()
            for row, entry in zip(rows, packed, strict=True):   # one writer.add per row
                writer.add(row[1], entry)
            take(k, rows, report)

