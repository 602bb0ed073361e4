"""Undoing what protected calls changed while keeping everything changed outside them:
the engine of the agent-only restore and of "revert one call" (issue 35).

A `Segment` is one call's change: the tree before it and the tree after it.  Each
segment is reverted over the running result, newest first, starting from the tree of
the workspace now: a three-way merge per path with ancestor = the segment's after,
ours = the running result, theirs = the segment's before.  Only the paths that differ
between the segment's before and after are looked at (a tree-to-tree diff that descends
only into differing subtrees; no rename detection: a rename by a shell call is a delete
plus a create); every other path has
ancestor == theirs, so it stays as it is.

The rule, per path (values compared as (mode, blob id), "none" for no file):
* ours == theirs: nothing to do (`keep`);
* ours == ancestor (nothing changed it since the call): take theirs;
* both files, content and mode merged apart: a side that did not change keeps the
  other's; both changed content: libgit2's line merge (byte-exact, git's xdiff), text
  only; both changed the mode differently: conflict;
* anything else (created by the agent and changed afterwards, deleted by it and
  created again differently, modified by it and deleted afterwards, a directory in
  the way, binary files or symlinks changed on both sides, overlapping hunks): a
  `conflict`, with what each side did;
* an ambiguous segment (the boundary between the agent and the person is not known
  around it): every path it changed is a conflict ("boundary unknown"), merged never.

A conflicting path is left exactly as it is now, and older segments leave it alone
too; with markers=True a text file gets git-style conflict markers instead (still
listed as `conflict`, `markers: true`).  Nothing here writes to the workspace: the
plan names each path's outcome and `tree` is the tree to put on disk.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import MergeFlag

from .codec import display
from .tree_edit import DIR, Clash, Entry, Trees

LINK = pygit2.GIT_FILEMODE_LINK
GITLINK = pygit2.GIT_FILEMODE_COMMIT
OURS_LABEL = b"current"
THEIRS_LABEL = b"before the agent's call"
_MAX_RANGES = 5


@dataclass(frozen=True)
class Segment:
    """One protected call's change.  `before`/`after`: tree (or commit) ids."""
    before: pygit2.Oid | str
    after: pygit2.Oid | str
    label: str                          # the journal operation id
    ambiguous: bool = False             # the agent/person boundary around it is not known


