"""The OpenAPI schema is the contract the panes follow (docs/design.md): fetched over
real HTTP (uvicorn on 127.0.0.1), every route declares its answer as a named
component and its errors as ErrorResult, and real answers validate against the
models in service/results.py.

The helpers below are also what the pane tests (tests/e2e/) check recorded field
reads and canned answers with: `undeclared(doc, reads)` lists the reads the schema
does not declare, `validate(doc, method, path, body)` parses an answer with the
route's model.
"""
from __future__ import annotations

import functools
import os
import re

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from chronos_git.api import create_app
from chronos_git.api.routes.store import Index
from chronos_git.service import results
from chronos_git.settings import Settings
from support.server import Server

PREFIX = "/api/plugins/chronos-git"
TOKEN = "schema-test-token"
NON_JSON = {("get", "/report"): "text/html"}     # a page, not a result
MODELS = {name: m for name, m in vars(results).items() if isinstance(m, type) and issubclass(m, BaseModel)}
MODELS["Index"] = Index


# ----------------------------------------------------------- schema walking
def component(doc: dict, ref: str) -> dict:
    return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


def branches(doc: dict, schema: dict):
    """The shapes a value of `schema` may take: $ref followed, anyOf/oneOf/allOf flattened."""
    if "$ref" in schema:
        yield from branches(doc, component(doc, schema["$ref"]))
        return
    alternatives = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if alternatives:
        for alt in alternatives:
            yield from branches(doc, alt)
    else:
        yield schema


def children(doc: dict, schema: dict, segment: str) -> list[dict]:
    """What reading `segment` (a field name, or `[]` for an element) of a `schema` value may
    give; empty if the schema does not declare it.  Only declared `properties` count, and the
    keys of a typed map (`dict[str, int]`): `additionalProperties: true` (extra="allow",
    `dict[str, Any]`) names no field."""
    out = []
    for b in branches(doc, schema):
        if segment == "[]":
            if b.get("type") == "array" and "items" in b:
                out.append(b["items"])
        elif segment in b.get("properties", {}):
            out.append(b["properties"][segment])
        elif "properties" not in b and isinstance(b.get("additionalProperties"), dict) and b["additionalProperties"]:
            out.append(b["additionalProperties"])
    return out


def route_of(doc: dict, method: str, path: str) -> str | None:
    """The schema's path template for a request path (under PREFIX or relative to it)."""
    path = path if path.startswith(PREFIX) else PREFIX + path
    candidates = [t for t, ops in doc["paths"].items() if method.lower() in ops]
    if path in candidates:
        return path
    for t in candidates:
        if re.fullmatch(re.sub(r"\{[^}/]+\}", "[^/]+", t), path):
            return t
    return None


def response_schema(doc: dict, method: str, template: str) -> dict:
    return doc["paths"][template][method.lower()]["responses"]["200"]["content"]["application/json"]["schema"]


def undeclared(doc: dict, reads) -> list[str]:
    """The reads ("GET /checkpoints: checkpoints[].short_id", path relative to PREFIX, no
    query) whose field path the route's 200 schema does not declare."""
    bad = []
    for read in sorted(set(reads)):
        head, field = read.split(": ", 1)
        method, path = head.split(" ", 1)
        template = route_of(doc, method, path)
        if template is None:
            bad.append(f"{read}  (no such route)")
            continue
        schemas = [response_schema(doc, method, template)]
        for segment in re.findall(r"\[\]|[^.\[\]]+", field):
            schemas = [c for s in schemas for c in children(doc, s, segment)]
        if not schemas:
            bad.append(f"{method} {template[len(PREFIX):]}: {field}")
    return bad


def models_of(doc: dict, method: str, template: str) -> list[type[BaseModel]]:
    schema = response_schema(doc, method, template)
    refs = [schema] if "$ref" in schema else schema["anyOf"]
    return [MODELS[r["$ref"].rsplit("/", 1)[1]] for r in refs]


def validate(doc: dict, method: str, path: str, body) -> BaseModel:
    """`body` parsed with the model the route declares (one of them, for a union)."""
    template = route_of(doc, method, path)
    assert template, f"{method} {path}: no such route in the schema"
    problems = []
    for model in models_of(doc, method, template):
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            problems.append(str(exc))
    raise AssertionError(f"{method} {path} answered what its schema does not declare:\n" + "\n".join(problems))


