"""The index: what the router serves (every route comes from the command table, api/routes/commands.py)."""
from __future__ import annotations

from fastapi import APIRouter

from ...service import results as r
from ..deps import ERRORS, EnvelopeRoute, respond
from .commands import endpoints


class Index(r.Result):
    plugin: str
    endpoints: list[str]


def router() -> APIRouter:
    api = APIRouter(route_class=EnvelopeRoute, tags=["store"], responses=ERRORS)

    @api.get("/", response_model=Index)
    def index():
        return respond(Index(plugin="chronos-git", endpoints=endpoints()))

    return api
