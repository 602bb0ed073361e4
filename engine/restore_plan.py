"""A restore's plan: what restoring a checkpoint over a tree would do, path by path, and
the digest a plan token binds.

Planning writes nothing.  It refuses the whole restore when the target holds a name
git's fsck rejects (a crafted tree never reaches the disk), and it keeps (`keep`) each
path whose bytes on disk are not the ones the scan captured, unless the caller forces
it, so the safety checkpoint really holds everything the restore replaces
(engine/restore.py carries the plan out).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from .checkpoint import Checkpoint
from .codec import canonical, display
from .confine import ABSENT, Confined, signature, split
from .errors import PathError, UnsafePath
from .paths import delta_path

GITLINK = pygit2.GIT_FILEMODE_COMMIT
NOT_CAPTURED = ("not captured by the safety checkpoint (it changed after the scan or could not be read); "
                "left untouched (force to overwrite)")
NOT_IN_SAFETY = ("not captured by the safety checkpoint (ignored, too large or special now); "
                 "left untouched (force to overwrite)")


@dataclass
class RestoreStep:
    path: str
    action: str                      # restore | create | delete | skip | keep | failed | conflict
    reason: str | None = None
    blob: str | None = None          # target content (restore/create)
    mode: int | None = None          # target git file mode
    current_blob: str | None = None  # content now (restore/delete)
    declared: bool = False           # part of the journaled intent (its outcome is read back)
    expect: object = None            # confine.signature of the path when planned (None: unchecked)
    bound: tuple = ()                # (id, mode) now, (id, mode) in the target (None: absent): see digest()
    agent: str | None = None         # a conflict: what the agent's call did
    person: str | None = None        # a conflict: what changed the path afterwards

    def to_dict(self) -> dict:
        out = {"path": self.path, "action": self.action}
        for key in ("reason", "agent", "person"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    @property
    def writes(self) -> bool:
        return self.action in ("restore", "create", "delete")


@dataclass
class _Change:
    status: str                      # added | deleted | modified
    path: str
    old_id: str | None = None
    new_id: str | None = None
    new_mode: int | None = None
    old_mode: int | None = None


_STATUS = {DeltaStatus.ADDED: "added", DeltaStatus.DELETED: "deleted"}


def _from_delta(delta, prefix: str = "") -> _Change:
    return _Change(_STATUS.get(delta.status, "modified"), prefix + delta_path(delta),
                   str(delta.old_file.id), str(delta.new_file.id), delta.new_file.mode, delta.old_file.mode)


def tree_entry(tree, rel: str):
    """The entry at `rel` in `tree`, or None (also for a name libgit2 cannot take)."""
    try:
        return tree[rel]
    except (KeyError, ValueError, TypeError, UnicodeError):
        return None


def require_known(ws, rels, trees: list, where: str, *, on_disk: bool, skipped=()) -> None:
    """PathError naming each of `rels` that is in none of `trees` (nor in the work tree when
    `on_disk`) and was not left out of a checkpoint on purpose (`skipped`): a person's typo
    would otherwise read as "nothing changed" (restore's and diff's --path)."""
    missing = [rel for rel in rels if rel and rel not in skipped and all(tree_entry(t, rel) is None for t in trees)
               and not (on_disk and os.path.lexists(os.path.join(ws.root_bytes, os.fsencode(rel))))]
    if missing:
        raise PathError(f"{named(missing)} in neither {where} (paths are relative to the workspace, "
                        "ignored files are never checkpointed; check the spelling)")


def named(rels: list[str]) -> str:
    """The subject of a refusal: "'a', 'b' and more are" (at most ten named)."""
    return (", ".join(repr(display(r)) for r in rels[:10]) + (" and more" if len(rels) > 10 else "")
            + (" is" if len(rels) == 1 else " are"))


def _blobs_under(repo, tree_id, prefix: str):
    for e in repo[tree_id]:
        path = prefix + e.name
        if e.type_str == "tree":
            yield from _blobs_under(repo, e.id, path + "/")
        else:
            yield e, path


def _changes(repo, current, target, rels):
    """What differs between two trees, whole or only below `rels` (no full-tree diff then)."""
    # INCLUDE_TYPECHANGE: a file <-> symlink change is one "restore", not a delete plus an add
    if not rels:
        for delta in repo.diff(current, target, flags=DiffOption.INCLUDE_TYPECHANGE).deltas:
            yield _from_delta(delta)
        return
    for rel in dict.fromkeys(rels):
        a, b = tree_entry(current, rel), tree_entry(target, rel)
        a_tree = a is not None and a.type_str == "tree"
        b_tree = b is not None and b.type_str == "tree"
        if a_tree and b_tree:
            for delta in repo[a.id].diff_to_tree(repo[b.id], flags=DiffOption.INCLUDE_TYPECHANGE).deltas:
                yield _from_delta(delta, rel + "/")
            continue
        if a is not None and b is not None and not a_tree and not b_tree:
            if a.id != b.id or a.filemode != b.filemode:
                yield _Change("modified", rel, str(a.id), str(b.id), b.filemode, a.filemode)
            continue
        if a_tree:
            for e, path in _blobs_under(repo, a.id, rel + "/"):
                yield _Change("deleted", path, old_id=str(e.id), old_mode=e.filemode)
        elif a is not None:
            yield _Change("deleted", rel, old_id=str(a.id), old_mode=a.filemode)
        if b_tree:
            for e, path in _blobs_under(repo, b.id, rel + "/"):
                yield _Change("added", path, new_id=str(e.id), new_mode=e.filemode)
        elif b is not None:
            yield _Change("added", rel, new_id=str(b.id), new_mode=b.filemode)


def _unsafe(tree, path: str, blob_id: str) -> str | None:
    """Why the target tree's entry at `path` must not be written, or None."""
    try:
        split(path)
    except UnsafePath as exc:
        return str(exc)
    e = tree_entry(tree, path)
    if e is None or str(e.id) != blob_id:
        # the path the diff reported does not lead to that entry: a name holding '/', or
        # duplicate or unsorted entries (git's fsck rejects all three)
        return (f"refusing the path {display(path)!r}: the checkpoint's tree does not lead there by "
                "name (a name holding '/', or duplicate or unsorted entries)")
    return None


