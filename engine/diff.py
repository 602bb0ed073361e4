"""Diffs between checkpoints, or between a checkpoint and the working tree.

A diff against the working tree writes nothing (it works on a full disk and
a read-only store): it composes the checkpoint-to-index and index-to-files
diffs the way `git diff <commit>` does, and leaves out what a snapshot would
not capture (nested repositories, files above the size cap).
"""
from __future__ import annotations

import os
import stat

import pygit2
from pygit2.enums import DeltaStatus, DiffFind, DiffOption

from . import fifo_guard
from .checkpoint import CheckpointMeta
from .errors import CheckpointNotFound, PathError
from .ignore import is_ignored
from .paths import delta_path, within
from .restore_plan import named, require_known, tree_entry
from .scan import align

STATUS = {
    DeltaStatus.ADDED: "added",
    DeltaStatus.DELETED: "deleted",
    DeltaStatus.MODIFIED: "modified",
    DeltaStatus.RENAMED: "renamed",
    DeltaStatus.COPIED: "added",
    DeltaStatus.TYPECHANGE: "modified",
    DeltaStatus.UNTRACKED: "added",
}
DEFAULT_MAX_PATCH_CHARS = 200_000


WORKDIR_FLAGS = (DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
                 | DiffOption.INCLUDE_TYPECHANGE | DiffOption.SHOW_UNTRACKED_CONTENT)


def working_tree(ws) -> str:
    """The current workspace as a tree id (refreshes the stat cache, commits nothing)."""
    return ws.snapshot(CheckpointMeta(description="working tree"), commit=False).tree_id


def _refuse_ignored(ws, tree, rels: list[str]) -> None:
    """PathError for a path only on disk that the workspace's rules ignore: it is in no
    checkpoint, and an empty diff would read as "unchanged"."""
    fresh = [rel for rel in rels if rel and tree_entry(tree, rel) is None]
    if not fresh:
        return
    wrepo = pygit2.Repository(str(ws.gitdir))
    ignored = [rel for rel in fresh if is_ignored(wrepo, rel) or is_ignored(wrepo, rel.rstrip("/") + "/")]
    if ignored:
        raise PathError(f"{named(ignored)} ignored by the workspace's rules, so never checkpointed: "
                        "there is nothing to diff it against")


def _to_workdir(ws, tree):
    """(diff, paths to leave out): `tree` against the files, through the stat cache."""
    try:
        ws.flush_index()       # this process's newer stat cache first (a declared snapshot's)
    except (OSError, pygit2.GitError):
        pass                   # a read-only store: the older cache file only costs re-hashing
    repo = pygit2.Repository(str(ws.gitdir))     # a private handle: no lock, nothing written
    try:
        index = repo.index
    except pygit2.GitError as exc:
        if not ws.drop_damaged_index(exc):
            raise
        repo = pygit2.Repository(str(ws.gitdir))
        index = repo.index
    align(index, tree)     # the cache file may be older than `tree`, missing or dropped
    d = index.diff_to_workdir(flags=WORKDIR_FLAGS, context_lines=3)
    cap = ws.store.config.max_file_bytes
    leave_out = set()
    for delta in d.deltas:
        path = delta.new_file.path
        if path.endswith("/"):                   # an untracked nested repository
            leave_out.add(path)
            continue
        if delta.status in (DeltaStatus.UNTRACKED, DeltaStatus.MODIFIED, DeltaStatus.ADDED,
                            DeltaStatus.TYPECHANGE):
            try:
                st = os.lstat(os.path.join(ws.root_bytes, os.fsencode(path)))
            except OSError:
                continue
            if (cap and stat.S_ISREG(st.st_mode) and st.st_size > cap) or \
                    ws.nested_ancestor(path.split("/")):
                leave_out.add(path)
    return d, leave_out


def diff(ws, from_spec: str | None = None, to_spec: str | None = None, *,
         patch: bool = True, max_patch_chars: int = DEFAULT_MAX_PATCH_CHARS,
         paths: list[str] | None = None) -> dict:
    """FROM defaults to the newest checkpoint, TO to the working tree."""
    with fifo_guard.watching(ws.root_bytes):      # libgit2 reads work-tree files (.gitignore too)
        return _diff(ws, from_spec, to_spec, patch=patch, max_patch_chars=max_patch_chars, paths=paths)


def _diff(ws, from_spec, to_spec, *, patch, max_patch_chars, paths) -> dict:
    repo = ws.store.repo()
    if from_spec is None:
        tip = ws.tip()
        if tip is None:
            raise CheckpointNotFound(f"workspace {ws.root} has no checkpoints to diff against")
        a = tip
    else:
        a = ws.resolve(from_spec)
    leave_out: set = set()
    rels = [ws.rel(p) for p in paths] if paths else None
    skipped = {s["path"] for s in a.meta.skipped or ()}
    if to_spec is None:
        if rels:
            require_known(ws, rels, [repo[a.tree_id]], f"checkpoint {a.id[:12]} nor the workspace",
                          on_disk=True, skipped=skipped)
            _refuse_ignored(ws, repo[a.tree_id], rels)
        d, leave_out = _to_workdir(ws, repo[a.tree_id])
        b_label = "working tree"
    else:
        b = ws.resolve(to_spec)
        if rels:
            require_known(ws, rels, [repo[a.tree_id], repo[b.tree_id]],
                          f"checkpoint {a.id[:12]} nor checkpoint {b.id[:12]}", on_disk=False,
                          skipped=skipped | {s["path"] for s in b.meta.skipped or ()})
        d = repo.diff(repo[a.tree_id], repo[b.tree_id], context_lines=3,
                      flags=DiffOption.INCLUDE_TYPECHANGE)
        b_label = b.id
    d.find_similar(flags=DiffFind.FIND_RENAMES | DiffFind.FIND_FOR_UNTRACKED)
    files = []
    chunks = []
    total = 0
    truncated = False
    for k, delta in enumerate(d.deltas):
        path = delta_path(delta)
        if path in leave_out or delta.status == DeltaStatus.UNMODIFIED:
            continue
        if rels and not (within(path, rels) or within(delta.old_file.path, rels)):
            continue
        p = d[k]
        delta = p.delta                 # loaded: its binary flag is known now
        item: dict = {"path": path, "status": STATUS.get(delta.status, "modified")}
        if delta.status == DeltaStatus.RENAMED:
            item["old_path"] = delta.old_file.path
            item["similarity"] = delta.similarity
        if delta.status in (DeltaStatus.MODIFIED, DeltaStatus.RENAMED) and delta.old_file.mode != delta.new_file.mode:
            item["mode"] = f"{delta.old_file.mode:o} -> {delta.new_file.mode:o}"    # e.g. the executable bit
        if delta.is_binary:
            item["binary"] = True
            item["additions"] = item["deletions"] = 0
        else:
            _, adds, dels = p.line_stats
            item["additions"], item["deletions"] = adds, dels
        files.append(item)
        if patch and not truncated:
            text = p.text or ""
            if total + len(text) > max_patch_chars:
                truncated = True
            else:
                chunks.append(text)
                total += len(text)
    out = {
        "from": a.id, "to": b_label, "files": files,
        "stats": {"files": len(files),
                  "additions": sum(f["additions"] for f in files),
                  "deletions": sum(f["deletions"] for f in files)},
    }
    if patch:
        out["patch"] = "".join(chunks)
        if truncated:
            out["patch_truncated"] = True
    return out
