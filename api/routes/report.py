"""The forensic report (report/) as one self-contained HTML page: GET /report.

Not JSON, so there is no response_model: the OpenAPI schema declares a
text/html answer instead.  Errors are still the JSON envelope.  The page
carries its own Content-Security-Policy; the header repeats it, so even a
browser that opened it from here would load and run nothing.
"""
from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from ..deps import ERRORS, Deps, EnvelopeRoute

# errors stay JSON envelopes; without an explicit content FastAPI would label them text/html
JSON_ERRORS = {code: {"description": spec["description"],
                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResult"}}}}
               for code, spec in ERRORS.items()}

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


def router(deps: Deps) -> APIRouter:
    api = APIRouter(route_class=EnvelopeRoute, tags=["report"], responses=JSON_ERRORS)

    @api.get("/report", response_class=HTMLResponse,
             responses={200: {"content": {"text/html": {}},
                              "description": "the forensic report: one HTML document, no scripts, "
                                             "no external references"}})
    def report(limit: int = Query(500, ge=1, le=10_000, description="newest journal events in the timeline"),
               checkpoints: int = Query(20, ge=1, le=200, description="newest checkpoints per workspace")):
        from ...report import build          # jinja2 only when a report is asked for
        return HTMLResponse(build(deps.service(), limit=limit, checkpoints=checkpoints),
                            headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                                     "Cache-Control": "no-store"})

    return api