def _is_tree(tree, path: str) -> bool:
    e = tree_entry(tree, path)
    return e is not None and e.type_str == "tree"


def plan(ws, target: Checkpoint, current_tree_id: str, *, rels: list[str] | None = None,
         clean: bool = True, force: bool = False, paths_must_exist: bool = False) -> list[RestoreStep]:
    """What a restore of `target` over the tree `current_tree_id` would do, path by path.

    Raises UnsafePath (naming every offending entry) when the target holds
    names that must never be written; PathError, with `paths_must_exist` (a
    person's --path), for a path in neither tree, which would read as "nothing
    to change".  A recovery's rollback passes paths that may be in neither."""
    repo = ws.store.repo()
    current, target_tree = repo[current_tree_id], repo[target.tree_id]
    uncaptured = {s["path"]: s["reason"] for s in target.meta.skipped or ()}
    if paths_must_exist:                 # on disk too: e.g. not captured
        require_known(ws, rels or (), [target_tree, current], f"checkpoint {target.id[:12]} nor the workspace",
                      on_disk=True, skipped=uncaptured)
    changes = list(_changes(repo, current, target_tree, rels))
    unsafe = [why for ch in changes if ch.status != "deleted"
              for why in [_unsafe(target_tree, ch.path, ch.new_id)] if why]
    if unsafe:
        raise UnsafePath(f"checkpoint {target.id[:12]} holds entries that git's fsck rejects, so it is "
                         f"not restored: " + "; ".join(unsafe[:20])
                         + (f" (and {len(unsafe) - 20} more)" if len(unsafe) > 20 else ""))
    deleting = {ch.path for ch in changes if ch.status == "deleted"} if clean else set()
    items: list[RestoreStep] = []
    seen: set[str] = set()
    with Confined(ws.root_bytes) as disk:
        for ch in changes:
            if ch.path in seen:          # overlapping --path arguments
                continue
            seen.add(ch.path)
            items.append(_decide(ws, disk, ch, current, uncaptured, deleting, clean, force))
    return items


