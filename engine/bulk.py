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

Here: the listing, the reading, the seeding from the user's git index and the
import's course.  The blobs are packed by forked children or on threads
(packers), into packs the pack writer writes (pack_writer); the trees and the
index file are import_index's.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pygit2

from . import faults, fifo_guard, packers, usergit
from .fsutil import O_READ, read_all
from .import_index import CachedTrees, cached_trees, packed_stat, stat_fields, write_index, write_trees
from .pack_writer import PACK_BYTES, PackWriter, pack_entry
from .scan import ScanReport, find_omissions, special_kind
from .worktree import is_nested

BLOB, TREE = 3, 2
MODE_FILE, MODE_EXEC, MODE_LINK, MODE_DIR = 0o100644, 0o100755, 0o120000, 0o40000
CHUNK_BYTES = 1 << 20
FORK_MIN_BYTES = PACK_BYTES                 # below one pack's worth, children cost more than they save
LEVEL = 0                                   # stored blocks: ~1 GB/s; compaction recompresses with deltas later


@dataclass(slots=True)
class _Entry:
    """One listed file (slots: a million of them are held at once in a large tree)."""
    path: bytes
    mode: int
    st: bytes | None              # its `packed_stat`; None until read when the listing's kind was enough
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


def _store(writer, kind: int, data: bytes) -> bytes:
    """One object hashed and framed where it lies, given to `writer`; its sha1."""
    name = b"blob" if kind == BLOB else b"tree"
    h = hashlib.sha1(b"%s %d\0" % (name, len(data)))
    h.update(data)
    sha = h.digest()
    writer.add(sha, pack_entry(kind, data, LEVEL))
    return sha


def _listing(repo: pygit2.Repository):
    """libgit2's walk of the work tree against an empty index: every non-ignored file."""
    flags = (pygit2.enums.DiffOption.INCLUDE_UNTRACKED | pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS)
    return repo.index.diff_to_workdir(flags=flags)


def _list_files(diff, root: bytes, cap: int, report: ScanReport,
                stats: dict[bytes, bytes] | None = None) -> list[_Entry]:
    """Every file of the listing.  Its kind and size are libgit2's (the walk lstat'ed every
    file); the full stat comes from the worker's fstat of the file it reads, unless a helper
    already took it (`stats`).  A first snapshot has no earlier permission record, so only
    bits that differ from git's are noted (by _read where the stat is taken there)."""
    stats = stats or {}
    out: list[_Entry] = []
    append, perms, dirs = out.append, report.perms, set()
    prefix = root.rstrip(b"/") + b"/"
    lstat, isreg, islnk = os.lstat, stat.S_ISREG, stat.S_ISLNK
    plain = (MODE_FILE, MODE_EXEC, MODE_LINK)
    for delta in diff.deltas:
        f = delta.new_file
        p = f.raw_path
        if p.endswith(b"/"):
            if is_nested(prefix + p):
                report.nested(os.fsdecode(p[:-1]))
            continue
        st = stats.get(p)
        mode = int(f.mode)              # pygit2 makes an enum of it: once per file, ~0.6 us
        if st is None and mode in plain:
            size = f.size
        else:
            if st is None:
                try:
                    st = packed_stat(lstat(prefix + p))
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    report.omit(os.fsdecode(p), exc)
                    continue
            fields = stat_fields(st)
            m, size = fields[6], fields[10]
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


def _read(root: bytes, e: _Entry, report: ScanReport, cap: int = 0) -> bytes | None:
    """The bytes to store for `e`, or None (reported in `skipped`): a file that became a
    FIFO, socket or device since it was listed is never waited on.  Where the listing took
    no stat, the stat taken here before the read is the entry's (as git stats, then reads)."""
    full = root + b"/" + e.path
    try:
        if e.mode == MODE_LINK:
            if e.st is None:
                st = os.lstat(full)    # no longer a link: no stat, the next scan takes it as it is
                e.st = packed_stat(st) if stat.S_ISLNK(st.st_mode) else None
            return os.readlink(full)
        fd = os.open(full, O_READ)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                report.skip(os.fsdecode(e.path), f"special_file: {special_kind(st.st_mode)}")
                return None
            if cap and st.st_size > cap:
                report.skip(os.fsdecode(e.path), "too_large", st.st_size)
                return None
            data = read_all(fd, st.st_size)
        finally:
            os.close(fd)
        listed = e.st
        if listed is None:
            m = st.st_mode
            e.mode, default = (MODE_EXEC, 0o755) if m & stat.S_IXUSR else (MODE_FILE, 0o644)
            if m & 0o7777 != default:
                report.perms[os.fsdecode(e.path)] = m & 0o7777
            if len(data) == st.st_size:
                e.st = packed_stat(st)
        elif _changed(listed, packed_stat(st)) or len(data) != st.st_size:
            e.st = None            # changed while we read: let the next scan re-hash it
        return data
    except (FileNotFoundError, NotADirectoryError):
        return None                # gone since the listing: not part of this snapshot
    except OSError as exc:
        report.omit(os.fsdecode(e.path), exc)
        return None


