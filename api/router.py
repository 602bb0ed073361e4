"""HTTP API over the service layer (FastAPI).  Mounted by the Hermes
dashboard at /api/plugins/chronos-git/ (dashboard/plugin_api.py) and served
standalone by `python -m chronos_git.api`.

Any web page the user opens can send requests to 127.0.0.1, so the router
itself (not only the app around it) refuses what a browser can be tricked
into sending:

* a Host header that is not a loopback name or an allowed one (DNS
  rebinding): 403.  Extra names: $CHRONOS_GIT_ALLOWED_HOSTS (comma-separated);
* a POST that is not `Content-Type: application/json` (forms and text/plain
  bodies are sent cross-site without a CORS preflight): 415;
* a workspace the store does not already know (`Chronos.known_workspace`):
  404, or 403 for `/`, a home, the store and system folders;
* a real restore without the `plan_token` of its dry run: 428 (409 when the
  token is unknown, used, expired or was issued for another request).

No CORS headers are ever added.  Every body goes through
`engine.codec.jsonable`: a file name that is not UTF-8 comes out as `path`
(for display) plus `path_b64` (the exact bytes); clients send such names
back as `workspace_b64` / `paths_b64`.  Errors are {"status": "error",
"error": ...} with 400 (bad input, including request validation: never
FastAPI's 422), 403, 404, 409 (recovery gate, journal integrity, plan token),
415, 428 or 500; never a bare error page.
Long git work runs in FastAPI's thread pool (plain `def` endpoints).
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from ..engine.codec import dumps, from_b64
from ..engine.errors import (CheckpointNotFound, ChronosError, PlanTokenError, UnknownWorkspace,
                             WorkspaceRefused)
from ..journal_refs import IntegrityError, JournalError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
ALLOWED_HOSTS_ENV = "CHRONOS_GIT_ALLOWED_HOSTS"


class _Body(BaseModel):
    """Unknown fields are errors: a misspelt `dry_run` must not mean a real restore."""
    model_config = ConfigDict(extra="forbid")


class RestoreRequest(_Body):
    checkpoint: str = Field(..., description="id, 7+ hex prefix, index (1 = newest) or 'latest'")
    workspace: str | None = None
    workspace_b64: str | None = None
    paths: list[str] | None = None
    paths_b64: list[str] | None = None
    clean: bool | None = None
    dry_run: bool = False
    force: bool = False
    plan_token: str | None = Field(None, description="from the dry run of this same request")


class ResolveRequest(_Body):
    operation_id: str
    outcome: Literal["completed", "not_applied"]
    evidence: str = Field(..., min_length=1)


class RecoverRequest(_Body):
    operation_id: str | None = None
    replay: bool = False
    rollback: bool = False


class SnapshotRequest(_Body):
    workspace: str | None = None
    workspace_b64: str | None = None
    message: str = "checkpoint from the dashboard"


class VerifyRequest(_Body):
    checkpoint: dict | None = None


class CompactRequest(_Body):
    dry_run: bool = False


def host_name(value: str) -> str:
    """The name in a Host header: `[::1]:8765` -> `::1`, `LocalHost:80` -> `localhost`."""
    v = value.strip().lower()
    if v.startswith("["):
        return v[1:].split("]", 1)[0]
    return v.rsplit(":", 1)[0] if v.count(":") == 1 else v


def allowed_hosts(extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, `extra` and $CHRONOS_GIT_ALLOWED_HOSTS (read when the router is built)."""
    names = [*extra, *os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")]
    return LOOPBACK_HOSTS | {host_name(n) for n in names if n.strip()}


def _json(body, status: int = 200) -> Response:
    """Every body through codec.jsonable: names that are not UTF-8 get a `_b64` twin, never a 500."""
    return Response(dumps(body).encode("utf-8", "replace"), status_code=status, media_type="application/json")


def _fail(message: str, status: int, /, **extra) -> Response:
    return _json({**extra, "status": "error", "error": message}, status)


def _error(exc: Exception) -> Response:
    from ..service import Blocked
    if isinstance(exc, Blocked):
        return _fail("chronos_blocked", 409, **exc.details)
    for kinds, code in (((CheckpointNotFound, UnknownWorkspace), 404), (WorkspaceRefused, 403),
                        ((PlanTokenError, IntegrityError), 409),
                        ((ChronosError, JournalError, ValueError), 400)):
        if isinstance(exc, kinds):
            extra = {"code": exc.code} if isinstance(exc, ChronosError) else {}
            return _fail(str(exc), code, **extra)
    return _fail(f"{type(exc).__name__}: {exc}", 500)


class _EnvelopeRoute(APIRoute):
    """Validation errors, the guard's refusals and anything else become the envelope
    (FastAPI answers 422 {"detail": [...]} otherwise, and a router cannot add app
    exception handlers)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                problems = []
                for e in exc.errors():
                    if e.get("type") == "json_invalid":
                        problems.append(f"the body is not valid JSON ({(e.get('ctx') or {}).get('error')})")
                        continue
                    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
                    problems.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
                return _fail("invalid request: " + "; ".join(problems), 400)
            except HTTPException as exc:      # the guard, or FastAPI failing to parse the body
                return _fail(str(exc.detail), exc.status_code)
            except Exception as exc:
                return _error(exc)
        return route


def _guard(hosts: frozenset[str]):
    """Router-level dependency, so the copy Hermes mounts is protected too."""
    async def guard(request: Request) -> None:
        given = request.headers.get("host", "")
        if host_name(given) not in hosts:
            raise HTTPException(403, f"Host {given[:100]!r} is not allowed: chronos-git answers only to "
                                     f"loopback names (127.0.0.1, localhost, [::1]) and those listed in "
                                     f"${ALLOWED_HOSTS_ENV}")
        if request.method not in ("GET", "HEAD"):
            ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                raise HTTPException(415, "requests that change state must be sent as Content-Type: "
                                         f"application/json (got {ctype or 'none'!r})")
    return guard


def _names(plain: list[str] | None, b64: list[str] | None) -> list[str] | None:
    """`paths` plus the decoded `paths_b64`; None for neither (everything), never an empty list."""
    if plain is None and b64 is None:
        return None
    names = [*(plain or []), *(from_b64(p) for p in b64 or [])]
    if not names:
        raise ChronosError("paths is empty: omit it to mean the whole workspace")
    return names


def build_router(get_service: Callable, default_workspace: Callable[[], str | None] | None = None, *,
                 extra_hosts: Iterable[str] = ()) -> APIRouter:
    """`get_service()` returns the Chronos service; `default_workspace()` the
    workspace used when a request names none (else the most recent one);
    `extra_hosts` are Host names accepted besides loopback and the environment's."""
    router = APIRouter(route_class=_EnvelopeRoute, dependencies=[Depends(_guard(allowed_hosts(extra_hosts)))])

    def servable(svc, root: str) -> bool:
        try:
            svc.known_workspace(root)
            return True
        except (ChronosError, ValueError, OSError):
            return False

    def ws_of(svc, given: str | None, given_b64: str | None = None) -> str:
        """A workspace the store knows, whatever the client named (or the default)."""
        if given_b64 is not None:
            given = from_b64(given_b64)
        if given:
            if not os.path.isabs(given):   # the server's cwd means nothing to an HTTP client
                raise ChronosError(f"workspace must be an absolute path, got {given!r}")
            return svc.known_workspace(given)
        d = default_workspace() if default_workspace else None
        if d:
            return svc.known_workspace(d)
        for w in svc.workspaces()["workspaces"]:
            if servable(svc, w["root"]):
                return w["root"]
        raise ChronosError("no workspace has checkpoints yet; pass ?workspace=/path")

    def call(fn):
        try:
            res = fn()
        except Exception as exc:   # every error becomes an envelope, never a bare 500 page
            return _error(exc)
        return res if isinstance(res, Response) else _json(res)

    @router.get("/")
    def index():
        return call(lambda: {
            "status": "ok", "plugin": "chronos-git",
            "endpoints": ["GET /health", "GET /workspaces", "GET /checkpoints", "GET /checkpoints/{id}",
                          "GET /diff", "POST /snapshot", "POST /restore", "POST /compact",
                          "GET /journal/status", "GET /journal/log", "POST /journal/verify",
                          "GET /journal/checkpoint", "POST /journal/resolve", "POST /journal/recover"]})

    @router.get("/health")
    def health(workspace: str | None = None, workspace_b64: str | None = None):
        def run():
            svc = get_service()
            named = workspace or workspace_b64 is not None or default_workspace
            return svc.health(ws_of(svc, workspace, workspace_b64) if named else None)
        return call(run)

    @router.get("/workspaces")
    def workspaces():
        def run():
            svc = get_service()
            res = svc.workspaces()
            res["workspaces"] = [w for w in res["workspaces"] if servable(svc, w["root"])]
            return res
        return call(run)

    @router.get("/checkpoints")
    def checkpoints(workspace: str | None = None, workspace_b64: str | None = None,
                    limit: int = Query(20, ge=1, le=1000)):
        def run():
            svc = get_service()
            return svc.log(ws_of(svc, workspace, workspace_b64), limit)
        return call(run)

    @router.get("/checkpoints/{checkpoint}")
    def checkpoint(checkpoint: str, workspace: str | None = None, workspace_b64: str | None = None):
        def run():
            svc = get_service()
            return svc.show(ws_of(svc, workspace, workspace_b64), checkpoint)
        return call(run)

    @router.get("/diff")
    def diff(workspace: str | None = None, workspace_b64: str | None = None,
             from_: str | None = Query(None, alias="from"), to: str | None = None, stat: bool = False,
             max_chars: int = Query(100_000, ge=0, le=5_000_000),
             paths: list[str] | None = Query(None), paths_b64: list[str] | None = Query(None)):
        def run():
            svc = get_service()
            return svc.diff(ws_of(svc, workspace, workspace_b64), from_, to, patch=not stat,
                            max_chars=max_chars, paths=_names(paths, paths_b64))
        return call(run)

    @router.post("/snapshot")
    def snapshot(req: SnapshotRequest = Body(default_factory=SnapshotRequest)):
        def run():
            svc = get_service()
            return svc.snapshot(ws_of(svc, req.workspace, req.workspace_b64), req.message, tool="dashboard")
        return call(run)

    @router.post("/restore")
    def restore(req: RestoreRequest):
        def run():
            svc = get_service()
            ws = ws_of(svc, req.workspace, req.workspace_b64)
            paths = _names(req.paths, req.paths_b64)
            if not req.dry_run and not req.plan_token:
                return _fail("a restore needs the plan_token of its dry run: POST the same request with "
                             "dry_run=true, check the plan, then send it again with that plan_token", 428,
                             code="plan_token_required")
            return svc.restore(ws, req.checkpoint, paths=paths, clean=req.clean, dry_run=req.dry_run,
                               force=req.force, actor="user (HTTP API)", plan_token=req.plan_token,
                               require_plan=True)
        return call(run)

    @router.post("/compact")
    def compact(req: CompactRequest = Body(default_factory=CompactRequest),
                dry_run: bool | None = Query(None, description="deprecated: send it in the JSON body")):
        return call(lambda: get_service().compact(dry_run=req.dry_run or bool(dry_run)))

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
            return res if res["status"] == "ok" else _json(res, 409)
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
