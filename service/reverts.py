"""The time machine's merging operations: undo what the agent did and keep everyone else's
edits (an agent-only restore), revert one call or one session's calls, and undo / redo the
time machine's own operations as in an editor.

Each takes back *segments* (service/call_changes.py: what a call changed, its pre- to its
post-checkpoint) over the workspace as it is now, hunk by hunk (engine/agent_merge.py); a
path where the change taken back and a later change overlap, or where the boundary between
the agent and the person is not known, is left exactly as it is and listed as a `conflict`.
They run as every time-machine operation does (TimeMachine.operate): a dry run with a plan
token, a safety checkpoint, a journaled call, every path read back, a checkpoint after.

Undo and redo: the time-machine operations of a workspace (restore, revert, agent-only
restore, and undo / redo themselves) are read from the journal in order; `undo` takes back
the newest one not undone (the step from its safety checkpoint to its checkpoint after),
`redo` takes back the newest undo not redone, and a new restore or revert clears what could
be redone.  With nothing changed in between both are byte-identical; otherwise they merge.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pygit2

from ..engine import agent_merge, perms, restore as restore_mod
from ..engine.agent_merge import Segment
from ..engine.checkpoint import Checkpoint, CheckpointMeta, signature, write_commit
from ..engine.errors import CallNotFound, CheckpointNotFound
from ..engine.restore import MergeTarget, RestoreStep
from ..engine.tree_edit import DIR, Clash, Trees
from ..engine.wording import plural
from . import call_changes
from .call_changes import CallChange
from .core import Core
from .results import CheckpointInfo, RestoreResult
from .timemachine import TimeMachine, TimeOp

REVERT_TOOLS = {"chronos.revert", "chronos.agent_restore"}
OPERATIONS = ("chronos.restore", "chronos.revert", "chronos.agent_restore", "chronos.undo", "chronos.redo",
              "chronos_rollback",      # the model's, through the approval prompt
              "chronos.rollback")      # an operator's `journal recover --rollback` of a crashed call


@dataclass
class History:
    """A workspace's time-machine operations as an editor's undo and redo stacks."""
    done: list[CallChange] = field(default_factory=list)      # undoable, oldest first
    undone: list[tuple[CallChange, CallChange]] = field(default_factory=list)   # (operation, its undo)


class Reverts:
    def __init__(self, core: Core, time: TimeMachine):
        self.core = core
        self.time = time
        self.events = time.events

    # ------------------------------------------------------------ what changed
    def _calls(self, ws, since_ns: int = 0) -> list[CallChange]:
        return call_changes.calls(self.events.newest_first(), os.fsdecode(ws.root_bytes), since_ns=since_ns)

    def history(self, ws) -> History:
        h = History()
        for c in self._calls(ws):
            done = c.status in ("ok", "partial") or (c.status in ("recovered", "resolved")
                                                      and c.settled in ("completed", "partial"))
            if c.tool not in OPERATIONS or not done:  # a crash cut off and settled completed: done too
                continue
            if c.pre is not None and _after_of(c) == c.pre:
                continue                              # it changed nothing: nothing to undo or redo
            undoes, redoes = c.args.get("undoes"), c.args.get("redoes")
            if c.tool == "chronos.undo" and h.done and h.done[-1].operation_id == undoes:
                h.undone.append((h.done.pop(), c))
            elif c.tool == "chronos.redo" and h.undone and h.undone[-1][1].operation_id == redoes:
                h.undone.pop()
                h.done.append(c)
            elif c.tool not in ("chronos.undo", "chronos.redo"):
                h.done.append(c)
                h.undone.clear()
        return h

    # ------------------------------------------------------------ operations
    def agent_restore(self, workspace: str, spec: str, *, tool: str = "chronos.agent_restore",
                      **kw) -> RestoreResult:
        """Take back what protected calls changed since checkpoint `spec`, keep the rest."""
        ws = self.time.existing(workspace)
        target = ws.resolve(spec)
        since = int(target.meta.time * 1e9)
        chosen = [c for c in self._calls(ws, since) if not c.is_time_machine]
        res = self._merge(ws, "agent-only restore", tool, chosen,
                          {"checkpoint": target.id, "agent_only": True}, branch_point=target, **kw)
        res.restored_checkpoint = target.id          # what it went back to (the merged tree is its own)
        res.target = CheckpointInfo(**target.summary())
        return res

    def revert(self, workspace: str, operation: str | None = None, *, session: str | None = None,
               subagent: str | None = None, **kw) -> RestoreResult:
        """Take back one call (an operation id or a unique prefix), every call of a session, or
        every call of one subagent (its id, or the tool call that started it, as the host names
        them)."""
        scopes = [name for name, v in (("an operation", operation), ("a session", session),
                                       ("a subagent", subagent)) if v is not None]
        if len(scopes) > 1:       # named for every surface: --session on the command line, session in HTTP
            raise ValueError(f"revert takes one of an operation id, a session id or a subagent id, not "
                             f"{' and '.join(scopes)}")
        if not scopes:
            raise ValueError("revert takes an operation id (or a unique prefix of one), a session id "
                             "(--session) or a subagent id (--subagent)")
        ws = self.time.existing(workspace)
        cs = [c for c in self._calls(ws) if not c.is_time_machine or c.tool == "chronos_rollback"]
        if session is not None:
            chosen = [c for c in cs if c.session_id == session]
            if not chosen:
                raise CallNotFound(f"no call of session {session!r} in workspace {ws.root}")
            args = {"session": session}
        elif subagent is not None:
            chosen = [c for c in cs if subagent in (c.subagent_id, c.parent_call)]
            if not chosen:
                raise CallNotFound(
                    f"no call of subagent {subagent!r} in workspace {ws.root} (a subagent is known by the id "
                    "the host gave it, or by the tool call that started it where the host names that; "
                    "`journal log` shows them; --session with the subagent's session id works too)")
            args = {"subagent": subagent}
        else:
            chosen = self._by_prefix(ws, cs, operation or "")
            args = {"operation": chosen[0].operation_id}
        return self._merge(ws, "revert", "chronos.revert", chosen, args, **kw)

    def undo(self, workspace: str, **kw) -> RestoreResult:
        ws = self.time.existing(workspace)
        h = self.history(ws)
        if not h.done:
            raise ValueError(f"nothing to undo in {ws.root}: no restore, revert or redo of it is left to undo")
        op = h.done[-1]
        return self._merge(ws, "undo", "chronos.undo", [op], {"undoes": op.operation_id},
                           branch_point=op.pre, operation_step=True, **kw)

    def redo(self, workspace: str, **kw) -> RestoreResult:
        ws = self.time.existing(workspace)
        h = self.history(ws)
        if not h.undone:
            raise ValueError(f"nothing to redo in {ws.root}: no undo is left to redo (a new restore or revert "
                             "clears them)")
        op, undo = h.undone[-1]
        return self._merge(ws, "redo", "chronos.redo", [undo], {"redoes": undo.operation_id,
                                                                  "operation": op.operation_id},
                           branch_point=_after_of(op), operation_step=True, **kw)

    def _by_prefix(self, ws, cs: list[CallChange], prefix: str) -> list[CallChange]:
        """The one call `prefix` names in this workspace; if none, an error that says where it is:
        a time-machine operation (taken back with undo), or a call of another workspace."""
        found = _by_prefix(cs, prefix)
        if found:
            return found
        p = prefix.strip().lower()
        root = os.fsdecode(ws.root_bytes)
        for ev in self.events.newest_first():
            if ev["kind"] != "started" or not (ev.get("operation_id") or "").startswith(p):
                continue
            what = f"{ev['operation_id'][:12]} ({ev.get('tool')})"
            if ev.get("tool") in call_changes.TIME_MACHINE_TOOLS:
                raise ValueError(f"{what} is a time-machine operation, not a call: take it back with undo")
            if ev.get("workspace") != root:
                raise CallNotFound(f"call {what} ran in workspace {ev.get('workspace')}, not {root}: "
                                         f"revert it there (-w {ev.get('workspace')})")
        raise CallNotFound(f"no protected call {prefix!r} in the journal (`chronos-git journal log` lists them)")

    # ------------------------------------------------------------ the merge
    def _merge(self, ws, what: str, tool: str, chosen: list[CallChange], args: dict, **kw) -> RestoreResult:
        """`_merge_now`, with a clear error where a checkpoint or file version the operation needs
        is gone (retention or a compaction dropped it) instead of libgit2's."""
        try:
            return self._merge_now(ws, what, tool, chosen, args, **kw)
        except (KeyError, pygit2.GitError) as exc:
            names = ", ".join(f"{c.operation_id[:12]} ({c.tool})" for c in chosen[:3])
            raise CheckpointNotFound(
                f"cannot {what}: a checkpoint or file version of {names}{' ...' if len(chosen) > 3 else ''} is no "
                f"longer in the store (retention keeps max_checkpoints per workspace; a compaction drops what it "
                f"no longer keeps): {str(exc).strip(chr(39))[:80]}. Nothing was changed; `log --all` lists what "
                "can still be restored") from None

    def _merge_now(self, ws, what: str, tool: str, chosen: list[CallChange], args: dict, *,
               branch_point=None, operation_step: bool = False, markers: bool = False, dry_run: bool = False,
               force: bool = False, gate: bool = True, actor: str = "cli", session_id: str | None = None,
               plan_token: str | None = None, require_plan: bool = False) -> RestoreResult:
        repo = self.core.store.repo()
        if operation_step:
            segments = [_operation_segment(c) for c in chosen]
        else:
            segments = [s for s in (_call_segment(repo, ws, c) for c in chosen) if s is not None]
        if not operation_step:
            segments += call_changes.gaps(chosen)
        ids = [c.operation_id for c in chosen]
        # the checkpoint whose permission record a path taken back to its state before a call gets
        checkpoint_before = {c.operation_id: c.pre for c in chosen}

        marked: dict = {}                 # paths written with conflict markers, by the last merge
        merged: set[str] = set()          # paths whose result keeps later changes (not the content before)

        def merge(current_tree: str) -> MergeTarget:
            segs = [s if s.after else Segment(s.before, current_tree, s.label, s.ambiguous) for s in segments]
            plan = agent_merge.undo_segments(repo, current_tree, segs, markers=markers)
            meta = CheckpointMeta(description=f"what {what} puts in place", kind="merge",
                                  modes=_modes(repo, ws, plan, checkpoint_before), files=_files(repo, plan.tree))
            cid = write_commit(self.core.store.root / "objects", plan.tree, [], signature(), meta.to_message())
            conflicts = [RestoreStep(s.path, "conflict", reason=s.why, agent=_said(s.agent, what, operation_step),
                                     person=s.person)
                         for s in plan.conflicts if not s.markers]
            marked.clear()
            marked.update({s.path: s for s in plan.conflicts if s.markers})
            merged.clear()
            merged.update(_merged(repo, plan, segs))
            return MergeTarget(Checkpoint.from_commit(repo[cid].peel(pygit2.Commit)), conflicts)

        point = branch_point.id if isinstance(branch_point, Checkpoint) else branch_point
        point_tree = _tree_of(repo, point)

        def branch(prepared, tree_id: str) -> str | None:
            return point if point and tree_id == point_tree else None

        touched = _touched(repo, ws, segments)
        key = {"operation": tool, **args, "markers": markers, "force": force,
               "calls": ids if not operation_step else None}
        op = TimeOp(tool=tool, what=what,
                    preview=lambda: restore_mod.previewed_merge(ws, merge, force=force, paths=touched),
                    prepare=lambda meta, approve: restore_mod.prepare_merge(ws, merge, force=force, meta=meta,
                                                                           approve=approve, paths=touched),
                    key=lambda _target: key,
                    args=lambda target: {**args, "markers": markers, "calls": ids, "target": target.id},
                    target_id=lambda: "", branch_point=branch)
        res = self.time.operate(ws, op, dry_run=dry_run, gate=gate, actor=actor, session_id=session_id,
                                plan_token=plan_token, require_plan=require_plan)
        res.kind = what
        res.calls = ids
        for item in res.plan:             # written with markers: still a conflict to resolve by hand
            if item.path in merged and item.action == "restore":
                item.merged = True
            step = marked.get(item.path)
            if step is not None and item.action == "restore":
                item.action, item.agent, item.person = "conflict", _said(step.agent, what, operation_step), step.person
                item.reason = "conflict markers written into the file: resolve them by hand"
        res.conflicts = sum(1 for i in res.plan if i.action == "conflict")
        if not dry_run and res.status == "ok" and res.after_checkpoint == res.safety_checkpoint:
            res.note = f"nothing was left to take back: the {what} changed nothing (and is not on the undo stack)"
        if res.note:
            return res
        if not chosen and res.status == "ok":
            res.note = f"no protected call to take back: the {what} changes nothing"
        elif res.conflicts and res.status == "ok" and markers:
            res.note = (f"{plural(res.conflicts, 'path')} with conflicts: resolve the git-style markers written "
                        "into them (a binary file or a symlink is left as it is)")
        elif res.conflicts and res.status == "ok":
            res.note = (f"{plural(res.conflicts, 'path')} left as {'they are' if res.conflicts > 1 else 'it is'}: "
                        "see the conflicts (--conflicts markers writes git-style markers into text files instead)")
        return res


