"""A protected tool call as the service sees it: what it declares, the ticket
its durable intent returns, and its outcome."""
from __future__ import annotations

from dataclasses import dataclass, field

from .engine.errors import ChronosError
from .journal_refs.recovery import UNKNOWN


class Blocked(ChronosError):
    """The recovery gate is closed; `details` is the structured refusal."""
    code = "chronos_blocked"


@dataclass
class Declared:
    """A path a call declares it will change, and what it should contain after (if known)."""
    path: str                                 # absolute
    post: bytes | None | str = UNKNOWN        # bytes, None (= deleted) or UNKNOWN


@dataclass
class Call:
    tool: str
    args: dict
    workspace: str
    session_id: str | None = None
    turn_id: str | None = None
    tool_call_id: str | None = None
    declared: list[Declared] | None = None    # None: not a file tool (full snapshot)
    replay_of: str | None = None
    actor: str | None = None


@dataclass
class Ticket:
    operation_id: str
    call: Call
    pre_checkpoint: str | None
    snapshot: dict
    started_ns: int
    fingerprint: str
    declared: list[dict] = field(default_factory=list)   # path, pre, post as journaled
    extra: dict = field(default_factory=dict)


@dataclass
class Outcome:
    status: str                    # ok | error
    result_hash: str | None = None
    exit_code: int | None = None
    uncertain_reason: str | None = None   # exception / cancelled / timeout: outcome unknown
