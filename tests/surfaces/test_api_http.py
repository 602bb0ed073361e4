"""The HTTP API over real HTTP: uvicorn on 127.0.0.1 serving `create_app()` (the
same router the Hermes dashboard mounts), a real store on disk, checkpoints and
journal events created by the real `chronos-git` CLI in other processes (as the
agent would), and crashed operations made by SIGKILLing the CLI at a fault point.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from chronos_git.api import create_app
from chronos_git.settings import Settings
from support.server import Server

TOKEN = "http-test-token"
PREFIX = "/api/plugins/chronos-git"


@pytest.fixture
def server(store_dir):
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    yield srv
    srv.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.base, headers={"X-Hermes-Session-Token": TOKEN}, timeout=60) as c:
        yield c


@pytest.fixture
def history(ws, cli):
    """Three checkpoints made by the CLI: a manual one, then a protected shell call
    (before/after).  Returns ids and the workspace."""
    r = cli("--json", "snapshot", "-m", "first state", cwd=ws)
    assert r.rc == 0, r.stderr
    first = r.json["checkpoint"]
    (ws / "a.txt").write_text("alpha\nbeta\n")
    r = cli("--json", "run", "--", "sh", "-c", "echo gamma > b.txt", cwd=ws)
    assert r.rc == 0, r.stderr
    log = cli("--json", "log", "-n", "50", cwd=ws).json["checkpoints"]
    return {"ws": ws, "first": first, "before": r.json["pre_checkpoint"], "after": r.json["post_checkpoint"],
            "op": r.json["operation_id"], "log": log}


def crash_unresolved(cli, ws, command="true") -> str:
    """A protected shell call whose process is SIGKILLed after the command ran, before
    its outcome was recorded: an operation nobody can settle by evidence."""
    r = cli("--json", "run", "--", "sh", "-c", command, cwd=ws, fault="after_dispatch")
    assert r.rc == -9, (r.rc, r.stdout, r.stderr)
    st = cli("--json", "journal", "status", cwd=ws).json
    assert len(st["unresolved"]) == 1, st
    return st["unresolved"][0]["operation_id"]


def confirmed_restore(http: httpx.Client, **body) -> tuple[dict, httpx.Response]:
    """The API's two steps: a dry run, then the same request with the dry run's plan_token."""
    plan = http.post("/restore", json={**body, "dry_run": True})
    assert plan.status_code == 200, plan.text
    assert plan.json()["plan_token"]
    return plan.json(), http.post("/restore", json={**body, "dry_run": False,
                                                    "plan_token": plan.json()["plan_token"]})


def err_of(resp: httpx.Response) -> dict:
    body = resp.json()
    assert body["status"] == "error", body
    assert isinstance(body["error"], str) and body["error"]
    return body


# ------------------------------------------------------------------ auth
def test_token_is_required_on_every_route(server, history):
    base = server.base
    with httpx.Client(timeout=30) as c:
        for path in ("/", "/health", "/workspaces", "/checkpoints", "/journal/status", "/journal/log"):
            r = c.get(base + path)
            assert r.status_code == 401, (path, r.text)
            assert err_of(r)["error"] == "unauthorized"
            assert c.get(base + path, headers={"X-Hermes-Session-Token": "wrong"}).status_code == 401
            assert c.get(base + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.get(base + path, headers={"Authorization": TOKEN}).status_code == 401   # no scheme
        assert c.get(base + "/workspaces", params={"token": TOKEN}).status_code == 401     # not a query param
        # a write without a token changes nothing
        before = (history["ws"] / "a.txt").read_text()
        r = c.post(base + "/restore", json={"checkpoint": history["first"], "workspace": str(history["ws"])})
        assert r.status_code == 401
        assert (history["ws"] / "a.txt").read_text() == before

        r = c.get(base + "/workspaces", headers={"X-Hermes-Session-Token": TOKEN})
        assert r.status_code == 200 and r.json()["status"] == "ok"
        r = c.get(base + "/workspaces", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and r.json()["status"] == "ok"
        r = c.get(base + "/journal/status", headers={"authorization": f"bearer {TOKEN}"})
        assert r.status_code == 200


# ------------------------------------------------------- read-only routes
def test_index_health_and_workspaces(http, history):
    idx = http.get("/").json()
    assert idx["status"] == "ok" and idx["plugin"] == "chronos-git"
    assert "POST /restore" in idx["endpoints"] and "POST /journal/resolve" in idx["endpoints"]

    h = http.get("/health").json()
    assert h["status"] == "ok"
    assert h["journal"]["integrity"] == "ok" and h["gate"] == "open" and h["unresolved"] == 0
    assert h["workspaces"] == 1 and h["store_bytes"] > 0
    hw = http.get("/health", params={"workspace": str(history["ws"])}).json()
    assert hw["workspace"]["root"] == str(history["ws"])
    assert hw["workspace"]["checkpoints"] == len(history["log"]) == 3

    w = http.get("/workspaces").json()
    assert [x["root"] for x in w["workspaces"]] == [str(history["ws"])]
    assert w["workspaces"][0]["checkpoints"] == 3
    assert w["workspaces"][0]["latest"]["id"] == history["after"]


def test_checkpoint_list_matches_the_store(http, history, tmp_path, cli):
    ws = history["ws"]
    r = http.get("/checkpoints", params={"workspace": str(ws)})
    assert r.status_code == 200
    cps = r.json()["checkpoints"]
    assert [c["id"] for c in cps] == [c["id"] for c in history["log"]]
    assert [c["id"] for c in cps] == [history["after"], history["before"], history["first"]]
    assert [c["index"] for c in cps] == [1, 2, 3]
    assert cps[2]["kind"] == "manual" and cps[2]["description"] == "first state"
    assert cps[0]["tool"] == "terminal" and cps[0]["description"] == "after terminal"
    for c in cps:
        assert {"time", "time_iso", "kind", "tool", "tool_call_id", "skipped", "description"} <= set(c)
    # limit
    assert [c["id"] for c in http.get("/checkpoints", params={"workspace": str(ws), "limit": 1}).json()["checkpoints"]] \
        == [history["after"]]
    # no workspace given: the most recent workspace is the default
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("o\n")
    assert cli("snapshot", "-m", "other ws", cwd=other).rc == 0
    r = http.get("/checkpoints").json()
    assert r["workspace"] == str(other) and r["checkpoints"][0]["description"] == "other ws"
    # a relative workspace would resolve against the server's cwd: refused
    r = http.get("/checkpoints", params={"workspace": "ws"})
    assert r.status_code == 400 and "absolute" in err_of(r)["error"]
    r = http.post("/restore", json={"checkpoint": history["first"], "workspace": "ws", "dry_run": True})
    assert r.status_code == 400 and "absolute" in err_of(r)["error"]
    # a bad limit is a 400 envelope, not FastAPI's 422
    r = http.get("/checkpoints", params={"workspace": str(ws), "limit": 0})
    assert r.status_code == 400 and "limit" in err_of(r)["error"]


def test_show_and_diff(http, history):
    ws = str(history["ws"])
    # what the shell call changed, recorded as before -> after
    r = http.get(f"/checkpoints/{history['after']}", params={"workspace": ws})
    assert r.status_code == 200
    body = r.json()
    assert body["checkpoint"]["id"] == history["after"]
    ch = body["changes"]
    assert ch["from"] == history["before"] and ch["to"] == history["after"]
    assert [(f["path"], f["status"]) for f in ch["files"]] == [("b.txt", "added")]
    assert "+gamma" in ch["patch"]
    # by prefix and by index
    assert http.get(f"/checkpoints/{history['first'][:8]}", params={"workspace": ws}).json()["checkpoint"]["id"] \
        == history["first"]
    assert http.get("/checkpoints/3", params={"workspace": ws}).json()["checkpoint"]["id"] == history["first"]

    # checkpoint vs working tree
    (history["ws"] / "a.txt").write_text("alpha\nbeta\nDELTA\n")
    d = http.get("/diff", params={"workspace": ws, "from": history["first"]}).json()
    assert d["from"] == history["first"] and d["to"] == "working tree"
    paths = {f["path"]: f["status"] for f in d["files"]}
    assert paths == {"a.txt": "modified", "b.txt": "added"}
    assert "+DELTA" in d["patch"] and "+beta" in d["patch"]
    # between two checkpoints, stat only
    d = http.get("/diff", params={"workspace": ws, "from": history["first"], "to": history["before"],
                                  "stat": "true"}).json()
    assert [f["path"] for f in d["files"]] == ["a.txt"]
    assert not d.get("patch")
    # a path in neither side: a 400 that names it, as POST /restore does (not an empty diff)
    r = http.get("/diff", params={"workspace": ws, "from": history["first"], "paths": ["a.txt", "nope.txt"]})
    assert r.status_code == 400 and "'nope.txt' is in neither checkpoint" in err_of(r)["error"], r.text
    # more paths than one request may name: a 400 that says how many, before any is looked at
    from chronos_git.service.timemachine import MAX_PATHS
    many = [f"f{i}" for i in range(MAX_PATHS + 1)]
    r = http.post("/restore", json={"workspace": ws, "checkpoint": history["first"], "dry_run": True,
                                    "paths": many})
    assert r.status_code == 400 and f"this request names {MAX_PATHS + 1:,}" in err_of(r)["error"], r.text


def test_unknown_checkpoint_is_404(http, history):
    ws = str(history["ws"])
    for r in (http.get("/checkpoints/0123456789abcdef", params={"workspace": ws}),
              http.get("/diff", params={"workspace": ws, "from": "0123456789abcdef"}),
              http.post("/restore", json={"checkpoint": "0123456789abcdef", "workspace": ws, "plan_token": "t"}),
              http.post("/restore", json={"checkpoint": "0123456789abcdef", "workspace": ws, "dry_run": True})):
        assert r.status_code == 404, (r.request.url, r.text)
        assert "0123456789" in err_of(r)["error"]
    # a value of another JSON type is not coerced: "yes" is not a dry run's true
    for body in ({"dry_run": "yes"}, {"dry_run": 1}, {"dry_run": True, "force": "false"}):
        r = http.post("/restore", json={"checkpoint": history["first"], "workspace": ws, **body})
        assert r.status_code == 400 and "valid boolean" in err_of(r)["error"], r.text
    # missing field in the body: the 400 envelope
    r = http.post("/restore", json={"workspace": ws})
    assert r.status_code == 400 and "checkpoint" in err_of(r)["error"]


# --------------------------------------------------------------- writing
def test_snapshot_route(http, history, cli):
    (history["ws"] / "c.txt").write_text("from the dashboard\n")
    r = http.post("/snapshot", json={"workspace": str(history["ws"]), "message": "dash snap"})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["created"] is True
    log = cli("--json", "log", cwd=history["ws"]).json["checkpoints"]
    assert log[0]["id"] == body["checkpoint"]
    assert log[0]["description"] == "dash snap" and log[0]["tool"] == "dashboard"
    show = cli("--json", "show", body["checkpoint"], cwd=history["ws"]).json
    assert [f["path"] for f in show["changes"]["files"]] == ["c.txt"]


def test_restore_dry_run_changes_nothing_and_real_restore_does(http, history, cli):
    ws = history["ws"]
    (ws / "a.txt").write_text("edited after the checkpoints\n")
    (ws / "new.txt").write_text("untracked\n")
    before_log = cli("--json", "log", "-n", "100", cwd=ws).json["checkpoints"]

    r = http.post("/restore", json={"checkpoint": history["first"], "workspace": str(ws), "dry_run": True})
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["dry_run"] is True and plan["safety_checkpoint"] is None
    assert plan["restored_checkpoint"] == history["first"]
    assert sorted((i["path"], i["action"]) for i in plan["plan"]) == [
        ("a.txt", "restore"), ("b.txt", "delete"), ("new.txt", "delete")]
    # nothing moved: files, checkpoints
    assert (ws / "a.txt").read_text() == "edited after the checkpoints\n"
    assert (ws / "b.txt").exists() and (ws / "new.txt").exists()
    assert cli("--json", "log", "-n", "100", cwd=ws).json["checkpoints"] == before_log

    assert plan["plan_token"]
    r = http.post("/restore", json={"checkpoint": history["first"], "workspace": str(ws), "dry_run": False,
                                    "plan_token": plan["plan_token"]})
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["dry_run"] is False and res["files_changed"] == 1 and res["untracked_removed"] == 2
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert not (ws / "b.txt").exists() and not (ws / "new.txt").exists()
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"
    safety = res["safety_checkpoint"]
    log = cli("--json", "log", "--all", "-n", "100", cwd=ws).json["checkpoints"]
    assert log[1]["id"] == safety and log[1]["kind"] == "safety" and log[1]["role"] == "safety"
    assert log[0]["id"] == res["after_checkpoint"] and log[0]["role"] == "restored"
    assert log[0]["restored_from"] == history["first"]          # the branch point of the timeline
    # the restore is a journaled operation of its own
    events = http.get("/journal/log", params={"limit": 5}).json()["events"]
    mine = [e for e in events if e.get("operation_id") == res["operation_id"]]
    assert {e["kind"] for e in mine} == {"started", "returned"}
    started = next(e for e in mine if e["kind"] == "started")
    assert started["tool"] == "chronos.restore" and started["actor"] == "user (HTTP API)"
    assert started["pre_checkpoint"] == safety

    # undo = restore the safety checkpoint (dry run, then confirm)
    undo_plan, r = confirmed_restore(http, checkpoint=safety, workspace=str(ws))
    assert r.status_code == 200, r.text
    assert sorted((i["path"], i["action"]) for i in undo_plan["plan"]) == [
        ("a.txt", "restore"), ("b.txt", "create"), ("new.txt", "create")]
    assert (ws / "a.txt").read_text() == "edited after the checkpoints\n"
    assert (ws / "new.txt").read_text() == "untracked\n" and (ws / "b.txt").read_text() == "gamma\n"


def test_restore_only_some_paths_without_clean(http, history):
    ws = history["ws"]
    (ws / "a.txt").write_text("changed\n")
    (ws / "src" / "main.py").write_text("changed too\n")
    plan, r = confirmed_restore(http, checkpoint=history["first"], workspace=str(ws), paths=["a.txt"],
                                clean=False)
    assert [(i["path"], i["action"]) for i in plan["plan"]] == [("a.txt", "restore")]
    assert r.status_code == 200, r.text
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert (ws / "src" / "main.py").read_text() == "changed too\n"
    assert (ws / "b.txt").read_text() == "gamma\n"


def test_compact_dry_run(http, history, cli):
    r = http.post("/compact", json={"dry_run": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and "dropped" in body
    # the query parameter still works (older clients), but the request must be JSON all the same
    assert http.post("/compact", params={"dry_run": "true"}, json={}).status_code == 200
    assert http.post("/compact", params={"dry_run": "true"}).status_code == 415
    assert len(cli("--json", "log", "-n", "100", cwd=history["ws"]).json["checkpoints"]) == 3


# --------------------------------------------------------------- journal
def test_journal_status_log_verify_and_checkpoint(http, history):
    st = http.get("/journal/status").json()
    assert st["status"] == "ok" and st["integrity"] == "ok" and st["gate"] == "open"
    assert st["unresolved"] == [] and st["events"] == 3          # genesis, started, returned
    log = http.get("/journal/log").json()["events"]
    assert [e["kind"] for e in log] == ["returned", "started", "genesis"]
    assert [e["seq"] for e in log] == [2, 1, 0]
    assert log[1]["operation_id"] == history["op"] and log[1]["tool"] == "terminal"
    assert log[0]["post_checkpoint"] == history["after"]
    assert [e["kind"] for e in http.get("/journal/log", params={"limit": 1}).json()["events"]] == ["returned"]

    v = http.post("/journal/verify", json={}).json()
    assert v["status"] == "ok" and v["integrity"] == "ok" and v["events"] == 3 and v["problems"] == []
    assert v["head"] == st["head"]

    cp = http.get("/journal/checkpoint").json()["checkpoint"]
    assert cp["head"] == st["head"] and cp["seq"] == 2
    v = http.post("/journal/verify", json={"checkpoint": cp})
    assert v.status_code == 200 and v.json()["external_checkpoint"] == "ok"
    # a foreign checkpoint fails verification (409) but is only a wrong argument: the gate stays open
    v = http.post("/journal/verify", json={"checkpoint": {"schema": "something-else"}})
    assert v.status_code == 409
    assert err_of(v)["integrity"] != "ok"
    assert http.get("/journal/status").json()["gate"] == "open"


@pytest.mark.process
def test_restore_is_blocked_while_an_operation_is_unresolved(http, history, cli):
    ws = history["ws"]
    op = crash_unresolved(cli, ws)
    st = http.get("/journal/status").json()
    assert st["gate"] == "closed"
    assert [o["operation_id"] for o in st["unresolved"]] == [op]
    assert st["unresolved"][0]["state"] == "pending" and st["unresolved"][0]["tool"] == "terminal"
    assert http.get("/health").json()["gate"] == "closed"

    (ws / "a.txt").write_text("keep me\n")
    _plan, r = confirmed_restore(http, checkpoint=history["first"], workspace=str(ws))
    assert r.status_code == 409, r.text
    body = err_of(r)
    assert body["error"] == "chronos_blocked" and body["blocked"] is True
    assert body["operation_ids"] == [op]
    assert op[:12] in body["message"]
    assert (ws / "a.txt").read_text() == "keep me\n" and (ws / "b.txt").exists()
    # a preview is still allowed while the gate is closed (it changes nothing)
    r = http.post("/restore", json={"checkpoint": history["first"], "workspace": str(ws), "dry_run": True})
    assert r.status_code == 200 and r.json()["dry_run"] is True
    assert (ws / "a.txt").read_text() == "keep me\n"

    # resolving needs evidence: empty -> 400 envelope, blank -> 400 from the service
    for evidence in ("", "   "):
        r = http.post("/journal/resolve", json={"operation_id": op, "outcome": "completed", "evidence": evidence})
        assert r.status_code == 400, r.text
        assert "evidence" in err_of(r)["error"]
    r = http.post("/journal/resolve", json={"operation_id": op, "outcome": "maybe", "evidence": "x"})
    assert r.status_code == 400 and "outcome" in err_of(r)["error"]
    r = http.post("/journal/resolve", json={"operation_id": "ffffffffff", "outcome": "completed", "evidence": "x"})
    assert r.status_code == 400 and "no operation" in err_of(r)["error"]
    assert http.get("/journal/status").json()["gate"] == "closed"

    r = http.post("/journal/resolve", json={"operation_id": op[:10], "outcome": "completed",
                                            "evidence": "`true` has no side effects"})
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["operation_id"] == op and res["outcome"] == "completed" and res["gate"] == "open"
    st = http.get("/journal/status").json()
    assert st["gate"] == "open" and st["unresolved"] == []
    ev = http.get("/journal/log", params={"limit": 1}).json()["events"][0]
    assert ev["kind"] == "resolved" and ev["operation_id"] == op
    assert ev["evidence"] == "`true` has no side effects" and ev["actor"] == "operator (HTTP API)"
    # resolving twice is refused
    r = http.post("/journal/resolve", json={"operation_id": op, "outcome": "completed", "evidence": "again"})
    assert r.status_code == 400

    _plan, r = confirmed_restore(http, checkpoint=history["first"], workspace=str(ws))
    assert r.status_code == 200, r.text
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert http.post("/journal/verify", json={}).json()["integrity"] == "ok"


@pytest.mark.process
def test_recover_rollback_of_a_crashed_shell_call(http, history, cli):
    ws = history["ws"]
    op = crash_unresolved(cli, ws, "echo crashed > crash.txt; echo clobbered > a.txt")
    assert (ws / "crash.txt").read_text() == "crashed\n"
    # evidence settling cannot decide a shell call
    r = http.post("/journal/recover", json={})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["gate"] == "closed" and [o["operation_id"] for o in body["unresolved"]] == [op]
    assert http.post("/journal/recover", json={"replay": True, "rollback": True}).status_code == 400

    r = http.post("/journal/recover", json={"operation_id": op, "rollback": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "rolled_back" and body["gate"] == "open"
    assert not (ws / "crash.txt").exists()
    assert (ws / "a.txt").read_text() == "alpha\nbeta\n"
    ev = http.get("/journal/log", params={"limit": 1}).json()["events"][0]
    assert ev["kind"] == "resolved" and ev["outcome"] == "rolled_back" and ev["operation_id"] == op


@pytest.mark.process
def test_module_entry_point_serves_with_a_token(store_dir, history):
    """`python -m chronos_git.api` (the standalone server) on a free port."""
    for _attempt in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_GIT_", "HERMES_"))}
        env["CHRONOS_GIT_API_TOKEN"] = TOKEN
        proc = subprocess.Popen([sys.executable, "-m", "chronos_git.api", "--store", str(store_dir),
                                 "--port", str(port)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            base = f"http://127.0.0.1:{port}{PREFIX}"
            deadline = time.monotonic() + 60
            up = False
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    httpx.get(base + "/", timeout=2)
                    up = True
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            if not up:
                continue                 # lost the port to someone else: try another
            assert httpx.get(base + "/workspaces").status_code == 401
            r = httpx.get(base + "/checkpoints", params={"workspace": str(history["ws"])},
                          headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 200
            assert [c["id"] for c in r.json()["checkpoints"]] == [c["id"] for c in history["log"]]
            return
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    pytest.fail("python -m chronos_git.api did not come up on a free port in 3 attempts")
