"""The HTTP API against what a hostile web page, a confused client or a bad
file name can send: real uvicorn on 127.0.0.1, real HTTP through httpx, a
real store whose checkpoints are made through the service (never the API).

Any page the user opens can send requests to 127.0.0.1 (simple cross-site
POSTs need no preflight; DNS rebinding makes a foreign name resolve to
127.0.0.1), so each test states what must never be served or changed.
"""
from __future__ import annotations

import base64
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pygit2
import pytest

from chronos_git.api import create_app
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.server import Server

TOKEN = "hostile-test-token"
PREFIX = "/api/plugins/chronos-git"
SECRET = "chronos-hostile-secret-4711"
AUTH = {"X-Hermes-Session-Token": TOKEN}


@pytest.fixture
def known(ws, store_dir):
    """A workspace the store knows: two checkpoints made through the service."""
    svc = Chronos.get(store_dir, Settings())
    first = svc.snapshot(str(ws), "first").wire()["checkpoint"]
    (ws / "a.txt").write_text("changed\n")
    second = svc.snapshot(str(ws), "second").wire()["checkpoint"]
    return {"ws": ws, "first": first, "second": second}


@pytest.fixture
def server(store_dir, known):
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    yield srv
    srv.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=60) as c:
        c.get("/health")                     # the journal exists before baselines are taken
        yield c


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def store_state(store_dir: Path) -> tuple:
    """Every ref with its target and every workspace gitdir: what a request could add."""
    repo = pygit2.Repository(str(store_dir))
    refs = sorted((name, str(repo.references[name].resolve().target)) for name in repo.references)
    wt = store_dir / "worktrees"
    return refs, sorted(os.listdir(wt)) if wt.exists() else []


def tree(path: Path) -> dict:
    """Every file below `path` with its bytes."""
    out = {}
    for root, dirs, files in os.walk(os.fsencode(path)):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, os.fsencode(path))] = fh.read()
    return out


def envelope(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.request.method, str(r.request.url), r.status_code, r.text)
    body = r.json()
    assert body["status"] == "error" and isinstance(body["error"], str) and body["error"], body
    assert isinstance(body.get("code"), str) and body["code"], body       # what a program branches on
    assert "Traceback" not in r.text
    return body


# ------------------------------------------------- unknown / refused paths
def _targets(tmp_path: Path, store_dir: Path, ws: Path) -> dict[str, tuple[str, int]]:
    stranger = tmp_path / "stranger"
    (stranger / "sub").mkdir(parents=True, exist_ok=True)
    (stranger / "secret.txt").write_text(SECRET + "\n")
    (stranger / "sub" / "more.txt").write_text(SECRET + "\n")
    link = tmp_path / "innocent-looking"
    if not link.exists():
        link.symlink_to("/etc")
    return {"etc": ("/etc", 403), "root": ("/", 403), "home": (os.path.expanduser("~"), 403),
            "usr-share": ("/usr/share", 403), "store": (str(store_dir), 403),
            "holds-the-store": (str(tmp_path), 403), "symlink-to-etc": (str(link), 403),
            "stranger": (str(stranger), 404), "inside-a-stranger": (str(stranger / "sub"), 404),
            "inside-a-known-workspace": (str(ws / "src"), 404)}


@pytest.mark.parametrize("field", ["workspace", "workspace_b64"])
@pytest.mark.parametrize("target", ["etc", "root", "home", "usr-share", "store", "holds-the-store",
                                    "symlink-to-etc", "stranger", "inside-a-stranger",
                                    "inside-a-known-workspace"])
