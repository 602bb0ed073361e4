"""The routes of the command table (commands/entries.py: every command with `http`).

GET takes the arguments as query parameters (a `{name}` in the path as a path parameter);
POST takes a JSON body whose model, named by the entry (RestoreRequest, ...), is made here
from the arguments and refuses unknown fields (a misspelt `dry_run` must not mean a real
restore).  A workspace or a path may be sent as `_b64` for names that are not UTF-8.  The
answer is the entry's result type, declared as the response model, so the OpenAPI schema is
the contract the panes follow.
"""
from __future__ import annotations

import inspect
from typing import Any, Literal

from fastapi import APIRouter, Body, Path, Query
from fastapi.responses import HTMLResponse
from pydantic import Field, create_model

from ...commands import COMMANDS, Context
from ..deps import ERRORS, Deps, EnvelopeRoute, names, respond
from ..models import Body as BodyModel

OPERATOR = "operator (HTTP API)"
USER = "user (HTTP API)"

# errors stay JSON envelopes; without an explicit content FastAPI would label them text/html
JSON_ERRORS = {code: {"description": spec["description"],
                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResult"}}}}
               for code, spec in ERRORS.items()}

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
WORKSPACE_HELP = "an absolute path the store knows (default: the host's, else the newest)"


def endpoints(table=COMMANDS) -> list[str]:
    """`METHOD /path` of every route, for the index."""
    return [f"{c.http.method} {c.http.path}" for c in table if c.http is not None]


def _fields(cmd) -> list[tuple[str, Any, Any]]:
    """(name, annotation, pydantic Field) of every HTTP field of `cmd`, workspace first."""
    out: list[tuple[str, Any, Any]] = []
    if cmd.workspace and cmd.http.workspace:
        out += [("workspace", str | None, Field(None)), ("workspace_b64", str | None, Field(None))]
    for a in cmd.args:
        name = a.http_name
        if name is None:
            continue
        default = a.http_default if a.http_default is not None else a.default
        about = a.help or None
        if a.kind == "names":
            out += [(name, list[str] | None, Field(None)), (name + "_b64", list[str] | None, Field(None))]
        elif a.kind == "json":
            out.append((name, dict | None, Field(None, description=about)))
        elif a.kind == "maybe":
            out.append((name, bool | None, Field(None, description=about)))
        elif a.kind == "bool":
            out.append((name, bool, Field(bool(default), description=about)))
        elif a.kind == "int":
            out.append((name, int, Field(default, ge=a.ge, le=a.le, description=about)))
        else:
            kind: Any = Literal[a.choices] if a.choices else str   # type: ignore[valid-type]
            if a.required:
                out.append((name, kind, Field(..., min_length=1, description=about)))
            else:
                out.append((name, kind if default is not None else kind | None, Field(default, description=about)))
    return out


def _bound(field, which: str):
    for m in field.metadata:
        if getattr(m, which, None) is not None:
            return getattr(m, which)
    return None


def _query_params(cmd) -> list[inspect.Parameter]:
    params = []
    for name, kind, field in _fields(cmd):
        if "{" + name + "}" in cmd.http.path:
            spec: Any = Path(..., description=field.description)
        else:
            spec = Query(None if field.is_required() else field.default, ge=_bound(field, "ge"),
                         le=_bound(field, "le"), description=field.description,
                         alias="from" if name == "from" else None)
        params.append(inspect.Parameter("from_" if name == "from" else name, inspect.Parameter.KEYWORD_ONLY,
                                        default=spec, annotation=kind))
    return params


def _body_model(cmd):
    fields = {name: (kind, field) for name, kind, field in _fields(cmd)}
    return create_model(cmd.http.body, __base__=BodyModel, **fields)


def _tag(path: str) -> str:
    first = path.strip("/").split("/")[0]
    return {"journal": "journal", "report": "report", "checkpoints": "checkpoints", "diff": "checkpoints",
            "snapshot": "checkpoints", "restore": "checkpoints"}.get(first, "store")


def _route(api: APIRouter, deps: Deps, cmd) -> None:
    http = cmd.http
    model = _body_model(cmd) if http.method == "POST" else None
    if model is not None:
        model.__doc__ = f"The body of {http.method} {http.path}."
    required = model is not None and any(f.is_required() for f in model.model_fields.values())

    def endpoint(**kw):
        svc = deps.service()
        values = dict(kw.pop("req").model_dump()) if model is not None else {}
        values.update({("from" if k == "from_" else k): v for k, v in kw.items()})
        params: dict = {}
        for a in cmd.args:
            name = a.http_name
            if name is None:
                continue
            if a.kind == "names":
                params[a.name] = names(values.get(name), values.get(name + "_b64"))
            else:
                params[a.name] = values.get(name)
            if name in http.also_query and values.get(name) is None:
                params[a.name] = False
        for name in http.also_query:                            # the deprecated query spelling
            q = kw.get(name)
            if q:
                params[name] = True
        ctx = Context("http", actor=OPERATOR, user=USER, extra={"servable": deps.servable})
        if cmd.workspace and http.workspace:
            given, given_b64 = values.get("workspace"), values.get("workspace_b64")
            named = cmd.workspace == "required" or given or given_b64 is not None or deps.default_workspace
            ctx.workspace = deps.workspace(svc, given, given_b64) if named else None
        result = cmd.run(svc, ctx, params)
        if http.html:
            return HTMLResponse(result, headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                                                 "Cache-Control": "no-store"})
        return respond(result, 409 if http.conflict and result.status != "ok" else 200)

    sig: list[inspect.Parameter] = []
    if model is not None:
        body: Any = Body(...) if required else Body(default_factory=model)
        sig.append(inspect.Parameter("req", inspect.Parameter.KEYWORD_ONLY, default=body, annotation=model))
        for name in http.also_query:
            sig.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=bool | None,
                                         default=Query(None, description="deprecated: send it in the JSON body")))
    else:
        sig = _query_params(cmd)
    endpoint.__signature__ = inspect.Signature(sig)            # type: ignore[attr-defined]
    endpoint.__name__ = cmd.name.replace(" ", "_").replace("-", "_")
    if http.html:
        api.add_api_route(http.path, endpoint, methods=[http.method], response_class=HTMLResponse,
                          tags=[_tag(http.path)], description=http.summary or cmd.help, responses={
                              **JSON_ERRORS, 200: {"content": {"text/html": {}}, "description": http.summary}})
    else:
        api.add_api_route(http.path, endpoint, methods=[http.method], response_model=cmd.result,
                          tags=[_tag(http.path)], description=http.summary or cmd.help, responses=ERRORS)


def router(deps: Deps, table=COMMANDS) -> APIRouter:
    api = APIRouter(route_class=EnvelopeRoute)
    for cmd in table:
        if cmd.http is not None:
            _route(api, deps, cmd)
    return api
