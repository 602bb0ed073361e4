"""The dashboard tab in a real browser: the REAL `hermes dashboard` (hermes-agent
0.19.0) with chronos-git installed and enabled as a user plugin in an isolated
HERMES_HOME, Debian chromium driven by Playwright, checkpoints and journal events
made by a scripted agent run and by the real CLI.  Assertions are on the page,
on disk and in the store.

Every answer of the chronos-git API reaches the tab behind a recording Proxy
(desktop_harness/field_recorder.js, hooked into window.fetch, which the SDK's
fetchJSON calls), and each test ends by checking that every field the tab read
is declared by the route's OpenAPI schema.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


from support.hermes_env import HermesEnv, hermes_bin  # noqa: E402
from surfaces.test_api_schema import openapi_doc, undeclared  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TOKEN = "browser-test-token"
BIN = Path(sys.executable).parent

try:
    from playwright.sync_api import sync_playwright
    _PW_ERROR = None
except ImportError as exc:          # pragma: no cover - depends on the environment
    sync_playwright = None
    _PW_ERROR = str(exc)

_HERMES = shutil.which("hermes", path=f"{BIN}:{os.environ.get('PATH', '')}")

pytestmark = [
    pytest.mark.hermes,
    pytest.mark.skipif(_HERMES is None, reason="hermes-agent is not installed in this environment"),
]


def browser_test(fn):
    """Drives chromium: skipped (with the reason) when chromium or playwright is missing."""
    for mark in (
        pytest.mark.browser,
        pytest.mark.skipif(not os.path.exists(CHROMIUM),
                           reason=f"{CHROMIUM} is missing (Debian package `chromium`; scripts/setup-env.sh installs it)"),
        pytest.mark.skipif(sync_playwright is None,
                           reason=f"the Python package playwright is not installed ({_PW_ERROR}); "
                                  "pip install playwright==1.64.1"),
    ):
        fn = mark(fn)
    return fn

# the tab's answers, behind recording Proxies: fetchJSON ends with `return response.json()`
RECORD_READS = (Path(__file__).parent / "desktop_harness" / "field_recorder.js").read_text() + """
;(() => {
  const PREFIX = '/api/plugins/chronos-git'
  const fetch0 = window.fetch
  window.fetch = async function (input, init) {
    const res = await fetch0.apply(this, arguments)
    const url = new URL(typeof input === 'string' ? input : input.url, location.href)
    if (!res.ok || !url.pathname.startsWith(PREFIX + '/')) return res
    const method = ((init && init.method) || (typeof input === 'string' ? 'GET' : input.method)).toUpperCase()
    const json = res.json.bind(res)
    res.json = () => json().then(body => window.__fieldRecorder.wrap(body, `${method} ${url.pathname.slice(PREFIX.length)}`))
    return res
  }
})()
"""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# ---------------------------------------------------------------- fixtures
class Dashboard:
    def __init__(self, env: HermesEnv):
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.out = env.root / "dashboard.out"

    def start(self) -> "Dashboard":
        for _attempt in range(3):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
            s.close()
            self.proc = subprocess.Popen(
                [hermes_bin(), "dashboard", "--port", str(self.port), "--no-open", "--skip-build"],
                cwd=self.env.ws, env=self.env.env({"HERMES_DASHBOARD_SESSION_TOKEN": TOKEN}),
                stdout=open(self.out, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if httpx.get(self.url("/"), timeout=2).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            self.stop()                  # port taken or too slow: try once more
        raise RuntimeError(f"hermes dashboard did not start:\n{self.out.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        self.proc = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def api(self, path: str) -> str:
        return self.url("/api/plugins/chronos-git" + path)


class Ctx:
    """One isolated Hermes home + workspace + running dashboard."""

    def __init__(self, env: HermesEnv, dash: Dashboard):
        self.env, self.dash = env, dash
        self.ws = env.ws

    def cli(self, *args, fault: str | None = None, check: bool = True, cwd: Path | None = None) -> dict:
        e = self.env.env({"CHRONOS_GIT_STORE": str(self.env.store)})
        if fault:
            e["CHRONOS_GIT_FAULT"] = fault
        p = subprocess.run([str(BIN / "chronos-git"), "--json", *map(str, args)], cwd=cwd or self.ws, env=e,
                           capture_output=True, text=True, timeout=120)
        if check:
            assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
        return json.loads(p.stdout) if p.stdout.strip().startswith("{") else {"rc": p.returncode}

    def log(self) -> list[dict]:
        return self.cli("log", "--all", "-n", "100")["checkpoints"]


@pytest.fixture
def ctx(tmp_path):
    env = HermesEnv(tmp_path).start()
    dash = None
    try:
        (env.ws / "a.txt").write_text("one\n")
        dash = Dashboard(env)
        c = Ctx(env, dash)
        yield c
    finally:
        if dash is not None:
            dash.stop()
        env.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, ctx):
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    context.add_init_script(RECORD_READS)
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    context.close()


def open_tab(page, ctx):
    """Through the SPA: load the dashboard, click the plugin's nav entry."""
    page.goto(ctx.dash.url("/"))
    page.get_by_role("link", name="Chronos").click()
    page.wait_for_url("**/chronos-git")
    page.get_by_test_id("chronos-root").wait_for()


