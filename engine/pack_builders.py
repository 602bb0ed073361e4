"""Packing with libgit2's PackBuilder, the work split across builders: compaction's packs.

Each object goes to the delta search with the name it was reached by (as git does), so
files of the same name are tried against each other first.  A big packing is cut into
parts, runs of the delta search's own order, and two builders pack them at once.  Each
pack is built in a scratch directory and renamed into place (.pack before .idx), fsynced
before anything it replaces is deleted.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pygit2

from . import faults
from .fsutil import fsync_dir
from .packers import cores as _cores


def _insert(pb, oid: pygit2.Oid, name: bytes | None) -> None:
    """Add one object, with the name it was reached by where pygit2's binding allows: the
    delta search then tries files of the same name first, as git does (pygit2's add() passes
    none, and a nameless search is slower and finds worse deltas)."""
    handle = getattr(pb, "_packbuilder", None)
    if name and handle is not None and _native is not None:
        ffi, lib = _native
        c_oid = ffi.new("git_oid *")
        ffi.buffer(c_oid)[:] = oid.raw
        if lib.git_packbuilder_insert(handle, c_oid, ffi.new("char[]", name)) == 0:
            return
    pb.add(oid)


try:                                          # feature-detected: a private part of pygit2
    from pygit2._libgit2 import ffi as _ffi, lib as _lib
    _native = (_ffi, _lib) if hasattr(_lib, "git_packbuilder_insert") else None
except ImportError:
    _native = None


# A big compaction packs in parts, two builders at once.  libgit2's builder searches for deltas
# on every core but writes on one (it compresses, recomputes the deltas it did not cache, hashes
# and indexes every object there): on the first compaction of a kernel tree that was 69 of
# 113 s.  The parts are runs of the delta search's own order, so they lose almost no delta.
PART_MIN_BYTES = 64 << 20          # below this much content: one pack from one builder
# each builder has its own delta cache and window (the bounds in the store's config are per
# builder) and holds a big object, its base and their delta index: two at most, and one
# where an object is big (two builders with 48 MiB files peaked at 506 MB, one at 377 MB;
# the kernel tree's 24 MB header packs in parts at 392 MB)
MAX_BUILDERS = 2
SOLO_OBJECT_BYTES = 32 << 20
_SPACE = frozenset(b" \t\n\v\f\r")


def _name_hash(name: bytes | None) -> int:
    """git's pack name hash (the last characters of the name count most): the delta search
    sorts by it, so objects of the same name end up side by side."""
    h = 0
    for c in name or b"":
        if c not in _SPACE:
            h = ((h >> 2) + (c << 24)) & 0xFFFFFFFF
    return h


def _shares(workers: int) -> list[float]:
    """The share of bytes of each part: one big part per builder, then smaller ones that
    whichever builder is free takes, so the builders finish close together."""
    if workers <= 1:
        return [1.0]
    return [0.3 / workers * 2] * workers + [0.15 / workers * 2] * workers + [0.05 / workers * 2] * workers


def _parts(repo, oids: list, names: dict, shares: list[float]) -> list[list]:
    """`oids` as runs of about `shares` of their bytes, in the delta search's order (type, then
    name hash), each cut where that key changes: a delta is only sought between neighbours in
    that order, so the parts lose almost no delta.  One run below PART_MIN_BYTES in all, or
    when an object is above SOLO_OBJECT_BYTES."""
    if len(shares) <= 1:
        return [oids]
    odb = repo.odb
    keyed, total = [], 0
    for oid in oids:
        kind, size = odb.read_header(oid)
        if size > SOLO_OBJECT_BYTES:
            return [oids]
        keyed.append((int(kind), _name_hash(names.get(oid)), size, oid))
        total += size
    if total < PART_MIN_BYTES:
        return [oids]
    keyed.sort(key=lambda k: (k[0], k[1]), reverse=True)
    group: dict = {}                    # bytes per (type, name hash): what a cut cannot split
    for kind, h, size, _ in keyed:
        group[kind, h] = group.get((kind, h), 0) + size
    goals = [share * total for share in shares]
    parts: list[tuple[int, list]] = []
    run: list = []
    run_bytes = 0
    for i, (kind, h, size, oid) in enumerate(keyed):
        if run and len(parts) < len(goals) - 1 and (kind, h) != keyed[i - 1][:2]:
            # the size of this run decides, not the running total: a name bigger than its
            # share makes one part of its own (cut before it once the run is half full), and
            # the next part still gets its own share; the last part takes the rest
            goal = goals[len(parts)]
            if run_bytes >= goal or (run_bytes >= goal / 2 and run_bytes + group[kind, h] > 1.5 * goal):
                parts.append((run_bytes, run))
                run, run_bytes = [], 0
        run.append(oid)
        run_bytes += size
    parts.append((run_bytes, run))
    if len(parts) > 1 and parts[-1][0] < min(goals) / 2:      # a crumb: into its neighbour
        crumb = parts.pop()
        parts[-1] = (parts[-1][0] + crumb[0], parts[-1][1] + crumb[1])
    return [run for _, run in parts]


def _build(repo_path: str, oids: list, names: dict, scratch: Path, threads: int) -> None:
    repo = pygit2.Repository(repo_path)        # a builder per thread, each on its own handle
    pb = pygit2.PackBuilder(repo)
    pb.set_threads(threads)
    for oid in oids:
        _insert(pb, oid, names.get(oid))
    pb.write(str(scratch))


def build_packs(repo, oids, pack_dir: Path, entry_names: dict | None = None) -> set[str]:
    """Pack `oids` into pack_dir; returns the pack names (stems) that now hold them.

    Each pack is built in a scratch directory first, so we know its name even
    when an identical pack already exists (same content, same name).  `entry_names`
    (object id -> the tree entry name it was reached by) guides the delta search.
    """
    if not oids:
        return set()
    cores = _cores()
    workers = min(cores, MAX_BUILDERS)
    entry_names = entry_names or {}
    parts = _parts(repo, list(oids), entry_names, _shares(workers))
    scratch = Path(tempfile.mkdtemp(prefix="tmp-compact-", dir=pack_dir))
    try:
        if len(parts) == 1:
            _build(repo.path, parts[0], entry_names, scratch, cores)   # its delta search on every core
        else:
            todo = list(enumerate(parts))          # the biggest shares first
            failed: list[BaseException] = []
            lock = threading.Lock()

            def work() -> None:
                while not failed:
                    with lock:
                        if not todo:
                            return
                        i, part = todo.pop(0)
                    try:
                        (scratch / str(i)).mkdir()
                        _build(repo.path, part, entry_names, scratch / str(i), 1)
                    except BaseException as exc:     # re-raised below, on the caller's thread
                        failed.append(exc)
            # daemon threads: a builder cannot be stopped inside libgit2, and a Ctrl-C must not
            # wait for it.  One left running takes no further part and writes only into the
            # scratch directory, which is deleted below; nothing is renamed into place but here.
            threads = [threading.Thread(target=work, name=f"chronos-pack-{i}", daemon=True)
                       for i in range(workers)]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    t.join()
            except BaseException as exc:
                failed.append(exc)
                raise
            if failed:
                raise failed[0]
        names = set()
        # .pack before .idx: an index is never in place without its pack
        for f in sorted(scratch.rglob("pack-*"), key=lambda f: (f.suffix != ".pack", f.name)):
            target = pack_dir / f.name
            if not target.exists():
                # durable before anything it replaces is deleted: the loose journal
                # objects were fsynced, their pack copy must be too
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
                os.replace(f, target)
                if f.suffix == ".pack":
                    faults.hit("compact_pack_before_idx")
            names.add(f.stem)
        fsync_dir(pack_dir)
        return names
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
