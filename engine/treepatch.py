"""The tree of a snapshot that changed a few files, without re-walking the index.

`index.write_tree()` rebuilds every tree above a changed entry from the whole
index: on a 78k-file tree that is ~30 ms per changed path, paid by every
post-call checkpoint.  When the in-memory index is known to hold the previous
checkpoint's tree exactly and only some file entries changed, the new tree is
that tree with those entries replaced or removed, rebuilt along their paths
only (TreeBuilder, ~1 ms).  Anything unusual (a directory walked or dropped,
a name that is not UTF-8, a file where the tree had a directory or the other
way round) answers None: the caller writes the tree from the index as before.
"""
from __future__ import annotations

import pygit2

TREE = pygit2.GIT_FILEMODE_TREE
_FAIL = object()


def patched_tree(repo: pygit2.Repository, base: pygit2.Tree, index: pygit2.Index,
                 rels: list[str]) -> pygit2.Oid | None:
    """The tree `index` would write, given that it equals `base` except at `rels`."""
    changes: dict = {}
    for rel in rels:
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            return None
        parts = rel.split("/")
        if not all(parts):
            return None
        node = changes
        for d in parts[:-1]:
            node = node.setdefault(d, {})
            if not isinstance(node, dict):
                return None
        if isinstance(node.get(parts[-1]), dict):
            return None
        entry = index[rel] if rel in index else None
        node[parts[-1]] = None if entry is None else (entry.id, entry.mode)
    out = _build(repo, base, changes)
    if out is _FAIL:
        return None
    if out is None:                          # everything removed: the empty tree
        return repo.TreeBuilder().write()
    return out


def _build(repo, tree: pygit2.Tree | None, changes: dict):
    tb = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name, change in changes.items():
        old = tree[name] if tree is not None and name in tree else None
        if isinstance(change, dict):
            if old is not None and old.filemode != TREE:
                return _FAIL                 # a file became a directory: let the index decide
            oid = _build(repo, repo[old.id] if old is not None else None, change)
            if oid is _FAIL:
                return _FAIL
            if oid is None:
                if old is not None:
                    tb.remove(name)
            else:
                tb.insert(name, oid, TREE)
        else:
            if old is not None and old.filemode == TREE:
                return _FAIL                 # a directory became a file (or vanished as a name)
            if change is None:
                if old is not None:
                    tb.remove(name)
            else:
                tb.insert(name, change[0], change[1])
    if len(tb) == 0:
        return None
    return tb.write()
