"""Packs written directly, without libgit2: the entry framing, the pack and its .idx, and a
writer that streams objects into packs of a known size.

The first import (bulk) writes its blobs and trees through it uncompressed, consolidation
(consolidate) its compressed copies, the journal (journal_refs.carried) the objects a sync
carries.  A pack's object count is known before it is written, so its checksum is computed
while writing (no re-read); the .idx goes last, so libgit2 never sees a pack without its
data.
"""
from __future__ import annotations

import errno
import hashlib
import os
import queue
import struct
import tempfile
import threading
import zlib
from pathlib import Path

from . import faults
from .fsutil import atomic_write

PACK_BYTES = 64 << 20                       # one pack per 64 MiB: its object count is known up front
RUN_BYTES = 1 << 20                         # pieces joined into runs this big: one hash update and write each


def object_header(kind: int, n: int) -> bytes:
    """A pack entry's type-and-size header (undeltified object)."""
    first = (kind << 4) | (n & 0x0F)
    n >>= 4
    hdr = bytearray()
    while n:
        hdr.append(first | 0x80)
        first = n & 0x7F
        n >>= 7
    hdr.append(first)
    return bytes(hdr)


STORED_BLOCK = 0xFFFF                       # deflate's largest stored block
ZLIB_HEAD = b"\x78\x01"                      # deflate, 32 KiB window, no dictionary, level 0 hint
_BLOCK, _ADLER = struct.Struct("<BHH"), struct.Struct(">I")


def _stored(data) -> list:
    """`data` as a zlib stream of stored deflate blocks, in pieces that share its memory
    (zlib.compress(data, 0) would copy every byte once more)."""
    n = len(data)
    if n <= STORED_BLOCK:                  # most files: one block
        return [ZLIB_HEAD + _BLOCK.pack(1, n, n ^ 0xFFFF), data, _ADLER.pack(zlib.adler32(data))]
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    head = ZLIB_HEAD
    for start in range(0, n, STORED_BLOCK):
        size = min(STORED_BLOCK, n - start)
        last = start + size == n
        pieces.append(head + _BLOCK.pack(last, size, size ^ 0xFFFF))
        pieces.append(view[start:start + size])
        head = b""
    pieces.append(_ADLER.pack(zlib.adler32(data)))
    return pieces


def stored(data) -> bytes:
    """`data` as one zlib stream of stored blocks: no compression, and none of its set-up."""
    return b"".join(_stored(data))


SMALL = 1 << 14


def deflate(data, level: int) -> bytes:
    """`data` as a zlib stream, with a window no larger than the data needs.  zlib.compress
    sets up a 32 KiB window and 256 KiB of state on each call: 30 us for a 200-byte object,
    against 3 us this way; every inflater reads the window size from the stream's header."""
    n = len(data)
    if n >= SMALL:
        return zlib.compress(data, level)
    wbits = max(9, n.bit_length())          # 2**wbits > n: no match is ever out of reach
    z = zlib.compressobj(level, zlib.DEFLATED, wbits, max(1, wbits - 7))
    return z.compress(data) + z.flush()


def pack_entry(kind: int, data, level: int = 0) -> tuple[int, int, list]:
    """One undeltified pack entry: (its crc32 for the .idx, its size, its pieces).  Level 0
    frames `data` in stored blocks without copying it; higher levels compress."""
    hdr = object_header(kind, len(data))
    pieces = _stored(data) if level == 0 else [b"", deflate(data, level)]
    pieces[0] = hdr + pieces[0]
    crc = size = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
    return crc, size, pieces


def _write_run(fd: int, h, pieces: list) -> None:
    """Join `pieces`, add them to the pack checksum `h` and write them all."""
    view = memoryview(b"".join(pieces))
    if h is not None:
        h.update(view)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "a pack write made no progress")
        view = view[n:]


