"""The first snapshot of a git work tree, taken by adopting the user's index as the stat cache.

A clone of a million files has an index that already names every tracked file with its
blob id and the stat data it had when git last looked.  Reading it into Python and
stat'ing each path costs seconds per hundred thousand files; libgit2 does the same
comparison in C (`git status`'s rule, racy-timestamp guard included).  So the user's
index bytes are copied (their mtime kept: that is what the racy guard compares with),
libgit2 diffs that copy against the work tree while Python parses the same bytes beside it
(engine/usergit.py: what it vouches for, what converts content, which packs hold it),
and what the diff reports changed, new or gone is handed back to the ordinary scan of
named paths (engine/scan.py `update_paths`) once the copy is the store's index.

The invariant a crash relies on: when the copy is put in place (`bulk_before_index` just
before), every blob it names and every tree its cache tree names is in the store (the
user's packs linked, objects they hold loose copied and checked); entries that cannot
meet it are left out and read from disk.  A crash after that leaves a stat cache the next
scan can trust; before it, only linked packs and copied objects (consolidation drops them).

The snapshot holds what the bulk import's (engine/bulk.py, still the way for everything
else: no git, git unusable, many files changed since git looked) would: a file git tracks
that an ignore rule matches (settings `ignored_patterns`, a `.gitignore`) is left out, as
libgit2 answers for each candidate path.  One difference: permission bits other than git's
644/755 are noted only for the files read here, not for those git vouched for.
"""
from __future__ import annotations

import os
import shutil
import stat
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

import pygit2
from pygit2.enums import DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from . import faults, fifo_guard, usergit
from .cycles import no_cycle_collection
from .durability import fsync_file
from .fsutil import fsync_dir
from .ignore import Candidates, is_ignored
from .scan import DIFF_FLAGS, Scanner, ScanReport, diff_index, find_omissions, update_paths
from .worktree import exclude_files

TMP_NAME = "index.chronos-adopt"
MAX_CHANGES = 2000        # more files to read than this: the bulk import packs them, in parallel
MODE_LINK = 0o120000


@dataclass
class Adopted:
    """An index in place; `changed` (decoded paths) is what the scan must bring up to date."""
    changed: list[str]
    specials: ScanReport          # what libgit2's walk leaves out (find_omissions)
    bytes: int
    linked: list[str]
    seeded: int                   # entries taken as git has them
    copied: int
    seconds: dict = field(default_factory=dict)
    handle: pygit2.Repository | None = None   # the store's handle, the index in place loaded (placed early)


@dataclass
class _Objects:
    """What the store holds of the index after the user's packs are linked and loose copied."""
    packs: dict[str, set[bytes]]
    copied: set[bytes]
    lacking: set[bytes]           # blob and tree ids the store cannot get, or not a tree where one is due


class _Placing:
    """The copy put in place early, as it is, when nothing has to leave it at the parse (no
    entry an ignore rule, the size cap, a gitlink or a missing object keeps out): then the
    index in place loads on a thread of its own while the walk runs and libgit2's diff
    finishes, instead of after them (a second of libgit2's at a million entries).

    Placed early, the copy is a second name of the same file: its temporary name stays until
    the adoption is finished (what the diff and the walk find after it, a new `.gitignore` or
    a nested repository that keeps tracked files out, written into the index in place).  A
    crash before that leaves both names, and the next snapshot drops both (`drop_unfinished`)
    and adopts again (`adopt_placed`)."""

    def __init__(self, tmp: str, final: Path, durable: bool, pool: ThreadPoolExecutor):
        self.tmp, self.final, self.durable, self.pool = tmp, final, durable, pool
        self.loaded: Future | None = None
        self.placed = False
        self._read = threading.Event()
        self._whole = False

    def opened(self, whole: bool) -> None:
        """libgit2 has read the copy for the diff (`whole`: all of it)."""
        self._whole = whole
        self._read.set()

    def now(self, store_path: str) -> None:
        self._read.wait()                   # libgit2's word on the copy first: one it refuses stays out
        if not self._whole:                 # libgit2 refused it: never in place
            return
        if self.durable:
            fsync_file(Path(self.tmp))
        faults.hit("bulk_before_index")
        _clear(self.final)                  # an empty index file (BULK runs into no other)
        os.link(self.tmp, self.final)
        self.placed = True
        if self.durable:
            fsync_dir(self.final.parent)
        self.loaded = self.pool.submit(_load_index, store_path)
        faults.hit("adopt_placed")

    def finish(self, index: pygit2.Index, edited: bool) -> None:
        """The adoption done: the index in place is what the snapshot may trust from now on."""
        if edited:
            index.write()
            if self.durable:
                fsync_file(self.final)
        os.unlink(self.tmp)
        if self.durable:
            fsync_dir(self.final.parent)

    def undo(self) -> None:
        """Not adopted after all: the index in place goes (the bulk import writes its own)."""
        if self.loaded is not None:
            self.loaded.cancel()
        if self.placed:
            _clear(self.final)