def _decide(ws, disk: Confined, ch: _Change, current, uncaptured: dict, deleting: set,
            clean: bool, force: bool) -> RestoreStep:
    item = _decide_item(ws, disk, ch, current, uncaptured, deleting, clean, force)
    item.bound = (None if ch.status == "added" else (ch.old_id, ch.old_mode),
                  None if ch.status == "deleted" else (ch.new_id, ch.new_mode))
    return item


def digest(items: list[RestoreStep]) -> str:
    """What a plan token binds: every path, its action and the content it holds now and will
    hold.  A workspace that changed after a dry run plans differently, so its token no longer
    fits (a preview showing no deletions must not confirm twenty)."""
    return hashlib.sha256(canonical([[i.path, i.action, *i.bound] for i in items]).encode()).hexdigest()


def _decide_item(ws, disk: Confined, ch: _Change, current, uncaptured: dict, deleting: set,
                 clean: bool, force: bool) -> RestoreStep:
    path = ch.path
    if ch.status != "deleted" and ch.new_mode == GITLINK:
        return RestoreStep(path, "skip", reason="a submodule entry (not restored)")
    if ws.nested_ancestor(path.split("/")):
        return RestoreStep(path, "skip", reason="inside a nested repository")
    now = disk.entry(path)
    if now.kind == "unreadable":
        return RestoreStep(path, "keep", reason=f"{now.why}; left untouched", current_blob=ch.old_id)
    item = _decide_kind(ws, disk, ch, now, current, uncaptured, deleting, clean, force)
    if item.writes and not force:
        item.expect = signature(now.st) if now.st is not None else ABSENT
    return item


def _decide_kind(ws, disk: Confined, ch: _Change, now, current, uncaptured: dict, deleting: set,
                 clean: bool, force: bool) -> RestoreStep:
    path = ch.path
    if now.kind == "blocked":
        blocker = now.blocker
        if blocker not in deleting:
            return RestoreStep(path, "skip", current_blob=ch.old_id,
                            reason=f"{now.why}; left untouched" + (
                                "" if clean or blocker is None or tree_entry(current, blocker) is None
                                else " (a clean restore replaces it)"))
    if ch.status == "deleted":
        if path in uncaptured:
            return RestoreStep(path, "skip", current_blob=ch.old_id,
                            reason=f"not captured by the checkpoint ({uncaptured[path]}); left untouched")
        if not clean:
            return RestoreStep(path, "skip", reason="not in the checkpoint; kept because clean is off",
                            current_blob=ch.old_id)
        if now.kind == "absent":
            return RestoreStep(path, "skip", reason="already absent", current_blob=ch.old_id)
        if not force and disk.content_id(path) != ch.old_id:
            return RestoreStep(path, "keep", reason=NOT_CAPTURED, current_blob=ch.old_id)
        return RestoreStep(path, "delete", current_blob=ch.old_id)
    if ch.status == "added":
        # a captured directory in the way is emptied by this plan's deletes
        if now.kind not in ("absent", "blocked") and not _is_tree(current, path) and not force:
            return RestoreStep(path, "keep", reason=NOT_IN_SAFETY)
        return RestoreStep(path, "create", blob=ch.new_id, mode=ch.new_mode)
    if now.kind != "absent" and not force and disk.content_id(path) != ch.old_id:
        return RestoreStep(path, "keep", reason=NOT_CAPTURED, current_blob=ch.old_id)
    return RestoreStep(path, "restore", blob=ch.new_id, mode=ch.new_mode, current_blob=ch.old_id)
