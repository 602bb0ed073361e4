"""What a workspace knows of its stat cache (the gitdir's `index`) between snapshots.

The in-memory index may hold a checkpoint's tree: then a declared or watched snapshot can
patch that tree instead of rebuilding it (engine/treepatch.py), and nothing may have changed
since (snapshot_plan: unchanged).  Known only while the index file's stat stamp is the one
seen when it was learnt: another process writing the file changes it.  Declared and watched
snapshots leave the in-memory index newer than the file (`unsaved`): the next walk, or
`Workspace.flush_index`, writes it.
"""
from __future__ import annotations

import os
from pathlib import Path

import pygit2

from .scan import forget


class StatCache:
    def __init__(self, gitdir: Path):
        self.path = gitdir / "index"
        self.tree: str | None = None       # the tree the in-memory index holds, when known
        self.stamp: tuple | None = None    # ... as of this stat of the index file
        self.unsaved = False               # the in-memory index is newer than its file
        # a restore's writes the index took: (the tip it held before, those paths)
        self.restored: tuple[str, list[str]] | None = None

    def new_handle(self) -> None:
        """A new handle reads the index file afresh: nothing the old in-memory index held (a
        checkpoint's tree, a restore's writes) is known of it."""
        self.tree = None
        self.restored = None

    def file_stamp(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def took_restore(self, index, removed: list[str], written: list[str]) -> None:
        """The index takes what a restore wrote (no walk); the tree it held is remembered with
        those paths, so the declared snapshot right after can put them back path by path."""
        base = self.known()
        self.restored = (base, [*removed, *written]) if base else None
        self.tree = None                 # it no longer holds a checkpoint's tree we know
        for rel in removed:
            forget(index, rel)
        for rel in written:
            try:
                index.add(rel)
            except (pygit2.GitError, OSError):
                pass                     # the next snapshot re-hashes it
        self.unsaved = True              # like a declared snapshot: the next walk writes the cache file

    def known(self) -> str | None:
        """The tree the in-memory index holds, if nothing reloaded or changed it since we
        knew (another process writing the index file changes its stamp)."""
        if self.tree is not None and self.stamp == self.file_stamp():
            return self.tree
        return None

    def learn(self, tree: str) -> None:
        """The in-memory index holds `tree`, as of the index file as it is now."""
        self.tree = tree
        self.stamp = self.file_stamp()

    def drop_file(self) -> None:
        """Delete a damaged index file (the next walk re-hashes every file once)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.unsaved = False


def entries_of(index, rels: list[str]) -> list:
    """What the index holds for `rels` (and its size: a directory's entries removed show)."""
    out: list = [len(index)]
    for rel in rels:
        try:
            e = index[rel]
        except (KeyError, ValueError):
            out.append(None)
        else:
            out.append((e.id, e.mode))
    return out
