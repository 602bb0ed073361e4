"""Checkpoint trees checked the way `git fsck` checks tree entries.

A commit on a snapshot ref can be written by anyone who can write the store
(the agent's own shell included).  A restore refuses any entry it would write
with a name git's fsck rejects (engine.restore); this walk finds them all,
for `journal verify`, so a crafted checkpoint is reported before anyone tries
to restore it.  Trees are immutable, so each is read once per walk.
"""
from __future__ import annotations

import os

import pygit2

from .codec import display
from .confine import bad_name

MAX_PROBLEMS = 50


def check_checkpoints(store) -> dict:
    """{"checkpoints": N, "trees": N, "problems": [...]} over every workspace's chain."""
    repo = store.repo()
    seen: set = set()
    problems: list[str] = []
    commits = 0
    for ws in store.workspaces():
        ref = repo.references.get(ws.ref)
        cid = ref.target if ref is not None else None
        while cid is not None:
            try:
                commit = repo[cid]
            except KeyError:
                break                        # below the retention cut
            commits += 1
            for path, why in _walk(repo, commit.tree_id, "", seen):
                if len(problems) < MAX_PROBLEMS:
                    problems.append(f"checkpoint {str(commit.id)[:12]} of {display(os.fsdecode(ws.root_bytes))}: "
                                    f"entry {display(path)!r} is {why}")
            cid = commit.parent_ids[0] if commit.parent_ids else None
    return {"checkpoints": commits, "trees": len(seen), "problems": problems}


def _walk(repo, tree_id, prefix: str, seen: set):
    stack = [(tree_id, prefix)]
    while stack:
        tid, pre = stack.pop()
        if tid in seen:
            continue
        seen.add(tid)
        try:
            tree = repo[tid]
        except KeyError:
            yield pre or ".", "a missing tree object"
            continue
        previous = None
        for e in tree:
            raw = os.fsencode(e.name)
            why = bad_name(raw)
            if why:
                yield pre + e.name, why
                continue
            key = raw + b"/" if e.filemode == pygit2.GIT_FILEMODE_TREE else raw
            if previous is not None and key <= previous[0]:
                yield pre + e.name, ("a duplicate entry" if raw == previous[1] else
                                     "out of git's order (entries must be sorted)")
            previous = (key, raw)
            if e.filemode == pygit2.GIT_FILEMODE_TREE:
                stack.append((e.id, f"{pre}{e.name}/"))