def _said(text: str | None, what: str, operation_step: bool) -> str | None:
    """The engine says what "the agent" did; an undo or redo takes back an operation."""
    if text is None or not operation_step:
        return text
    return text.replace("the agent's call", f"the operation {what} takes back").replace(
        "the agent", f"the operation {what} takes back")


def _merged(repo, plan, segments: list[Segment]) -> set[str]:
    """The paths a merge writes with content other than they had before the first call it takes
    back: changes made after that call are kept in them (a three-way merge), where the others
    simply go back."""
    by_label = {s.label: s for s in segments}
    out = set()
    for step in plan.steps:
        first = by_label.get(step.segments[-1]) if step.action == "write" and step.segments else None
        if first is None:
            continue
        try:
            before = str(repo[first.before].peel(pygit2.Tree)[step.path].id)
        except (KeyError, ValueError, UnicodeError, pygit2.GitError):
            before = None
        if before != step.blob:
            out.add(step.path)
    return out


def _by_prefix(cs: list[CallChange], prefix: str) -> list[CallChange]:
    p = prefix.strip().lower()
    if len(p) < 4 or not all(ch in "0123456789abcdef" for ch in p):
        raise ValueError(f"{prefix!r} is not an operation id: give it, or a prefix of at least 4 hex digits "
                         "(`chronos-git journal log` lists them)")
    found = [c for c in cs if c.operation_id.startswith(p)]
    if len(found) > 1:
        raise ValueError(f"operation prefix {prefix!r} is ambiguous ({len(found)} calls)")
    return found


