"""What HTTP clients send: request bodies.  Unknown fields are errors (a misspelt
`dry_run` must not mean a real restore).  Responses are service.results models."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RestoreRequest(Body):
    checkpoint: str = Field(..., description="id, 7+ hex prefix, index (1 = newest) or 'latest'")
    workspace: str | None = None
    workspace_b64: str | None = None
    paths: list[str] | None = None
    paths_b64: list[str] | None = None
    clean: bool | None = None
    dry_run: bool = False
    force: bool = False
    plan_token: str | None = Field(None, description="from the dry run of this same request")


class ResolveRequest(Body):
    operation_id: str
    outcome: Literal["completed", "not_applied"]
    evidence: str = Field(..., min_length=1)


class RecoverRequest(Body):
    operation_id: str | None = None
    replay: bool = False
    rollback: bool = False
    dry_run: bool = Field(False, description="with rollback: the plan, nothing changed")


class SnapshotRequest(Body):
    workspace: str | None = None
    workspace_b64: str | None = None
    message: str = "checkpoint from the dashboard"


class VerifyRequest(Body):
    checkpoint: dict | None = Field(None, description="an exported journal head that must be an ancestor")


class CompactRequest(Body):
    dry_run: bool = False
