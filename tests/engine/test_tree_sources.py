"""narrowing.tree_sources walks only the subtrees two trees do not share; it must name the same
`.gitignore` files as libgit2's tree diff (what it replaced: 24 ms per declared checkpoint on
the kernel tree)."""
from __future__ import annotations

import os
import random

import pygit2

from chronos_git.engine.narrowing import IGNORE_NAME, tree_sources


def _by_diff(old, new) -> list[str]:
    out = set()
    for d in old.diff_to_tree(new).deltas:
        for p in (d.old_file.path, d.new_file.path):
            if p and os.path.basename(p) == IGNORE_NAME:
                out.add(p)
    return sorted(out)


def _tree(repo, files: dict[str, tuple[bytes, int]]):
    idx = pygit2.Index()
    for path, (data, mode) in sorted(files.items()):
        idx.add(pygit2.IndexEntry(path, repo.create_blob(data), mode))
    return repo[idx.write_tree(repo)]


def test_tree_sources_names_what_the_tree_diff_names(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    rng = random.Random(7)
    dirs = ["", "a/", "a/b/", "a/b/c/", "d/", "d/e/"]
    files: dict[str, tuple[bytes, int]] = {}
    for d in dirs:
        for name in ("x.txt", "y.c", IGNORE_NAME):
            if rng.random() < 0.7:
                files[d + name] = (f"{d}{name}".encode(), pygit2.GIT_FILEMODE_BLOB)
    for _round in range(60):
        new = dict(files)
        for _ in range(rng.randint(1, 4)):
            d = rng.choice(dirs)
            name = rng.choice(["x.txt", "y.c", IGNORE_NAME, "new.txt"])
            path = d + name
            what = rng.random()
            if what < 0.3:
                new.pop(path, None)                                   # deleted
            elif what < 0.5 and path in new:
                new[path] = (new[path][0], pygit2.GIT_FILEMODE_BLOB_EXECUTABLE)   # mode only
            elif what < 0.6:
                new[path] = (b"target", pygit2.GIT_FILEMODE_LINK)     # became a symlink
            else:
                new[path] = (os.urandom(8), pygit2.GIT_FILEMODE_BLOB)  # changed or added
        if not new:
            continue
        old_tree, new_tree = _tree(repo, files), _tree(repo, new)
        assert tree_sources(old_tree, new_tree) == _by_diff(old_tree, new_tree)
        files = new


def test_identical_trees_and_missing_sides_name_nothing(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    t = _tree(repo, {"a/.gitignore": (b"*", pygit2.GIT_FILEMODE_BLOB)})
    assert tree_sources(t, t) == [] and tree_sources(None, t) == [] and tree_sources(t, None) == []
