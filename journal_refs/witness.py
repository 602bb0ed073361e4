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

import hashlib
import os
from pathlib import Path

from ..engine import faults
from ..engine.fsutil import atomic_write

SLOT_MIN = 64 * 1024
_PAGE = 4096
_MAGIC = b"chronos-git witness v1 "
_HEADER_MAX = 128


def _header(gen: int, record: bytes) -> bytes:
    return _MAGIC + b"%d %d %s\n" % (gen, len(record), hashlib.sha256(record).hexdigest().encode())


def _parse(slot: bytes, index: int) -> tuple[int, bytes] | None:
    """(gen, record) of a whole slot, or None (torn, zeroed or edited)."""
    end = slot.find(b"\n", 0, _HEADER_MAX)
    if end < 0 or not slot.startswith(_MAGIC):
        return None
    fields = slot[len(_MAGIC):end].split(b" ")
    if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    gen, length = int(fields[0]), int(fields[1])
    record = slot[end + 1:end + 1 + length]
    if gen % 2 != index or len(record) != length or hashlib.sha256(record).hexdigest().encode() != fields[2]:
        return None
    return gen, record


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

    def read(self) -> tuple[bytes, bool] | None:
        """(the newest record, whether the other slot is torn), or None if there is no file.
        ValueError: the file holds no whole record (or is not a witness file)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._gen = self._record = self._shape = None
            return None
        try:
            st = os.fstat(fd)
            raw = b""
            while len(raw) < st.st_size:
                chunk = os.pread(fd, st.st_size - len(raw), len(raw))
                if not chunk:
                    break
                raw += chunk
        finally:
            os.close(fd)
        if raw[:1] == b"{":                 # an older version's single JSON document
            self._gen, self._record, self._shape = 0, raw, None
            return raw, False
        size = len(raw)
        if size < 2 * _PAGE or size % (2 * _PAGE):
            self._shape = None
            raise ValueError(f"its size ({size} bytes) is not two whole slots")
        slot = size // 2
        found = [r for k in (0, 1) if (r := _parse(raw[k * slot:(k + 1) * slot], k)) is not None]
        if not found:
            self._shape = None
            raise ValueError("neither of its two records is whole")
        if len(found) == 2 and abs(found[0][0] - found[1][0]) != 1:
            self._shape = None
            raise ValueError("its two records are not consecutive")
        self._gen, self._record = max(found)
        self._shape = (st.st_ino, size)
        return self._record, len(found) < 2

    def write(self, record: bytes, *, fault: str = "witness_half_written") -> None:
        """Make `record` the newest record, durably (OSError as the disk gives it)."""
        gen = (self._gen or 0) + 1
        rec = _header(gen, record) + record
        if self._shape is not None and len(rec) <= self._shape[1] // 2:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except PermissionError:             # made read-only: replaced whole, as before
                fd = None
        else:
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
                if (st.st_ino, st.st_size) == self._shape:
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
                        try:
                            os.pwrite(fd, bytes(len(_MAGIC)), off)
                        except OSError:
                            pass
                        raise
                    self._gen, self._record = gen, record
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
        buf = bytearray(2 * slot)
        for g, r in recs.items():
            buf[(g % 2) * slot:(g % 2) * slot + len(r)] = r
        atomic_write(self.path, bytes(buf), mode=0o600, durable=True, fault="witness_temp_written")
        st = os.stat(self.path)
        self._gen, self._record, self._shape = gen, record, (st.st_ino, st.st_size)


def read_doc(path: Path) -> bytes | None:
    """The newest record of the witness at `path` (tools and tests; ValueError if none)."""
    got = WitnessFile(path).read()
    return got[0] if got else None


def write_doc(path: Path, record: bytes) -> None:
    """Replace the newest record (tools and tests: what an editor of the file would do)."""
    wf = WitnessFile(path)
    wf.read()
    wf.write(record)
