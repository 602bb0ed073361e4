"""Backend of the dashboard tab, mounted by `hermes dashboard` / `hermes serve`
at /api/plugins/chronos-git/ behind Hermes' session token.

Hermes imports this file by path (no package context), so it finds the
chronos-git package that owns this directory and reuses its router: the
dashboard process shares nothing in memory with agents, only the store.
The router guards itself (Host names, JSON-only POSTs, known workspaces,
plan tokens); extra Host names come from $CHRONOS_GIT_ALLOWED_HOSTS, read here
at import.
"""
import importlib
import importlib.util
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _package():
    for name in ("hermes_plugins.chronos_git", "chronos_git"):
        mod = sys.modules.get(name)
        if mod is not None and Path(mod.__file__).resolve().parent == _ROOT:
            return mod
    spec = importlib.util.spec_from_file_location("chronos_git", _ROOT / "__init__.py",
                                                  submodule_search_locations=[str(_ROOT)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["chronos_git"] = mod
    spec.loader.exec_module(mod)
    return mod


_pkg = _package()


def _full_router():
    settings = importlib.import_module(_pkg.__name__ + ".settings")
    service = importlib.import_module(_pkg.__name__ + ".service")
    api = importlib.import_module(_pkg.__name__ + ".api.router")

    def svc():
        loaded = settings.load(env=False)           # the one resolver Hermes and the CLIs use
        svc = service.Chronos.get(settings.store_location(loaded.settings), loaded.settings,
                                  problems=loaded.problems)
        svc.watch_profile()                         # weakening edits of config.yaml are held
        return svc
    return api.build_router(svc)


def _off_router(reason: str):
    """Protection cannot run here (pygit2 missing, say): the pane still says so, and why."""
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse
    shell = importlib.import_module(_pkg.__name__ + ".hermes.shell")
    off = APIRouter()

    @off.get("/health")
    def health():
        return JSONResponse(shell.off_status(reason), status_code=503)
    return off


try:
    router = _full_router()
except Exception as exc:                # never silently off, in the dashboard either
    router = _off_router(f"the chronos-git API could not load ({type(exc).__name__}: {exc})")
