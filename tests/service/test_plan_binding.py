"""Issue 33, finding 3: a plan token confirms the plan its dry run showed, not only the request.

The trial: a dry run showed no deletions; then 20 untracked files appeared, and the same token
ran a clean restore that deleted them all.  Now the token binds every path, its action and the
content it holds now and will hold; a confirm whose plan differs is refused with nothing
changed, and the refusal carries the new plan and a token for it.  Through the service, the
HTTP API (409) and `/chronos confirm`.
"""
from __future__ import annotations

import types

import httpx
import pytest

from chronos_git.api import create_app
from chronos_git.engine.errors import PlanTokenError
from chronos_git.hermes.slash import SlashCommand
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.server import Server

TOKEN = "plan-binding-token"


@pytest.fixture
def two(svc, ws):
    """A service and the first of two checkpoints (a.txt changed after it)."""
    s = svc()
    first = s.snapshot(str(ws), "v1").checkpoint
    (ws / "a.txt").write_text("changed\n")
    s.snapshot(str(ws), "v2")
    return s, first


def untracked(ws, n=20):
    for i in range(n):
        (ws / f"new{i:02}.txt").write_text(f"mine {i}\n")
    return sorted(p.name for p in ws.iterdir())


def state(s, ws):
    return sorted(p.name for p in ws.iterdir()), (ws / "a.txt").read_text(), s.log(str(ws), None).checkpoints


def test_a_token_confirms_only_the_plan_its_dry_run_showed(two, ws):
    s, first = two
    shown = s.restore(str(ws), first, dry_run=True, clean=True)
    assert shown.untracked_removed == 0 and shown.files_changed == 1 and shown.plan_token
    untracked(ws)
    before = state(s, ws)
    res = s.restore(str(ws), first, clean=True, plan_token=shown.plan_token, require_plan=True)
    assert res.status == "error" and res.code == "plan_changed", res
    assert "the workspace changed since the preview" in res.error and "nothing was restored" in res.error
    assert res.dry_run and res.safety_checkpoint is None and res.operation_id is None
    assert res.untracked_removed == 20 and res.files_changed == 1
    assert sorted(i.path for i in res.plan if i.action == "delete") == [f"new{i:02}.txt" for i in range(20)]
    assert state(s, ws) == before                     # nothing deleted, no safety checkpoint either
    assert res.plan_token and res.plan_token != shown.plan_token
    done = s.restore(str(ws), first, clean=True, plan_token=res.plan_token, require_plan=True)
    assert done.status == "ok" and not done.dry_run and done.untracked_removed == 20
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "src"] and (ws / "a.txt").read_text() == "alpha\n"


def test_new_bytes_in_a_planned_path_are_a_different_plan(two, ws):
    """Same paths, same actions: the content a path holds now is part of the plan too."""
    s, first = two
    shown = s.restore(str(ws), first, dry_run=True)
    (ws / "a.txt").write_text("changed again after the preview\n")
    res = s.restore(str(ws), first, plan_token=shown.plan_token, require_plan=True)
    assert res.code == "plan_changed" and [(i.path, i.action) for i in res.plan] == [("a.txt", "restore")]
    assert (ws / "a.txt").read_text() == "changed again after the preview\n"
    with pytest.raises(PlanTokenError, match="unknown, used or expired"):     # a token is used once
        s.restore(str(ws), first, plan_token=shown.plan_token, require_plan=True)


def test_an_unchanged_workspace_runs_its_plan(two, ws):
    s, first = two
    shown = s.restore(str(ws), first, dry_run=True)
    done = s.restore(str(ws), first, plan_token=shown.plan_token, require_plan=True)
    assert done.status == "ok" and done.code is None and (ws / "a.txt").read_text() == "alpha\n"


def test_http_answers_409_with_the_new_plan(two, ws, store_dir):
    s, first = two
    Chronos.forget_instances()
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    try:
        _http_refuses_a_changed_plan(srv, first, ws)
    finally:
        srv.stop()


def _http_refuses_a_changed_plan(srv, first, ws):
    with httpx.Client(base_url=srv.base, headers={"X-Hermes-Session-Token": TOKEN}, timeout=60) as http:
        body = {"checkpoint": first, "workspace": str(ws), "clean": True}
        shown = http.post("/restore", json={**body, "dry_run": True})
        assert shown.status_code == 200, shown.text
        assert shown.json()["untracked_removed"] == 0
        names = untracked(ws)
        r = http.post("/restore", json={**body, "plan_token": shown.json()["plan_token"]})
        assert r.status_code == 409, r.text
        new = r.json()
        assert new["status"] == "error" and new["code"] == "plan_changed"
        assert "the workspace changed since the preview" in new["error"]
        assert new["dry_run"] is True and new["untracked_removed"] == 20 and new["plan_token"]
        assert sorted(p.name for p in ws.iterdir()) == names
        r = http.post("/restore", json={**body, "plan_token": new["plan_token"]})
        assert r.status_code == 200, r.text
        assert r.json()["untracked_removed"] == 20 and sorted(p.name for p in ws.iterdir()) == ["a.txt", "src"]


def test_slash_confirm_refuses_a_changed_plan_and_arms_the_new_one(two, ws):
    s, first = two
    cmd = SlashCommand(types.SimpleNamespace(svc=lambda: s, cwd=lambda: str(ws)))
    armed = cmd(first[:10])
    assert "/chronos confirm" in armed and "remove 0" in armed, armed
    names = untracked(ws)
    refused = cmd("confirm")
    assert "the workspace changed since the preview" in refused and "nothing was changed" in refused, refused
    assert "new07.txt" in refused and "/chronos confirm" in refused
    assert sorted(p.name for p in ws.iterdir()) == names
    done = cmd("confirm")                             # the new plan, as shown
    assert "restored" in done and "20 removed" in done, done
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "src"]


def test_the_cli_renders_the_refusal_and_the_new_plan(two, ws):
    from chronos_git.cli import render
    s, first = two
    shown = s.restore(str(ws), first, dry_run=True, clean=True)
    untracked(ws, 2)
    text = render.text(s.restore(str(ws), first, clean=True, plan_token=shown.plan_token, require_plan=True))
    assert text.startswith("restore REFUSED: the workspace changed since the preview, so nothing was changed")
    assert "remove 2" in text and "new01.txt" in text and "error: the workspace changed" in text, text
