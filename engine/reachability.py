"""What the store must keep: the roots (every ref, each workspace's HEAD and index tree, the
checkpoints the journal names) and every object reachable from them.

Compaction packs what this walk reaches and deletes the rest; consolidation copies out of
a first import's packs only what it reaches.  libgit2 honours the store's `shallow` file
(the retention cut), so the walk stops at the boundaries retention made roots.
"""
from __future__ import annotations

import pygit2


def roots(store, keep: set[str] | None = None) -> tuple[list[pygit2.Oid], list[pygit2.Oid]]:
    """(commit roots, tree roots): every ref, each workspace HEAD and index tree, and the
    checkpoints in `keep` (the journal names them) that are in the store."""
    repo = store.repo()
    commits, trees = [], []
    for name in repo.references:
        try:
            obj = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
        commits.append(obj.id)
    for ws in store.workspaces():
        if not (ws.gitdir / "commondir").exists():
            continue
        try:
            wrepo = pygit2.Repository(str(ws.gitdir))
        except pygit2.GitError:
            continue
        if not wrepo.head_is_unborn:
            commits.append(wrepo.head.target)
        if (ws.gitdir / "index").exists():
            try:
                trees.append(wrepo.index.write_tree())
            except pygit2.GitError:
                pass        # a damaged stat cache holds nothing a checkpoint lacks; the next walk drops it
    for cid in sorted(keep or ()):
        try:
            named = repo[cid]
        except (KeyError, ValueError, pygit2.GitError):
            continue
        if isinstance(named, pygit2.Commit):
            commits.append(named.id)
    return commits, trees


def walk(repo, commits, trees, seen: set, names: dict | None = None) -> list[pygit2.Oid]:
    """Objects reachable from the roots and not yet in `seen` (which is updated).  `names`,
    if given, gets the entry name each blob and tree was first reached by (for packing)."""
    new: list[pygit2.Oid] = []
    stack_c = list(commits)
    stack_t = list(trees)
    while stack_c:
        cid = stack_c.pop()
        if cid in seen:
            continue
        seen.add(cid)
        new.append(cid)
        c = repo[cid]
        stack_t.append(c.tree_id)
        stack_c.extend(c.parent_ids)        # libgit2 honours `shallow`: boundaries have none
        while stack_t:
            tid = stack_t.pop()
            if tid in seen:
                continue
            seen.add(tid)
            new.append(tid)
            for entry in repo[tid]:
                if entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
                    continue                # gitlink: not ours to keep
                if entry.id in seen:
                    continue
                if names is not None and entry.id not in names:
                    names[entry.id] = entry.raw_name
                if entry.type_str == "tree":
                    stack_t.append(entry.id)
                else:
                    seen.add(entry.id)
                    new.append(entry.id)
    return new