def test_only_workspaces_the_store_knows_are_served(http, known, store_dir, tmp_path, target, field):
    path, status = _targets(tmp_path, store_dir, known["ws"])[target]
    name = {field: path if field == "workspace" else b64(os.fsencode(path))}
    stranger = tmp_path / "stranger"
    before = store_state(store_dir), tree(stranger), tree(known["ws"])
    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    # read-only requests first: on a server that serves anything, these fail before a snapshot of `/`
    requests = [
        lambda: http.get("/checkpoints", params=name),
        lambda: http.get("/health", params=name),
        lambda: http.get("/checkpoints/latest", params=name),
        lambda: http.get("/diff", params=name),
        lambda: http.post("/restore", json={"checkpoint": "latest", "dry_run": True, **name}),
        lambda: http.post("/restore", json={"checkpoint": "latest", "plan_token": "x", **name}),
        lambda: http.post("/snapshot", json={"message": "steal", **name}),
    ]
    for send in requests:
        r = send()
        body = envelope(r, status)
        if status == 404:
            assert "unknown workspace" in body["error"], body
        assert SECRET not in r.text and passwd not in r.text
    assert (store_state(store_dir), tree(stranger), tree(known["ws"])) == before
    assert not (stranger / ".git").exists()
    # the known workspace itself is still served, by name and by base64
    assert http.get("/checkpoints", params={"workspace": str(known["ws"])}).status_code == 200
    r = http.get("/checkpoints", params={"workspace_b64": b64(os.fsencode(known["ws"]))})
    assert [c["id"] for c in r.json()["checkpoints"]] == [known["second"], known["first"]]


def test_relative_and_outside_paths_stay_400(http, known):
    ws = str(known["ws"])
    # an empty name is not "the default workspace" (a client's unset variable), nor are two names
    for name in ({"workspace": ""}, {"workspace_b64": ""}, {"workspace": ws, "workspace_b64": b64(b"/x")}):
        r = http.post("/restore", json={"checkpoint": known["first"], "dry_run": True, **name})
        assert envelope(r, 400)["error"].startswith(("workspace is empty", "give workspace or")), r.text
        envelope(http.get("/checkpoints", params=name), 400)
    envelope(http.get("/checkpoints", params={"workspace": "ws"}), 400)
    envelope(http.get("/checkpoints", params={"workspace_b64": b64(b"ws")}), 400)
    for name in ({"workspace": ws + "\x00/x"}, {"workspace_b64": b64(os.fsencode(ws) + b"\0")}):
        assert "contains a NUL character" in envelope(http.get("/checkpoints", params=name), 400)["error"]
    for paths in (["/etc/passwd"], ["../../../etc/passwd"], []):
        r = http.post("/restore", json={"checkpoint": known["first"], "workspace": ws, "dry_run": True,
                                        "paths": paths})
        envelope(r, 400)
        assert "root:" not in r.text


# --------------------------------------------------------------- the Host
@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}",
                                  "localhost.evil.example", "127.0.0.2:{port}", "[::2]:{port}", "0.0.0.0:{port}"])
def test_foreign_host_headers_are_refused(server, http, known, store_dir, host):
    """DNS rebinding: a foreign name that resolves to 127.0.0.1 reaches the server with the page's Host."""
    h = {"Host": host.format(port=server.port)}
    before = store_state(store_dir), tree(known["ws"])
    for r in (http.get("/workspaces", headers=h),
              http.get("/checkpoints", params={"workspace": str(known["ws"])}, headers=h),
              http.post("/snapshot", json={"workspace": str(known["ws"])}, headers=h),
              http.post("/restore", json={"checkpoint": known["first"], "workspace": str(known["ws"]),
                                          "dry_run": True}, headers=h),
              http.post("/restore", content=b'{"dry_run": true, "dry_run": false}',     # the Host comes first
                        headers={**h, "Content-Type": "application/json"})):
        assert "Host" in envelope(r, 403)["error"]
        assert "changed" not in r.text
    assert (store_state(store_dir), tree(known["ws"])) == before
    for good in ("127.0.0.1:{port}", "localhost:{port}", "LocalHost", "[::1]:{port}", "127.0.0.1"):
        assert http.get("/workspaces", headers={"Host": good.format(port=server.port)}).status_code == 200


def test_extra_host_names_come_from_the_environment(monkeypatch, store_dir, known):
    monkeypatch.setenv("CHRONOS_GIT_ALLOWED_HOSTS", " chronos.test , Box.LAN:8080")
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    try:
        with httpx.Client(base_url=srv.base, headers=AUTH, timeout=30) as c:
            for ok in ("chronos.test", f"chronos.test:{srv.port}", "box.lan:1"):
                assert c.get("/workspaces", headers={"Host": ok}).status_code == 200, ok
            envelope(c.get("/workspaces", headers={"Host": "evil.example"}), 403)
    finally:
        srv.stop()