class PackWriter:
    """Objects go into packs of at most PACK_BYTES.  Each pack's object count is known
    before it is written, so its checksum is computed while writing (no re-read), and a
    writer thread hashes and writes one pack while the caller produces the next."""

    def __init__(self, pack_dir: str, durable: bool = False, pack_bytes: int = PACK_BYTES):
        self.dir = pack_dir
        self.durable = durable
        self.pack_bytes = pack_bytes
        self.seen: set[bytes] = set()
        self.names: list[str] = []
        self._batch: list[tuple[bytes, int, int, list]] = []
        self._batch_bytes = 0
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chronos-git-pack-writer", daemon=True)
        self._thread.start()

    def add(self, sha: bytes, entry: tuple[int, int, list]) -> None:
        """`entry` as pack_entry() makes it."""
        if sha in self.seen:
            return
        self.seen.add(sha)
        crc, size, pieces = entry
        self._batch.append((sha, crc, size, pieces))
        self._batch_bytes += size
        if self._batch_bytes >= self.pack_bytes:
            self._ship()

    def _ship(self) -> None:
        if self._error is not None:
            raise self._error
        if self._batch:
            self._queue.put(self._batch)
            self._batch, self._batch_bytes = [], 0

    def finish(self) -> list[str]:
        self._ship()
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.names

    def abort(self) -> None:
        self._batch = []
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            self._error = self._error or RuntimeError("aborted")
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None or self._error is not None:
                return
            try:
                self.names.append(write_pack(self.dir, batch, durable=self.durable))
            except BaseException as exc:      # surfaced to the producer by _ship/finish
                self._error = exc


def write_pack(pack_dir: str, batch: list, *, durable: bool,
               points: tuple[str, str] = ("bulk_mid_pack", "bulk_before_idx")) -> str:
    """One pack of `batch` ((sha, crc, size, pieces) as pack_entry() frames them) and its .idx,
    the .idx last (only then does libgit2 see the pack); its stem.  `durable`: both fsynced,
    and the directory.  `points`: the fault points half way through and before the .idx."""
    fd, tmp = tempfile.mkstemp(prefix="tmp_pack_chronos_", dir=pack_dir)
    objects: dict[bytes, tuple[int, int]] = {}
    h = hashlib.sha1()
    try:
        head = b"PACK" + struct.pack(">II", 2, len(batch))
        # pieces are joined into ~1 MiB runs: one hash update and one write each, so this
        # thread takes the GIL back a few thousand times per import, not once per piece
        run, run_bytes, offset = [head], len(head), len(head)
        for n, (sha, crc, size, pieces) in enumerate(batch):
            if n == len(batch) // 2:
                _write_run(fd, h, run)
                run, run_bytes = [], 0
                faults.hit(points[0])
            objects[sha] = (offset, crc)
            run += pieces
            run_bytes += size
            offset += size
            if run_bytes >= RUN_BYTES:
                _write_run(fd, h, run)
                run, run_bytes = [], 0
        _write_run(fd, h, run)
        digest = h.digest()
        _write_run(fd, None, [digest])
        if durable:
            os.fsync(fd)
        fd, closing = -1, fd
        os.close(closing)
        name = "pack-" + digest.hex()
        os.chmod(tmp, 0o444)
        os.replace(tmp, os.path.join(pack_dir, name + ".pack"))
        faults.hit(points[1])
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # the .idx last: only now does libgit2 see the pack
    atomic_write(Path(pack_dir) / (name + ".idx"), _pack_index(objects, digest), mode=0o444,
                 durable=durable)
    return name


def _pack_index(objects: dict, pack_digest: bytes) -> bytes:
    """A version-2 .idx for `objects` (sha -> (offset, crc32))."""
    shas = sorted(objects)
    out = bytearray(b"\xfftOc" + struct.pack(">I", 2))
    counts = [0] * 256
    for s in shas:
        counts[s[0]] += 1
    total = 0
    for c in counts:
        total += c
        out += struct.pack(">I", total)
    for s in shas:
        out += s
    for s in shas:
        out += struct.pack(">I", objects[s][1])
    large: list[int] = []
    for s in shas:
        off = objects[s][0]
        if off < 0x80000000:
            out += struct.pack(">I", off)
        else:
            out += struct.pack(">I", 0x80000000 | len(large))
            large.append(off)
    for off in large:
        out += struct.pack(">Q", off)
    out += pack_digest
    out += hashlib.sha1(out).digest()
    return bytes(out)
