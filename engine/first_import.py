"""A workspace's first snapshot as one bulk import (engine/bulk.py): one pack and a complete
index, written under a temp name and put in place whole; the caller checks the index against
libgit2's own tree before it trusts it (never our own writer blindly)."""
from __future__ import annotations

import os
from pathlib import Path

import pygit2

TMP_NAME = "index.chronos-bulk"


def run(repo, gitdir: Path, root_bytes: bytes, store, progress):
    """The import, its index in place as the gitdir's `index`; None when it failed (then
    nothing was replaced and a walk does the first snapshot)."""
    from .bulk import import_tree
    tmp_index = str(gitdir / TMP_NAME)
    try:
        res = import_tree(repo, root_bytes, tmp_index, str(store.root / "objects" / "pack"),
                          cap=store.config.max_file_bytes, durable=store.config.durable_snapshots,
                          progress=progress, use_git=store.config.seed_from_git)
    except (OSError, pygit2.GitError, ValueError):
        try:
            os.unlink(tmp_index)
        except FileNotFoundError:
            pass
        return None
    os.replace(tmp_index, gitdir / "index")
    return res


def fold(report, res) -> None:
    """What the import found (skipped files, permission bits, nested repositories, bytes
    added) into the snapshot's scan report."""
    report.skipped.extend(res.report.skipped)
    report.perms.update(res.report.perms)
    for d in res.report.nested_repos:
        report.nested(d)
    report.added_bytes += res.bytes
