"""HTTP surface: `build_router()` for the Hermes dashboard, `create_app()` standalone."""
from .router import build_router

__all__ = ["build_router", "create_app"]


def create_app(store_dir=None, settings=None, token: str | None = None):
    """A standalone FastAPI app serving the router at /api/plugins/chronos-git.

    With `token`, requests need `X-Hermes-Session-Token` or `Authorization: Bearer`
    (the same headers the Hermes dashboard uses).
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from ..service import Chronos
    app = FastAPI(title="chronos-git")

    if token:
        @app.middleware("http")
        async def _auth(request: Request, call_next):
            given = request.headers.get("x-hermes-session-token") or ""
            auth = request.headers.get("authorization") or ""
            if auth.lower().startswith("bearer "):
                given = given or auth[7:]
            if given != token:
                return JSONResponse({"status": "error", "error": "unauthorized"}, status_code=401)
            return await call_next(request)

    app.include_router(build_router(lambda: Chronos.get(store_dir, settings)),
                       prefix="/api/plugins/chronos-git")
    return app
