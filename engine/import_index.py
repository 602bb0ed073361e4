"""The trees and the index file a first import (bulk) writes.

Every tree object is built from the imported entries (or, where git's cache tree vouches
for a directory, taken from the user's linked packs as it is), and the index is written
with real stat data and a complete TREE extension, so the very next snapshot is a
stat-only walk and `write_tree()` is instant.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile

import pygit2


class CachedTrees:
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


def cached_trees(known, held: set[bytes], odb) -> CachedTrees | None:
    """The cache tree of `known` (usergit) as far as `held` (the linked packs' object ids) holds it."""
    if isinstance(known, str) or not known.trees or not held:
        return None
    return CachedTrees(known, held, odb)


def write_trees(entries: list, store_tree, cached: CachedTrees | None = None) -> tuple[bytes, bytes]:
    """Write every tree object of `entries` (path, mode, sha, exact) with `store_tree(body)`
    (returns its id); return (root sha, TREE index extension payload).  `cached`
    is asked for each directory below the root whose entries are all exact.  The root is
    always written by us: a new commit freshens its tree, and freshening an object of the
    user's (hard-linked) pack would touch that pack's mtime."""
    if cached is not None and all(e.exact for e in entries):
        done = _clean_root(entries, store_tree, cached)
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
        return _tree_result(store_tree, name, count, subs, files)

    sha, _, ext_bytes = build(root, b"", b"")
    return sha, ext_bytes


def _tree_result(store_tree, name: bytes, count: int, subs: list, files: list) -> tuple[bytes, int, bytes]:
    """Write one tree (subdirectories as (name, id, their TREE entry), files as (name, mode,
    id)); return (its id, count, its TREE extension entry with the subtrees, by name)."""
    rows = [(n + b"/", b"40000 " + n + b"\0" + sha) for n, sha, _ in subs]
    rows += [(n, b"%o " % mode + n + b"\0" + sha) for n, mode, sha in files]
    rows.sort(key=lambda r: r[0])              # git's order: a directory sorts as "name/"
    sha = store_tree(b"".join(body for _, body in rows))
    # cache-tree entry: name NUL count SP nsub LF sha, then the subtrees (sorted by name)
    me = name + b"\0" + b"%d %d\n" % (count, len(subs)) + sha
    for _, _, sub_ext in sorted(subs, key=lambda s: s[0]):
        me += sub_ext
    return sha, count, me


def _clean_root(entries: list, store_tree, cached: CachedTrees) -> tuple[bytes, bytes] | None:
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
    sha, _, ext = _tree_result(store_tree, b"", count, subs, files)
    return (sha, ext) if sha == cached.trees[b""][1] else None


_INDEX_ENTRY = struct.Struct(">10I20sH")
_STAT = struct.Struct(">10IQ")
_M32 = 0xFFFFFFFF
WIDE_TIME = 1 << 31                 # in the st_mode field: a time the index cannot hold whole


def packed_stat(st: os.stat_result) -> bytes:
    """The stat fields an index entry keeps (ctime, mtime, dev, inode, st_mode, uid, gid and
    size as git's index stores them, 32-bit), then the full size: 81 bytes where an
    `os.stat_result` takes ~650, for the million entries a large first import holds.
    A time before 1970 or past 2106 sets WIDE_TIME (above the file type bits), so that
    nothing compares its wrapped seconds as if they were the file's."""
    cs, cns = divmod(st.st_ctime_ns, 1_000_000_000)
    ms, mns = divmod(st.st_mtime_ns, 1_000_000_000)
    mode = st.st_mode & 0xFFFF
    if not (0 <= cs <= _M32 and 0 <= ms <= _M32):
        mode |= WIDE_TIME
    size = max(st.st_size, 0)
    return _STAT.pack(cs & _M32, cns, ms & _M32, mns, st.st_dev & _M32, st.st_ino & _M32,
                      mode, st.st_uid & _M32, st.st_gid & _M32, size & _M32, size)


def stat_fields(ps: bytes) -> tuple:
    """`packed_stat`'s fields: (ctime s, ns, mtime s, ns, dev, ino, st_mode, uid, gid, size
    (32-bit), size)."""
    return _STAT.unpack(ps)


def write_index(path: str, entries: list, tree_ext: bytes) -> None:
    """A version-2 index of `entries` (path, mode, sha, `packed_stat` or None) with
    `tree_ext` as its TREE extension, renamed into place at `path`.  Built in one buffer
    that grows in place (a million entries: ~130 MB, held once)."""
    entries = sorted(entries, key=lambda e: e.path)
    out = bytearray(b"DIRC" + struct.pack(">II", 2, len(entries)))
    pack, fields = _INDEX_ENTRY.pack, _STAT.unpack
    pads = [b"\0" * n for n in range(9)]
    for e in entries:
        ps, p = e.st, e.path
        if ps is None:                      # changed while read: zero stat forces a re-check
            out += pack(0, 0, 0, 0, 0, 0, e.mode, 0, 0, 0, e.sha, min(len(p), 0xFFF))
        else:
            cs, cns, ms, mns, dev, ino, _m, uid, gid, size, _ = fields(ps)
            out += pack(cs, cns, ms, mns, dev, ino, e.mode, uid, gid, size, e.sha, min(len(p), 0xFFF))
        out += p
        out += pads[8 - ((62 + len(p)) % 8)]  # 1 to 8 NULs: the entry ends on an 8-byte boundary
    if tree_ext:
        out += b"TREE" + struct.pack(">I", len(tree_ext)) + tree_ext
    out += hashlib.sha1(out).digest()
    fd, tmp = tempfile.mkstemp(prefix="index.chronos.", dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as fh:
        fh.write(out)
    os.replace(tmp, path)
