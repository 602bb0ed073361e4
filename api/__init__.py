"""HTTP surface: `build_router()` for the Hermes dashboard, `create_app()` standalone."""
import secrets

from .. import __version__
from .router import build_router

__all__ = ["build_router", "create_app"]


def create_app(store_dir=None, settings=None, token: str | None = None, *, allowed_hosts=(),
               problems: list[str] | None = None):
    """A standalone FastAPI app serving the router at /api/plugins/chronos-git.

    Every request needs the token in `X-Hermes-Session-Token` or `Authorization:
    Bearer` (the Hermes dashboard's headers).  There is no unauthenticated mode,
    since any web page can reach 127.0.0.1: without `token` one is generated.
    The token is `app.state.token`.  `allowed_hosts` are Host names accepted
    besides loopback ones; `problems` are the settings problems /health reports.
    """
    from fastapi import FastAPI, Request
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from ..service import Chronos
    from .deps import http_error
    token = token or secrets.token_urlsafe(32)
    expected = token.encode("utf-8", "surrogateescape")
    app = FastAPI(title="chronos-git", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/plugins/chronos-git/openapi.json")
    app.state.token = token

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        given = request.headers.get("x-hermes-session-token") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = given or auth[7:]
        if not secrets.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
            return http_error("unauthorized", 401)
        return await call_next(request)

    @app.exception_handler(StarletteHTTPException)
    async def _envelope(request: Request, exc: StarletteHTTPException):
        """Outside the router too (unknown path, wrong method): the envelope, not {"detail": ...}."""
        return http_error(str(exc.detail), exc.status_code, exc.headers)

    def service() -> Chronos:
        svc = Chronos.get(store_dir, settings, problems=problems)
        svc.watch_profile(env_overrides=True)       # weakening edits of config.yaml are held
        return svc

    app.include_router(build_router(service,
                                    extra_hosts=allowed_hosts),
                       prefix="/api/plugins/chronos-git")
    return app