@dataclass
class MergeStep:
    path: str                           # surrogate-escaped like every path in the engine
    action: str                         # write | create | delete | keep | conflict
    blob: str | None = None             # resulting content (write/create; conflict with markers)
    mode: int | None = None             # resulting git file mode (same cases)
    current_blob: str | None = None     # the content now (None: no file)
    current_mode: int | None = None
    why: str | None = None              # conflicts (and keeps): for people
    agent: str | None = None            # conflicts: what the agent's call did
    person: str | None = None           # conflicts: what changed it afterwards
    markers: bool = False               # conflict written with conflict markers
    segments: list[str] = field(default_factory=list)   # labels of the calls that changed it, newest first

    @property
    def raw_path(self) -> bytes:
        return os.fsencode(self.path)

    @property
    def writes(self) -> bool:
        return self.action in ("write", "create", "delete") or self.markers

    def to_dict(self) -> dict:
        out: dict = {"path": self.path, "action": self.action, "segments": list(self.segments)}
        for key in ("blob", "mode", "current_blob", "current_mode", "why", "agent", "person"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.markers:
            out["markers"] = True
        return out


@dataclass
class Plan:
    steps: list[MergeStep]
    tree: pygit2.Oid                    # the workspace after the plan (conflicts as chosen)

    @property
    def conflicts(self) -> list[MergeStep]:
        return [s for s in self.steps if s.action == "conflict"]

    @property
    def clean(self) -> bool:
        return not self.conflicts

    def to_dict(self) -> dict:
        return {"tree": str(self.tree), "steps": [s.to_dict() for s in self.steps]}


class _Conflict:
    __slots__ = ("why", "agent", "person", "markers")

    def __init__(self, why: str, agent: str | None = None, person: str | None = None,
                 markers: Entry | None = None):
        self.why, self.agent, self.person, self.markers = why, agent, person, markers


class _Keep:
    """The running result stays as it is at a path."""


_KEEP = _Keep()


def undo_segments(repo: pygit2.Repository, current_tree: pygit2.Oid | str, segments: Sequence[Segment], *,
                  markers: bool = False) -> Plan:
    """Revert `segments` (given oldest to newest; undone newest first) over `current_tree`."""
    trees = Trees(repo)
    current = _tree_raw(repo, current_tree)
    overlay: dict[bytes, Entry | None] = {}         # path -> its value in the running result
    touched: dict[bytes, list[str]] = {}            # path -> labels, newest first
    conflicts: dict[bytes, _Conflict] = {}
    for seg in reversed(segments):
        before, after = _tree_raw(repo, seg.before), _tree_raw(repo, seg.after)
        for path in dict.fromkeys(trees.changed(before, after)):
            touched.setdefault(path, []).append(seg.label)
            if path in conflicts:                   # frozen: left as it is (or as marked)
                continue
            a, t = trees.lookup(after, path), trees.lookup(before, path)
            o = overlay[path] if path in overlay else _value(trees, current, path, overlay)
            got: Entry | None | _Conflict | _Keep
            if seg.ambiguous:
                got = _Conflict(f"boundary unknown (segment {seg.label})",
                                f"the call {seg.label} changed it, but changes by others may be mixed in",
                                "not known which of its changes are the agent's")
            else:
                got = _decide(repo, seg.label, a, o, t, markers)
            if isinstance(got, _Conflict):
                conflicts[path] = got
                overlay.pop(path, None)
                if got.markers is not None:
                    overlay[path] = got.markers
            elif not isinstance(got, _Keep):
                overlay[path] = got
    while True:
        try:
            tree = trees.edit(current, overlay)
            break
        except Clash as clash:                      # a file and a directory in one place: leave them
            hit = [p for p in overlay if p == clash.path or p.startswith(clash.path + b"/")]
            for p in hit or list(overlay):
                overlay.pop(p)
                if p not in conflicts:
                    conflicts[p] = _Conflict("a file and a directory in the same place",
                                             "the agent's calls turned one into the other",
                                             "the other changed afterwards")
    steps = [_step(trees, current, path, labels, overlay, conflicts) for path, labels in sorted(touched.items())]
    return Plan(steps, pygit2.Oid(raw=tree))


def result_tree(repo: pygit2.Repository, current_tree: pygit2.Oid | str, plan: Plan) -> pygit2.Oid:
    """The tree of the workspace after applying `plan`'s steps over `current_tree`:
    conflicting paths as they are (or with their markers)."""
    changes: dict[bytes, Entry | None] = {}
    for s in plan.steps:
        if s.action in ("write", "create") or (s.action == "conflict" and s.markers):
            assert s.blob is not None and s.mode is not None
            changes[s.raw_path] = (s.mode, bytes.fromhex(s.blob))
        elif s.action == "delete":
            changes[s.raw_path] = None
    return pygit2.Oid(raw=Trees(repo).edit(_tree_raw(repo, current_tree), changes))


def _tree_raw(repo: pygit2.Repository, ident: pygit2.Oid | str) -> bytes:
    return repo[ident].peel(pygit2.Tree).id.raw


def _value(trees: Trees, current: bytes, path: bytes, overlay: dict) -> Entry | None:
    """The running result at `path` when the overlay does not name it.  A directory that
    has changed paths below it in the overlay is not the directory of the tree any more."""
    e = trees.lookup(current, path)
    if e is not None and e[0] == DIR and any(p.startswith(path + b"/") for p in overlay):
        return (DIR, b"\0" * 20)                    # equals no tree: such a path is a conflict
    return e


def _is_file(v: Entry | None) -> bool:
    return v is not None and v[0] != DIR


def _decide(repo: pygit2.Repository, label: str, a: Entry | None, o: Entry | None, t: Entry | None,
            markers: bool) -> Entry | None | _Conflict | _Keep:
    """The reverted value of one path: an Entry, None (no file), _KEEP or a _Conflict."""
    if o == t:
        return _KEEP
    if o == a:
        return t if _is_file(t) else None           # a directory before: its files come back one by one
    kind = _kind(a)
    if not _is_file(a):
        if not _is_file(t):
            return _KEEP
        agent = "deleted it" if a is None else "replaced it with a directory"
        return _Conflict(f"the agent's call ({label}) {agent}; it was created again afterwards",
                         f"{agent} (call {label})", _later(o, a))
    if not _is_file(t):
        return _Conflict(f"the agent's call ({label}) created this {kind}; it changed afterwards",
                         f"created it (call {label})", _later(o, a))
    if not _is_file(o):
        return _Conflict(f"the agent's call ({label}) modified this {kind}; it was "
                         f"{'deleted' if o is None else 'replaced by a directory'} afterwards",
                         f"modified it (call {label})", _later(o, a))
    assert a is not None and o is not None and t is not None
    mode = _three(a[0], o[0], t[0])
    if mode is None:
        return _Conflict(f"the agent's call ({label}) changed the file mode and it changed differently afterwards",
                         f"mode {a[0]:o} -> {t[0]:o} reverted", f"mode is now {o[0]:o}")
    content = _three(a[1], o[1], t[1])
    if content is not None:
        return (mode, content)
    if LINK in (a[0], o[0], t[0]) or GITLINK in (a[0], o[0], t[0]) or any(
            repo[pygit2.Oid(raw=x[1])].peel(pygit2.Blob).is_binary for x in (a, o, t)):
        what = "a symlink" if LINK in (a[0], o[0], t[0]) else "a binary file"
        return _Conflict(f"the agent's call ({label}) changed {what} and it changed afterwards",
                         f"changed {what} (call {label})", "changed it afterwards")
    ok, data = _merge_text(repo, a[1], o[1], t[1])
    if ok:
        assert data is not None
        return (mode, repo.create_blob(data).raw)
    agent, person = _hunks(repo, a[1], o[1], t[1])
    marked = None
    if markers and data is not None:
        marked = (mode, repo.create_blob(data).raw)
    return _Conflict(f"the agent's change ({label}) and a later change overlap (line numbers of the file "
                     "as the agent's call left it)", f"{agent} (call {label})",
                     person, marked)


def _three(a, o, t):
    """A three-way pick of one property: None when both sides changed it differently."""
    if o == a:
        return t
    if t == a or o == t:
        return o
    return None


def _kind(v: Entry | None) -> str:
    return "symlink" if v is not None and v[0] == LINK else "file"


def _later(o: Entry | None, a: Entry | None) -> str:
    if o is None:
        return "deleted afterwards"
    if o[0] == DIR:
        return "a directory is there now"
    if a is None or a[0] == DIR:
        return "created again afterwards"
    return "changed afterwards" if o[1] != a[1] else "its mode changed afterwards"


def _step(trees: Trees, current: bytes, path: bytes, labels: list[str], overlay: dict,
          conflicts: dict) -> MergeStep:
    cur = trees.lookup(current, path)
    cur_file = cur if _is_file(cur) else None
    new = overlay.get(path, cur_file)
    step = MergeStep(os.fsdecode(path), "keep", segments=labels,
                     current_blob=cur_file[1].hex() if cur_file else None,
                     current_mode=cur_file[0] if cur_file else None)
    c = conflicts.get(path)
    if c is not None:
        step.action, step.why, step.agent, step.person = "conflict", c.why, c.agent, c.person
        if path in overlay and new is not None:
            step.markers, step.blob, step.mode = True, new[1].hex(), new[0]
        return step
    if new == cur_file:
        step.why = "nothing to undo: it is as it was before the agent's calls"
        return step
    if new is None:
        step.action = "delete"
        return step
    step.action = "write" if cur_file is not None else "create"
    step.blob, step.mode = new[1].hex(), new[0]
    return step


# -- content ---------------------------------------------------------------------------------

try:                                          # feature-detected: a private part of pygit2
    from pygit2._libgit2 import ffi as _ffi, lib as _lib
    _native = (_ffi, _lib) if hasattr(_lib, "git_merge_file_from_index") else None
except ImportError:
    _native = None


def _merge_text(repo: pygit2.Repository, a: bytes, o: bytes, t: bytes) -> tuple[bool, bytes | None]:
    """libgit2's line merge of three blobs (raw ids): (clean, the merged bytes; with conflict
    markers when not clean).  Byte-exact: the result buffer is copied, never decoded."""
    if _native is None:
        return _merge_text_by_trees(repo, a, o, t)
    ffi, lib = _native
    keep = []

    def entry(raw: bytes):
        e = ffi.new("git_index_entry *")
        ffi.buffer(ffi.addressof(e, "id"))[:] = raw
        e.mode = pygit2.GIT_FILEMODE_BLOB
        name = ffi.new("char[]", b"file")       # a fixed name: no attributes, no encoding
        keep.append(name)
        e.path = name
        return e

    opts = ffi.new("git_merge_file_options *")
    opts.version = 1
    labels = [ffi.new("char[]", OURS_LABEL), ffi.new("char[]", THEIRS_LABEL)]
    opts.our_label, opts.their_label = labels
    res = ffi.new("git_merge_file_result *")
    err = lib.git_merge_file_from_index(res, repo._repo, entry(a), entry(o), entry(t), opts)
    if err < 0:
        raise pygit2.GitError(f"merging file contents failed ({err})")
    try:
        data = bytes(ffi.buffer(res.ptr, res.len)) if res.ptr != ffi.NULL else b""
        return bool(res.automergeable), data
    finally:
        lib.git_merge_file_result_free(res)


def _merge_text_by_trees(repo: pygit2.Repository, a: bytes, o: bytes, t: bytes) -> tuple[bool, bytes | None]:
    """The same merge through one-file trees (no markers: a conflict stays untouched)."""
    trees = Trees(repo)
    a_t, o_t, t_t = (pygit2.Oid(raw=trees.write({b"file": (pygit2.GIT_FILEMODE_BLOB, x)})) for x in (a, o, t))
    index = repo.merge_trees(a_t, o_t, t_t, flags=MergeFlag(0))
    if index.conflicts is not None:
        return False, None
    return True, repo[index["file"].id].read_raw()


def _hunks(repo: pygit2.Repository, a: bytes, o: bytes, t: bytes) -> tuple[str, str]:
    """What each side did, in lines of the file as the agent's call left it."""
    blob = lambda raw: repo[pygit2.Oid(raw=raw)].read_raw()  # noqa: E731
    before, after, now = blob(t), blob(a), blob(o)
    agent = [(h.new_start, h.new_lines) for h in pygit2.Patch.create_from(before, after, context_lines=0).hunks]
    person = [(h.old_start, h.old_lines) for h in pygit2.Patch.create_from(after, now, context_lines=0).hunks]

    def touches(x, ys):
        lo, hi = x[0], x[0] + max(x[1], 1)
        return any(y[0] <= hi and lo <= y[0] + max(y[1], 1) for y in ys)

    agent_hit = [h for h in agent if touches(h, person)] or agent
    person_hit = [h for h in person if touches(h, agent)] or person
    # the agent's hunks in the lines it left (none: it removed lines there); the later ones in
    # the same lines (none: lines were added there); every surface labels the second "after"
    return f"the agent {_ranges(agent_hit, 'removed')}", _ranges(person_hit, "added")


def _ranges(hunks: list[tuple[int, int]], none: str) -> str:
    parts = []
    for start, n in hunks[:_MAX_RANGES]:
        parts.append(f"{none} lines after line {start}" if n == 0 else
                     f"changed line {start}" if n == 1 else f"changed lines {start}-{start + n - 1}")
    more = f" and {len(hunks) - _MAX_RANGES} more" if len(hunks) > _MAX_RANGES else ""
    return ", ".join(parts) + more


def describe(step: MergeStep) -> str:
    """One line for people."""
    text = f"{step.action:8} {display(step.path)}"
    if step.action == "conflict":
        text += f": {step.why}" + (f" ({step.agent} / {step.person})" if step.agent and step.person else "")
        if step.markers:
            text += " [conflict markers written]"
    return text
