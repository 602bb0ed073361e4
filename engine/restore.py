"""Restoring a checkpoint so that nothing escapes, nothing is lost and nothing widens.

Order of work (a refused restore changes nothing, its history included):

1. resolve the checkpoint and every `paths` argument;
2. scan the workspace: its tree is written, but it is not a checkpoint yet;
3. plan what differs between that tree and the target, and refuse the whole
   restore if the plan would write any name git's fsck rejects (`..`, `.git`,
   a name holding `/`, ...): a crafted tree never reaches the disk;
4. check each path the plan overwrites or deletes against what the scan
   captured: bytes that are not in the scan (changed since, unreadable) are
   kept (`keep`) unless the caller forces it, so the safety checkpoint really
   holds everything the restore replaces;
5. `approve`: the caller may refuse the plan (one that differs from the
   dry run a person confirmed; nothing is committed or written then), else
   commit the scan as the safety checkpoint (restoring it undoes this);
6. `on_plan`: the caller's durable intent (the journal);
7. apply through `confine.Confined` (no symlink followed, nothing outside the
   root, no `.git`): a path that cannot be written or deleted is reported as
   `failed` and the rest is still restored;
8. evidence: every path is read back and compared with its pre- and
   post-image, so the outcome is known, not assumed.

Files get the permission bits the checkpoint recorded (engine.perms); a foreign
checkpoint's (off this workspace's chain: fetched, or off every chain) go through
the umask.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from . import faults, inflight, perms
from .checkpoint import Checkpoint, CheckpointMeta
from .confine import ChangedMeanwhile, Confined, PathBlocked, split
from .diff import working_tree
from .errors import ChronosError, WorkspaceRefused
from .ignore import is_ignored
from .paths import same
from .restore_plan import RestoreStep, digest, plan

# digest: the plan token's, as service/timemachine.py reads it
__all__ = ["Merge", "MergeTarget", "Prepared", "RestoreStep", "apply", "digest", "evidence", "plan", "prepare",
           "prepare_merge", "preview", "preview_of", "previewed", "previewed_merge", "restore"]

LINK = pygit2.GIT_FILEMODE_LINK
EXEC = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE


@dataclass
class Prepared:
    """A validated restore whose safety checkpoint exists and nothing is written yet."""
    target: Checkpoint
    safety: Checkpoint
    items: list[RestoreStep]
    clean: bool
    foreign: bool = True             # not on this workspace's chain: its permission record is masked


def _target(ws, spec: str, foreign_ok: bool) -> tuple[Checkpoint, bool]:
    """The checkpoint to restore, and whether it is foreign (off this workspace's chain).
    A foreign one (fetched from a remote, or dropped from another workspace's by retention)
    would put another tree over this folder's own files: it goes only into a new or empty
    folder, unless the caller knows it is this workspace's (a recovery's rollback to the
    pre-checkpoint its journal names)."""
    target = ws.resolve(spec)
    foreign = not ws.on_chain(target.id)
    if foreign_ok or not foreign:
        return target, foreign
    try:
        crowded = bool(os.listdir(ws.root_bytes))
    except FileNotFoundError:
        crowded = False
    if crowded:
        raise WorkspaceRefused(
            f"checkpoint {target.id[:12]} is not one of {ws.root}'s checkpoints (fetched from a remote, "
            "or dropped from another workspace's history): it is restored only into a new or empty "
            "folder, so that nothing of this one is replaced (`--workspace NEW_DIR`); nothing was changed")
    return target, foreign


def preview(ws, spec: str, *, paths: list[str] | None = None, clean: bool = True,
            force: bool = False, paths_must_exist: bool = False, foreign_ok: bool = False) -> dict:
    """A dry run: the plan against the working tree, nothing committed or written."""
    return previewed(ws, spec, paths=paths, clean=clean, force=force, paths_must_exist=paths_must_exist,
                     foreign_ok=foreign_ok)[0]


def previewed(ws, spec: str, *, paths: list[str] | None = None, clean: bool = True, force: bool = False,
              paths_must_exist: bool = False, foreign_ok: bool = False) -> tuple[dict, list[RestoreStep]]:
    """`preview`, with the plan's items (for `digest`)."""
    target, _ = _target(ws, spec, foreign_ok)
    rels = _rels(ws, paths)
    items = plan(ws, target, working_tree(ws), rels=rels, clean=clean, force=force,
                 paths_must_exist=paths_must_exist)
    return preview_of(target, items, clean), items


def preview_of(target: Checkpoint, items: list[RestoreStep], clean: bool) -> dict:
    """A plan as a dry run's result."""
    return _result(target, None, items, clean, dry_run=True)


@dataclass
class MergeTarget:
    """What a merged restore puts in place (engine/agent_merge.py computed it over the tree
    the workspace has now): `target`, a commit of the merged tree (off every chain), and the
    paths left as they are, each a `conflict` step saying what each side did."""
    target: Checkpoint
    conflicts: list[RestoreStep]


Merge = Callable[[str], MergeTarget]      # the workspace's tree now -> what to put in place


def previewed_merge(ws, merge: Merge, *, force: bool = False,
                    paths: list[str] | None = None) -> tuple[dict, list[RestoreStep]]:
    """A merged restore's dry run: its plan against the working tree, nothing written.
    `paths`: the only ones the merge can touch (read from disk; the rest as last checkpointed)."""
    now = (working_tree(ws) if paths is None
           else ws.snapshot(CheckpointMeta(description="working tree"), paths=paths, commit=False).tree_id)
    mt = merge(now)
    items = plan(ws, mt.target, now, rels=_rels(ws, paths), clean=True, force=force) + mt.conflicts
    return preview_of(mt.target, items, True), items


def prepare_merge(ws, merge: Merge, *, force: bool = False, meta: CheckpointMeta | None = None,
                  approve: Callable[[Checkpoint, list[RestoreStep]], None] | None = None,
                  paths: list[str] | None = None) -> Prepared:
    """`prepare` for a target computed from the workspace as scanned (an agent-only restore,
    a revert, an undo): the merge runs over exactly the tree the safety checkpoint commits, so
    nothing changed between the two can be overwritten unseen.  `paths`: the only paths the
    merge can touch; only they are read from disk (a one-file revert in a large tree does not
    walk it).  The caller holds `ws.exclusive()` until `apply` returns."""
    ws.root.mkdir(parents=True, exist_ok=True)
    safety_meta = meta or CheckpointMeta(description="")
    safety_meta.kind = safety_meta.role = "safety"
    scan = ws.snapshot(safety_meta, paths=paths, commit=False)
    mt = merge(scan.tree_id)
    safety_meta.description = safety_meta.description or "safety checkpoint before a time-machine operation"
    safety_meta.note = "state before it; restore this to undo"
    items = plan(ws, mt.target, scan.tree_id, rels=_rels(ws, paths), clean=True, force=force) + mt.conflicts
    if approve is not None:
        approve(mt.target, items)
    faults.hit("merge_target_written")
    safety = ws.commit_scan(scan, safety_meta).checkpoint
    faults.hit("restore_after_safety")
    for it in items:
        it.declared = it.writes
    return Prepared(mt.target, safety, items, True, foreign=False)


def prepare(ws, spec: str, *, paths: list[str] | None = None, clean: bool = True, force: bool = False,
            meta: CheckpointMeta | None = None, paths_must_exist: bool = False,
            foreign_ok: bool = False,
            approve: Callable[[Checkpoint, list[RestoreStep]], None] | None = None) -> Prepared:
    """Steps 1-5: validate, scan, plan, capture check, safety checkpoint.  `approve(target,
    items)` sees the plan before anything is committed; raising there refuses the restore
    with nothing changed (a plan that differs from the one a person confirmed).

    The caller holds `ws.exclusive()` from here until `apply` returns."""
    target, foreign = _target(ws, spec, foreign_ok)
    rels = _rels(ws, paths)                   # validated before any side effect
    ws.root.mkdir(parents=True, exist_ok=True)
    safety_meta = meta or CheckpointMeta(description="")
    safety_meta.kind = "safety"
    safety_meta.role = "safety"
    safety_meta.description = safety_meta.description or f"safety checkpoint before restoring {target.id[:12]}"
    safety_meta.note = f"state before restoring {target.id}; restore this to undo"
    scan = ws.snapshot(safety_meta, commit=False)
    items = plan(ws, target, scan.tree_id, rels=rels, clean=clean, force=force,
                 paths_must_exist=paths_must_exist)
    if approve is not None:
        approve(target, items)
    safety = ws.commit_scan(scan, safety_meta).checkpoint
    faults.hit("restore_after_safety")
    for it in items:
        it.declared = it.writes
    return Prepared(target, safety, items, clean, foreign)


def apply(ws, prepared: Prepared) -> tuple[dict, list[dict]]:
    """Steps 7-8: the writes, then every declared path read back: (result, evidence)."""
    _apply(ws, prepared.target, prepared.items, perms.umask() if prepared.foreign else 0)
    faults.hit("after_restore_files")
    return (_result(prepared.target, prepared.safety.id, prepared.items, prepared.clean, dry_run=False),
            evidence(ws, prepared.items))


def restore(ws, spec: str, *, paths: list[str] | None = None, clean: bool = True,
            dry_run: bool = False, force: bool = False, meta: CheckpointMeta | None = None) -> dict:
    """preview, or prepare + apply, for callers that journal nothing (the engine's own tests)."""
    if dry_run:
        return preview(ws, spec, paths=paths, clean=clean, force=force)
    with ws.exclusive():
        result, _ = apply(ws, prepare(ws, spec, paths=paths, clean=clean, force=force, meta=meta))
    return result


def _rels(ws, paths: list[str] | None) -> list[str] | None:
    rels = [ws.rel(p) for p in paths] if paths else None
    for rel in rels or ():
        split(rel)
    return rels


def _result(target, safety_id, items, clean, *, dry_run) -> dict:
    def count(*actions):
        return sum(1 for i in items if i.action in actions)
    return {
        "restored_checkpoint": target.id,
        "target": target.summary(),
        "safety_checkpoint": safety_id,
        "dry_run": dry_run,
        "clean": clean,
        "files_changed": count("restore", "create"),
        "untracked_removed": count("delete"),
        "skipped": count("skip"),
        "kept": count("keep"),
        "failed": count("failed"),
        "conflicts": count("conflict"),
        "plan": [i.to_dict() for i in items],
    }


def _is_ignore_rules(path: str) -> bool:
    return path == ".gitignore" or path.endswith("/.gitignore")


def _apply(ws, target: Checkpoint, items: list[RestoreStep], mask: int = 0) -> None:
    """`mask`: bits a foreign checkpoint's permission record may not grant (the umask)."""
    repo = ws.store.repo()
    record = perms.expand(target.meta.modes)
    deletes = sorted((i for i in items if i.action == "delete"), key=lambda i: -i.path.count("/"))
    writes = [i for i in items if i.action in ("restore", "create")]
    dirs = {os.path.dirname(i.path) for i in deletes + writes}
    done: list[RestoreStep] = []

    def failed(it: RestoreStep, exc: BaseException) -> None:
        if isinstance(exc, ChangedMeanwhile):     # new bytes nobody captured: never replaced
            it.action, it.reason = "keep", f"{exc}; left untouched"
            return
        if isinstance(exc, PathBlocked):          # something stands in the way: a policy skip
            it.action, it.reason = "skip", f"{exc}; left untouched"
            return
        it.action = "failed"
        it.reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
        it.reason += "; left as it was"

    def delete(it: RestoreStep) -> None:
        try:
            disk.unlink(it.path, expect=it.expect)
        except (OSError, ChronosError) as exc:
            failed(it, exc)
            return
        done.append(it)
        faults.hit("mid_restore")

    def dir_perm(rel: str) -> int:
        return perms.dir_perm(record, rel, mask=mask)

    def write(it: RestoreStep) -> None:
        try:
            try:
                data = repo[it.blob].data
            except KeyError:
                raise ChronosError(f"blob {str(it.blob)[:12]} is missing from the store") from None
            if it.mode == LINK:
                disk.symlink(it.path, data, dir_perm=dir_perm, expect=it.expect)
            else:
                now = disk.entry(it.path)
                bits = perms.file_perm(record, it.path, it.mode == EXEC,
                                       stat.S_IMODE(now.st.st_mode) if now.kind == "file" else None, mask=mask)
                disk.write(it.path, data, bits, dir_perm=dir_perm, expect=it.expect)
        except (OSError, ChronosError) as exc:
            failed(it, exc)
            return
        done.append(it)
        faults.hit("mid_restore")

    with inflight.writing(ws.store, ws.root_bytes, dirs), Confined(ws.root_bytes, token=inflight.TOKEN) as disk:
        # .gitignore files first: whether a file absent from the target is ignored (kept) or
        # untracked (deleted in clean mode) is decided by the rules being restored, not by the
        # ones being replaced (else undoing a restore that removed a .gitignore deletes the
        # files it ignores)
        rules = [i for i in deletes + writes if _is_ignore_rules(i.path)]
        for it in rules:
            (delete if it.action == "delete" else write)(it)
            (deletes if it in deletes else writes).remove(it)
        wrepo = ws.repo()
        for it in deletes:
            if rules and is_ignored(wrepo, it.path):
                it.action, it.reason = "skip", "ignored by the restored .gitignore rules; left untouched"
                continue
            delete(it)
        for it in writes:
            write(it)
        _restore_dir_perms(disk, record, items, mask)
        ws.note_restored([i.path for i in done if i.action == "delete"],
                         [i.path for i in done if i.action != "delete"])


def _restore_dir_perms(disk: Confined, record: dict | None, items: list[RestoreStep], mask: int = 0) -> None:
    """Directories the checkpoint recorded with narrower bits get them back (below what was restored)."""
    if not record:
        return
    touched = {os.path.dirname(i.path) for i in items if i.action in ("restore", "create")}
    for path in record:
        if not path.endswith("/") or path[:-1] not in touched:
            continue
        e = disk.entry(path[:-1])
        if e.kind != "dir" or e.st is None:      # a dir entry always has its stat
            continue
        have = stat.S_IMODE(e.st.st_mode)
        want = perms.dir_perm(record, path, have, mask=mask)     # narrower only: never widened
        if want != have:
            try:
                disk.chmod_dir(path[:-1], want)
            except (OSError, ChronosError):
                pass


def evidence(ws, items: list[RestoreStep]) -> list[dict]:
    """Each attempted path read back: at its post-image (done), its pre-image (not done), or neither."""
    out = []
    with Confined(ws.root_bytes) as disk:
        for it in items:
            if not it.declared:
                continue
            post, pre = it.blob, it.current_blob
            try:
                now = disk.content_id(it.path)
            except ChronosError:
                now = "special:unsafe"
            out.append({"path": it.path, "action": it.action, "now": now, "pre": pre, "post": post,
                        "at_post": same(now, post), "at_pre": same(now, pre)})
    return out
