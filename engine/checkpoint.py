"""Checkpoint metadata: what a snapshot commit says about itself.

The commit message is written for `git log` first (a subject and a few
`Key: value` lines) and ends with one line of canonical JSON that the code
reads back, so humans and programs see the same facts.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pygit2

from . import loose
from .codec import canonical, display

SCHEMA = "chronos-git.checkpoint.v1"
SHORT_ID = 12                    # how long an id is shown to people, on every surface (full in JSON)
SIGNATURE_NAME = "chronos-git"
SIGNATURE_EMAIL = "chronos-git@localhost"


def signature(when: float | None = None) -> pygit2.Signature:
    """The author and committer of every commit chronos-git writes (checkpoints, journal)."""
    t = int(when if when is not None else time.time())
    return pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL, t, 0)


def write_commit(objects_dir, tree, parents, sig: pygit2.Signature, message: str) -> pygit2.Oid:
    """The commit `repo.create_commit(None, sig, sig, message, tree, parents)` writes, byte
    for byte, without its side effect (libgit2 freshens the tree, touching the mtime of a pack
    that holds it, and a clean clone's root tree is also in the user's hard-linked pack), and
    written as git writes loose objects (engine.loose says why)."""
    data = loose.commit_data(str(tree), [str(p) for p in parents], sig, message)
    return pygit2.Oid(hex=loose.write(objects_dir, pygit2.GIT_OBJECT_COMMIT, data)[0])



@dataclass
class CheckpointMeta:
    description: str
    kind: str = "full"
    tool: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    tool_call_id: str | None = None
    time: float = field(default_factory=time.time)
    skipped: list[dict] = field(default_factory=list)
    nested_repos: list[str] = field(default_factory=list)
    added_bytes: int = 0
    files: int = 0
    note: str | None = None      # why a checkpoint is partial, what a safety checkpoint guards
    modes: dict | None = None    # permission bits beyond 644/755 (engine.perms); None: not recorded
    number: int | None = None    # per workspace, given once by the chain (engine/chain.py); never changes
    role: str | None = None      # what it is for (ROLES); older checkpoints: derived (`role_of`)
    restored_from: str | None = None   # the checkpoint a time-machine operation put back: a branch point

    def to_message(self) -> str:
        subject = display(f"chronos checkpoint: {self.description}").replace("\n", " ")[:200]
        lines = [subject, ""]
        lines.append(f"Kind: {self.kind}")
        for label, value in (("Tool", self.tool), ("Session", self.session_id),
                             ("Turn", self.turn_id), ("Tool-Call", self.tool_call_id),
                             ("Note", self.note)):
            if value:
                lines.append(display(f"{label}: {value}").replace("\n", " "))
        lines.append(f"Files: {self.files}")
        if self.skipped:
            lines.append(display(f"Skipped: {len(self.skipped)} path(s): "
                                 + ", ".join(s["path"] for s in self.skipped[:5])
                                 + (" ..." if len(self.skipped) > 5 else "")).replace("\n", " "))
        if self.nested_repos:
            lines.append(display("Nested repositories excluded: "
                                 + ", ".join(self.nested_repos[:10])).replace("\n", " "))
        lines.append("")
        payload = {"schema": SCHEMA, **{k: v for k, v in self.__dict__.items()
                                        if not (k in OPTIONAL and v is None)}}
        lines.append(canonical(payload))
        return "\n".join(lines) + "\n"

    @classmethod
    def from_message(cls, message: str) -> CheckpointMeta:
        return cls.parse(message)[0]

    @classmethod
    def parse(cls, message: str, when: float | None = None) -> tuple[CheckpointMeta, list[str]]:
        """The metadata and what is wrong with it (empty: intact).  Never raises: a commit
        that says the wrong things about itself is shown as damaged, with its fields at
        their defaults (`when`, the commit's time, for a time it lacks), and every command
        still answers.  A field written by no version is damage too (the schema has one)."""
        subject = message.split("\n", 1)[0]
        last = message.rstrip("\n").rsplit("\n", 1)[-1]
        try:
            data = json.loads(last)
        except (ValueError, RecursionError):
            data = None
        fallback: dict = {} if when is None else {"time": when}
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return (cls(description=subject, kind="foreign", **fallback),
                    ["its message holds no chronos-git checkpoint metadata"])
        problems: list[str] = []
        known: dict = {}
        for name, (ok, what) in _FIELDS.items():
            if name not in data:
                if name not in OPTIONAL:        # None is left out when written
                    problems.append(f"no {name}")
            elif ok(data[name]):
                known[name] = data[name]
            else:
                problems.append(f"{name} is not {what}")
        extra = sorted(k for k in data if k not in _FIELDS and k != "schema")
        if extra:
            problems.append("unknown field" + ("s " if len(extra) > 1 else " ")
                            + ", ".join(repr(k[:40]) for k in extra[:5]) + (" ..." if len(extra) > 5 else ""))
        known.setdefault("description", subject.removeprefix("chronos checkpoint: "))
        if "time" not in known:
            known.update(fallback)
        return cls(**known), problems


MAX_TIME = 253402300799.0      # 9999-12-31: beyond it no date can be shown


def _text(v) -> bool:
    return isinstance(v, str)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _skips(v) -> bool:
    return isinstance(v, list) and all(
        isinstance(s, dict) and isinstance(s.get("path"), str) and isinstance(s.get("reason"), str)
        and (s.get("size") is None or _count(s["size"])) and set(s) <= {"path", "reason", "size"} for s in v)


def _modes(v) -> bool:
    return v is None or (isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(ps, list) and all(isinstance(p, str) for p in ps) for k, ps in v.items()))


# fields written only when set (older versions wrote none of them)
OPTIONAL = frozenset({"modes", "number", "role", "restored_from"})

# what a checkpoint is for, as `log` and the report label it
ROLES = {
    "baseline": "first checkpoint",
    "before_call": "before a call",
    "after_call": "after a call",
    "turn_start": "turn start",
    "safety": "safety (undo point)",
    "manual": "taken by hand",
    "restored": "after a time-machine operation",
    "boundary": "as a crash was found",
}


# each field of the JSON line: (valid?, what it must be)
_FIELDS = {
    "description": (_text, "text"), "kind": (_text, "text"),
    **{k: ((lambda v: v is None or isinstance(v, str)), "text or null")
       for k in ("tool", "session_id", "turn_id", "tool_call_id", "note")},
    "time": ((lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_TIME),
             "a time (seconds since 1970)"),
    "skipped": (_skips, "a list of {path, reason, size}"),
    "nested_repos": ((lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v)), "a list of paths"),
    "added_bytes": (_count, "a count"), "files": (_count, "a count"),
    "modes": (_modes, "a permission record (mode: [paths])"),
    "number": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "a number from 1"),
    "role": ((lambda v: isinstance(v, str) and v in ROLES), "one of " + ", ".join(ROLES)),
    "restored_from": ((lambda v: isinstance(v, str) and len(v) == 40), "a checkpoint id"),
}
def roles_in_order(roles) -> list[str]:
    """Roles (None dropped) in ROLES' order, for one way of listing them everywhere."""
    return [r for r in ROLES if r in roles]


def role_of(meta: CheckpointMeta) -> str | None:
    """The role, also of a checkpoint written before roles were (from its kind, tool and
    description, as those versions wrote them)."""
    if meta.role:
        return meta.role
    if meta.kind in ("safety", "manual"):
        return meta.kind
    if meta.tool == "turn start":
        return "turn_start"
    d = meta.description
    if d.startswith("before "):
        return "before_call"
    if d.startswith("after "):
        return "after_call"
    if d.startswith("first checkpoint"):
        return "baseline"
    if d.startswith("as the crash of operation"):
        return "boundary"
    return None


def message_of(commit: pygit2.Commit) -> str:
    """A commit's message, whatever encoding its header claims (an unknown one: UTF-8, replaced)."""
    return _read_message(commit)[0]


def _read_message(commit: pygit2.Commit) -> tuple[str, list[str]]:
    try:
        return commit.message, []
    except (LookupError, UnicodeError, ValueError):
        return (commit.raw_message.decode("utf-8", "replace"),
                [f"its message claims an encoding that cannot be read ({str(commit.message_encoding)[:40]!r})"])


# a commit's metadata, parsed once per process: a commit never changes (its id is its content),
# and a listing of 10,000 checkpoints would parse every one on every call
_PARSED: dict[str, tuple[CheckpointMeta, str | None, str, str | None]] = {}   # meta, damage, tree, parent
_PARSED_MAX = 100_000


@functools.lru_cache(maxsize=1 << 16)
def iso_time(t: float) -> str:
    """A checkpoint's time as `log` shows it (kept: a listing of 10,000 asks for each again)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


@dataclass
class Checkpoint:
    id: str
    tree_id: str
    parent_id: str | None
    meta: CheckpointMeta
    damage: str | None = None      # why its metadata cannot be trusted (fields it lacked: defaults)
    number: int | None = None      # its number (meta.number, or given by the chain to an older one)

    @classmethod
    def from_commit(cls, commit: pygit2.Commit) -> Checkpoint:
        key = str(commit.id)
        parsed = _PARSED.get(key)
        if parsed is None:
            when = min(max(float(commit.commit_time), 0.0), MAX_TIME)
            message, odd = _read_message(commit)
            meta, problems = CheckpointMeta.parse(message, when=when)
            parsed = (meta, f"damaged metadata: {'; '.join(problems + odd)}" if problems or odd else None,
                      str(commit.tree_id), str(commit.parent_ids[0]) if commit.parent_ids else None)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = parsed
        meta = object.__new__(CheckpointMeta)           # a copy of its own: callers may set fields
        meta.__dict__.update(parsed[0].__dict__)        # (copy.copy, without its generic path)
        return cls(id=key, tree_id=parsed[2], parent_id=parsed[3], meta=meta, damage=parsed[1], number=meta.number)

    def summary(self, index: int | None = None) -> dict:
        m = self.meta
        out = {
            "id": self.id,
            "short_id": self.id[:SHORT_ID],
            "time": m.time,
            "time_iso": iso_time(m.time),
            "description": m.description,
            "kind": m.kind,
            "tool": m.tool,
            "session_id": m.session_id,
            "turn_id": m.turn_id,
            "tool_call_id": m.tool_call_id,
            "files": m.files,
            "skipped": m.skipped,
            "nested_repos": m.nested_repos,
            "added_bytes": m.added_bytes,
        }
        if m.note:
            out["note"] = m.note
        out["number"] = self.number
        out["role"] = role_of(m)
        if m.restored_from:
            out["restored_from"] = m.restored_from
        if self.damage:
            out["damaged"] = self.damage
        if index is not None:
            out["index"] = index
        return out