def _changed(listed: bytes, now: bytes) -> bool:
    """Another mtime, inode or size than the listing saw (seconds and inode as the index
    keeps them, 32-bit: the read's own fstat names the same file, so no more is needed)."""
    a, b = stat_fields(listed), stat_fields(now)
    return (a[2], a[3], a[5], a[10]) != (b[2], b[3], b[5], b[10])


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
            stats[p] = packed_stat(st)
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
    entries, known = _list(repo, root, cap, report, use_git, say)
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
        cached = cached_trees(known, held, repo.odb)
    t_seed = time.monotonic()
    say("packing", len(kept), len(entries))
    blobs = _Blobs(root, cap, report, say, kept, len(entries), _chunks(todo), res.bytes)
    root_sha, tree_ext, t_blobs = _pack(blobs, todo, pack_dir, durable, workers, cached, res)
    t_pack = time.monotonic()
    faults.hit("bulk_before_index")
    write_index(index_path, kept, tree_ext)
    t_index = time.monotonic()
    res.tree, res.entries, res.bytes = root_sha.hex(), len(kept), blobs.total
    res.seconds = {"list": round(t_list - t0, 3), "git_index": round(t_seed - t_list, 3),
                   "blobs": round(t_blobs - t_seed, 3), "trees_pack": round(t_pack - t_blobs, 3),
                   "index": round(t_index - t_pack, 3)}
    return res


def _list(repo: pygit2.Repository, root: bytes, cap: int, report: ScanReport, use_git: bool,
          say) -> tuple[list[_Entry], object]:
    """(Every file to snapshot, the user's index or why it cannot be used (None without
    `use_git`)); what libgit2's walk leaves out is reported as skipped."""
    say("listing", 0, 0)
    known, stats, specials = None, {}, ScanReport()

    def beside() -> None:
        # while libgit2 walks the tree (the walk releases the GIL): the user's index parsed and
        # its paths stat'ed, and the scan for what libgit2's walk leaves out (own handle)
        nonlocal known, stats
        if use_git:
            known, stats = _read_known(root)
        with fifo_guard.watching(root):      # libgit2 opens a FIFO `.gitignore` and waits
            find_omissions(pygit2.Repository(repo.path), root, specials)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chronos-git-listing") as one:
        helper = one.submit(beside)
        diff = _listing(repo)
        helper.result()
    entries = _list_files(diff, root, cap, report, stats)
    del diff, stats
    _give_back()
    for item in specials.skipped:
        report.skip(item["path"], item["reason"], item.get("size"))
    return entries, known


def _give_back() -> None:
    """Return the heap libgit2's listing freed to the system (glibc keeps it otherwise: ~300
    MB at a million files, resident in this process and in every packing child forked
    next).  Nothing where there is no glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _chunks(todo: list[_Entry]) -> list[list[_Entry]]:
    """`todo` in chunks of ~1 MiB: they keep per-task overhead low and deal the work out evenly."""
    chunks, cur, size = [], [], 0
    for e in todo:
        cur.append(e)
        size += e.size
        if size >= CHUNK_BYTES or len(cur) >= 256:
            chunks.append(cur)
            cur, size = [], 0
    if cur:
        chunks.append(cur)
    return chunks


class _Blobs:
    """The files still to read: packed chunk by chunk (`pack_one`, in a forked child or on a
    thread), their rows taken back here as they come (`take`, in the import's thread)."""

    def __init__(self, root: bytes, cap: int, report: ScanReport, say, kept: list[_Entry],
                 files: int, chunks: list[list[_Entry]], total: int):
        self.root, self.cap, self.report, self.say = root, cap, report, say
        self.kept, self.files, self.chunks, self.total = kept, files, chunks, total

    def pack_one(self, chunk: list[_Entry], writer: PackWriter, rep: ScanReport) -> list[tuple]:
        """Read, hash and pack one chunk: (position, blob id, mode, stat, bytes) per file."""
        rows = []
        for pos, e in enumerate(chunk):
            data = _read(self.root, e, rep, self.cap)
            if data is not None:
                sha = _store(writer, BLOB, data)
                rows.append((pos, sha, e.mode, e.st, len(data)))
        return rows

    def take(self, k: int, rows: list[tuple], rep: ScanReport) -> None:
        chunk, report = self.chunks[k], self.report
        for pos, sha, mode, st, n in rows:
            e = chunk[pos]
            e.sha, e.mode, e.st = sha, mode, st
            self.kept.append(e)
            self.total += n
        if rep is not report:
            for item in rep.skipped:
                report.skip(item["path"], item["reason"], item.get("size"))
            report.perms.update(rep.perms)
        self.say("packing", len(self.kept), self.files)


def _pack(blobs: _Blobs, todo: list[_Entry], pack_dir: str, durable: bool, workers: int | None,
          cached: CachedTrees | None, res: BulkResult) -> tuple[bytes, bytes, float]:
    """Pack the blobs (in forked children past FORK_MIN_BYTES where they can run, else on
    threads), then the trees; (root tree id, TREE extension, when the blobs were done).
    `res.packs` gets every pack written."""
    chunks = blobs.chunks
    procs = min(workers or packers.cores(), len(chunks))
    forked = procs >= 2 and sum(e.size for e in todo) >= FORK_MIN_BYTES and packers.usable(procs)
    if forked:
        hashlib.sha1()                 # in the method cache before the fork: the children only read it
        child_packs = packers.run(chunks, procs, lambda: PackWriter(pack_dir, durable),
                                  blobs.pack_one, blobs.take)
    writer = PackWriter(pack_dir, durable)
    try:
        if not forked:
            child_packs = []
            packers.on_threads(chunks, max(2, procs), writer, blobs.pack_one, blobs.take, blobs.report)
        t_blobs = time.monotonic()
        blobs.say("trees", len(blobs.kept), blobs.files)
        root_sha, tree_ext = write_trees(blobs.kept, lambda body: _store(writer, TREE, body), cached)
        res.packs = child_packs + writer.finish()
    except BaseException:
        writer.abort()
        raise
    return root_sha, tree_ext, t_blobs
