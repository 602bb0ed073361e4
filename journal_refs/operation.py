"""An operation: one protected call, from its intent to its outcome, as the journal sees it."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.owner import ProcessIdentity


@dataclass(frozen=True)
class OpenOperation:
    """An open operation.  `state`: running (its owner is alive), pending (its owner died
    before the outcome: a crash), uncertain (the outcome is known to be unknown)."""
    operation_id: str
    state: str
    tool: str | None = None
    session_id: str | None = None
    tool_call_id: str | None = None
    workspace: str | None = None
    pre_checkpoint: str | None = None
    started_seq: int | None = None
    owner: dict | None = None
    reason: str | None = None
    evidence: object = None
    declared: list = field(default_factory=list)     # [{"path", "pre", "post"}]
    boundary_checkpoint: str | None = None            # a crashed shell call: the workspace as it was found

    @classmethod
    def from_state(cls, operation_id: str, info: dict) -> OpenOperation:
        """From the journal state's record; a running one whose owner is gone is pending."""
        state = info["state"]
        if state == "running":
            owner = ProcessIdentity.from_dict(info.get("owner"))
            if owner is None or not owner.alive():
                state = "pending"
        return cls(operation_id=operation_id, state=state, tool=info.get("tool"),
                   session_id=info.get("session_id"), tool_call_id=info.get("tool_call_id"),
                   workspace=info.get("workspace"), pre_checkpoint=info.get("pre_checkpoint"),
                   started_seq=info.get("started_seq"), owner=info.get("owner"), reason=info.get("reason"),
                   evidence=info.get("evidence"), declared=well_formed_declared(info.get("declared")) or [],
                   boundary_checkpoint=info.get("boundary_checkpoint"))

    @property
    def declared_paths(self) -> list[str]:
        return [d["path"] for d in self.declared]

    def to_dict(self) -> dict:
        """The wire shape (results.Operation)."""
        d: dict = {"operation_id": self.operation_id, "tool": self.tool, "state": self.state,
             "session_id": self.session_id, "tool_call_id": self.tool_call_id, "workspace": self.workspace,
             "pre_checkpoint": self.pre_checkpoint, "started_seq": self.started_seq, "owner": self.owner}
        if self.reason:
            d["reason"] = self.reason
        if self.evidence is not None:
            d["evidence"] = self.evidence
        if self.declared:
            d["declared_paths"] = self.declared_paths
        if self.boundary_checkpoint:
            d["boundary_checkpoint"] = self.boundary_checkpoint
        return d


def well_formed_declared(value) -> list[dict] | None:
    """The declared paths as journaled ({"path", "pre", "post"} each); None for anything else
    (an edited event), which declares none: the call is left to an operator instead of settled
    by evidence read from a malformed list."""
    if isinstance(value, list) and all(isinstance(d, dict) and isinstance(d.get("path"), str) for d in value):
        return list(value)
    return None
