"""The store: what it serves, its health, its workspaces, compaction."""
from __future__ import annotations

from fastapi import APIRouter, Body, Query

from ...service import results as r
from ..deps import ERRORS, Deps, EnvelopeRoute, respond
from ..models import CompactRequest

ENDPOINTS = ["GET /health", "GET /workspaces", "GET /checkpoints", "GET /checkpoints/{id}", "GET /diff",
             "POST /snapshot", "POST /restore", "POST /compact", "GET /journal/status", "GET /journal/log",
             "POST /journal/verify", "GET /journal/checkpoint", "POST /journal/resolve", "POST /journal/recover",
             "GET /report"]


class Index(r.Result):
    plugin: str
    endpoints: list[str]


def router(deps: Deps) -> APIRouter:
    api = APIRouter(route_class=EnvelopeRoute, tags=["store"], responses=ERRORS)

    @api.get("/", response_model=Index)
    def index():
        return respond(Index(plugin="chronos-git", endpoints=ENDPOINTS))

    @api.get("/health", response_model=r.HealthResult)
    def health(workspace: str | None = None, workspace_b64: str | None = None):
        svc = deps.service()
        named = workspace or workspace_b64 is not None or deps.default_workspace
        return respond(svc.health(deps.workspace(svc, workspace, workspace_b64) if named else None))

    @api.get("/workspaces", response_model=r.WorkspacesResult)
    def workspaces():
        return respond(r.WorkspacesResult(workspaces=deps.servable(deps.service())))

    @api.post("/compact", response_model=r.CompactResult)
    def compact(req: CompactRequest = Body(default_factory=CompactRequest),
                dry_run: bool | None = Query(None, description="deprecated: send it in the JSON body")):
        return respond(deps.service().compact(dry_run=req.dry_run or bool(dry_run)))

    return api
