"""Restoring a checkpoint: plan per file, safety checkpoint, then minimal writes.

Only files that differ are rewritten (atomically: temp file + rename), files
absent from the target are removed in clean mode, and nothing the current
snapshot did not capture (ignored, too large, nested repositories) is ever
touched.  The safety checkpoint is the current state, so restoring it undoes
the restore exactly.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from . import faults
from .checkpoint import CheckpointMeta
from .diff import working_tree
from .errors import ChronosError
from .paths import delta_path

_UMASK = os.umask(0)
os.umask(_UMASK)

ACTIONS = ("restore", "create", "delete", "skip")


@dataclass
class PlanItem:
    path: str
    action: str
    reason: str | None = None
    blob: str | None = None          # target content (restore/create)
    mode: int | None = None          # target git file mode
    current_blob: str | None = None  # content now (restore/delete)

    def to_dict(self) -> dict:
        out = {"path": self.path, "action": self.action}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass
class _Change:
    status: str                      # added | deleted | modified
    path: str
    old_id: str | None = None
    new_id: str | None = None
    new_mode: int | None = None


_STATUS = {DeltaStatus.ADDED: "added", DeltaStatus.DELETED: "deleted"}


def _from_delta(delta, prefix: str = "") -> _Change:
    return _Change(_STATUS.get(delta.status, "modified"), prefix + delta_path(delta),
                   str(delta.old_file.id), str(delta.new_file.id), delta.new_file.mode)


def _entry(tree, rel: str):
    try:
        return tree[rel]
    except (KeyError, ValueError, TypeError, UnicodeError):
        return None


def _blobs_under(repo, tree_id, prefix: str):
    for e in repo[tree_id]:
        path = prefix + e.name
        if e.type_str == "tree":
            yield from _blobs_under(repo, e.id, path + "/")
        elif e.filemode != pygit2.GIT_FILEMODE_COMMIT:
            yield e, path


def _changes(repo, current, target, rels):
    """What differs between two trees, whole or only below `rels` (no full-tree diff then)."""
    # INCLUDE_TYPECHANGE: a file <-> symlink change is one "restore", not a delete plus an add
    # (the add would be skipped as "present on disk" after the delete removed it)
    if not rels:
        for delta in repo.diff(current, target, flags=DiffOption.INCLUDE_TYPECHANGE).deltas:
            yield _from_delta(delta)
        return
    for rel in dict.fromkeys(rels):
        a, b = _entry(current, rel), _entry(target, rel)
        a_tree = a is not None and a.type_str == "tree"
        b_tree = b is not None and b.type_str == "tree"
        if a_tree and b_tree:
            for delta in repo[a.id].diff_to_tree(repo[b.id], flags=DiffOption.INCLUDE_TYPECHANGE).deltas:
                yield _from_delta(delta, rel + "/")
            continue
        if a is not None and b is not None and not a_tree and not b_tree:
            if a.id != b.id or a.filemode != b.filemode:
                yield _Change("modified", rel, str(a.id), str(b.id), b.filemode)
            continue
        if a_tree:
            for e, path in _blobs_under(repo, a.id, rel + "/"):
                yield _Change("deleted", path, old_id=str(e.id))
        elif a is not None:
            yield _Change("deleted", rel, old_id=str(a.id))
        if b_tree:
            for e, path in _blobs_under(repo, b.id, rel + "/"):
                yield _Change("added", path, new_id=str(e.id), new_mode=e.filemode)
        elif b is not None:
            yield _Change("added", rel, new_id=str(b.id), new_mode=b.filemode)


def plan(ws, target_tree_id: str, current_tree_id: str, *, paths: list[str] | None = None,
         clean: bool = True) -> list[PlanItem]:
    repo = ws.store.repo()
    rels = [r for r in (ws.rel(p) for p in paths)] if paths else None
    current = repo[current_tree_id]
    items: list[PlanItem] = []
    seen: set[str] = set()
    for ch in _changes(repo, current, repo[target_tree_id], rels):
        path = ch.path
        if path in seen:                 # overlapping --path arguments
            continue
        seen.add(path)
        full = os.path.join(ws.root_bytes, os.fsencode(path))
        if ch.status == "added":
            nested = ws._nested_ancestor(path.split("/"))
            # a captured directory in the way is emptied by this plan's deletes, not "uncaptured"
            in_the_way = os.path.lexists(full) and not _is_captured_dir(current, path)
            if nested or in_the_way:
                items.append(PlanItem(path, "skip", reason=(
                    "inside a nested repository" if nested else
                    "present on disk but not captured now (ignored, too large or special); left untouched")))
            else:
                items.append(PlanItem(path, "create", blob=ch.new_id, mode=ch.new_mode))
        elif ch.status == "deleted":
            if clean:
                items.append(PlanItem(path, "delete", current_blob=ch.old_id))
            else:
                items.append(PlanItem(path, "skip", reason="not in the checkpoint; kept because clean is off",
                                      current_blob=ch.old_id))
        else:
            items.append(PlanItem(path, "restore", blob=ch.new_id, mode=ch.new_mode, current_blob=ch.old_id))
    return items


def restore(ws, spec: str, *, paths: list[str] | None = None, clean: bool = True,
            dry_run: bool = False, meta: CheckpointMeta | None = None, on_plan=None) -> dict:
    """Restore checkpoint `spec`. `on_plan(items, safety, target)` runs before any write."""
    target = ws.resolve(spec)
    if dry_run:
        items = plan(ws, target.tree_id, working_tree(ws), paths=paths, clean=clean)
        return _result(target, None, items, clean, dry_run=True)
    ws.root.mkdir(parents=True, exist_ok=True)
    with ws.store.writing(), ws.lock():
        safety_meta = meta or CheckpointMeta(description="")
        safety_meta.kind = "safety"
        safety_meta.description = safety_meta.description or f"safety checkpoint before restoring {target.id[:8]}"
        safety_meta.note = f"state before restoring {target.id}; restore this to undo"
        safety = ws.snapshot(safety_meta)
        items = plan(ws, target.tree_id, safety.tree_id, paths=paths, clean=clean)
        if on_plan is not None:
            on_plan(items, safety.checkpoint, target)
        _apply(ws, items)
    return _result(target, safety.checkpoint.id, items, clean, dry_run=False)


def _result(target, safety_id, items, clean, *, dry_run) -> dict:
    return {
        "restored_checkpoint": target.id,
        "safety_checkpoint": safety_id,
        "dry_run": dry_run,
        "clean": clean,
        "files_changed": sum(1 for i in items if i.action in ("restore", "create")),
        "untracked_removed": sum(1 for i in items if i.action == "delete"),
        "skipped": sum(1 for i in items if i.action == "skip"),
        "plan": [i.to_dict() for i in items],
    }


def _is_captured_dir(tree, path: str) -> bool:
    try:
        return tree[path].type_str == "tree"
    except (KeyError, ValueError, TypeError, UnicodeError):
        return False


def _is_ignore_rules(path: str) -> bool:
    return path == ".gitignore" or path.endswith("/.gitignore")


def _apply(ws, items: list[PlanItem]) -> None:
    repo = ws._open_repo()
    root = ws.root_bytes
    done: list[PlanItem] = []
    deletes = sorted((i for i in items if i.action == "delete"), key=lambda i: -i.path.count("/"))
    writes = [i for i in items if i.action in ("restore", "create")]

    def delete(it: PlanItem) -> None:
        full = os.path.join(root, os.fsencode(it.path))
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            it.action, it.reason = "skip", "became a directory; left untouched"
            return
        _prune_empty_parents(root, full)
        done.append(it)
        faults.hit("mid_restore")

    def write(it: PlanItem, *, final: bool = True) -> bool:
        full = os.path.join(root, os.fsencode(it.path))
        try:
            _write_blob(repo, full, it.blob, it.mode)
        except _Conflict as exc:
            if final:
                it.action, it.reason = "skip", str(exc)
            return False
        done.append(it)
        faults.hit("mid_restore")
        return True

    # .gitignore files first: whether a file absent from the target is ignored (kept) or
    # untracked (deleted in clean mode) is decided by the rules being restored, not by the
    # ones being replaced (else undoing a restore that removed a .gitignore deletes the
    # files it ignores)
    rules = [i for i in deletes + writes if _is_ignore_rules(i.path)]
    for it in rules:
        if it.action == "delete":
            delete(it)
            deletes.remove(it)
        elif write(it, final=False):
            writes.remove(it)
    for it in deletes:
        if rules and repo.path_is_ignored(it.path):
            it.action, it.reason = "skip", "ignored by the restored .gitignore rules; left untouched"
            continue
        delete(it)
    for it in writes:
        write(it)
    index = repo.index
    for it in done:
        try:
            if it.action == "delete":
                if it.path in index:
                    index.remove(it.path)
            else:
                index.add(it.path)
        except (pygit2.GitError, OSError):
            pass                        # the next snapshot re-hashes it
    ws._index_unsaved = True            # like a declared snapshot: the next walk writes the cache file


class _Conflict(ChronosError):
    pass


def _prune_empty_parents(root: bytes, full: bytes) -> None:
    parent = os.path.dirname(full)
    while parent != root and parent.startswith(root + b"/"):
        try:
            os.rmdir(parent)
        except OSError:
            return
        parent = os.path.dirname(parent)


def _make_parents(root: bytes, full: bytes) -> None:
    parent = os.path.dirname(full)
    probe = parent
    while probe != root and probe.startswith(root + b"/"):
        if os.path.lexists(probe) and not os.path.isdir(probe):
            raise _Conflict(f"{os.fsdecode(os.path.relpath(probe, root))} is a file where a directory is needed")
        probe = os.path.dirname(probe)
    os.makedirs(parent, exist_ok=True)


def _write_blob(repo, full: bytes, blob_id: str, mode: int) -> None:
    root = os.fsencode(repo.workdir).rstrip(b"/")
    _make_parents(root, full)
    data = repo[blob_id].data
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        try:
            os.rmdir(full)
        except OSError:
            raise _Conflict("a non-empty directory is in the way") from None
        st = None
    tmp = os.path.join(os.path.dirname(full), b"." + os.path.basename(full) + b".chronos-restore-%d" % os.getpid())
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    if mode == pygit2.GIT_FILEMODE_LINK:
        os.symlink(data, tmp)
    else:
        executable = mode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
        if st is not None and stat.S_ISREG(st.st_mode):
            perm = stat.S_IMODE(st.st_mode)
            perm = perm | ((perm & 0o444) >> 2) if executable else perm & ~0o111
        else:
            perm = (0o777 if executable else 0o666) & ~_UMASK
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, perm)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
        os.chmod(tmp, perm)
    os.replace(tmp, full)