@functools.cache
def openapi_doc() -> dict:
    """The schema as the app builds it: the document /openapi.json serves (checked below).
    Building it opens no store."""
    return create_app("/nonexistent/chronos-git-schema-store", Settings(), token="x").openapi()


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def served(store_dir, ws, cli):
    """A store with history (checkpoints, a name that is not UTF-8, a crashed file call the
    server settles at its start) and the API over HTTP: (client, workspace, first id, cli)."""
    first = cli("--json", "snapshot", "-m", "first", cwd=ws).json["checkpoint"]
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("not utf-8 name\n")
    assert cli("--json", "run", "--", "sh", "-c", "echo gamma > b.txt", cwd=ws).rc == 0
    assert cli("write", "--json", "c.txt", "--content", "crashed\n", cwd=ws, fault="after_dispatch").rc == -9
    server = Server(create_app(store_dir, Settings(), token=TOKEN))
    try:
        with httpx.Client(base_url=server.base, headers={"X-Hermes-Session-Token": TOKEN}, timeout=60) as http:
            yield http, ws, first, cli
    finally:
        server.stop()


# -------------------------------------------------------------------- tests
@pytest.mark.process
def test_every_route_declares_a_named_result_and_errors_as_error_result(served):
    http = served[0]
    r = http.get("/openapi.json")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert httpx.get(f"{str(http.base_url).rstrip('/')}/openapi.json").status_code == 401   # behind the token
    assert doc == openapi_doc()                 # what the pane tests check reads against
    routes = [(m, p) for p, ops in doc["paths"].items() for m in ops]
    assert routes and all(p.startswith(PREFIX) for _m, p in routes)
    assert {("get", PREFIX + "/checkpoints"), ("post", PREFIX + "/restore"), ("get", PREFIX + "/journal/status")} \
        <= set(routes)
    schemas = doc["components"]["schemas"]
    problems = []
    for method, path in routes:
        op = doc["paths"][path][method]
        where = f"{method.upper()} {path[len(PREFIX):]}"
        content = op["responses"].get("200", {}).get("content")
        if not content:
            problems.append(f"{where}: no 200 answer declared")
        elif (method, path[len(PREFIX):]) in NON_JSON:
            if list(content) != [NON_JSON[method, path[len(PREFIX):]]]:
                problems.append(f"{where}: 200 should be {NON_JSON[method, path[len(PREFIX):]]} only: {content}")
        else:
            schema = content.get("application/json", {}).get("schema", {})
            refs = [schema] if "$ref" in schema else schema.get("anyOf", [])
            if not refs or not all("$ref" in x for x in refs):
                problems.append(f"{where}: 200 is not a named component: {content}")
            for x in refs:
                target = component(doc, x["$ref"]) if "$ref" in x else {}
                if target.get("type") != "object" or not target.get("properties"):
                    problems.append(f"{where}: 200 {x} declares no fields")
        errors = {code: resp for code, resp in op["responses"].items()
                  if (code[0] in "45" or code == "default") }
        if not {"400", "404", "409", "500"} <= set(errors):
            problems.append(f"{where}: documents only the errors {sorted(errors)}")
        for code, resp in errors.items():
            if resp.get("content") != {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResult"}}}:
                problems.append(f"{where}: {code} is not documented as a JSON ErrorResult: {resp.get('content')}")
    assert not problems, "the schema does not declare:\n" + "\n".join(problems)
    assert {"status", "error"} <= set(schemas["ErrorResult"]["properties"])
    # bad parameters are a 400 ErrorResult (and no 422 is documented: the test below)
    bad = http.get("/checkpoints", params={"limit": 0})
    assert bad.status_code == 400 and results.ErrorResult.model_validate(bad.json())


def test_no_undelivered_validation_error_is_documented():
    doc = openapi_doc()
    documented = {(p, m) for p, ops in doc["paths"].items() for m, op in ops.items() if "422" in op["responses"]}
    assert documented == set()


@pytest.mark.process
def test_real_answers_validate_against_their_models(served):
    http, ws, first, cli = served
    doc = http.get("/openapi.json").json()
    seen = set()

    def check(method: str, path: str, resp: httpx.Response, status: int = 200):
        assert resp.status_code == status, (method, path, resp.text)
        seen.add((method.lower(), route_of(doc, method, path)))
        return validate(doc, method, path, resp.json())

    def get(path, **params):
        return check("GET", path, http.get(path, params=params))

    def post(path, body, status=200):
        return check("POST", path, http.post(path, json=body), status)

    w = str(ws)
    status = get("/journal/status")
    assert [s.result for s in status.settled_at_start] == ["completed"]
    assert status.protection.state == "on" and status.unresolved == []
    get("/")
    health = get("/health", workspace=w)
    assert health.protection.state == "on" and health.workspace.root == w
    get("/health")
    assert get("/workspaces").workspaces[0].root == w
    log = get("/checkpoints", workspace=w)
    newest = log.checkpoints[0].id
    assert get(f"/checkpoints/{newest}", workspace=w).changes is not None
    assert get(f"/checkpoints/{first}", workspace=w).changes is None
    diff = get("/diff", workspace=w, **{"from": first})
    odd = [f for f in diff.files if f.path_b64]
    assert odd and odd[0].path == "caf\ufffd.txt"                         # the declared _b64 twin
    get("/diff", workspace=w, stat="true", **{"from": first})
    get("/journal/log", limit=50)
    get("/journal/checkpoint")

    plan = post("/restore", {"checkpoint": first, "workspace": w, "dry_run": True})
    assert plan.plan_token and {i.action for i in plan.plan} >= {"restore", "delete"}
    done = post("/restore", {"checkpoint": first, "workspace": w, "plan_token": plan.plan_token})
    assert done.target.id == first and done.safety_checkpoint and done.failed == 0
    r = http.post("/undo", json={"workspace": w})                   # named as itself, not "a restore"
    assert r.status_code == 428 and "an undo needs the plan_token" in r.json()["error"]
    undo = post("/undo", {"workspace": w, "dry_run": True})
    assert post("/undo", {"workspace": w, "plan_token": undo.plan_token}).kind == "undo"
    redo = post("/redo", {"workspace": w, "dry_run": True})
    assert post("/redo", {"workspace": w, "plan_token": redo.plan_token}).kind == "redo"
    agent = post("/restore", {"checkpoint": first, "workspace": w, "agent_only": True, "dry_run": True})
    assert agent.kind == "agent-only restore" and agent.restored_checkpoint == first and agent.plan_token
    post("/journal/verify", {})
    post("/snapshot", {"workspace": w, "message": "from the schema test"})
    post("/compact", {"dry_run": True})

    # an operation nobody can settle: unresolved, then resolved by an operator
    assert cli("--json", "run", "--", "true", cwd=ws, fault="after_dispatch").rc == -9
    run = cli("--json", "journal", "status", cwd=ws).json["unresolved"][0]["operation_id"]
    status = get("/journal/status")
    assert [o.operation_id for o in status.unresolved] == [run] and status.gate == "closed"
    post("/journal/resolve", {"operation_id": run, "outcome": "completed", "evidence": "checked"})
    assert post("/revert", {"workspace": w, "operation": run, "dry_run": True}).calls == [run]
    post("/journal/recover", {})

    json_routes = {(m, p) for p, ops in doc["paths"].items() for m in ops if (m, p[len(PREFIX):]) not in NON_JSON}
    assert json_routes <= seen, f"routes whose answers this test does not check: {sorted(json_routes - seen)}"


def test_the_field_check_names_what_the_schema_does_not_declare():
    doc = openapi_doc()
    fine = ["GET /checkpoints: checkpoints[].short_id", "GET /checkpoints: checkpoints[].skipped[].path",
            "GET /checkpoints/0123abc: changes.files[].path_b64", "GET /journal/status: protection.fix",
            "GET /journal/status: unresolved[].operation_id", "GET /journal/status: totals.started",
            "POST /restore: target.description", "POST /journal/recover: replayed[].paths[]",
            "GET /journal/log: events[].tool"]
    assert undeclared(doc, fine) == []
    assert undeclared(doc, ["GET /checkpoints: checkpoints[].bogus", "GET /journal/log: events[].args",
                            "GET /journal/status: unresolved[].owner.pid", "GET /nowhere: x",
                            "POST /checkpoints: checkpoints", "GET /journal/status: gate.x"]) == [
        "GET /checkpoints: checkpoints[].bogus", "GET /journal/log: events[].args",
        "GET /journal/status: gate.x", "GET /journal/status: unresolved[].owner.pid",
        "GET /nowhere: x  (no such route)", "POST /checkpoints: checkpoints  (no such route)"]


def test_an_edited_events_odd_tool_is_shown_as_text_not_an_error():
    from chronos_git.service.results import Event
    e = Event(schema="chronos-git.journal.v1", seq=1, timestamp_ns=1, kind="started", operation_id=None, id="x",
              tool=["rm", "-rf"], session_id=7, actor={"uid": 0})
    assert (e.tool, e.session_id, e.subagent_id) == ('["rm", "-rf"]', "7", None)
    assert e.model_extra == {"actor": {"uid": 0}}