def _touched(repo, ws, segments: list[Segment]) -> list[str] | None:
    """The paths the segments change (absolute): the only ones a merge reads from disk; None
    (read everything) when one of them runs up to the workspace as it is now, or none changes
    anything."""
    if any(not s.after for s in segments):
        return None
    trees = Trees(repo)
    rels: set[bytes] = set()
    for s in segments:
        a, b = _tree_of(repo, str(s.before)), _tree_of(repo, str(s.after))
        if a is None or b is None:
            return None
        rels.update(trees.changed(bytes.fromhex(a), bytes.fromhex(b)))
    return [os.fsdecode(os.path.join(ws.root_bytes, r)) for r in sorted(rels)] or None


def _call_segment(repo, ws, c: CallChange) -> Segment | None:
    """A protected call's change.  A file call's is exact: its checkpoint (before, else after)
    with each declared path set to the pre-image, then to the post-image the journal holds, so
    neither a missing checkpoint nor an edit saved while its checkpoint after was taken (behind,
    off the call's path) can blur it.  Any other call's is the step between its checkpoints."""
    if c.settled == "not_applied":
        return None                                   # a crash settled: it never changed anything
    exact = _from_images(repo, ws, c) if c.status not in ("uncertain", "error") else None
    if exact is not None:
        return exact
    if c.pre is None:
        raise ValueError(f"call {c.operation_id[:12]} ({c.tool}) has no checkpoint before it, and the journal does "
                         "not hold its changes path by path (or it deleted a file whose kind and mode no checkpoint "
                         "holds), so what it did cannot be told from what others did: nothing was changed (take "
                         "back other calls by id with `revert`, or restore a checkpoint)")
    return c.segment()


