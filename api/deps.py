"""What every route depends on: the service, the workspace a request names, the
guard against what a browser can be tricked into sending, and the answer.

Any web page the user opens can send requests to 127.0.0.1, so the router
itself (not only the app around it) refuses:

* a Host header that is not a loopback name or an allowed one (DNS
  rebinding): 403.  Extra names: $CHRONOS_GIT_ALLOWED_HOSTS (comma-separated);
* a request that changes state without `Content-Type: application/json`
  (forms and text/plain bodies are sent cross-site without a CORS preflight): 415;
  one without its Content-Length (411) or with a body over 16 MiB (413); a JSON body
  with a key named twice in one object (400: parsers disagree on which one counts);
* a workspace the store does not already know (`Chronos.known_workspace`):
  404, or 403 for `/`, a home, the store and system folders.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Iterable

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as AnyHTTPException

from ..engine.codec import dumps, from_b64
from ..service.errors import envelope
from ..service.results import ErrorResult, Result

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
ALLOWED_HOSTS_ENV = "CHRONOS_GIT_ALLOWED_HOSTS"

# documented for every route: the OpenAPI schema is the contract the panes follow
ERRORS = {code: {"model": ErrorResult, "description": why} for code, why in (
    (400, "bad input"), (403, "a refused workspace or Host"), (404, "unknown checkpoint or workspace"),
    (409, "the recovery gate is closed, the journal is in doubt, or a plan token does not fit"),
    (411, "a request that changes state without its Content-Length"), (413, "a request body over 16 MiB"),
    (415, "a request that changes state must be JSON"), (428, "a restore without its dry run's plan token"),
    (500, "an unexpected failure"), (507, "the store cannot take writes (full disk, read-only)"),
    # bad parameters are answered 400 ErrorResult; a documented default keeps FastAPI from
    # advertising a 422 HTTPValidationError that is never sent
    ("default", "any other error"))}


# the `code` of an error the HTTP layer answers itself (the service's errors carry their own)
HTTP_CODES = {400: "bad_input", 401: "unauthorized", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed", 411: "length_required", 413: "too_large",
              415: "unsupported_media_type"}
MAX_BODY = 16 << 20          # bytes of a request body


def http_error(message: str, status: int, headers=None) -> Response:
    """An error the HTTP layer answers itself, in the envelope every other error has."""
    answer = respond(ErrorResult(error=message, code=HTTP_CODES.get(status, "error")), status)
    answer.headers.update(headers or {})
    return answer


def host_name(value: str) -> str:
    """The name in a Host header: `[::1]:8765` -> `::1`, `LocalHost:80` -> `localhost`."""
    v = value.strip().lower()
    if v.startswith("["):
        name, _, rest = v[1:].partition("]")
        return name if rest == "" or (rest.startswith(":") and rest[1:].isdigit()) else v
    return v.rsplit(":", 1)[0] if v.count(":") == 1 else v


def allowed_hosts(extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, `extra` and $CHRONOS_GIT_ALLOWED_HOSTS (read when the router is built)."""
    names = [*extra, *os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")]
    return LOOPBACK_HOSTS | {host_name(n) for n in names if n.strip()}


def guard(hosts: frozenset[str]):
    """The router-level dependency, so the copy Hermes mounts is protected too."""
    async def check(request: Request) -> None:
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
            length = request.headers.get("content-length", "")
            if not length.isdigit():     # a body streamed without its length would be read whole first
                raise HTTPException(411, "requests that change state must say their Content-Length")
            if int(length) > MAX_BODY:
                raise HTTPException(413, f"the request body has {int(length):,} bytes; at most {MAX_BODY:,} "
                                         "are read (10,000 paths of 1 KiB fit: name folders instead)")
            twice = await _named_twice(await request.body())
            if twice is not None:   # JSON parsers disagree on which one wins: neither is guessed
                raise HTTPException(400, f"invalid request: the JSON body names {twice[:80]!r} twice")
    return check


def respond(result: Result | dict, status: int = 200) -> Response:
    """Every body through `wire()` / codec.jsonable: a name that is not UTF-8 gets a `_b64`
    twin, never a 500."""
    body = result.wire() if isinstance(result, Result) else result
    return Response(dumps(body).encode("utf-8", "replace"), status_code=status, media_type="application/json")


def fail(exc: BaseException) -> Response:
    result, _exit, status = envelope(exc)
    return respond(result, status)


def names(plain: list[str] | None, b64: list[str] | None) -> list[str] | None:
    """`paths` plus the decoded `paths_b64`; None for neither (everything), never an empty list."""
    if plain is None and b64 is None:
        return None
    out = [*(plain or []), *(from_b64(p) for p in b64 or [])]
    if not out:
        raise ValueError("paths is empty: omit it to mean the whole workspace")
    return out


@dataclass
class Deps:
    """Bound once per router: where the service comes from and the default workspace."""
    get_service: Callable
    default_workspace: Callable[[], str | None] | None = None

    def service(self):
        return self.get_service()

    def workspace(self, svc, given: str | None, given_b64: str | None = None) -> str:
        """A workspace the store knows, whatever the client named (or the default one).  An
        empty name is refused, not read as "the default": a client's unset variable must not
        pick the newest workspace for a restore."""
        if given is not None and given_b64 is not None:
            raise ValueError("give workspace or workspace_b64, not both")
        if given_b64 is not None:
            given = from_b64(given_b64)
        if given is not None and not given:
            raise ValueError("workspace is empty: leave it out for the default workspace, or name one")
        if given:
            if not os.path.isabs(given):   # the server's cwd means nothing to an HTTP client
                raise ValueError(f"workspace must be an absolute path, got {given!r}")
            return svc.known_workspace(given)
        d = self.default_workspace() if self.default_workspace else None
        if d:
            return svc.known_workspace(d)
        for w in self.servable(svc):
            return w.root
        raise ValueError("no workspace has checkpoints yet; pass ?workspace=/path")

    @staticmethod
    def servable(svc) -> list:
        """The workspaces a client may name (newest first)."""
        out = []
        for w in svc.workspaces().workspaces:
            try:
                svc.known_workspace(w.root)
            except Exception:
                continue
            out.append(w)
        return out


class EnvelopeRoute(APIRoute):
    """Validation errors, the guard's refusals and anything else become the envelope
    (FastAPI answers 422 {"detail": [...]} otherwise, and a router cannot add app
    exception handlers).  HEAD is answered as GET is (without the body), as Starlette's
    own routes do: monitors ask `HEAD /health`."""

    def _as_get(self, scope):
        """A HEAD request's scope as the GET it stands for (the server keeps its own scope,
        by which it leaves the body out)."""
        if scope.get("type") == "http" and scope.get("method") == "HEAD" and "GET" in self.methods:
            return {**scope, "method": "GET"}
        return scope

    def matches(self, scope):
        return super().matches(self._as_get(scope))

    async def handle(self, scope, receive, send):
        scope = self._as_get(scope)
        if scope.get("type") == "http" and scope.get("method") not in self.methods:
            # Starlette's 405 names the route's own methods; HEAD is answered too
            allow = sorted(self.methods) + (["HEAD"] if "GET" in self.methods else [])
            raise AnyHTTPException(405, headers={"Allow": ", ".join(allow)})
        await super().handle(scope, receive, send)

    def get_route_handler(self):
        handler = super().get_route_handler()
        known = _query_names(self.dependant)

        async def route(request):
            unknown = sorted(set(request.query_params) - known)
            if unknown:     # a misspelt filter (`path` for `paths`) would widen the answer silently
                return http_error(f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(repr(u[:40]) for u in unknown[:5])}; this route "
                                  f"takes: {', '.join(sorted(known)) or 'none'}", 400)
            try:
                return await handler(request)
            except RequestValidationError as exc:
                problems = []
                for e in exc.errors():
                    if e.get("type") == "json_invalid":
                        problems.append(f"the body is not valid JSON ({(e.get('ctx') or {}).get('error')})")
                        continue
                    if tuple(e.get("loc", ())) == ("body",) and e.get("type") == "missing":
                        problems.append("the JSON body is missing")
                        continue
                    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
                    problems.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
                return http_error("invalid request: " + "; ".join(problems), 400)
            except AnyHTTPException as exc:   # the guard, or FastAPI failing to parse the body
                return http_error(str(exc.detail), exc.status_code)
            except Exception as exc:
                return fail(exc)
        return route


class _Twice(Exception):
    pass


def _no_twice(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Twice(k)
        out[k] = v
    return out


def _twice_in(body: bytes) -> str | None:
    try:
        json.loads(body, object_pairs_hook=_no_twice)
    except _Twice as exc:
        return str(exc.args[0])
    except (ValueError, RecursionError):
        return None          # not JSON: FastAPI's own error says so
    return None


async def _named_twice(body: bytes) -> str | None:
    """A key some object of the JSON body names twice, or None (the guard asks, after its own
    checks; FastAPI has read the body already).  A large body is parsed on a worker thread,
    not on the event loop."""
    if not body:
        return None
    if len(body) <= 64 * 1024:
        return _twice_in(body)
    return await run_in_threadpool(_twice_in, body)


def _query_names(dependant) -> set[str]:
    """The query parameters a route declares, its dependencies' included."""
    out = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        out |= _query_names(sub)
    return out
