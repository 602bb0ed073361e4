"""The HTTP API over the service layer: `build_router()`, mounted by the Hermes
dashboard at /api/plugins/chronos-git/ (dashboard/plugin_api.py) and served
standalone by `python -m chronos_git.api` (api/__init__.create_app).

The routes are built from the command table (api/routes/commands.py), each
declaring its `response_model` (service.results), so the OpenAPI schema is the
contract the panes follow.
api/deps.py holds the guard (Host check, JSON-only changes), the workspace
check and the answer; every error is the envelope {"status": "error",
"error": ...} with the status service.errors maps it to, never a bare error
page.  No CORS headers are ever added.  Long git work runs in FastAPI's
thread pool (plain `def` endpoints).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from fastapi import APIRouter, Depends

from .deps import Deps, EnvelopeRoute, allowed_hosts, guard
from .routes import commands, store


def build_router(get_service: Callable, default_workspace: Callable[[], str | None] | None = None, *,
                 extra_hosts: Iterable[str] = ()) -> APIRouter:
    """`get_service()` returns the Chronos service; `default_workspace()` the workspace used
    when a request names none (else the most recent one); `extra_hosts` are Host names
    accepted besides loopback and the environment's."""
    deps = Deps(get_service, default_workspace)
    api = APIRouter(route_class=EnvelopeRoute, dependencies=[Depends(guard(allowed_hosts(extra_hosts)))])
    api.include_router(store.router())
    api.include_router(commands.router(deps))
    return api
