"""The first snapshot of a big tree, written as one pack instead of loose objects.

libgit2 writes every new blob as its own zlib'd loose object file (~77
syscalls each); for a 78k-file tree that is minutes on a slow disk.  Here the
file list comes from libgit2 (so .gitignore semantics are libgit2's own), but
blobs and trees are hashed and compressed on a thread pool (hashlib and zlib
release the GIL) and streamed into a single pack with its .idx; the index
file is written with real stat data and a complete TREE cache, so the very
next snapshot is a stat-only walk and `write_tree()` is instant.

The result is checked: libgit2 must compute the same root tree from the
index we wrote, or the caller falls back to the ordinary path.
"""
from __future__ import annotations

import errno
import hashlib
import os
import queue
import stat
import struct
import tempfile
import threading
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import faults, packers, usergit
from .fsutil import atomic_write, read_all
from .scan import ScanReport, find_omissions, special_kind

BLOB, TREE = 3, 2
MODE_FILE, MODE_EXEC, MODE_LINK, MODE_DIR = 0o100644, 0o100755, 0o120000, 0o40000
CHUNK_BYTES = 1 << 20
PACK_BYTES = 64 << 20                       # one pack per 64 MiB: its object count is known up front
WINDOW_CHUNKS = 64                          # at most ~64 MiB read ahead
FORK_MIN_BYTES = PACK_BYTES                 # below one pack's worth, children cost more than they save
LEVEL = 0                                   # stored blocks: ~1 GB/s; compaction recompresses with deltas later


@dataclass
class _Entry:
    path: bytes
    mode: int
    st: os.stat_result | None     # None until read when the listing's own stat was enough
    size: int = 0                 # as listed: for the size cap and the read-ahead chunks
    sha: bytes = b""
    exact: bool = False          # blob id and mode as git's index has them (its cache tree holds)


@dataclass
class BulkResult:
    tree: str
    entries: int
    bytes: int
    report: ScanReport
    seconds: dict = field(default_factory=dict)
    packs: list[str] = field(default_factory=list)     # what this import wrote (stems)
    linked: list[str] = field(default_factory=list)    # the user's packs it linked in (stems)
    seeded: int = 0                                    # files whose blob id git's index vouched for
    seed_note: str | None = None                       # why the user's repository was not used


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


def pack_entry(kind: int, data, level: int = 0) -> tuple[int, int, list]:
    """One undeltified pack entry: (its crc32 for the .idx, its size, its pieces).  Level 0
    frames `data` in stored blocks without copying it; higher levels compress."""
    hdr = object_header(kind, len(data))
    pieces = _stored(data) if level == 0 else [b"", zlib.compress(data, level)]
    pieces[0] = hdr + pieces[0]
    crc = size = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
    return crc, size, pieces


def _object(kind: int, data: bytes) -> tuple[bytes, tuple[int, int, list]]:
    """(sha1, pack entry) of one object, hashed and framed where it lies."""
    name = b"blob" if kind == BLOB else b"tree"
    h = hashlib.sha1(b"%s %d\0" % (name, len(data)))
    h.update(data)
    return h.digest(), pack_entry(kind, data, LEVEL)


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


class _PackWriter:
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
            if run_bytes >= CHUNK_BYTES:
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


def _listing(repo: pygit2.Repository):
    """libgit2's walk of the work tree against an empty index: every non-ignored file."""
    flags = (pygit2.enums.DiffOption.INCLUDE_UNTRACKED | pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS)
    return repo.index.diff_to_workdir(flags=flags)


