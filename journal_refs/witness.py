"""The witness file: two slots rewritten in place, one fdatasync per append.

Every append makes its event durable by rewriting the witness.  Writing a new
file and renaming it over the old one costs two fsyncs, one of them a
directory's, and a new inode each time (about 1 ms here, several under load).
Instead the file holds two records in two fixed slots; record `gen` lives in
slot `gen % 2`, so a write always overwrites the slot that does *not* hold the
newest record, then fdatasyncs (the file's size and blocks do not change, so
no metadata has to reach the disk).

    slot:  b"chronos-git witness v1 <gen> <length> <sha256 of record>\\n" record, zero padding

Reading takes the valid record with the highest `gen`.  A write cut short by
a power cut (or an I/O error) leaves its slot torn, and the previous record,
which was durable, in the other slot: the reader says the other slot is torn,
and the journal decides whether that is the write it expects (the journal
ref is not ahead of the surviving record: an event counts only once its
record is durable) or damage (journal_refs/journal.py).

A record too large for its slot, the first write, and the first write after an
older version's single-JSON witness rewrite the whole file the old way: a temp
file, fsynced, renamed, the directory fsynced, with both slots filled (the
previous record as the standby), so that step is atomic too.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from ..engine import faults
from ..engine.fsutil import atomic_write, left_temps, read_all, realpath

SLOT_MIN = 64 * 1024
SLOT_MAX = 256 * 1024 * 1024        # a record never needs more; a bigger file is not ours
LEGACY_MAX = 64 * 1024 * 1024      # an older version's JSON witness
_MAGIC = b"chronos-git witness v1 "
_HEADER_MAX = 128


def _header(gen: int, record: bytes) -> bytes:
    return _MAGIC + b"%d %d %s\n" % (gen, len(record), hashlib.sha256(record).hexdigest().encode())


def _slot_ok(slot: int) -> bool:
    """The slot sizes the writer makes: 64 KiB times a power of two, at most SLOT_MAX."""
    n = slot // SLOT_MIN
    return SLOT_MIN <= slot <= SLOT_MAX and slot % SLOT_MIN == 0 and n & (n - 1) == 0


def _read_slot(fd: int, index: int, slot: int) -> tuple[int, bytes, bytes] | None:
    """(gen, record, the slot's bytes as read: header and record) of slot `index` if it is
    whole, else None (torn, zeroed or edited).
    Reads the header and the record only: memory and time follow the record, not the file."""
    off = index * slot
    head = os.pread(fd, _HEADER_MAX, off)
    end = head.find(b"\n")
    if end < 0 or not head.startswith(_MAGIC):
        return None
    fields = head[len(_MAGIC):end].split(b" ")
    if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit() or len(fields[0]) > 18:
        return None
    gen, length = int(fields[0]), int(fields[1])
    if gen % 2 != index or length > slot - end - 1:
        return None
    record = _pread_all(fd, length, off + end + 1)
    if len(record) != length or hashlib.sha256(record).hexdigest().encode() != fields[2]:
        return None
    return gen, record, head[:end + 1] + record


def _pread_all(fd: int, n: int, off: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, off + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _pwrite_all(fd: int, data: bytes, off: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, off)
        if n <= 0:
            raise OSError(f"short write to the witness ({n} bytes)")
        view, off = view[n:], off + n


class WitnessFile:
    """One witness file.  Not thread-safe: the journal calls it under its lock, and reads
    before it writes (the write goes to the slot after the newest record it read)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._gen: int | None = None        # the newest record read or written
        self._record: bytes | None = None
        self._shape: tuple[int, int] | None = None   # (inode, size) of the slotted file
        # each slot's bytes (header and record) as last written or read whole: a read that
        # finds both again byte for byte needs no hashing (journal.Journal reads before it writes)
        self._slots: dict[int, bytes] = {}

    def read(self) -> tuple[bytes, bool] | None:
        """(the newest record, whether the other slot is torn), or None if there is no file.
        ValueError: the file holds no whole record, or is not a witness file (a directory,
        a FIFO: never waited on, a size the writer does not make)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            self._gen = self._record = self._shape = None
            self._slots = {}
            return None
        try:
            st = os.fstat(fd)
            if self._unchanged(fd, st):
                assert self._record is not None
                return self._record, False
            self._shape, self._slots = None, {}
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("it is not a regular file")
            if os.pread(fd, 1, 0) == b"{":      # an older version's single JSON document
                if st.st_size > LEGACY_MAX:
                    raise ValueError(f"it is too large ({st.st_size} bytes)")
                self._gen, self._record = 0, read_all(fd, st.st_size)
                return self._record, False
            slot = st.st_size // 2
            if st.st_size % 2 or not _slot_ok(slot):
                raise ValueError(f"its size ({st.st_size} bytes) is not two whole slots")
            found = [r for k in (0, 1) if (r := _read_slot(fd, k, slot)) is not None]
        finally:
            os.close(fd)
        if not found:
            raise ValueError("neither of its two records is whole")
        if len(found) == 2 and abs(found[0][0] - found[1][0]) != 1:
            raise ValueError("its two records are not consecutive")
        self._gen, self._record, _ = max(found)
        self._shape = (st.st_ino, st.st_size)
        self._slots = {g % 2: raw for g, _, raw in found}
        return self._record, len(found) < 2

    def _unchanged(self, fd: int, st: os.stat_result) -> bool:
        """The newest record's slot holds exactly the bytes this object last wrote or read whole
        there, and the other slot still starts with the header it had.  The other slot's record
        is not read again: another writer's record there comes with a new header, and a body
        edited under an old header only breaks the superseded record, which the next write
        overwrites (a process that opens the file reads both whole)."""
        if (len(self._slots) != 2 or self._shape != (st.st_ino, st.st_size) or self._gen is None
                or not stat.S_ISREG(st.st_mode) or st.st_size % 2 or not _slot_ok(st.st_size // 2)):
            return False
        slot, k = st.st_size // 2, self._gen % 2
        data, other = self._slots[k], self._slots[1 - k]
        head = other[:other.find(b"\n") + 1]
        return (_pread_all(fd, len(data), k * slot) == data
                and os.pread(fd, len(head), (1 - k) * slot) == head)

    def write(self, record: bytes, *, fault: str = "witness_half_written") -> None:
        """Make `record` the newest record, durably (OSError as the disk gives it)."""
        gen = (self._gen or 0) + 1
        rec = _header(gen, record) + record
        if self._shape is not None and len(rec) <= self._shape[1] // 2:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                raise
            except OSError:                     # read-only, or a symlink: replaced whole, as before
                fd = None
        else:
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
                # a hard link (a backup made with `cp -al`) keeps the file it had: replaced whole
                if (st.st_ino, st.st_size) == self._shape and st.st_nlink == 1:
                    off = (gen % 2) * (st.st_size // 2)
                    try:
                        if faults.armed() == fault:      # the crash a power cut would leave
                            _pwrite_all(fd, rec[:len(rec) // 2], off)
                            faults.hit(fault)
                        _pwrite_all(fd, rec, off)
                        os.fdatasync(fd)
                    except BaseException:
                        # the append fails: its record must not be read as the newest later on
                        # (Linux keeps the pages of a failed sync readable)
                        self._slots = {}
                        try:
                            os.pwrite(fd, bytes(len(_MAGIC)), off)
                        except OSError:
                            pass
                        raise
                    self._gen, self._record = gen, record
                    self._slots[gen % 2] = rec
                    return
            finally:
                os.close(fd)
        self._rewrite(gen, record)

    def _rewrite(self, gen: int, record: bytes) -> None:
        """The whole file, atomically: this record and the previous one (or itself) as standby."""
        prev = self._record if self._record is not None else record
        recs = {gen: _header(gen, record) + record, gen - 1: _header(gen - 1, prev) + prev}
        slot = SLOT_MIN
        while slot < max(map(len, recs.values())):
            slot *= 2
        if slot > SLOT_MAX:
            raise OSError(errno.EFBIG, f"a journal witness record of {len(record)} bytes is too large")
        buf = bytearray(2 * slot)
        for g, r in recs.items():
            buf[(g % 2) * slot:(g % 2) * slot + len(r)] = r
        self._slots = {}
        atomic_write(self.path, bytes(buf), mode=0o600, durable=True, fault="witness_temp_written")
        st = os.stat(self.path)
        self._gen, self._record, self._shape = gen, record, (st.st_ino, st.st_size)
        if st.st_size == len(buf):       # else replaced since the rename: the next read reads it whole
            self._slots = {g % 2: r for g, r in recs.items()}

    def newest_slot(self) -> tuple[int, int]:
        """(the slot holding the newest record, the slot size), as the last `read` found them
        (the wind tunnel and the tests damage one slot or the other)."""
        if self._shape is None or self._gen is None:
            raise ValueError("no slotted witness was read")
        return self._gen % 2, self._shape[1] // 2

    def clear_temp(self) -> list[str]:
        """Remove the temp files a crash during a whole rewrite left (callers hold the lock
        every witness write takes, so none of them is being written)."""
        gone = []
        for p in left_temps(self.path):
            try:
                p.unlink()
                gone.append(p.name)
            except OSError:
                pass
        return gone


def read_doc(path: Path) -> bytes | None:
    """The newest record of the witness at `path` (tools and tests; ValueError if none)."""
    got = WitnessFile(path).read()
    return got[0] if got else None


def write_doc(path: Path, record: bytes) -> None:
    """Replace the newest record (tools and tests: what an editor of the file would do)."""
    wf = WitnessFile(path)
    wf.read()
    wf.write(record)


WITNESS_SUFFIX = ".journal-witness.json"
OLD_WITNESS_SUFFIX = ".journal-checkpoint.json"   # its older name: a store made with it keeps it


def witness_path_for(store_root: Path) -> Path:
    """The witness file, beside the store's real folder, so that the store reached through a
    symlink has the same witness (one kept beside such a link before, and only there, is still
    used).  A store whose witness has its older name keeps that one: an upgrade never finds it
    missing, and a file of the new name planted beside it is not read instead."""
    given, real = Path(store_root), Path(realpath(store_root))

    def existing(suffix: str) -> Path | None:
        ours = real.parent / (real.name + suffix)
        beside_link = given.parent / (given.name + suffix)
        if real != given and beside_link.exists() and not ours.exists():
            return beside_link
        return ours if ours.exists() else None
    return existing(OLD_WITNESS_SUFFIX) or existing(WITNESS_SUFFIX) or real.parent / (real.name + WITNESS_SUFFIX)
