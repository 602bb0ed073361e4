"""Journal events: one type per kind, canonical JSON, hashes and the commit format.

An event is stored as the canonical JSON of its payload (the bytes git hashes
into the chain); the types here are typed views of such a payload, so code
reads `ev.outcome`, never `payload["outcome"]`, and the kind of an event is a
class, never a string literal.  The payload itself is kept verbatim: `journal
verify` recomputes the canonical form of exactly what was stored.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..engine.codec import canonical, display

SCHEMA = "chronos-git.journal.v1"
STATE_SCHEMA = "chronos-git.journal-state.v1"
WITNESS_SCHEMA = "chronos-git.journal-checkpoint.v1"   # the witness file and exported heads
OUTCOMES = ("completed", "not_applied", "rolled_back")

__all__ = ["JournalEvent", "Genesis", "Started", "Returned", "Uncertain", "Recovered", "Resolved",
           "ReplayedEvent", "Maintenance", "Refused", "TYPES", "parse", "canonical", "message", "parse_message",
           "sha256_hex", "args_hash", "fingerprint", "call_hashes"]


@dataclass(frozen=True)
class JournalEvent:
    """Common to every event; `payload` is the stored dict, verbatim."""
    kind: ClassVar[str]
    required: ClassVar[tuple[str, ...]] = ()
    _own_fields: ClassVar[tuple[str, ...] | None] = None    # the kind's own fields, found once
    seq: int
    operation_id: str | None
    payload: dict = field(repr=False)

    @classmethod
    def from_payload(cls, payload: dict) -> JournalEvent:
        missing = [k for k in cls.required if payload.get(k) is None]
        if missing:
            raise ValueError(f"{cls.kind} event without {', '.join(missing)}")
        names = cls.__dict__.get("_own_fields")
        if names is None:                # per class (__dict__: not a base class's), not per event
            names = tuple(f.name for f in fields(cls) if f.name not in ("seq", "operation_id", "payload"))
            cls._own_fields = names
        extra = {n: payload.get(n) for n in names}
        return cls(seq=payload.get("seq"),   # type: ignore[arg-type]  # no seq: JournalState.apply refuses it
                   operation_id=payload.get("operation_id"), payload=payload, **extra)


@dataclass(frozen=True)
class Genesis(JournalEvent):
    kind = "genesis"
    required = ("journal_id",)
    journal_id: str | None = None


@dataclass(frozen=True)
class Started(JournalEvent):
    """Durable intent: written and fsynced before the tool is dispatched."""
    kind = "started"
    required = ("operation_id",)
    tool: str | None = None
    session_id: str | None = None
    tool_call_id: str | None = None
    turn_id: str | None = None
    owner: dict | None = None
    workspace: str | None = None
    pre_checkpoint: str | None = None
    declared: list | None = None              # [{"path", "pre", "post"}] of a file call
    snapshot: dict | None = None
    replay_of: str | None = None
    # a subagent's call, as the host names it (each only where the host says)
    subagent_id: str | None = None
    parent_session_id: str | None = None
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class Returned(JournalEvent):
    """The tool returned: a known outcome (`status` ok, error, or partial for a restore)."""
    kind = "returned"
    required = ("operation_id",)
    status: str | None = None
    post_checkpoint: str | None = None


@dataclass(frozen=True)
class Uncertain(JournalEvent):
    """The outcome is unknown (exception, timeout, a crash settled as partial)."""
    kind = "uncertain"
    required = ("operation_id",)
    reason: str | None = None
    evidence: list | None = None


@dataclass(frozen=True)
class Recovered(JournalEvent):
    """Settled by evidence at a later start (only a crashed call that was still running)."""
    kind = "recovered"
    required = ("operation_id", "outcome")
    outcome: str | None = None
    evidence: list | None = None
    replayable: bool | None = None


@dataclass(frozen=True)
class Resolved(JournalEvent):
    """Settled by an operator, with evidence."""
    kind = "resolved"
    required = ("operation_id", "outcome")
    outcome: str | None = None
    evidence: str | None = None


@dataclass(frozen=True)
class ReplayedEvent(JournalEvent):
    """A not-applied file call was applied once, as operation `replay_operation_id`."""
    kind = "replayed"
    required = ("operation_id",)
    replay_operation_id: str | None = None


@dataclass(frozen=True)
class Maintenance(JournalEvent):
    """Retention decisions and compactions (no operation)."""
    kind = "maintenance"
    action: str | None = None


@dataclass(frozen=True)
class Refused(JournalEvent):
    """A call refused before dispatch, nothing run and no operation opened: its target is
    chronos-git's own (the store, the witness, the plugin's files; `code` protected_path), or
    the recovery gate was closed (`code` chronos_blocked, `blocked_by` the operations it waited
    on).  Journals written before this kind existed never hold one; their verification is unchanged."""
    kind = "refused"
    required = ("operation_id", "code")
    tool: str | None = None
    code: str | None = None
    paths: list | None = None                 # [{"path", "resolved", "what"}]


TYPES: dict[str, type[JournalEvent]] = {t.kind: t for t in (Genesis, Started, Returned, Uncertain, Recovered,
                                                             Resolved, ReplayedEvent, Maintenance, Refused)}


def parse(payload: dict) -> JournalEvent:
    """The typed view of a stored payload; ValueError for an unknown kind or missing fields."""
    try:
        cls = TYPES[payload["kind"]]
    except (KeyError, TypeError):
        raise ValueError(f"unknown event kind {payload.get('kind') if isinstance(payload, dict) else payload!r}") \
            from None
    return cls.from_payload(payload)


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()


def args_hash(args) -> str:
    return sha256_hex(canonical(args))


def fingerprint(tool: str, args) -> str:
    return sha256_hex(canonical({"tool": tool, "args": args}))


def call_hashes(tool: str, args) -> tuple[str, str]:
    """(fingerprint(tool, args), args_hash(args)) with the arguments encoded once: a
    write_file call's arguments hold the whole file.  The fingerprint's text is the object
    {"args", "tool"} in canonical (sorted, compact) form, built around the same encoding."""
    encoded = canonical(args)
    return (sha256_hex('{"args":' + encoded + ',"tool":' + canonical(tool) + "}"), sha256_hex(encoded))


def message(payload: dict) -> str:
    """`git log` shows the first line; the canonical JSON follows a blank line."""
    bits = [f"journal #{payload['seq']} {payload['kind']}"]
    if payload.get("tool"):
        bits.append(display(str(payload["tool"])))
    if payload.get("operation_id"):
        bits.append(f"op={payload['operation_id'][:12]}")
    if payload.get("outcome"):
        bits.append(f"outcome={payload['outcome']}")
    if payload.get("status"):
        bits.append(f"status={payload['status']}")
    if payload.get("tool_call_id"):
        bits.append(display(f"call={payload['tool_call_id']}"))
    return " ".join(bits).replace("\n", " ") + "\n\n" + canonical(payload) + "\n"


def parse_message(text: str) -> tuple[dict, str]:
    """(payload, raw json text) of an event commit message."""
    try:
        _, raw = text.split("\n\n", 1)
    except ValueError:
        raise ValueError("event commit has no payload") from None
    raw = raw.rstrip("\n")
    return json.loads(raw), raw