def _from_images(repo, ws, c: CallChange) -> Segment | None:
    base_id = c.pre or c.post
    if not c.declared:
        return None
    root = os.fsdecode(ws.root_bytes)
    pre: dict[bytes, str | None] = {}
    post: dict[bytes, str | None] = {}
    for d in c.declared:
        path, a, b = d.get("path"), d.get("pre"), d.get("post")
        if not isinstance(path, str) or "unknown" in (a, b):
            return None
        rel = os.path.relpath(path, root)
        if rel.startswith(".."):
            return None
        key = os.fsencode(rel)
        pre[key], post[key] = a, b
    if c.pre is None and any(a is not None and post[k] is None for k, a in pre.items()):
        return None      # it deleted a path no checkpoint before it holds: its kind and mode are not known
    trees = Trees(repo)
    # no checkpoint around it (the first call while the workspace's first snapshot was still
    # being taken): the images alone are its change, set on an empty tree
    base = _tree_of(repo, base_id) if base_id is not None else trees.write({}).hex()
    if base is None:
        return None
    raw = bytes.fromhex(base)
    try:
        def entries(images: dict[bytes, str | None]) -> dict:
            out: dict = {}
            for key, blob in images.items():
                now = trees.lookup(raw, key)
                mode = now[0] if now is not None and now[0] != DIR else pygit2.GIT_FILEMODE_BLOB
                out[key] = None if blob is None else (mode, bytes.fromhex(blob))
            return out
        before = raw if c.pre is not None else trees.edit(raw, entries(pre))
        after = trees.edit(before, entries(post))
    except (Clash, ValueError, KeyError):
        return None
    return Segment(before=before.hex(), after=after.hex(), label=c.operation_id)