def drop_unfinished(gitdir: Path) -> bool:
    """A first snapshot's adoption cut off after its copy went in place early (the copy's
    temporary name is still there): the index in place may hold what it was to leave out, so
    both go, and the snapshot adopts again.  True when there was one."""
    tmp = gitdir / TMP_NAME
    if not os.path.lexists(tmp):
        return False
    for path in (gitdir / "index", tmp):
        try:
            _clear(path)
        except OSError:
            pass        # the index goes first: what stays costs a walk per snapshot, never a snapshot
    return True


def _clear(path) -> None:
    """Whatever is at `path` goes: a file, a link (never what it points to), a directory."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _write_copy(tmp: str, raw: usergit.RawIndex) -> None:
    """The copy, as a new file of ours: never through a link, a FIFO or a file already there."""
    _clear(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as fh:
        fh.write(raw.data)
        fh.flush()
        os.utime(fh.fileno(), ns=(raw.mtime_ns, raw.mtime_ns))      # libgit2's racy guard compares with it


def _load_index(store_path: str) -> pygit2.Repository:
    handle = pygit2.Repository(store_path)
    len(handle.index)                 # libgit2 reads the file (GIL released)
    return handle


def run(repo: pygit2.Repository, gitdir: Path, root: bytes, objects_dir: str, *, cap: int,
        durable: bool, say=lambda *a: None) -> Adopted | str:
    """Adopt the user's index as `gitdir`'s (`objects_dir`: the store's); the reason (text)
    when it cannot be, with nothing of it left in place."""
    t0 = time.monotonic()
    try:
        raw = usergit.read_index(root)
    except usergit.Unusable as exc:
        return str(exc)
    tmp = os.path.join(str(gitdir), TMP_NAME)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="chronos-git-adopt") as pool:
        place = _Placing(tmp, gitdir / "index", durable, pool)
        try:
            with no_cycle_collection():      # a million parsed entries, walked over by every collection
                done = _adopt(repo, raw, place, root, objects_dir, cap, durable, say, t0)
        except (OSError, pygit2.GitError, ValueError) as exc:
            done = f"the index could not be adopted ({type(exc).__name__}: {exc})"
        if isinstance(done, str):
            place.undo()
            _clear(tmp)
    return done


def _adopt(repo, raw: usergit.RawIndex, place: _Placing, root: bytes, objects_dir: str, cap: int,
           durable: bool, say, t0: float) -> Adopted | str:
    tmp = place.tmp
    _write_copy(tmp, raw)
    say("listing", 0, 0)
    count = struct.unpack_from(">I", raw.data, 8)[0]
    # libgit2 loads the copy and compares it with the work tree (GIL released) while the
    # same bytes are parsed and the rest is done in Python beside it (`_beside`)
    helper = place.pool.submit(_beside, raw, root, repo.path, objects_dir, durable, cap, place)
    whole = False
    try:
        try:
            index = _open_index(tmp)
            whole = len(index) == count     # never a diff against what is not the copy
        finally:
            place.opened(whole)
        flags = DIFF_FLAGS | DiffOption.IGNORE_SUBMODULES
        diff = None if not whole or index.conflicts is not None else diff_index(repo, index, flags)
    finally:
        wait([helper])                      # done, an early placing too, before anything is undone
    got = helper.result()
    t_diff = time.monotonic()
    if not whole:
        return "the index copy could not be read whole"
    if diff is None:
        return "the repository's index holds unresolved conflicts"
    if isinstance(got, str):
        return got
    known, rules, ignored, late, capped, objects, specials = got   # late: found after an early placing
    if len(diff) > MAX_CHANGES:
        return (f"{len(diff):,} paths differ" if len(diff) != 1 else "1 path differs") + " from the repository's index"
    changed = [os.fsdecode(d.old_file.raw_path if d.status == pygit2.enums.DeltaStatus.DELETED
                           else d.new_file.raw_path).rstrip("/") for d in diff.deltas]
    new_rules = {os.fsencode(p) for p in changed if p.rsplit("/", 1)[-1] == ".gitignore"} - rules
    if new_rules:                              # a .gitignore not in git's index yet
        late += _ignored(pygit2.Repository(repo.path), known.entries, _scoped(root, new_rules))
    if specials.nested_repos:                  # a tracked folder that is a repository of its own now
        below = tuple(os.fsencode(d) + b"/" for d in specials.nested_repos)
        late += [p for p in known.entries if p.startswith(below)]
    ignored += late
    out = [*ignored, *known.odd]               # gitlinks: the scan reports the nested repository
    if ignored:
        gone = {os.fsdecode(p) for p in ignored}
        for p in ignored:
            known.entries.pop(p, None)
        changed = [p for p in changed if p not in gone]
    changed += [os.fsdecode(p) for p in known.odd]
    entries = known.entries
    changed += [os.fsdecode(p) for p in capped]
    facts = {"bytes": sum(item[2] for item in entries.values()), "linked": sorted(objects.packs),
             "copied": len(objects.copied)}
    if place.loaded is not None:
        handle = place.loaded.result()
        index = handle.index
        for path in late:
            if path in index:
                index.remove(path)
        place.finish(index, edited=bool(late))
        changed = sorted(set(changed))
        t_index = time.monotonic()
        seeded = len(index) - sum(1 for p in changed if p in index)
        return Adopted(changed=changed, specials=specials, seeded=seeded, handle=handle,
                       seconds={"list": round(t_diff - t0, 3), "git_index": 0.0,
                                "index": round(t_index - t_diff, 3)}, **facts)
    touch: list[bytes] = []
    if objects.lacking:
        # what the store cannot hold as git has it: the files are read; a tree is rebuilt from
        # the entries (one entry below it set again invalidates it: nothing written, nothing read)
        read, touch = _holding(entries, known.trees, objects.lacking)
        changed += read
        if len(changed) + len(touch) > MAX_CHANGES:
            return f"{len(objects.lacking):,} objects of the repository's index are in none of its packs"
    out += [os.fsencode(rel) for rel in changed]        # out of the cache: read from disk by the scan
    t_seed = time.monotonic()
    removed = False
    for path in out:
        if path in index:
            index.remove(path)          # bytes: pygit2 takes them (os.fsencode)
            removed = True
    for path in touch:
        if path in index and path in entries:
            sha, mode, _size, _st = entries[path]     # its stat data gone: hashed (not written) next scan
            index.add(pygit2.IndexEntry(path, pygit2.Oid(raw=sha), mode))   # type: ignore[arg-type]  # bytes paths: pygit2 takes them
            removed = True
    if removed:
        index.write()            # else the copy is the index as it is, its mtime git's
    if durable:
        fsync_file(Path(tmp))
    faults.hit("bulk_before_index")
    os.replace(tmp, place.final)
    t_index = time.monotonic()
    return Adopted(changed=sorted(set(changed)), specials=specials, seeded=len(index),
                   seconds={"list": round(t_diff - t0, 3), "git_index": round(t_seed - t_diff, 3),
                            "index": round(t_index - t_seed, 3)}, **facts)


def _beside(raw: usergit.RawIndex, root: bytes, store_path: str, objects_dir: str, durable: bool, cap: int,
            place: _Placing):
    """What runs beside libgit2's diff (its own repository handle): the parse, the tracked
    files an ignore rule matches, the objects brought into the store, the copy put in place
    when it can go as it is (`_Placing`), the walk for what the diff leaves out.  The reason
    (text) when the index cannot be adopted.  libgit2 opens a `.gitignore` without
    O_NONBLOCK: this thread is guarded against a FIFO too (fifo_guard)."""
    with fifo_guard.watching(root):
        return _beside_guarded(raw, root, store_path, objects_dir, durable, cap, place)


def _beside_guarded(raw: usergit.RawIndex, root: bytes, store_path: str, objects_dir: str, durable: bool,
                    cap: int, place: _Placing):
    try:
        known = usergit.known_from(raw, root, checked=True)     # libgit2 loads the same bytes beside
    except usergit.Unusable as exc:
        return str(exc)
    finally:
        raw.data = b""                     # parsed and copied: its memory back (100+ MB at 1M files)
    odd = sorted({why for why in known.odd.values() if why != "gitlink"})
    if odd:
        return f"the repository's index holds entries git marks {', '.join(odd)}"
    handle = pygit2.Repository(store_path)
    rules = set(known.ignore_files)
    found = _scoped(root, rules)
    found.add(b"", exclude_files(handle))
    ignored = _ignored(handle, known.entries, found)
    for path in ignored:
        del known.entries[path]
    capped = [p for p, (_s, mode, size, _st) in known.entries.items()
              if size > cap and mode != MODE_LINK] if cap else []
    objects = _objects(known, handle, objects_dir, durable, cap)
    if not (ignored or capped or known.odd or objects.lacking):
        place.now(store_path)
    specials = ScanReport()
    find_omissions(handle, root, specials)
    late, selfish = [], {os.fsencode(p) for p in specials.ignore_files} - rules
    if selfish:                            # a .gitignore that ignores itself: its rules apply too
        late = _ignored(handle, known.entries, _scoped(root, selfish))
        rules |= selfish
    return known, rules, ignored, late, capped, objects, specials


def _objects(known: usergit.Known, handle: pygit2.Repository, objects_dir: str, durable: bool,
             cap: int) -> _Objects:
    """The user's packs that hold the index's objects linked, the objects it holds loose
    copied; which blob and tree ids are still lacking (or are not trees where trees are due)."""
    shas = set(map(itemgetter(0), known.entries.values()))
    nodes = {item[1] for item in known.trees.values()}
    packs = usergit.link_packs(known, shas, os.path.join(objects_dir, "pack"), durable)
    held = next(iter(packs.values())) if len(packs) == 1 else set().union(*packs.values())
    lacking = shas.difference(held)
    # blobs git holds loose are copied (not those of files over the cap: those are skipped);
    # a tree only from its packs, which hold what it names (a loose one may name blobs no
    # entry asks for): a cache-tree node elsewhere is rebuilt from the entries instead
    wanted = {sha for sha, mode, size, _st in known.entries.values() if sha in lacking
              and not (cap and size > cap and mode != MODE_LINK)} if lacking else set()
    copied = usergit.copy_loose(known, wanted, objects_dir) if wanted else set()
    lacking -= copied
    lacking |= nodes.difference(held)
    lacking |= _not_trees(handle.odb, nodes - lacking)
    return _Objects(packs, copied, lacking)


def _holding(entries: dict, trees: dict, lacking: set[bytes]) -> tuple[list[str], list[bytes]]:
    """(Paths to read so that no blob in `lacking` is taken from the index, one entry below
    each cache-tree node whose tree is in `lacking`: setting it again invalidates the node)."""
    read = [os.fsdecode(p) for p, (sha, *_rest) in entries.items() if sha in lacking]
    touch = []
    nodes = sorted(d for d, (_c, sha, _kids) in trees.items() if sha in lacking)
    if nodes:
        under: dict[bytes, bytes | None] = dict.fromkeys(nodes)
        for p in entries:                      # one pass: the first entry below each node
            d = p
            while True:
                d = d.rpartition(b"/")[0]
                if d in under and under[d] is None:
                    under[d] = p
                if not d:
                    break
        touch = [p for p in under.values() if p is not None]
    return read, touch


def read_changed(repo: pygit2.Repository, scanner: Scanner, got: Adopted) -> tuple[dict, dict, bool]:
    """With the adopted index in place: the paths it could not vouch for read as a file call's
    are, and what the walk beside the diff found folded into the report; (phase times, seed
    facts, whether the index now differs from the file in place)."""
    t0 = time.monotonic()
    update_paths(repo, repo.index, scanner, got.changed)
    report = scanner.report
    for item in got.specials.skipped:
        report.skip(item["path"], item["reason"], item.get("size"))
    for d in got.specials.nested_repos:
        report.nested(d)
    report.added_bytes += got.bytes
    return ({**got.seconds, "changed": round(time.monotonic() - t0, 3)},
            {"seeded_files": got.seeded, "linked_packs": len(got.linked), "note": None, "adopted": True,
             "changed_files": len(got.changed), "loose_copied": got.copied},
            bool(got.changed))


def _ignored(handle, entries: dict, found: Candidates) -> list[bytes]:
    """The tracked paths an ignore rule ignores: the candidates `found` finds by pattern, each
    answered by libgit2 (which applies every rule there is)."""
    if not found:
        return []
    return [p for p in found.among(entries) if is_ignored(handle, os.fsdecode(p))]


def _scoped(root: bytes, rules) -> Candidates:
    """The candidates of these `.gitignore` files (work-tree paths), each for its own folder."""
    found = Candidates()
    for rel in sorted(rules):
        found.add(rel.rpartition(b"/")[0], [os.path.join(root, rel)])
    return found


def _not_trees(odb, ids: set[bytes]) -> set[bytes]:
    """Of the cache tree's ids, those the store does not hold as trees (an index can name
    anything there; libgit2's write_tree takes a valid node as it is)."""
    out = set()
    for sha in ids:
        try:
            if odb.read_header(pygit2.Oid(raw=sha))[0] != pygit2.enums.ObjectType.TREE:
                out.add(sha)
        except (KeyError, ValueError, pygit2.GitError):
            out.add(sha)
    return out


def _open_index(path: str) -> pygit2.Index:
    """pygit2.Index(path), minus its noise: an index libgit2 refuses leaves no half-made
    object whose finaliser fails."""
    out = ffi.new("git_index **")
    check_error(C.git_index_open(out, os.fsencode(path)))
    return pygit2.Index.from_c(None, out)
