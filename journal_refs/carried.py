"""Journal objects carried by the witness until they are synced.

An append does not fsync its git objects one by one (two fsyncs each, with
libgit2 holding the GIL).  It writes them to the page cache and copies their
loose-object bytes (a few hundred bytes to a few KiB each: engine/loose.py `prepare`) into the witness,
the one file it fsyncs.  Every few calls `sync` writes the objects into one
fsynced pack (their loose copies go) and makes the journal ref durable, and the
witness stops carrying them.

After a power cut the next open writes back whatever carried object the cut
took (`restore`), so the chain is whole again, and moves the journal ref
forward if it lost its last updates.  An object is only ever restored from
bytes whose SHA-1 is its name.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import re
import stat
import zlib
from pathlib import Path

from ..engine import faults, loose
from ..engine.codec import canonical
from ..engine.durability import fsync_file, note_durable_objects, note_durable_pack, settle_objects
from ..engine.fsutil import atomic_write, fsync_dir
from ..engine.pack_writer import pack_entry, write_pack
from ..engine.powercut import loose_object_ok

MAX_BLOB = 64 * 1024          # a linked blob larger than this is fsynced, not carried
SYNC_AFTER_OBJECTS = 64   # the outcome writer syncs once the witness carries this many (~8 file calls)
CAP_OBJECTS = 96          # an append syncs first when the witness would carry more,
CAP_BYTES = 256 * 1024    # or more than this many encoded bytes (the witness is rewritten each append)

_OID = re.compile(r"[0-9a-f]{40}")


def is_oid(s) -> bool:
    return isinstance(s, str) and _OID.fullmatch(s) is not None


def loose_bytes(repo, oid: str) -> bytes:
    """The object as git stores it loose (read back from `repo`)."""
    return loose.loose_bytes(*repo.odb.read(oid))


def _recent(repo, oid: str) -> tuple[int, bytes] | None:
    """What engine/loose.py kept of `oid`, written lately into this store and still in it."""
    objects = os.path.join(repo.path, "objects")
    got = loose.recent(objects, oid)
    if got is None:
        return None
    # its loose file is the usual answer (one access, not libgit2's search of every pack first)
    there = os.access(os.path.join(objects, oid[:2], oid[2:]), os.F_OK) or loose.held(repo, oid, objects)
    return got if there else None


def _loose_file(repo, oid: str) -> bytes | None:
    """The bytes of `oid`'s loose file if it has one that holds that object, small enough to
    carry (inflating them costs a tenth of deflating the object again: a call's file images).
    ValueError if something other than a file is there (a FIFO is never waited on)."""
    try:
        fd = os.open(os.path.join(repo.path, "objects", oid[:2], oid[2:]),
                     os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"the loose object {oid[:12]} is a symbolic link") from None
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"the loose object {oid[:12]} is not a file")
        raw = os.pread(fd, 2 * MAX_BLOB + 1024, 0)     # a bigger file holds a bigger object
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        _framed(oid, raw, most=MAX_BLOB)
    except ValueError:
        return None
    return raw


def encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def decode(oid: str, text) -> bytes:
    """The loose bytes of `oid`, checked; ValueError if they are not that object."""
    return _inflate(oid, text)[0]


def _inflate(oid: str, text) -> tuple[bytes, bytes]:
    """(loose bytes, the framed object they inflate to) of `oid`, checked as `decode` says."""
    if not is_oid(oid) or not isinstance(text, str):
        raise ValueError("a carried object is malformed")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError(f"carried object {oid[:12]} is not decodable") from None
    return raw, _framed(oid, raw)


def _framed(oid: str, raw: bytes, *, most: int | None = None) -> bytes:
    """The object the loose bytes `raw` inflate to; ValueError unless they are one whole
    zlib stream of an object named `oid` (and, with `most`, of at most that many bytes: its
    header is read first, so a small file that inflates to a huge object is never inflated)."""
    d = zlib.decompressobj()
    try:
        if most is not None:
            head = d.decompress(raw, 64)
            end = head.find(b"\0")
            if end < 0 or not head[head.find(b" ") + 1:end].isdigit() \
                    or int(head[head.find(b" ") + 1:end]) > most:
                raise ValueError(f"carried object {oid[:12]} is too big to carry")
            data = head + d.decompress(d.unconsumed_tail, most + end + 1 - len(head) + 1)
        else:
            data = d.decompress(raw)
    except zlib.error:
        raise ValueError(f"carried object {oid[:12]} is not decodable") from None
    if not d.eof or d.unused_data or d.unconsumed_tail:
        raise ValueError(f"carried object {oid[:12]} is not one whole zlib stream")
    if hashlib.sha1(data).hexdigest() != oid:
        raise ValueError(f"carried object {oid[:12]} does not hash to its name")
    return data


def carry(repo, oids, known: dict[str, tuple[int, bytes | None]] | None = None) -> tuple[dict[str, str], list[str]]:
    """(carried: oid -> encoded loose bytes, settle: oids to make durable where they are).
    `known`: oid -> (size, loose bytes) of objects just written, not read back (as are those
    this process wrote lately: engine/loose.py `recent`).

    A loose object is carried unless it is too big (then fsynced).  A packed one is not: its
    pack is fsynced instead, once per process (durability.settle_objects), so a call's packed
    pre-image does not ride along in every witness record until the next sync."""
    out, settle = {}, []
    known = known or {}
    for oid in oids:
        oid = str(oid)
        if oid in out:
            continue
        size, raw = known.get(oid) or _recent(repo, oid) or (0, None)
        if raw is not None:
            if size > MAX_BLOB:
                settle.append(oid)
            else:
                out[oid] = encode(raw)
            continue
        raw = _loose_file(repo, oid)
        if raw is not None:
            out[oid] = encode(raw)
            continue
        size = repo.odb.read_header(oid)[1]          # KeyError, GitError: missing or unreadable
        if size > MAX_BLOB or (not os.path.exists(os.path.join(repo.path, "objects", oid[:2], oid[2:]))
                               and not os.path.exists(os.path.join(repo.path, "objects", "info", "alternates"))):
            settle.append(oid)          # packed here (or too big): fsynced where it is
        else:
            # a loose file that did not check, or maybe borrowed through alternates (only this
            # store's own packs are fsynced): carried as libgit2 reads it, and packed at the sync
            out[oid] = encode(loose_bytes(repo, oid))
    return out, settle


SYNC_AFTER_BYTES = CAP_BYTES // 2     # or once they take this many encoded bytes (file images)


def size(carry: dict[str, str]) -> int:
    """Encoded bytes of the carried objects."""
    return sum(map(len, carry.values()))


def worth_syncing(n: int, nbytes: int, min_objects: int) -> bool:
    """Whether an idle sync is due: more than `min_objects` objects carried, or more than
    SYNC_AFTER_BYTES (a few calls' file images reach the byte cap before the object cap, and
    an append that reaches a cap syncs on the call's path)."""
    return n > max(min_objects, 0) or (min_objects > 0 and nbytes > SYNC_AFTER_BYTES)


def full(carry: dict[str, str], new: dict[str, str]) -> bool:
    """Whether carrying `new` on top of `carry` would pass a cap (then sync `carry` first)."""
    return (len(carry) + len(new) > CAP_OBJECTS
            or size(carry) + size(new) > CAP_BYTES)


def restore(repo, objects_dir: Path, carried: dict[str, str]) -> list[str]:
    """Write back every carried object a power cut took or damaged; returns their ids."""
    done = []
    for oid, text in carried.items():
        path = objects_dir / oid[:2] / oid[2:]
        if path.exists():
            if loose_object_ok(path):
                continue
        else:
            try:
                if oid in repo.odb:
                    repo.odb.read(oid)       # packed and readable
                    continue
            except Exception:                # noqa: BLE001 (a damaged pack: write it loose)
                pass
        raw = decode(oid, text)
        path.parent.mkdir(exist_ok=True)
        if path.exists():
            os.chmod(path, 0o644)
        atomic_write(path, raw, mode=0o444, durable=True)      # file and directory fsynced
        done.append(oid)
    return done


def sync(store_root: Path, ref: str, carried: dict[str, str], *, also=(), token: str | None = None) -> None:
    """Make what the witness carries (oid -> its encoded loose bytes), the objects `also`
    names (loose or packed, wherever they are) and the journal ref durable.

    The carried objects go into one pack, written and fsynced with its .idx and directory
    (three fsyncs), and their loose copies are deleted: an fsync per loose file and its
    fan-out directory was ~190 fsyncs per sync, ~12 ms per call in a real Hermes session.
    A crash before the .idx is durable leaves the objects loose and still carried; a lost
    unlink leaves a loose copy the next boot's sweep checks like any other.
    `token`: the store's compaction token read before (durability.note_durable_objects)."""
    objects = store_root / "objects"
    entries, in_place = [], list(also)
    for oid, text in carried.items():
        try:
            head, _, body = _inflate(oid, text)[1].partition(b"\0")
            kind = loose.KIND_OF[head.split(b" ", 1)[0]]
        except (ValueError, KeyError):
            in_place.append(oid)            # not ours to repack: made durable where it is
            continue
        entries.append((bytes.fromhex(oid), *pack_entry(kind, body, 1)))
    if entries:
        stem = write_pack(str(objects / "pack"), entries, durable=True,
                          points=("journal_sync_mid_pack", "journal_sync_before_idx"))
        note_durable_pack(objects / "pack", stem)
        if token is not None:
            note_durable_objects(objects, [sha.hex() for sha, *_ in entries], token)
        for sha, *_ in entries:
            oid = sha.hex()
            try:
                os.unlink(objects / oid[:2] / oid[2:])
            except OSError:                 # not loose, or not ours to delete: the pack holds it
                pass
        faults.hit("journal_sync_packed")
    settle_objects(objects, in_place)
    for p in (store_root / ref, store_root / "packed-refs"):
        if fsync_file(p):
            fsync_dir(p.parent)


class RecordEncoder:
    """The witness record's JSON, canonical({**doc, "carried": carry}), with each carried
    object's JSON kept between appends (encoding them all again was a fifth of an append)."""

    def __init__(self):
        self._frags: dict[str, tuple[str, str]] = {}     # oid -> (its text, its JSON)

    def record(self, doc: dict, carry: dict[str, str]) -> bytes:
        if not carry:
            return canonical(doc).encode()
        frags = self._frags
        if len(frags) > 4 * CAP_OBJECTS:
            self._frags = frags = {o: f for o, f in frags.items() if o in carry}
        parts = []
        for oid in sorted(carry):
            text = carry[oid]
            got = frags.get(oid)
            if got is None or got[0] != text:
                got = frags[oid] = (text, f'"{oid}":{json.dumps(text)}')
            parts.append(got[1])
        # oids and base64 need no escaping; a '"carried":{}' inside a string would be escaped
        return canonical({**doc, "carried": {}}).replace(
            '"carried":{}', '"carried":{' + ",".join(parts) + "}", 1).encode()
