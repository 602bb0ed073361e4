"""Diffs between checkpoints, or between a checkpoint and the working tree."""
from __future__ import annotations

from pygit2.enums import DeltaStatus, DiffFind, DiffOption

from .checkpoint import CheckpointMeta
from .errors import CheckpointNotFound
from .paths import delta_path, within

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


def working_tree(ws) -> str:
    """The current workspace as a tree id (refreshes the stat cache, commits nothing)."""
    return ws.snapshot(CheckpointMeta(description="working tree"), commit=False).tree_id


def diff(ws, from_spec: str | None = None, to_spec: str | None = None, *,
         patch: bool = True, max_patch_chars: int = DEFAULT_MAX_PATCH_CHARS,
         paths: list[str] | None = None) -> dict:
    """FROM defaults to the newest checkpoint, TO to the working tree."""
    repo = ws.store.repo()
    if from_spec is None:
        tip = ws.tip()
        if tip is None:
            raise CheckpointNotFound(f"workspace {ws.root} has no checkpoints to diff against")
        a = tip
    else:
        a = ws.resolve(from_spec)
    if to_spec is None:
        b_tree = repo[working_tree(ws)]
        b_label = "working tree"
    else:
        b = ws.resolve(to_spec)
        b_tree = repo[b.tree_id]
        b_label = b.id
    d = repo.diff(repo[a.tree_id], b_tree, context_lines=3, flags=DiffOption.INCLUDE_TYPECHANGE)
    d.find_similar(flags=DiffFind.FIND_RENAMES)
    rels = [ws.rel(p) for p in paths] if paths else None
    files = []
    chunks = []
    total = 0
    truncated = False
    for p in d:
        delta = p.delta
        path = delta_path(delta)
        if rels and not (within(path, rels) or within(delta.old_file.path, rels)):
            continue
        item = {"path": path, "status": STATUS.get(delta.status, "modified")}
        if delta.status == DeltaStatus.RENAMED:
            item["old_path"] = delta.old_file.path
            item["similarity"] = delta.similarity
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