def _list_files(diff, root: bytes, cap: int, report: ScanReport,
                stats: dict[bytes, os.stat_result] | None = None) -> list[_Entry]:
    """Every file of the listing.  Its kind and size are libgit2's (the walk lstat'ed every
    file); the full stat comes from the worker's fstat of the file it reads, unless a helper
    already took it (`stats`).  A first snapshot has no earlier permission record, so only
    bits that differ from git's are noted (by _read where the stat is taken there)."""
    stats = stats or {}
    out: list[_Entry] = []
    append, perms, dirs = out.append, report.perms, set()
    prefix = root.rstrip(b"/") + b"/"
    lstat, isreg, islnk = os.lstat, stat.S_ISREG, stat.S_ISLNK
    for delta in diff.deltas:
        f = delta.new_file
        p = f.raw_path
        if p.endswith(b"/"):
            if os.path.lexists(prefix + p + b".git"):
                report.nested(os.fsdecode(p[:-1]))
            continue
        st = stats.get(p)
        if st is None and f.mode in (MODE_FILE, MODE_EXEC, MODE_LINK):
            mode, size = f.mode, f.size
        else:
            if st is None:
                try:
                    st = lstat(prefix + p)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    report.omit(os.fsdecode(p), exc)
                    continue
            m, size = st.st_mode, st.st_size
            if isreg(m):
                mode, default = (MODE_EXEC, 0o755) if m & stat.S_IXUSR else (MODE_FILE, 0o644)
                if m & 0o7777 != default:
                    perms[os.fsdecode(p)] = m & 0o7777
            elif islnk(m):
                mode = MODE_LINK
            else:
                report.skip(os.fsdecode(p), f"special_file: {special_kind(m)}")
                continue
        if cap and mode != MODE_LINK and size > cap:
            report.skip(os.fsdecode(p), "too_large", size)
            continue
        cut = p.rfind(b"/")
        if cut > 0:
            dirs.add(p[:cut])
        append(_Entry(p, mode, st, size))
    _note_dir_perms(perms, prefix, dirs)
    return out


def _note_dir_perms(perms: dict, prefix: bytes, dirs: set[bytes]) -> None:
    """The bits of every directory that holds a listed file (and of its parents), where they
    differ from git's 755."""
    seen: set[bytes] = set()
    for d in dirs:
        while d and d not in seen:
            seen.add(d)
            try:
                bits = stat.S_IMODE(os.lstat(prefix + d).st_mode)
            except OSError:
                break
            if bits != 0o755:
                perms[os.fsdecode(d) + "/"] = bits
            cut = d.rfind(b"/")
            d = d[:cut] if cut > 0 else b""


_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _read(root: bytes, e: _Entry, report: ScanReport, cap: int = 0) -> bytes | None:
    """The bytes to store for `e`, or None (reported in `skipped`): a file that became a
    FIFO, socket or device since it was listed is never waited on.  Where the listing took
    no stat, the stat taken here before the read is the entry's (as git stats, then reads)."""
    full = root + b"/" + e.path
    rel = os.fsdecode(e.path)
    try:
        if e.mode == MODE_LINK:
            if e.st is None:
                e.st = os.lstat(full)
                if not stat.S_ISLNK(e.st.st_mode):
                    e.st = None        # no longer a link: the next scan takes it as it is
            return os.readlink(full)
        fd = os.open(full, _O_READ)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                report.skip(rel, f"special_file: {special_kind(st.st_mode)}")
                return None
            if cap and st.st_size > cap:
                report.skip(rel, "too_large", st.st_size)
                return None
            data = read_all(fd, st.st_size)
        finally:
            os.close(fd)
        listed = e.st
        if listed is None:
            m = st.st_mode
            e.mode, default = (MODE_EXEC, 0o755) if m & stat.S_IXUSR else (MODE_FILE, 0o644)
            if m & 0o7777 != default:
                report.perms[rel] = m & 0o7777
            if len(data) == st.st_size:
                e.st = st
        elif (st.st_mtime_ns, st.st_size, st.st_ino) != (listed.st_mtime_ns, listed.st_size, listed.st_ino) \
                or len(data) != st.st_size:
            e.st = None            # changed while we read: let the next scan re-hash it
        return data
    except (FileNotFoundError, NotADirectoryError):
        return None                # gone since the listing: not part of this snapshot
    except OSError as exc:
        report.omit(rel, exc)
        return None


def _read_known(root: bytes):
    """(The user's index or the reason it cannot be used, the lstat of every path it lists).
    Run beside libgit2's listing, which releases the GIL: the stat calls the listing would
    need next are mostly done by the time it returns."""
    try:
        known = usergit.read_known(root)
    except usergit.Unusable as exc:
        return str(exc), {}
    except Exception as exc:          # whatever the user's repository holds, the snapshot goes on
        return f"the repository could not be read ({type(exc).__name__}: {exc})", {}
    prefix, lstat, isdir, stats = root.rstrip(b"/") + b"/", os.lstat, stat.S_ISDIR, {}
    for p in known.entries:
        try:
            st = lstat(prefix + p)
        except OSError:
            continue                  # the listing's own lstat says what it is
        if not isdir(st.st_mode):
            stats[p] = st
    return known, stats