def assert_reads_declared(page, *expected: str) -> list[str]:
    """Every field the tab read is declared by its route's OpenAPI schema; `expected` reads
    show that the recording worked."""
    reads = page.evaluate("window.__fieldRecorder.reads()")
    assert set(expected) <= set(reads), sorted(set(expected) - set(reads))
    bad = undeclared(openapi_doc(), reads)
    assert not bad, "the tab read fields its routes' schemas do not declare:\n" + "\n".join(bad)
    return reads


def row(page, cid: str):
    return page.locator(f'[data-testid="checkpoint-row"][data-checkpoint-id="{cid}"]')


def write(path: str, content: str, call_id: str) -> dict:
    return {"name": "write_file", "arguments": {"path": path, "content": content}, "id": call_id}


# ------------------------------------------------------------------ tests
def test_router_is_mounted_behind_the_session_token(ctx):
    first = ctx.cli("snapshot", "-m", "first")["checkpoint"]
    ctx.dash.start()
    api = ctx.dash.api
    assert httpx.get(api("/workspaces")).status_code == 401
    assert httpx.get(api("/workspaces"), headers={"X-Hermes-Session-Token": "wrong"}).status_code == 401
    r = httpx.get(api("/workspaces"), headers={"X-Hermes-Session-Token": TOKEN})
    assert r.status_code == 200
    assert [w["root"] for w in r.json()["workspaces"]] == [str(ctx.ws)]
    r = httpx.get(api("/checkpoints"), headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and [c["id"] for c in r.json()["checkpoints"]] == [first]
    # the errors are our envelopes, through Hermes' app
    r = httpx.get(api("/checkpoints/0123456789abcdef"), headers={"X-Hermes-Session-Token": TOKEN})
    assert r.status_code == 404 and r.json()["status"] == "error"
    r = httpx.post(api("/journal/resolve"), headers={"X-Hermes-Session-Token": TOKEN},
                   json={"operation_id": "abcdef123", "outcome": "completed", "evidence": ""})
    assert r.status_code == 400 and r.json()["status"] == "error"
    # the router's own guards hold inside Hermes' app too
    auth = {"X-Hermes-Session-Token": TOKEN}
    r = httpx.get(api("/checkpoints"), params={"workspace": "/etc"}, headers=auth)
    assert r.status_code == 403 and r.json()["status"] == "error"
    r = httpx.get(api("/checkpoints"), params={"workspace": str(ctx.env.root)}, headers=auth)
    assert r.status_code in (403, 404) and r.json()["status"] == "error"
    r = httpx.post(api("/snapshot"), content=f'{{"workspace": "{ctx.ws}"}}', headers={**auth, "Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["status"] == "error"
    r = httpx.post(api("/restore"), json={"checkpoint": first, "workspace": str(ctx.ws)}, headers=auth)
    assert r.status_code == 428                                   # no plan_token: nothing restored
    for host in ("evil.example", f"127.0.0.1.evil.example:{ctx.dash.port}"):
        r = httpx.get(api("/workspaces"), headers={**auth, "Host": host})
        assert r.status_code in (400, 403), r.text                # Hermes' own Host check, or ours
    pre = httpx.options(api("/restore"), headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert not [h for h in pre.headers if h.lower().startswith("access-control-allow")]
    assert [c["id"] for c in ctx.log()] == [first]

    plugins = httpx.get(ctx.dash.url("/api/dashboard/plugins")).json()
    mine = next(p for p in plugins if p["name"] == "chronos-git")
    assert mine["has_api"] is True and mine["tab"]["path"] == "/chronos-git" and mine["entry"] == "dist/index.js"
    js = httpx.get(ctx.dash.url("/dashboard-plugins/chronos-git/dist/index.js"))
    assert js.status_code == 200 and 'register(NAME, Page)' in js.text
    # the SPA page carries the token the tab's fetchJSON uses
    assert f'__HERMES_SESSION_TOKEN__="{TOKEN}"' in httpx.get(ctx.dash.url("/chronos-git")).text


@browser_test
def test_timeline_diff_and_two_click_restore_with_undo(ctx, page, tmp_path):
    # an older workspace, then a scripted agent turn in the main one: real tool calls
    other = tmp_path / "other-ws"
    other.mkdir()
    (other / "o.txt").write_text("other\n")
    other_cp = ctx.cli("snapshot", "-m", "other workspace", cwd=other)["checkpoint"]
    ctx.env.set_script([{"match": "*", "steps": [
        {"tool_calls": [write("__WS__/b.txt", "bee\n", "call_write_b")]},
        {"tool_calls": [{"name": "patch", "id": "call_patch_a", "arguments": {
            "mode": "replace", "path": "__WS__/a.txt", "old_string": "one", "new_string": "one two"}}]},
        {"content": "done"}]}])
    r = ctx.env.chat("do the work")
    assert r.returncode == 0, r.stderr
    assert (ctx.ws / "a.txt").read_text() == "one two\n" and (ctx.ws / "b.txt").read_text() == "bee\n"
    log = ctx.log()
    by_call = {c["tool_call_id"]: c for c in log if c["tool_call_id"]}
    assert {"call_write_b", "call_patch_a"} <= set(by_call), log
    oldest = log[-1]
    assert oldest["tool_call_id"] is None           # the turn-start checkpoint: a.txt == "one", no b.txt
    ctx.dash.start()

    open_tab(page, ctx)
    for c in log:
        row(page, c["id"]).wait_for()
    ids_on_page = page.locator('[data-testid="checkpoint-row"]').evaluate_all(
        "els => els.map(e => e.getAttribute('data-checkpoint-id'))")
    assert ids_on_page == [c["id"] for c in log]          # same ids, newest first
    w = row(page, by_call["call_write_b"]["id"])
    assert w.get_by_test_id("checkpoint-call").inner_text().endswith("call_write_b")
    assert w.get_by_test_id("checkpoint-tool").inner_text() == "write_file"
    assert w.get_by_test_id("checkpoint-id").inner_text() == by_call["call_write_b"]["id"][:12]
    assert page.get_by_test_id("workspace-root").inner_text() == str(ctx.ws)   # the most recent one

    # the workspace picker (the SDK Select): switch to the other workspace and back
    picker = page.get_by_test_id("workspace-select").get_by_role("combobox")
    picker.click()
    page.get_by_role("option", name=str(other), exact=False).click()
    row(page, other_cp).wait_for()
    assert page.get_by_test_id("workspace-root").inner_text() == str(other)
    assert page.locator('[data-testid="checkpoint-row"]').count() == 1
    picker.click()
    page.get_by_role("option", name=str(ctx.ws) + " ", exact=False).click()
    row(page, log[0]["id"]).wait_for()
    assert page.locator('[data-testid="checkpoint-row"]').count() == len(log)

    # select: the diff this checkpoint recorded
    w.click()
    detail = page.get_by_test_id("checkpoint-detail")
    assert detail.get_attribute("data-checkpoint-id") == by_call["call_write_b"]["id"]
    patch = page.get_by_test_id("diff-patch")
    assert "+bee" in patch.inner_text() and "b/b.txt" in patch.inner_text()
    # checkpoint -> working tree
    page.get_by_test_id("diff-mode-worktree").click()
    page.locator('[data-testid="diff-view"][data-mode="worktree"]').wait_for()
    assert "+one two" in page.get_by_test_id("diff-patch").inner_text()

    # arming, then selecting another checkpoint, disarms: a click there only previews
    row(page, oldest["id"]).click()
    assert page.get_by_test_id("checkpoint-detail").get_attribute("data-checkpoint-id") == oldest["id"]
    button = page.get_by_test_id("restore-button")
    button.click()
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    plan = page.get_by_test_id("restore-plan")
    items = plan.get_by_test_id("restore-plan-item").evaluate_all(
        "els => els.map(e => e.getAttribute('data-action') + ' ' + e.textContent.trim().split(/\\s+/).pop())")
    assert sorted(items) == ["delete b.txt", "restore a.txt"]
    # the first click changed nothing
    assert (ctx.ws / "a.txt").read_text() == "one two\n" and (ctx.ws / "b.txt").exists()
    row(page, by_call["call_write_b"]["id"]).click()
    assert page.get_by_test_id("restore-plan").count() == 0
    assert button.get_attribute("data-armed") == "false"
    row(page, oldest["id"]).click()
    button.click()                                     # arms again (new preview), still nothing written
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    assert (ctx.ws / "a.txt").read_text() == "one two\n" and (ctx.ws / "b.txt").exists()

    with page.expect_request(lambda q: q.url.endswith("/restore") and q.method == "POST") as confirm:
        button.click()                                 # second click: restore, with the dry run's token
    sent = confirm.value
    assert sent.headers["content-type"] == "application/json"
    body = json.loads(sent.post_data)
    assert body["dry_run"] is False and body["plan_token"] and body["checkpoint"] == oldest["id"]
    assert body["workspace"] == str(ctx.ws)
    result = page.get_by_test_id("restore-result")
    result.wait_for()
    assert (ctx.ws / "a.txt").read_text() == "one\n"
    assert not (ctx.ws / "b.txt").exists()
    after = ctx.log()
    safety = page.get_by_test_id("safety-checkpoint-id").get_attribute("data-checkpoint-id")
    # nothing changed since the agent's last call, so the safety checkpoint is that
    # checkpoint (the engine does not duplicate an unchanged tree); undo below proves its content
    assert safety == after[1]["id"] == log[0]["id"]
    assert after[0]["role"] == "restored" and after[0]["restored_from"] == oldest["id"]   # the restore's own
    assert page.get_by_test_id("restored-checkpoint-id").inner_text() == oldest["id"][:12]
    row(page, safety).wait_for()                       # the timeline shows the safety checkpoint
    page.screenshot(path=str(tmp_path / "dashboard-restored.png"), full_page=True)

    # undo = restore the safety checkpoint: previewed (nothing written yet), then confirmed
    page.get_by_test_id("undo-button").click()
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    assert page.get_by_test_id("checkpoint-detail").get_attribute("data-checkpoint-id") == safety
    items = page.get_by_test_id("restore-plan-item").evaluate_all("els => els.map(e => e.dataset.action)")
    assert sorted(items) == ["create", "restore"]
    assert (ctx.ws / "a.txt").read_text() == "one\n" and not (ctx.ws / "b.txt").exists()
    page.get_by_test_id("restore-button").click()
    page.locator('[data-testid="restore-result"]:has-text("Undone")').wait_for()
    assert (ctx.ws / "a.txt").read_text() == "one two\n" and (ctx.ws / "b.txt").read_text() == "bee\n"
    events = ctx.cli("journal", "log", "-n", "10")["events"]
    restores = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos.restore"]
    assert len(restores) == 2 and all(e["actor"] == "user (HTTP API)" for e in restores)
    assert page.get_by_test_id("header-protection").get_attribute("data-state") == "on"
    assert page.get_by_test_id("protection-banner").count() == 0
    store_line = page.get_by_test_id("header-store").inner_text()     # size and the store budget's use
    assert store_line.startswith("store ") and "MiB · budget " in store_line, store_line
    assert page.errors == []
    assert_reads_declared(page, "GET /health: store_bytes", "GET /health: store_budget.budget_bytes",
                          "GET /workspaces: workspaces[].root", "GET /checkpoints: checkpoints[].short_id",
                          f"GET /checkpoints/{by_call['call_write_b']['id']}: changes.patch", "GET /diff: files[].path",
                          "POST /restore: plan_token", "POST /restore: plan[].action", "POST /restore: target.description",
                          "GET /journal/status: protection.state", "GET /journal/log: events[].kind")


@browser_test
def test_journal_panel_blocked_restore_resolve_and_verify(ctx, page, tmp_path):
    first = ctx.cli("snapshot", "-m", "first")["checkpoint"]
    (ctx.ws / "a.txt").write_text("two\n")
    ctx.cli("run", "--", "sh", "-c", "echo bee > b.txt")
    assert ctx.cli("run", "--", "true", fault="after_dispatch", check=False) == {"rc": -9}
    op = ctx.cli("journal", "status")["unresolved"][0]["operation_id"]
    ctx.env.write_config({"auto_snapshot": False})       # protected, but not checkpointed: degraded
    ctx.dash.start()

    open_tab(page, ctx)
    banner = page.get_by_test_id("protection-banner")
    banner.wait_for()
    assert banner.get_attribute("data-state") == "degraded"
    # turning auto_snapshot off weakens protection: held for the operator, and said so
    assert "auto_snapshot" in banner.get_by_test_id("protection-reason").inner_text()
    assert banner.get_by_test_id("protection-fix").inner_text()
    assert page.get_by_test_id("header-protection").inner_text() == "protection DEGRADED"
    panel = page.get_by_test_id("journal-panel")
    panel.get_by_test_id("journal-gate").wait_for()
    assert panel.get_by_test_id("journal-integrity").inner_text() == "ok"
    assert panel.get_by_test_id("journal-gate").inner_text() == "closed"
    assert page.get_by_test_id("header-gate").inner_text() == "gate closed"
    ops = panel.get_by_test_id("unresolved-op")
    assert ops.count() == 1 and ops.first.get_attribute("data-operation-id") == op
    kinds = panel.get_by_test_id("journal-event").evaluate_all("els => els.map(e => e.dataset.kind)")
    # maintenance events (the settings record) are listed too; the calls are these
    assert [k for k in kinds if k != "maintenance"] == ["started", "returned", "started", "genesis"]

    # a restore while the gate is closed: a clear error, nothing written
    row(page, first).click()
    page.get_by_test_id("restore-button").click()
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    page.get_by_test_id("restore-button").click()
    err = page.get_by_test_id("chronos-error")
    err.wait_for()
    assert err.get_attribute("data-code") == "chronos_blocked"
    assert "HTTP 409" in err.inner_text() and op[:12] in err.inner_text()
    assert (ctx.ws / "a.txt").read_text() == "two\n" and (ctx.ws / "b.txt").exists()
    page.screenshot(path=str(tmp_path / "dashboard-blocked.png"), full_page=True)

    # resolve: evidence is required, outcome picked in the SDK Select
    form = ops.first.get_by_test_id("resolve-form")
    assert form.get_by_test_id("resolve-submit").is_disabled()
    form.get_by_test_id("resolve-outcome").get_by_role("combobox").click()
    page.get_by_role("option", name="not_applied").click()
    form.get_by_test_id("resolve-evidence").fill("checked by hand: `true` changed nothing")
    form.get_by_test_id("resolve-submit").click()
    page.locator('[data-testid="journal-gate"]:text-is("open")').wait_for()
    assert panel.get_by_test_id("unresolved-op").count() == 0
    page.locator('[data-testid="journal-event"][data-kind="resolved"]').wait_for()
    resolved = next(e for e in ctx.cli("journal", "log", "-n", "5")["events"] if e["kind"] != "maintenance")
    assert resolved["kind"] == "resolved" and resolved["operation_id"] == op
    assert resolved["outcome"] == "not_applied"
    assert resolved["evidence"] == "checked by hand: `true` changed nothing"

    # now the restore goes through
    page.get_by_test_id("chronos-error-dismiss").click()
    page.get_by_test_id("restore-button").click()
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    page.get_by_test_id("restore-button").click()
    page.get_by_test_id("restore-result").wait_for()
    assert (ctx.ws / "a.txt").read_text() == "one\n" and not (ctx.ws / "b.txt").exists()
    assert page.get_by_test_id("chronos-error").count() == 0

    page.get_by_test_id("verify-button").click()
    v = page.get_by_test_id("verify-result")
    v.wait_for()
    assert v.get_attribute("data-integrity") == "ok"
    n_events = ctx.cli("journal", "status")["events"]
    assert f"Verified {n_events} events" in v.inner_text()
    page.screenshot(path=str(tmp_path / "dashboard-journal.png"), full_page=True)
    assert page.errors == []
    assert_reads_declared(page, "GET /journal/status: unresolved[].operation_id", "GET /journal/status: gate",
                          "POST /journal/verify: events", "POST /restore: safety_checkpoint",
                          "GET /journal/status: protection.reason", "GET /journal/status: protection.fix")


@browser_test
def test_remote_state_shows_in_the_journal_panel(ctx, page, tmp_path):
    import socket
    ctx.cli("write", "b.txt", "--content", "bee")
    ctx.cli("remote", "add", "backup", str(tmp_path / "backup.git"))
    ctx.cli("push", "backup")
    with socket.socket() as s:                         # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    ctx.cli("remote", "add", "down", f"git://127.0.0.1:{dead}/x.git")
    assert ctx.cli("push", "down", check=False)["status"] == "error"
    ctx.dash.start()
    open_tab(page, ctx)
    panel = page.get_by_test_id("journal-panel")
    up = panel.locator('[data-testid="remote-state"][data-remote="backup"]')
    up.wait_for()
    assert "pushed" in up.inner_text() and "1 event(s) behind" in up.inner_text()   # adding "down" came after
    down = panel.locator('[data-testid="remote-state"][data-remote="down"]')
    assert "failing" in down.inner_text() and "Connection refused" in down.inner_text()
    assert_reads_declared(page, "GET /journal/status: remotes[].name", "GET /journal/status: remotes[].last_error")
    assert not page.errors, page.errors
