"""The tree of a snapshot that changed a few files, without re-walking the index.

`index.write_tree()` rebuilds every tree above a changed entry from the whole
index: on a 78k-file tree that is ~30 ms per changed path, paid by every
post-call checkpoint.  When the in-memory index is known to hold the previous
checkpoint's tree exactly and only some file entries changed, the new tree is
that tree with those entries replaced or removed, rebuilt along their paths
only (~1 ms; written by engine.loose).  Anything unusual (a directory walked or dropped,
a name that is not UTF-8, a file where the tree had a directory or the other
way round) answers None: the caller writes the tree from the index as before.
"""
from __future__ import annotations

import pygit2

from . import loose

TREE = pygit2.GIT_FILEMODE_TREE
_FAIL = object()


def patched_tree(repo: pygit2.Repository, base: pygit2.Tree, index: pygit2.Index,
                 rels: list[str], objects_dir) -> pygit2.Oid | None:
    """The tree `index` would write, given that it equals `base` except at `rels`
    (trees written by engine.loose into `objects_dir`)."""
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
        entry = index[rel] if rel in index else None   # noqa: SIM401 (pygit2.Index has no get())
        node[parts[-1]] = None if entry is None else (entry.id, entry.mode)
    try:
        out = _build(repo, objects_dir, str(base.id), changes)
    except ValueError:                       # a damaged tree: the index decides
        return None
    if out is _FAIL:
        return None
    if out is None:                          # everything removed: the empty tree
        out = loose.write(objects_dir, pygit2.GIT_OBJECT_TREE, b"", repo=repo)[0]
    return pygit2.Oid(hex=out)


def _entries(repo, tree_id: str | None) -> dict[bytes, tuple[int, bytes]]:
    return {} if tree_id is None else read_entries(repo, tree_id)


def read_entries(repo, tree_id) -> dict[bytes, tuple[int, bytes]]:
    """name -> (mode, raw id) of a stored tree, read from its bytes (any name bytes: pygit2's
    own tree objects refuse names that are not UTF-8)."""
    kind, data = repo.odb.read(tree_id)
    if kind != pygit2.GIT_OBJECT_TREE:
        raise ValueError(f"{tree_id} is not a tree")
    out, pos = {}, 0
    while pos < len(data):
        sp = data.index(b" ", pos)
        nul = data.index(b"\0", sp)
        out[data[sp + 1:nul]] = (int(data[pos:sp], 8), data[nul + 1:nul + 21])
        pos = nul + 21
    return out


def order(item) -> bytes:
    """git's tree order: a directory sorts as if its name ended in "/"."""
    name, (mode, _) = item
    return name + b"/" if mode == TREE else name


def _build(repo, objects_dir, tree_id: str | None, changes: dict):
    entries = _entries(repo, tree_id)
    for name, change in changes.items():
        key = name.encode()
        old = entries.get(key)
        if isinstance(change, dict):
            if old is not None and old[0] != TREE:
                return _FAIL                 # a file became a directory: let the index decide
            oid = _build(repo, objects_dir, old[1].hex() if old is not None else None, change)
            if oid is _FAIL:
                return _FAIL
            if oid is None:
                entries.pop(key, None)
            else:
                entries[key] = (TREE, bytes.fromhex(oid))
        else:
            if old is not None and old[0] == TREE:
                return _FAIL                 # a directory became a file (or vanished as a name)
            if change is None:
                entries.pop(key, None)
            else:
                entries[key] = (change[1], change[0].raw)
    if not entries:
        return None
    data = b"".join(b"%o %s\0%s" % (mode, name, oid) for name, (mode, oid) in sorted(entries.items(), key=order))
    return loose.write(objects_dir, pygit2.GIT_OBJECT_TREE, data, repo=repo)[0]