def _seed(known, entries: list[_Entry], pack_dir: str, durable: bool,
          res: BulkResult) -> tuple[list[_Entry], set[bytes]]:
    """Take the blob ids the user's git index vouches for (their packs linked into the
    store); returns the entries that still have to be read and hashed, and the object ids
    the linked packs hold."""
    if isinstance(known, str):
        res.seed_note = known
        return entries, set()
    vouched = known.vouch(entries)
    if not vouched:
        res.seed_note = "no file matches the repository's index"
        return entries, set()
    packs = usergit.link_packs(known, set(vouched.values()), pack_dir, durable)
    held = set().union(*packs.values()) if packs else set()
    res.linked = sorted(packs)
    rest, seeded, nbytes = [], 0, 0
    get, indexed = vouched.get, known.entries
    for e in entries:
        sha = get(id(e))
        if sha is not None and sha in held:
            e.sha = sha
            e.exact = indexed[e.path][1] == e.mode
            seeded += 1
            nbytes += e.size
        else:
            rest.append(e)
    res.seeded += seeded
    res.bytes += nbytes
    if not res.seeded:
        res.seed_note = "the repository's packs hold none of the indexed blobs"
    return rest, held


class _CachedTrees:
    """What git's cache tree (the index's TREE extension) lets a first import take as it is:
    a directory whose entries are all exact (the caller checks that), as many as the cache
    counts for it, and whose tree the linked packs hold as a tree.  That is what `git
    commit` would write, so it is neither built nor hashed again."""

    def __init__(self, known, held: set[bytes], odb):
        self.trees, self.held, self.odb, self.known = known.trees, held, odb, known

    def reuse(self, path: bytes, count: int, name: bytes) -> tuple[bytes, bytes] | None:
        """(tree id, TREE extension entry) of directory `path` (never the root), or None."""
        item = self.trees.get(path)
        if not path or item is None or item[0] != count or item[1] not in self.held:
            return None
        try:
            ext = self.known.tree_ext(path, name)
            if ext is None or self.odb.read_header(pygit2.Oid(raw=item[1]))[0] != pygit2.enums.ObjectType.TREE:
                return None
        except (KeyError, ValueError, RecursionError, pygit2.GitError):
            return None                # a cache tree nested deeper than Python recurses: built instead
        return item[1], ext

    def root_dirs(self) -> list[bytes]:
        item = self.trees.get(b"")
        return list(item[2]) if item else []


def _cached_trees(known, held: set[bytes], odb) -> _CachedTrees | None:
    if isinstance(known, str) or not known.trees or not held:
        return None
    return _CachedTrees(known, held, odb)