def test_the_router_guards_itself_inside_another_app(store_dir, known):
    """As in `hermes dashboard`: the router mounted by an app without our middleware."""
    from fastapi import FastAPI

    from chronos_git.api.router import build_router
    app = FastAPI()
    app.include_router(build_router(lambda: Chronos.get(store_dir, Settings())), prefix=PREFIX)
    srv = Server(app)
    try:
        with httpx.Client(base_url=srv.base, timeout=30) as c:
            assert c.get("/workspaces").status_code == 200
            envelope(c.get("/workspaces", headers={"Host": "evil.example"}), 403)
            envelope(c.post("/snapshot", content=b'{"message": "x"}', headers={"Content-Type": "text/plain"}), 415)
            envelope(c.get("/checkpoints", params={"workspace": "/etc"}), 403)
    finally:
        srv.stop()
    assert [c for c in Chronos.get(store_dir, Settings()).log(str(known["ws"]), 10).wire()["checkpoints"]
            if c["description"] == "x"] == []


# ------------------------------------------------- cross-site simple POSTs
def test_cross_site_simple_posts_are_refused_and_there_is_no_cors(http, known, store_dir):
    ws = str(known["ws"])
    (known["ws"] / "new.txt").write_text("keep me\n")
    body = {"checkpoint": known["first"], "workspace": ws}
    plan = http.post("/restore", json={**body, "dry_run": True}).json()
    real = {**body, "dry_run": False, "plan_token": plan.get("plan_token")}
    before = store_state(store_dir), tree(known["ws"])
    text = json.dumps(real).encode()
    kinds = [
        {"content": text, "headers": {"Content-Type": "text/plain;charset=UTF-8"}},
        {"content": b"x=" + text, "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
        {"files": {"x": ("x", text)}},                                          # multipart/form-data
        {"content": text},                                                      # a Blob: no Content-Type
        {"content": text, "headers": {"Content-Type": "application/jsonx"}},
    ]
    for kw in kinds:
        for path, payload in (("/restore", text), ("/snapshot", b'{"workspace": "%s"}' % ws.encode()),
                              ("/compact", b"{}"), ("/journal/verify", b"{}"), ("/journal/recover", b"{}"),
                              ("/journal/resolve", b'{"operation_id": "x", "outcome": "completed", "evidence": "e"}')):
            k = dict(kw)
            if "content" in k:
                k["content"] = k["content"].replace(text, payload)
            r = http.post(path, **k)
            assert "Content-Type" in envelope(r, 415)["error"], (path, k)
    assert (store_state(store_dir), tree(known["ws"])) == before
    # a preflight or a cross-origin read never gets a CORS grant
    for origin in ("https://evil.example", "http://localhost:3000", "null"):
        pre = http.options("/restore", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": "content-type,x-hermes-session-token"})
        got = http.get("/workspaces", headers={"Origin": origin})
        for r in (pre, got):
            assert not [h for h in r.headers if h.lower().startswith("access-control-")], dict(r.headers)
        assert pre.status_code >= 400
    # the token the refused requests carried was not used up: the JSON request goes through
    r = http.post("/restore", json=real)
    assert r.status_code == 200, r.text
    assert (known["ws"] / "a.txt").read_text() == "alpha\n" and not (known["ws"] / "new.txt").exists()


def test_a_huge_request_is_refused_before_it_is_read_and_nothing_is_echoed_whole(http, known):
    ws = str(known["ws"])
    big = json.dumps({"checkpoint": "x" * (17 << 20), "workspace": ws, "dry_run": True})
    assert envelope(http.post("/restore", content=big, headers={"Content-Type": "application/json"}),
                    413)["code"] == "too_large"
    r = http.post("/restore", json={"checkpoint": "f" * 1_000_000, "workspace": ws, "dry_run": True})
    assert len(envelope(r, 404)["error"]) < 5000 and "characters left out" in r.json()["error"]

    def chunks():
        yield b'{"checkpoint": "latest", "dry_run": true}'
    r = http.post("/restore", content=chunks(), headers={"Content-Type": "application/json"})   # no length
    assert envelope(r, 411)["code"] == "length_required"


# ------------------------------------------------------------ plan tokens
def test_a_real_restore_needs_the_plan_token_of_its_own_dry_run(http, known, store_dir):
    ws = known["ws"]
    (ws / "new.txt").write_text("keep me\n")
    body = {"checkpoint": known["first"], "workspace": str(ws)}

    def dry(**kw) -> str:
        r = http.post("/restore", json={**body, **kw, "dry_run": True})
        assert r.status_code == 200, r.text
        return r.json()["plan_token"]

    before = store_state(store_dir), tree(ws)
    for missing in ({}, {"dry_run": False}, {"plan_token": ""}, {"plan_token": None}):
        r = http.post("/restore", json={**body, **missing})
        assert "a restore needs the plan_token" in envelope(r, 428)["error"]
    assert (store_state(store_dir), tree(ws)) == before          # no safety checkpoint either
    others = [dry(paths=["a.txt"]), dry(clean=False), dry(checkpoint=known["second"]), "made-up-token"]
    for token in others:
        r = http.post("/restore", json={**body, "plan_token": token})
        assert "plan token" in envelope(r, 409)["error"]
        assert ("used up now" in r.json()["error"]) == (token != "made-up-token")   # says the token is gone
    assert tree(ws) == before[1]

    token = dry()
    r = http.post("/restore", json={**body, "plan_token": token})
    assert r.status_code == 200, r.text
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "new.txt").exists()
    after = store_state(store_dir), tree(ws)
    r = http.post("/restore", json={**body, "plan_token": token})     # once only
    envelope(r, 409)
    assert (store_state(store_dir), tree(ws)) == after


# ----------------------------------------------------- names beyond UTF-8
def test_names_that_are_not_utf8_round_trip(tmp_path, store_dir):
    root_b = os.fsencode(tmp_path) + b"/ws-\xff"
    name = b"caf\xe9.txt"
    os.mkdir(root_b)
    with open(root_b + b"/" + name, "wb") as f:
        f.write(b"v1\n")
    with open(root_b + b"/plain.txt", "wb") as f:
        f.write(b"p1\n")
    svc = Chronos.get(store_dir, Settings())
    root = os.fsdecode(root_b)
    first = svc.snapshot(root, "v1").wire()["checkpoint"]
    for n, data in ((name, b"v2\n"), (b"plain.txt", b"p2\n")):
        with open(root_b + b"/" + n, "wb") as f:
            f.write(data)
    second = svc.snapshot(root, "v2").wire()["checkpoint"]
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    ws = {"workspace_b64": b64(root_b)}
    try:
        with httpx.Client(base_url=srv.base, headers=AUTH, timeout=60) as c:
            def ok(r):
                assert r.status_code == 200, r.text
                r.content.decode("utf-8")                 # strict UTF-8 JSON
                return r.json()

            w = ok(c.get("/workspaces"))["workspaces"]
            assert [x["root_b64"] for x in w] == [b64(root_b)]
            assert ok(c.get("/health", params=ws))["workspace"]["root_b64"] == b64(root_b)
            assert [x["id"] for x in ok(c.get("/checkpoints", params=ws))["checkpoints"]] == [second, first]
            shown = ok(c.get(f"/checkpoints/{second}", params=ws))["changes"]["files"]
            assert sorted(base64.b64decode(f["path_b64"]) if "path_b64" in f else f["path"].encode()
                          for f in shown) == [name, b"plain.txt"]
            d = ok(c.get("/diff", params={**ws, "from": first, "to": second}))
            bad = [f for f in d["files"] if "path_b64" in f]
            assert [base64.b64decode(f["path_b64"]) for f in bad] == [name] and "\ufffd" in bad[0]["path"]
            d = ok(c.get("/diff", params={**ws, "from": first, "paths_b64": [b64(name)]}))
            assert [base64.b64decode(f["path_b64"]) for f in d["files"]] == [name]

            req = {**ws, "checkpoint": first, "paths_b64": [b64(name)]}
            plan = ok(c.post("/restore", json={**req, "dry_run": True}))
            assert [(base64.b64decode(i["path_b64"]), i["action"]) for i in plan["plan"]] == [(name, "restore")]
            res = ok(c.post("/restore", json={**req, "plan_token": plan["plan_token"]}))
            assert res["dry_run"] is False and res["files_changed"] == 1
    finally:
        srv.stop()
    assert sorted(os.listdir(root_b)) == sorted([name, b"plain.txt"])
    with open(root_b + b"/" + name, "rb") as f:
        assert f.read() == b"v1\n"
    with open(root_b + b"/plain.txt", "rb") as f:
        assert f.read() == b"p2\n"                        # only the named file was restored


# ---------------------------------------------------------- bad input
def test_malformed_input_is_a_400_envelope_and_changes_nothing(http, known, store_dir):
    ws = str(known["ws"])
    ok = {"checkpoint": known["first"], "workspace": ws, "dry_run": True}
    j = {"Content-Type": "application/json"}
    cases = [
        ("POST", "/restore", {"content": b'{"checkpoint": ', "headers": j}),
        ("POST", "/restore", {"content": b"[]", "headers": j}),
        ("POST", "/restore", {"content": b"null", "headers": j}),
        ("POST", "/restore", {"content": b'"latest"', "headers": j}),
        ("POST", "/restore", {"content": b"\xff\xfe{}", "headers": j}),
        ("POST", "/restore", {"content": b'{"checkpoint": "latest", "dry_run": ' + b"9" * 5000 + b"}", "headers": j}),
        ("POST", "/restore", {"content": b'{"checkpoint": "latest", "dry_run": 1e999}', "headers": j}),
        ("POST", "/restore", {"content": b'{"checkpoint": "latest", "dry_run": true, "dry_run": false}',
                              "headers": j}),     # a key twice: which one counts is the parser's guess
        ("POST", "/journal/verify", {"content": b'{"checkpoint": {"a": 1, "a": 2}}', "headers": j}),
        ("POST", "/restore", {"json": {**ok, "checkpoint": 5}}),
        ("POST", "/restore", {"json": {**ok, "dry_run": "perhaps"}}),
        ("POST", "/restore", {"json": {**ok, "dryrun": True, "dry_run": False}}),     # unknown field
        ("POST", "/restore", {"json": {**ok, "paths": "a.txt"}}),
        ("POST", "/restore", {"json": {**ok, "workspace_b64": "not base64!"}}),
        ("POST", "/restore", {"json": {**ok, "paths_b64": ["%%%"]}}),
        ("POST", "/restore", {"json": {**ok, "workspace": ws + "\x00"}}),
        ("POST", "/restore", {"json": {**ok, "paths": ["a\x00.txt"]}}),
        ("POST", "/snapshot", {"json": {"workspace": ws, "message": {"a": 1}}}),
        ("POST", "/snapshot", {"json": {"workspace": ws, "tool": "x"}}),
        ("POST", "/snapshot", {"json": {"workspace": ws, "message": "M" * 5_000_000}}),   # every listing would carry it
        ("POST", "/compact", {"json": {"dry_run": True, "force": True}}),
        ("POST", "/journal/verify", {"json": {"checkpoint": "not a dict"}}),
        ("POST", "/journal/resolve", {"json": {"operation_id": ["x"], "outcome": "completed", "evidence": "e"}}),
        ("POST", "/journal/recover", {"json": {"rollback": [], "operation_id": 1}}),
        ("GET", "/checkpoints", {"params": {"workspace": ws, "limit": "9" * 40}}),
        ("GET", "/checkpoints", {"params": {"workspace_b64": "!!!"}}),
        ("GET", "/diff", {"params": {"workspace": ws, "max_chars": "-1"}}),
        ("GET", "/diff", {"params": {"workspace": ws, "paths_b64": "@@"}}),
        ("GET", "/journal/log", {"params": {"limit": "abc"}}),
    ]
    cases += [   # a misspelt filter never widens the answer: `path` for `paths`, `from_` for `from`
        ("GET", "/diff", {"params": {"workspace": ws, "from": "@1", "path": "/etc/passwd"}}),
        ("GET", "/checkpoints", {"params": {"workspace": ws, "limt": "1"}}),
        ("GET", "/journal/log", {"params": {"kind": "started"}}),
    ]
    before = store_state(store_dir), tree(known["ws"])
    for method, path, kw in cases:
        r = http.request(method, path, **kw)
        envelope(r, 400)
    said = http.get("/diff", params={"workspace": ws, "from": "@1", "path": "a.txt"}).json()["error"]
    assert "unknown query parameter 'path'" in said and "paths" in said
    said = http.get("/diff", params={"workspace": ws, "from": "@1", "paths": ""}).json()["error"]
    assert said.startswith("an empty path names the workspace") and "itself" in said
    said = http.post("/restore", content=b"", headers={"Content-Type": "application/json"}).json()["error"]
    assert said == "invalid request: the JSON body is missing"
    said = http.post("/restore", content=b'{"dry_run": true, "checkpoint": "x", "dry_run": false}',
                     headers={"Content-Type": "application/json"}).json()["error"]
    assert said == "invalid request: the JSON body names 'dry_run' twice"
    for r in (http.get("/checkpoints/%00", params={"workspace": ws}),
              http.get("/checkpoints/" + "f" * 5000, params={"workspace": ws}),
              http.get("/diff", params={"workspace": ws, "from": "../../HEAD"})):
        assert r.status_code in (400, 404), r.text
        envelope(r, r.status_code)
    assert (store_state(store_dir), tree(known["ws"])) == before


def test_head_is_answered_as_get_without_a_body(http, known):
    """Monitors ask `HEAD /health`; every GET route answers HEAD the same way, bodiless."""
    for path, params in (("/health", {}), ("/checkpoints", {"workspace": str(known["ws"])})):
        got, head = http.get(path, params=params), http.head(path, params=params)
        assert got.status_code == head.status_code == 200
        assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]
    assert http.head("/checkpoints", params={"limt": "1"}).status_code == 400
    assert all("head" not in ops for ops in http.get("/openapi.json").json()["paths"].values())   # the contract is GET


