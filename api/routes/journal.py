"""The journal: status, events, verification, the exported head, reconciliation."""
from __future__ import annotations

from fastapi import APIRouter, Body, Query

from ...service import results as r
from ..deps import ERRORS, Deps, EnvelopeRoute, respond
from ..models import RecoverRequest, ResolveRequest, VerifyRequest


def router(deps: Deps) -> APIRouter:
    api = APIRouter(prefix="/journal", route_class=EnvelopeRoute, tags=["journal"], responses=ERRORS)

    @api.get("/status", response_model=r.JournalStatus)
    def status():
        return respond(deps.service().journal_status())

    @api.get("/log", response_model=r.EventsResult)
    def log(limit: int = Query(50, ge=1, le=10_000)):
        return respond(deps.service().journal_log(limit))

    @api.post("/verify", response_model=r.VerifyResult)
    def verify(req: VerifyRequest = Body(default_factory=VerifyRequest)):
        res = deps.service().journal_verify(req.checkpoint)
        return respond(res, 200 if res.status == "ok" else 409)

    @api.get("/checkpoint", response_model=r.JournalHeadResult)
    def export_head():
        return respond(deps.service().journal_export())

    @api.post("/resolve", response_model=r.ResolveResult)
    def resolve(req: ResolveRequest):
        return respond(deps.service().resolve(req.operation_id, req.outcome, req.evidence,
                                              actor="operator (HTTP API)"))

    @api.post("/recover", response_model=r.RecoverResult | r.RollbackResult)
    def recover(req: RecoverRequest = Body(default_factory=RecoverRequest)):
        return respond(deps.service().recover(req.operation_id, replay=req.replay, rollback=req.rollback,
                                              dry_run=req.dry_run,
                                              actor="operator (HTTP API)"))

    return api
