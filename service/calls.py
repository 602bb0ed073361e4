"""A protected call as the service sees it: what it declares, the ticket its
durable intent returns, and its outcome."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..journal_refs.events import sha256_hex
from ..journal_refs.evidence import UNKNOWN

__all__ = ["UNKNOWN", "sha256_hex", "Declared", "Call", "Ticket", "Outcome"]

UNSET = object()          # an image the service reads (pre) or stores (post) itself


@dataclass
class Declared:
    """A path a call declares it will change, and what it should contain after (if known).

    `post` is the content to be (bytes), None (the path will be gone) or UNKNOWN.
    A caller that already holds both images as blob ids (a restore) passes
    `pre_id` / `post_id` instead, and nothing is read or stored again."""
    path: str                                 # absolute
    post: bytes | None | str = UNKNOWN
    pre_id: object = UNSET
    post_id: object = UNSET


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
    pre_checkpoint: str | None = None         # set: taken already (a restore's safety checkpoint),
    snapshots: bool = True                    # and with snapshots=False none is taken before or after
    subagent: dict | None = None              # a subagent's call: what the host said of it (Subagent.fields)

    def provenance(self) -> dict:
        """Who asked for the call, as its journal events record it (each only where known)."""
        out: dict = {}
        if self.replay_of:
            out["replay_of"] = self.replay_of
        if self.actor:
            out["actor"] = self.actor
        out.update(self.subagent or {})
        return out


@dataclass
class Ticket:
    operation_id: str
    call: Call
    pre_checkpoint: str | None
    snapshot: dict
    started_ns: int
    fingerprint: str
    declared: list[dict] = field(default_factory=list)   # path, pre, post as journaled
    gate_warning: str | None = None
    protected_baseline: tuple | None = None   # a shell call: (maintenance events, fingerprint) after its intent
    since_ticks: int | None = None            # a shell call: its start, in process start-time ticks


@dataclass
class Outcome:
    status: str                               # ok | error | partial (a restore with failed paths)
    result_hash: str | None = None
    exit_code: int | None = None
    uncertain_reason: str | None = None       # exception / cancelled / timeout: outcome unknown
    post_checkpoint: str | None = None        # set: the state after is known (a restore's target)
    fields: dict = field(default_factory=dict)   # more facts for the journal event (per-path evidence)
