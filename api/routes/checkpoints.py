"""Checkpoints of a workspace: list, show, diff, take one, restore one."""
from __future__ import annotations

from fastapi import APIRouter, Body, Query

from ...service import results as r
from ..deps import ERRORS, Deps, EnvelopeRoute, names, respond
from ..models import RestoreRequest, SnapshotRequest


def router(deps: Deps) -> APIRouter:
    api = APIRouter(route_class=EnvelopeRoute, tags=["checkpoints"], responses=ERRORS)

    @api.get("/checkpoints", response_model=r.LogResult)
    def checkpoints(workspace: str | None = None, workspace_b64: str | None = None,
                    limit: int = Query(20, ge=1, le=1000)):
        svc = deps.service()
        return respond(svc.log(deps.workspace(svc, workspace, workspace_b64), limit))

    @api.get("/checkpoints/{checkpoint}", response_model=r.ShowResult)
    def checkpoint(checkpoint: str, workspace: str | None = None, workspace_b64: str | None = None):
        svc = deps.service()
        return respond(svc.show(deps.workspace(svc, workspace, workspace_b64), checkpoint))

    @api.get("/diff", response_model=r.DiffResult)
    def diff(workspace: str | None = None, workspace_b64: str | None = None,
             from_: str | None = Query(None, alias="from"), to: str | None = None, stat: bool = False,
             max_chars: int = Query(100_000, ge=0, le=5_000_000),
             paths: list[str] | None = Query(None), paths_b64: list[str] | None = Query(None)):
        svc = deps.service()
        return respond(svc.diff(deps.workspace(svc, workspace, workspace_b64), from_, to, patch=not stat,
                                max_chars=max_chars, paths=names(paths, paths_b64)))

    @api.post("/snapshot", response_model=r.SnapshotResult)
    def snapshot(req: SnapshotRequest = Body(default_factory=SnapshotRequest)):
        svc = deps.service()
        return respond(svc.snapshot(deps.workspace(svc, req.workspace, req.workspace_b64), req.message,
                                    tool="dashboard"))

    @api.post("/restore", response_model=r.RestoreResult)
    def restore(req: RestoreRequest):
        """A dry run returns `plan_token`; the real restore must send it back (428 without)."""
        svc = deps.service()
        res = svc.restore(deps.workspace(svc, req.workspace, req.workspace_b64), req.checkpoint,
                          paths=names(req.paths, req.paths_b64), clean=req.clean, dry_run=req.dry_run,
                          force=req.force, actor="user (HTTP API)", plan_token=req.plan_token,
                          require_plan=True)
        return respond(res, 200 if res.status == "ok" else 409)

    return api
