"""Checkpoint metadata: what a snapshot commit says about itself.

The commit message is written for `git log` first (a subject and a few
`Key: value` lines) and ends with one line of canonical JSON that the code
reads back, so humans and programs see the same facts.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pygit2

from . import loose
from .codec import canonical, display

SCHEMA = "chronos-git.checkpoint.v1"
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
                                        if not (k == "modes" and v is None)}}
        lines.append(canonical(payload))
        return "\n".join(lines) + "\n"

    @classmethod
    def from_message(cls, message: str) -> CheckpointMeta:
        last = message.rstrip("\n").rsplit("\n", 1)[-1]
        try:
            data = json.loads(last)
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return cls(description=message.split("\n", 1)[0], kind="foreign")
        data.pop("schema", None)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Checkpoint:
    id: str
    tree_id: str
    parent_id: str | None
    meta: CheckpointMeta

    @classmethod
    def from_commit(cls, commit: pygit2.Commit) -> Checkpoint:
        return cls(id=str(commit.id), tree_id=str(commit.tree_id),
                   parent_id=str(commit.parent_ids[0]) if commit.parent_ids else None,
                   meta=CheckpointMeta.from_message(commit.message))

    def summary(self, index: int | None = None) -> dict:
        m = self.meta
        out = {
            "id": self.id,
            "short_id": self.id[:8],
            "time": m.time,
            "time_iso": datetime.fromtimestamp(m.time, UTC).isoformat(timespec="seconds"),
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
        if index is not None:
            out["index"] = index
        return out