def import_tree(repo: pygit2.Repository, root: bytes, index_path: str, pack_dir: str, *, cap: int,
                workers: int | None = None, durable: bool = False, progress=None,
                use_git: bool = True) -> BulkResult:
    """Pack every file and tree, write the index; returns the root tree id.

    With `use_git`, a workspace that is a git work tree first takes what its index and
    packs already know (usergit): only the files git cannot vouch for are read.
    `progress(phase, done, total)` is told about the listing and then after every chunk."""
    say = progress or (lambda *a: None)
    t0 = time.monotonic()
    report = ScanReport()
    say("listing", 0, 0)
    known, stats, specials = None, {}, ScanReport()

    def beside() -> None:
        # while libgit2 walks the tree (the walk releases the GIL): the user's index parsed and
        # its paths stat'ed, and the scan for what libgit2's walk leaves out (own handle)
        nonlocal known, stats
        if use_git:
            known, stats = _read_known(root)
        find_omissions(pygit2.Repository(repo.path), root, specials)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chronos-git-listing") as one:
        helper = one.submit(beside)
        diff = _listing(repo)
        helper.result()
    entries = _list_files(diff, root, cap, report, stats)
    for item in specials.skipped:
        report.skip(item["path"], item["reason"], item.get("size"))
    t_list = time.monotonic()
    os.makedirs(pack_dir, exist_ok=True)
    res = BulkResult(tree="", entries=0, bytes=0, report=report)
    kept: list[_Entry] = []
    todo, cached = entries, None
    if not use_git:
        res.seed_note = "off"
    else:
        say("reading the git index", 0, len(entries))
        todo, held = _seed(known, entries, pack_dir, durable, res)
        kept = [e for e in entries if e.sha]
        cached = _cached_trees(known, held, repo.odb)
    t_seed = time.monotonic()
    say("packing", len(kept), len(entries))
    total = res.bytes
    # chunks of ~1 MiB keep per-task overhead low and deal the work out evenly
    chunks, cur, size = [], [], 0
    for e in todo:
        cur.append(e)
        size += e.size
        if size >= CHUNK_BYTES or len(cur) >= 256:
            chunks.append(cur)
            cur, size = [], 0
    if cur:
        chunks.append(cur)

    def pack_one(chunk: list[_Entry], writer: _PackWriter, rep: ScanReport) -> list[tuple]:
        """Read, hash and pack one chunk: (position, blob id, mode, stat, bytes) per file."""
        rows = []
        for pos, e in enumerate(chunk):
            data = _read(root, e, rep, cap)
            if data is not None:
                sha, packed = _object(BLOB, data)
                writer.add(sha, packed)
                rows.append((pos, sha, e.mode, e.st, len(data)))
        return rows

    def take(k: int, rows: list[tuple], rep: ScanReport) -> None:
        nonlocal total
        chunk = chunks[k]
        for pos, sha, mode, st, n in rows:
            e = chunk[pos]
            e.sha, e.mode, e.st = sha, mode, st
            kept.append(e)
            total += n
        if rep is not report:
            for item in rep.skipped:
                report.skip(item["path"], item["reason"], item.get("size"))
            report.perms.update(rep.perms)
        say("packing", len(kept), len(entries))

    procs = min(workers or packers.cores(), len(chunks))
    forked = procs >= 2 and sum(e.size for e in todo) >= FORK_MIN_BYTES and packers.usable(procs)
    if forked:
        hashlib.sha1()                 # in the method cache before the fork: the children only read it
        child_packs = packers.run(chunks, procs, lambda: _PackWriter(pack_dir, durable), pack_one, take)
    writer = _PackWriter(pack_dir, durable)
    try:
        if not forked:
            child_packs = []
            _pack_on_threads(chunks, max(2, procs), writer, pack_one, take, report)
        t_blobs = time.monotonic()
        say("trees", len(kept), len(entries))
        root_sha, tree_ext = _trees(kept, writer, cached)
        res.packs = child_packs + writer.finish()
    except BaseException:
        writer.abort()
        raise
    t_pack = time.monotonic()
    faults.hit("bulk_before_index")
    _write_index(index_path, kept, tree_ext)
    t_index = time.monotonic()
    res.tree, res.entries, res.bytes = root_sha.hex(), len(kept), total
    res.seconds = {"list": round(t_list - t0, 3), "git_index": round(t_seed - t_list, 3),
                   "blobs": round(t_blobs - t_seed, 3), "trees_pack": round(t_pack - t_blobs, 3),
                   "index": round(t_index - t_pack, 3)}
    return res


def _pack_on_threads(chunks: list, workers: int, writer: _PackWriter, pack_one, take,
                     report: ScanReport) -> None:
    """Where no child can be forked: the chunks on a thread pool (read, hash, frame
    release the GIL), a window of them in flight, the packs written by `writer`."""
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


def _trees(entries: list[_Entry], writer: _PackWriter, cached: _CachedTrees | None = None) -> tuple[bytes, bytes]:
    """Write every tree object; return (root sha, TREE index extension payload).  `cached`
    is asked for each directory below the root whose entries are all exact.  The root is
    always written by us: a new commit freshens its tree, and freshening an object of the
    user's (hard-linked) pack would touch that pack's mtime."""
    if cached is not None and all(e.exact for e in entries):
        done = _clean_root(entries, writer, cached)
        if done is not None:
            return done
    tally = None                               # a node's [entries below, entries not exact]
    root: dict = {tally: [0, 0]}
    for e in entries:
        parts = e.path.split(b"/")
        inexact = not e.exact
        node = root
        t = node[tally]
        t[0] += 1
        t[1] += inexact
        for d in parts[:-1]:
            sub = node.get(d)
            if sub is None:
                sub = node[d] = {tally: [0, 0]}
            node = sub
            t = node[tally]
            t[0] += 1
            t[1] += inexact
        node[parts[-1]] = e

    def build(node: dict, name: bytes, path: bytes) -> tuple[bytes, int, bytes]:
        count, inexact = node.pop(tally)
        if cached is not None and not inexact:
            hit = cached.reuse(path, count, name)
            if hit is not None:
                return hit[0], count, hit[1]
        subs, files = [], []
        for n, v in node.items():
            if isinstance(v, dict):
                sha, _c, sub_ext = build(v, n, path + b"/" + n if path else n)
                subs.append((n, sha, sub_ext))
            else:
                files.append((n, v.mode, v.sha))
        return _tree_result(writer, name, count, subs, files)

    sha, _, ext_bytes = build(root, b"", b"")
    return sha, ext_bytes