def test_a_method_a_route_does_not_take_is_405_naming_head_beside_get(http, known):
    for method, path in (("OPTIONS", "/health"), ("DELETE", "/checkpoints"), ("PUT", "/health")):
        r = http.request(method, path)
        assert r.status_code == 405, (method, path, r.text)
        assert r.headers["allow"] == "GET, HEAD", r.headers
        assert "error" in envelope(r, 405)


# ----------------------------------------------------- always a token
def test_create_app_without_a_token_generates_one(store_dir, known):
    app = create_app(store_dir, Settings())
    token = app.state.token
    assert isinstance(token, str) and len(token) >= 32
    assert create_app(store_dir, Settings()).state.token != token
    srv = Server(app)
    try:
        with httpx.Client(base_url=srv.base, timeout=30) as c:
            for h in ({}, {"X-Hermes-Session-Token": ""}, {"Authorization": "Bearer"}, {"X-Hermes-Session-Token": "x"},
                      {"Authorization": f"Basic {token}"}):
                assert envelope(c.get("/workspaces", headers=h), 401)["error"] == "unauthorized"
            assert c.get("/workspaces", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        srv.stop()


@pytest.mark.process
def test_the_standalone_server_prints_and_requires_a_generated_token(store_dir, known):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_GIT_", "HERMES_"))}
    proc = subprocess.Popen([sys.executable, "-m", "chronos_git.api", "--store", str(store_dir), "--port", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.5).rstrip("\n"))
            except queue.Empty:
                assert proc.poll() is None, seen
        assert len(seen) == 3, f"printed at start: {seen}"
        url = re.search(r"http://127\.0\.0\.1:(\d+)/api/plugins/chronos-git/", seen[0])
        assert url and int(url.group(1)) > 0, seen
        token = re.fullmatch(r"token: (\S{32,})", seen[1])
        assert token, seen
        token = token.group(1)
        assert "X-Hermes-Session-Token" in seen[2] and "Authorization: Bearer" in seen[2]
        base = url.group(0)
        envelope(httpx.get(base + "workspaces", timeout=10), 401)
        r = httpx.get(base + "checkpoints", params={"workspace": str(known["ws"])},
                      headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert [c["id"] for c in r.json()["checkpoints"]] == [known["second"], known["first"]]
        assert httpx.get(base + "workspaces", headers={"X-Hermes-Session-Token": token}).status_code == 200
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
