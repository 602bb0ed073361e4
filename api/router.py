"""HTTP API over the service layer (FastAPI).  Mounted by the Hermes
dashboard at /api/plugins/chronos-git/ (dashboard/plugin_api.py) and served
standalone by `python -m chronos_git.api`.

Every response is the service's JSON envelope; errors are
{"status": "error", "error": ...} with 400 (bad input, including request
validation: never FastAPI's 422), 404 (unknown
checkpoint), 409 (recovery gate closed / journal integrity) or 500.
Long git work runs in FastAPI's thread pool (plain `def` endpoints).
"""
from __future__ import annotations

import os
from typing import Callable, Literal

from fastapi import APIRouter, Body, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from ..engine.errors import CheckpointNotFound, ChronosError
from ..journal_refs import IntegrityError, JournalError


class RestoreRequest(BaseModel):
    checkpoint: str = Field(..., description="id, 7+ hex prefix, index (1 = newest) or 'latest'")
    workspace: str | None = None
    paths: list[str] | None = None
    clean: bool | None = None
    dry_run: bool = False


class ResolveRequest(BaseModel):
    operation_id: str
    outcome: Literal["completed", "not_applied"]
    evidence: str = Field(..., min_length=1)


class RecoverRequest(BaseModel):
    operation_id: str | None = None
    replay: bool = False
    rollback: bool = False


class SnapshotRequest(BaseModel):
    workspace: str | None = None
    message: str = "checkpoint from the dashboard"


class VerifyRequest(BaseModel):
    checkpoint: dict | None = None


def _error(exc: Exception) -> JSONResponse:
    from ..service import Blocked
    if isinstance(exc, Blocked):
        return JSONResponse({**exc.details, "status": "error", "error": "chronos_blocked"}, status_code=409)
    if isinstance(exc, CheckpointNotFound):
        code = 404
    elif isinstance(exc, IntegrityError):
        code = 409
    elif isinstance(exc, (ChronosError, JournalError, ValueError)):
        code = 400
    else:
        code = 500
    msg = str(exc) if code != 500 else f"{type(exc).__name__}: {exc}"
    return JSONResponse({"status": "error", "error": msg}, status_code=code)


class _EnvelopeRoute(APIRoute):
    """Request validation errors become the 400 envelope too (FastAPI answers 422
    with {"detail": [...]} otherwise, and a router cannot add app exception handlers)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                problems = []
                for e in exc.errors():
                    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
                    problems.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
                return JSONResponse({"status": "error", "error": "invalid request: " + "; ".join(problems)},
                                    status_code=400)
        return route


def build_router(get_service: Callable, default_workspace: Callable[[], str | None] | None = None) -> APIRouter:
    """`get_service()` returns the Chronos service; `default_workspace()` the
    workspace used when a request names none (else the most recent one)."""
    router = APIRouter(route_class=_EnvelopeRoute)

    def ws_of(given: str | None) -> str:
        if given:
            if not os.path.isabs(given):   # the server's cwd means nothing to an HTTP client
                raise ChronosError(f"workspace must be an absolute path, got {given!r}")
            return given
        if default_workspace:
            d = default_workspace()
            if d:
                return d
        items = get_service().workspaces()["workspaces"]
        if not items:
            raise ChronosError("no workspace has checkpoints yet; pass ?workspace=/path")
        return items[0]["root"]

    def call(fn):
        try:
            return fn()
        except Exception as exc:   # every error becomes an envelope, never a bare 500 page
            return _error(exc)

    @router.get("/")
    def index():
        return {"status": "ok", "plugin": "chronos-git",
                "endpoints": ["GET /health", "GET /workspaces", "GET /checkpoints", "GET /checkpoints/{id}",
                              "GET /diff", "POST /snapshot", "POST /restore", "POST /compact",
                              "GET /journal/status", "GET /journal/log", "POST /journal/verify",
                              "GET /journal/checkpoint", "POST /journal/resolve", "POST /journal/recover"]}

    @router.get("/health")
    def health(workspace: str | None = None):
        return call(lambda: get_service().health(ws_of(workspace) if workspace or default_workspace else None))

    @router.get("/workspaces")
    def workspaces():
        return call(lambda: get_service().workspaces())

    @router.get("/checkpoints")
    def checkpoints(workspace: str | None = None, limit: int = Query(20, ge=1, le=1000)):
        return call(lambda: get_service().log(ws_of(workspace), limit))

    @router.get("/checkpoints/{checkpoint}")
    def checkpoint(checkpoint: str, workspace: str | None = None):
        return call(lambda: get_service().show(ws_of(workspace), checkpoint))

    @router.get("/diff")
    def diff(workspace: str | None = None, from_: str | None = Query(None, alias="from"),
             to: str | None = None, stat: bool = False, max_chars: int = Query(100_000, ge=0, le=5_000_000)):
        return call(lambda: get_service().diff(ws_of(workspace), from_, to, patch=not stat, max_chars=max_chars))

    @router.post("/snapshot")
    def snapshot(req: SnapshotRequest = Body(default_factory=SnapshotRequest)):
        return call(lambda: get_service().snapshot(ws_of(req.workspace), req.message, tool="dashboard"))

    @router.post("/restore")
    def restore(req: RestoreRequest):
        return call(lambda: get_service().restore(ws_of(req.workspace), req.checkpoint, paths=req.paths,
                                                  clean=req.clean, dry_run=req.dry_run, actor="user (HTTP API)"))

    @router.post("/compact")
    def compact(dry_run: bool = False):
        return call(lambda: get_service().compact(dry_run=dry_run))

    @router.get("/journal/status")
    def journal_status():
        return call(lambda: get_service().journal_status())

    @router.get("/journal/log")
    def journal_log(limit: int = Query(50, ge=1, le=10_000)):
        return call(lambda: get_service().journal_log(limit))

    @router.post("/journal/verify")
    def journal_verify(req: VerifyRequest = Body(default_factory=VerifyRequest)):
        def run():
            res = get_service().journal_verify(req.checkpoint)
            return res if res["status"] == "ok" else JSONResponse(res, status_code=409)
        return call(run)

    @router.get("/journal/checkpoint")
    def journal_checkpoint():
        return call(lambda: get_service().journal_checkpoint())

    @router.post("/journal/resolve")
    def journal_resolve(req: ResolveRequest):
        return call(lambda: get_service().resolve(req.operation_id, req.outcome, req.evidence,
                                                  actor="operator (HTTP API)"))

    @router.post("/journal/recover")
    def journal_recover(req: RecoverRequest = Body(default_factory=RecoverRequest)):
        return call(lambda: get_service().recover(req.operation_id, replay=req.replay, rollback=req.rollback,
                                                  actor="operator (HTTP API)"))

    return router
