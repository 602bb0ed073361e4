"""Trees read and edited by byte paths, along the edited paths only.

git paths are bytes, and pygit2's TreeBuilder and `tree[path]` refuse names that are
not UTF-8 (a surrogate-escaped `str` raises UnicodeEncodeError).  So this reads tree
objects from their raw bytes and writes new ones with `odb.write` wherever a name
is not UTF-8 (libgit2's own lookup and TreeBuilder elsewhere, which are faster): every name stays
byte-exact, and an edit of a few paths in a 78k-file tree costs the directories along
those paths, never a walk of the whole tree (engine/agent_merge.py builds on it).

An entry is `(mode, raw oid)`; a directory has mode DIR.
"""
from __future__ import annotations

from collections.abc import Iterator

import pygit2
from pygit2.enums import ObjectType

from .treepatch import order, read_entries

DIR = pygit2.GIT_FILEMODE_TREE
Entry = tuple[int, bytes]


class Clash(Exception):
    """An edit would leave a file and a directory at one path (`path`, bytes)."""

    def __init__(self, path: bytes):
        super().__init__(path)
        self.path = path


class Trees:
    """Reads (cached by tree id) and writes trees of one repository."""

    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self._cache: dict[bytes, dict[bytes, Entry]] = {}
        self._trees: dict[bytes, pygit2.Tree] = {}

    def entries(self, tree: bytes) -> dict[bytes, Entry]:
        """name -> (mode, raw id) of the tree with raw id `tree`, parsed from its bytes."""
        out = self._cache.get(tree)
        if out is None:
            out = self._cache[tree] = read_entries(self.repo, pygit2.Oid(raw=tree))
        return out

    def lookup(self, root: bytes, path: bytes) -> Entry | None:
        """The entry at `path` below the tree `root` (None: no entry, or a file on the way)."""
        try:
            name = path.decode()
        except UnicodeDecodeError:
            return self._lookup_raw(root, path)
        tree = self._trees.get(root)
        if tree is None:
            tree = self._trees[root] = self.repo[pygit2.Oid(raw=root)].peel(pygit2.Tree)
        try:
            e = tree[name]                           # libgit2's lookup by path
        except KeyError:
            return None
        return (int(e.filemode), e.id.raw)

    def _lookup_raw(self, root: bytes, path: bytes) -> Entry | None:
        node = root
        parts = path.split(b"/")
        for i, name in enumerate(parts):
            e = self.entries(node).get(name)
            if e is None or i == len(parts) - 1:
                return e
            if e[0] != DIR:
                return None
            node = e[1]
        return None

    def changed(self, a: bytes | None, b: bytes | None, prefix: bytes = b"") -> Iterator[bytes]:
        """Every file path whose entry differs between the trees `a` and `b` (None: empty),
        descending only into subtrees whose ids differ (libgit2's tree diff costs ~14 ms for
        one changed file in a 78k-file tree; this, the directories along the change).  A file
        replaced by a directory yields the path and every file below it; no renames."""
        if a == b:
            return
        ea = self.entries(a) if a is not None else {}
        eb = self.entries(b) if b is not None else {}
        for name in ea.keys() | eb.keys():
            x, y = ea.get(name), eb.get(name)
            if x == y:
                continue
            x_dir, y_dir = x is not None and x[0] == DIR, y is not None and y[0] == DIR
            if (x is not None and not x_dir) or (y is not None and not y_dir):
                yield prefix + name
            if x_dir or y_dir:
                yield from self.changed(x[1] if x is not None and x_dir else None,
                                        y[1] if y is not None and y_dir else None, prefix + name + b"/")

    def edit(self, root: bytes, changes: dict[bytes, Entry | None]) -> bytes:
        """The raw id of `root` with each path of `changes` set to its blob entry, or with
        no file there (None; a directory at that path is left alone).  Directories left
        empty disappear, as in git.  Raises Clash where a file would share a path with
        a directory that still holds something."""
        nested: dict = {}
        for path, entry in changes.items():
            node = nested
            parts = path.split(b"/")
            for name in parts[:-1]:
                node = node.setdefault(name, [False, None, {}])[2]
            slot = node.setdefault(parts[-1], [False, None, {}])
            slot[0], slot[1] = True, entry
        out = self._build(root, nested, b"")
        return out if out is not None else self.write({})

    def write(self, entries: dict[bytes, Entry]) -> bytes:
        """Write a tree object holding `entries`; its raw id."""
        data = b"".join(b"%o %s\0%s" % (mode, name, oid)
                        for name, (mode, oid) in sorted(entries.items(), key=order))
        oid = self.repo.odb.write(ObjectType.TREE, data)
        return oid.raw

    def _build(self, base: bytes | None, node: dict, prefix: bytes) -> bytes | None:
        try:
            for name in node:
                name.decode()
            return self._apply(_Builder(self.repo, base), node, prefix)
        except (UnicodeDecodeError, pygit2.GitError, ValueError):
            # a name pygit2 cannot take (not UTF-8, or one its TreeBuilder refuses): bytes
            return self._apply(_RawEntries(self, base), node, prefix)

    def _apply(self, tree, node: dict, prefix: bytes) -> bytes | None:
        for name, (has_leaf, leaf, children) in node.items():
            path = prefix + name
            old = tree.get(name)
            old_dir = old is not None and old[0] == DIR
            if has_leaf and leaf is not None:            # a file goes here
                below = old[1] if old is not None and old_dir else None
                if children:
                    below = self._build(below, children, path + b"/")
                if below is not None:
                    raise Clash(path)
                tree.set(name, leaf)
                continue
            if has_leaf and old is not None and not old_dir:   # no file here
                tree.pop(name)
                old = None
            if children:
                if old is not None and not old_dir:
                    raise Clash(path)
                sub = self._build(old[1] if old is not None else None, children, path + b"/")
                if sub is None:
                    if old is not None:
                        tree.pop(name)
                else:
                    tree.set(name, (DIR, sub))
        return tree.finish()


class _Builder:
    """One directory edited through libgit2's TreeBuilder (UTF-8 names only)."""

    def __init__(self, repo: pygit2.Repository, base: bytes | None):
        self.tb = repo.TreeBuilder(pygit2.Oid(raw=base)) if base is not None else repo.TreeBuilder()

    def get(self, name: bytes) -> Entry | None:
        e = self.tb.get(name.decode())
        return None if e is None else (int(e.filemode), e.id.raw)

    def set(self, name: bytes, entry: Entry) -> None:
        self.tb.insert(name.decode(), pygit2.Oid(raw=entry[1]), entry[0])

    def pop(self, name: bytes) -> None:
        self.tb.remove(name.decode())

    def finish(self) -> bytes | None:
        return self.tb.write().raw if len(self.tb) else None


class _RawEntries:
    """One directory edited as bytes (any name)."""

    def __init__(self, trees: Trees, base: bytes | None):
        self.trees, self.base = trees, base
        self.entries = dict(trees.entries(base)) if base is not None else {}

    def get(self, name: bytes) -> Entry | None:
        return self.entries.get(name)

    def set(self, name: bytes, entry: Entry) -> None:
        self.entries[name] = entry

    def pop(self, name: bytes) -> None:
        del self.entries[name]

    def finish(self) -> bytes | None:
        if not self.entries:
            return None
        if self.base is not None and self.entries == self.trees.entries(self.base):
            return self.base
        return self.trees.write(self.entries)