def _tree_result(writer: _PackWriter, name: bytes, count: int, subs: list, files: list) -> tuple[bytes, int, bytes]:
    """Write one tree (subdirectories as (name, id, their TREE entry), files as (name, mode,
    id)); return (its id, count, its TREE extension entry with the subtrees, by name)."""
    rows = [(n + b"/", b"40000 " + n + b"\0" + sha) for n, sha, _ in subs]
    rows += [(n, b"%o " % mode + n + b"\0" + sha) for n, mode, sha in files]
    rows.sort(key=lambda r: r[0])              # git's order: a directory sorts as "name/"
    sha, packed = _object(TREE, b"".join(body for _, body in rows))
    writer.add(sha, packed)
    # cache-tree entry: name NUL count SP nsub LF sha, then the subtrees (sorted by name)
    me = name + b"\0" + b"%d %d\n" % (count, len(subs)) + sha
    for _, _, sub_ext in sorted(subs, key=lambda s: s[0]):
        me += sub_ext
    return sha, count, me


def _clean_root(entries: list[_Entry], writer: _PackWriter, cached: _CachedTrees) -> tuple[bytes, bytes] | None:
    """A clean clone: every directory below the root taken from the cache tree, the root
    built from them and its own files (and checked to be git's root tree)."""
    files = [(e.path, e.mode, e.sha) for e in entries if b"/" not in e.path]
    subs, count = [], len(files)
    for d in cached.root_dirs():
        n = cached.trees[d][0] if d in cached.trees else -1
        hit = cached.reuse(d, n, d)
        if hit is None:
            return None
        subs.append((d, hit[0], hit[1]))
        count += n
    if count != len(entries):
        return None
    sha, _, ext = _tree_result(writer, b"", count, subs, files)
    return (sha, ext) if sha == cached.trees[b""][1] else None


_INDEX_ENTRY = struct.Struct(">10I20sH")


def _write_index(path: str, entries: list[_Entry], tree_ext: bytes) -> None:
    entries = sorted(entries, key=lambda e: e.path)
    parts = [b"DIRC" + struct.pack(">II", 2, len(entries))]
    add, pack = parts.append, _INDEX_ENTRY.pack
    m, pads = 0xFFFFFFFF, [b"\0" * n for n in range(9)]
    for e in entries:
        st, p = e.st, e.path
        if st is None:                      # changed while read: zero stat forces a re-check
            head = pack(0, 0, 0, 0, 0, 0, e.mode, 0, 0, 0, e.sha, min(len(p), 0xFFF))
        else:
            head = pack(int(st.st_ctime) & m, st.st_ctime_ns % 1_000_000_000, int(st.st_mtime) & m,
                        st.st_mtime_ns % 1_000_000_000, st.st_dev & m, st.st_ino & m, e.mode,
                        st.st_uid & m, st.st_gid & m, st.st_size & m, e.sha, min(len(p), 0xFFF))
        add(head)
        add(p)
        add(pads[8 - ((62 + len(p)) % 8)])  # 1 to 8 NULs: the entry ends on an 8-byte boundary
    if tree_ext:
        parts.append(b"TREE" + struct.pack(">I", len(tree_ext)) + tree_ext)
    out = b"".join(parts)
    out += hashlib.sha1(out).digest()
    fd, tmp = tempfile.mkstemp(prefix="index.chronos.", dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as fh:
        fh.write(out)
    os.replace(tmp, path)