def _after_of(c: CallChange) -> str | None:
    return c.outcome.get("after_checkpoint") if c.outcome else None


def _operation_segment(c: CallChange) -> Segment:
    """A time-machine operation's step: its safety checkpoint to its checkpoint after.  One a
    crash cut off has none: its step is taken to what it was putting in place (its target), and
    is ambiguous (every path it would have changed is a conflict: what happened after the crash
    is not known)."""
    after = _after_of(c)
    target = c.args.get("target") or c.args.get("checkpoint")
    if c.pre is None or (after is None and not target):
        raise ValueError(f"operation {c.operation_id[:12]} ({c.tool}) cannot be taken back: the checkpoints around "
                         "it were not recorded (restore its safety checkpoint by hand if it has one)")
    return Segment(before=c.pre, after=str(after or target), label=c.operation_id, ambiguous=after is None)


def _tree_of(repo, object_id: str | None) -> str | None:
    """The tree of a commit, or the tree itself."""
    if not object_id:
        return None
    try:
        return str(repo[object_id].peel(pygit2.Tree).id)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def _files(repo, tree_id) -> int:
    """How many files the merged tree holds (a dry run's `target.files`), counted in C."""
    index = pygit2.Index()
    index.read_tree(repo[tree_id])
    return len(index)


def _modes(repo, ws, plan, checkpoint_before: dict[str, str | None]) -> dict | None:
    """The permission record of the merged tree: the newest checkpoint's, and for each path the
    plan writes, the record of the checkpoint whose content it takes back to."""
    tip = ws.tip()
    record = dict(perms.expand(tip.meta.modes) or {}) if tip else {}
    for step in plan.steps:
        if not step.writes or not step.segments:
            continue
        record.pop(step.path, None)
        before_id = checkpoint_before.get(step.segments[-1])
        try:
            obj = repo[before_id] if before_id else None
            before = Checkpoint.from_commit(obj) if isinstance(obj, pygit2.Commit) else None
        except (KeyError, ValueError):
            before = None
        mode = (perms.expand(before.meta.modes) or {}).get(step.path) if before else None
        if mode is not None:
            record[step.path] = mode
    out: dict[str, list[str]] = {}
    for path, mode in sorted(record.items()):
        out.setdefault(f"{mode:o}", []).append(path)
    return out
