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


def select(page, cid: str) -> None:
    """Click a checkpoint's row and wait until its detail (with the restore buttons) shows it: a
    restore click before that previews the checkpoint selected before, which never arms here."""
    row(page, cid).click()
    page.locator(f'[data-testid="checkpoint-detail"][data-checkpoint-id="{cid}"]').wait_for()


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
    select(page, oldest["id"])
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
    select(page, first)
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


def cp_row_texts(page, cid: str, testid: str) -> list[str]:
    return row(page, cid).get_by_test_id(testid).evaluate_all("els => els.map(e => e.textContent.trim())")


def shot(page, tmp_path: Path, name: str, locator=None) -> Path:
    """A Chromium screenshot in tmp_path, copied to docs/panes/ (the pane's documentation)."""
    out = tmp_path / name
    (locator or page).screenshot(path=str(out), **({} if locator else {"full_page": True}))
    docs = Path(__file__).resolve().parents[2] / "docs" / "panes"
    docs.mkdir(exist_ok=True)
    shutil.copyfile(out, docs / name)
    return out


def plan_items(scope) -> list[str]:
    """`action path` of each item of the plan shown in `scope` (the page, or one panel)."""
    return scope.get_by_test_id("restore-plan-item").evaluate_all(
        "els => els.map(e => e.dataset.action + ' ' + e.dataset.path)")


def confirm(page, testid: str):
    """The second click of a two-click operation.  The first click's arming lasts 5 s: when
    it ran out (a slow machine), one click previews anew and arms again."""
    button = page.get_by_test_id(testid)
    if button.get_attribute("data-armed") != "true":
        button.click()
        page.locator(f'[data-testid="{testid}"][data-armed="true"]').wait_for()
    button.click()


@browser_test
def test_timeline_tree_scrub_agent_only_conflict_and_undo_redo(ctx, page, tmp_path):
    """A timeline that branches: a restore to an older checkpoint, then new calls.  The tab
    draws the tree (the line left behind dimmed, the branch point marked, @N and roles),
    scrubs through it with the arrow keys (the diff of each checkpoint previewed, asked for
    once the scrub rests), previews an agent-only restore whose plan lists the person's edit
    in the agent's hunk as a conflict, applies it, and undoes and redoes it with the buttons."""
    ws = ctx.ws
    eight = "".join(f"{i}\n" for i in range(1, 9))
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    (ws / "m.txt").write_text(eight)
    base = ctx.cli("snapshot", "-m", "base")["checkpoint"]
    ctx.cli("write", "b.txt", "--content", "bee\n")                      # the agent's calls ...
    ctx.cli("write", "a.txt", "--content", "one\nTWO\nthree\n")
    ctx.cli("restore", base)                                             # ... taken back: a branch
    ctx.cli("write", "m.txt", "--content", eight.replace("1\n", "1 agent\n", 1))   # new calls on the new line
    ctx.cli("write", "c.txt", "--content", "sea\n")
    ctx.cli("write", "a.txt", "--content", "one\ntwo agent\nthree\n")
    (ws / "a.txt").write_text("one\ntwo person\nthree\n")                # the person, in the agent's hunk ...
    (ws / "m.txt").write_text(eight.replace("1\n", "1 agent\n", 1).replace("8\n", "8 person\n"))   # ... and apart
    log = ctx.log()
    num = {c["number"]: c for c in log}
    assert sorted(num) == [1, 2, 3, 4, 5, 6, 7], [(c["number"], c["role"]) for c in log]
    restored = num[4]
    assert restored["role"] == "restored" and restored["restored_from"] == base == num[1]["id"]
    line = [c["id"] for c in ctx.cli("log", "-n", "100")["checkpoints"]]      # the current line
    assert line == [num[n]["id"] for n in (7, 6, 5, 4, 1)]
    left_behind = {num[2]["id"], num[3]["id"]}
    ctx.dash.start()

    page.set_viewport_size({"width": 1400, "height": 1600})          # room for the tree and a plan
    page.clock.install()                # real time flows until paused (the debounce check below)
    open_tab(page, ctx)
    for c in log:
        row(page, c["id"]).wait_for()
    rows = page.locator('[data-testid="checkpoint-row"]')
    assert rows.evaluate_all("els => els.map(e => e.dataset.checkpointId)") == [c["id"] for c in log]

    # ---- the tree: numbers, roles, the line left behind dimmed, the branch point marked
    for c in log:
        r = row(page, c["id"])
        assert r.get_by_test_id("checkpoint-number").inner_text() == f"@{c['number']}"
        assert r.get_attribute("data-on-line") == ("false" if c["id"] in left_behind else "true"), c["number"]
        assert r.get_attribute("data-lane") == ("1" if c["id"] in left_behind else "0"), c["number"]
        if c["id"] in left_behind:
            assert float(r.evaluate("e => getComputedStyle(e).opacity")) < 0.9
            assert r.get_by_test_id("off-line").count() == 1
        else:
            assert r.get_by_test_id("off-line").count() == 0
        roles = cp_row_texts(page, c["id"], "checkpoint-role")
        assert {"before call" if x == "before_call" else "after call" if x == "after_call" else x
                for x in c.get("roles") or [c["role"]]} == set(roles), (c, roles)
    assert "restored" in cp_row_texts(page, restored["id"], "checkpoint-role")
    assert "manual" in cp_row_texts(page, base, "checkpoint-role")
    assert "after call" in cp_row_texts(page, num[3]["id"], "checkpoint-role")
    marker = page.get_by_test_id("branch-marker")
    assert marker.count() == 1
    assert row(page, base).get_by_test_id("branch-marker").get_attribute("data-branches") == "2"
    came_from = row(page, restored["id"]).get_by_test_id("checkpoint-restored-from")
    assert came_from.get_attribute("data-restored-from") == base and "@1" in came_from.inner_text()
    # a manual checkpoint's detail says "manual" once (its role and its kind are the same word)
    select(page, base)
    detail = page.get_by_test_id("checkpoint-detail")
    assert detail.get_by_test_id("detail-role").all_inner_texts().count("manual") == 1
    assert detail.get_by_text("manual", exact=True).count() == 1 and detail.get_by_test_id("detail-kind").count() == 0
    # the line left behind stays restorable: its plan is previewed like any other
    select(page, num[3]["id"])
    page.get_by_test_id("restore-button").click()
    page.locator('[data-testid="restore-button"][data-armed="true"]').wait_for()
    items = plan_items(page)
    assert sorted(items) == ["create b.txt", "delete c.txt", "restore a.txt", "restore m.txt"], items
    assert (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"          # a preview writes nothing
    shot(page, tmp_path, "dashboard-tree.png", page.get_by_test_id("timeline"))

    # ---- scrub: the arrow keys on the slider step through the checkpoints, each previewed
    row(page, num[7]["id"]).click()
    preview = page.get_by_test_id("scrub-preview")
    page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{num[7]["id"]}"][data-loaded="true"]').wait_for()
    assert "a.txt" in preview.inner_text() and "@7" in preview.inner_text()
    scrubber = page.get_by_test_id("timeline-scrubber")
    assert scrubber.input_value() == "6"
    scrubber.focus()
    seen = []
    for n, path, added in ((6, "c.txt", "+sea"), (5, "m.txt", "+1 agent"), (4, "a.txt", "+two")):
        page.keyboard.press("ArrowLeft")
        cid = num[n]["id"]
        page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{cid}"][data-loaded="true"]').wait_for()
        assert row(page, cid).get_attribute("aria-pressed") == "true"
        assert page.get_by_test_id("checkpoint-detail").get_attribute("data-checkpoint-id") == cid
        assert f"@{n}" in preview.inner_text() and path in preview.inner_text(), preview.inner_text()
        assert added in page.get_by_test_id("diff-patch").inner_text()
        seen.append(preview.inner_text())
        if n == 5:
            shot(page, tmp_path, "dashboard-scrub.png")
    assert len(set(seen)) == 3
    assert scrubber.input_value() == "3"
    # ... and the arrow keys on the list, too (up = newer, down = older: into the line left behind)
    row(page, num[4]["id"]).focus()
    page.keyboard.press("ArrowDown")
    page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{num[3]["id"]}"][data-loaded="true"]').wait_for()
    assert "+TWO" in page.get_by_test_id("diff-patch").inner_text()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{num[5]["id"]}"][data-loaded="true"]').wait_for()
    # the diff is asked for once the scrub rests (debounced): four quick steps, one request
    asked: list[str] = []
    page.on("request", lambda q: asked.append(q.url) if "/api/plugins/chronos-git/checkpoints/" in q.url else None)
    page.clock.pause_at(time.time() + 2)
    scrubber.focus()
    for _ in range(4):
        page.keyboard.press("ArrowRight")                                # @6, @7 ... the end: @7
    page.keyboard.press("ArrowLeft")                                     # rests on @6
    assert row(page, num[6]["id"]).get_attribute("aria-pressed") == "true"
    assert asked == []
    page.clock.run_for(400)
    page.clock.resume()
    page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{num[6]["id"]}"][data-loaded="true"]').wait_for()
    assert len(asked) == 1 and num[6]["id"] in asked[0], asked
    # dragging the slider's thumb to the left end: the oldest checkpoint, previewed
    box = scrubber.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.8, y)
    page.mouse.down()
    page.mouse.move(box["x"] + 1, y, steps=8)
    page.mouse.up()
    page.locator(f'[data-testid="scrub-preview"][data-checkpoint-id="{base}"][data-loaded="true"]').wait_for()
    assert scrubber.input_value() == "0" and "@1" in preview.inner_text()

    # ---- agent-only restore to @4: the calls since (m.txt, c.txt, a.txt) taken back: m.txt
    # merged (the person's line 8 stays), the person's edit in the agent's hunk of a.txt a
    # conflict, listed before anything is written
    select(page, restored["id"])
    with page.expect_request(lambda q: q.url.endswith("/restore") and q.method == "POST") as dry:
        page.get_by_test_id("agent-restore-button").click()
    assert json.loads(dry.value.post_data) == {"dry_run": True, "checkpoint": restored["id"], "agent_only": True,
                                               "workspace": str(ws)}
    page.locator('[data-testid="agent-restore-button"][data-armed="true"]').wait_for()
    plan = page.get_by_test_id("restore-plan")
    assert plan.get_attribute("data-kind") == "agent"
    assert page.get_by_test_id("restore-button").get_attribute("data-armed") == "false"
    items = plan_items(plan)
    assert sorted(items) == ["conflict a.txt", "delete c.txt", "restore m.txt"], items
    assert plan.locator('[data-testid="restore-plan-item"][data-path="m.txt"]').inner_text().startswith("merge")
    assert plan.get_by_test_id("restore-plan-conflicts").get_attribute("data-count") == "1"
    conflict = plan.locator('[data-testid="plan-conflict"][data-path="a.txt"]')
    assert "line 2" in conflict.get_by_test_id("plan-conflict-agent").inner_text()
    assert "line 2" in conflict.get_by_test_id("plan-conflict-person").inner_text()
    summary = plan.get_by_test_id("restore-plan-summary").inner_text()
    assert "1 merge" in summary and "1 conflict" in summary and "takes back 3 call(s)" in summary, summary
    assert (ws / "c.txt").exists() and (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"
    shot(page, tmp_path, "dashboard-agent-only-conflict.png")
    with page.expect_request(lambda q: q.url.endswith("/restore") and q.method == "POST"
                             and not json.loads(q.post_data)["dry_run"]) as confirmed:
        confirm(page, "agent-restore-button")                           # second click: with the dry run's token
    body = json.loads(confirmed.value.post_data)
    assert body["dry_run"] is False and body["plan_token"] and body["agent_only"] is True
    result = page.locator('[data-testid="restore-result"][data-kind="agent"]')
    result.wait_for()
    assert not (ws / "c.txt").exists()
    assert (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"      # left exactly as it is
    assert (ws / "m.txt").read_text() == eight.replace("8\n", "8 person\n")   # the agent's line back, the person's kept
    assert result.get_by_test_id("restore-conflicts").count() == 1
    after = result.get_by_test_id("after-checkpoint-id").get_attribute("data-checkpoint-id")
    log2 = ctx.log()
    assert log2[0]["id"] == after and log2[0]["role"] == "restored"
    row(page, after).wait_for()                                          # on the timeline, where it happened
    assert "restored" in cp_row_texts(page, after, "checkpoint-role")

    # ---- undo and redo: the buttons, each previewed, then confirmed
    page.get_by_test_id("tm-undo-button").click()
    op = page.locator('[data-testid="op-plan"][data-kind="undo"]')
    op.wait_for()
    page.locator('[data-testid="op-confirm-button"][data-armed="true"]').wait_for()
    assert sorted(plan_items(op)) == ["create c.txt", "restore m.txt"]
    assert not (ws / "c.txt").exists()
    confirm(page, "op-confirm-button")
    page.locator('[data-testid="restore-result"][data-kind="undo"]').wait_for()
    assert (ws / "c.txt").read_text() == "sea\n" and (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"
    assert (ws / "m.txt").read_text() == eight.replace("1\n", "1 agent\n", 1).replace("8\n", "8 person\n")
    undo_after = page.get_by_test_id("after-checkpoint-id").get_attribute("data-checkpoint-id")
    row(page, undo_after).wait_for()
    log3 = {c["id"]: c for c in ctx.log()}
    assert log3[undo_after]["role"] == "restored"
    if log3[undo_after].get("restored_from"):                            # a branch: the undo's own line
        assert row(page, undo_after).get_by_test_id("checkpoint-restored-from").get_attribute(
            "data-restored-from") == log3[undo_after]["restored_from"]
    assert page.get_by_test_id("op-plan").count() == 0

    page.get_by_test_id("tm-redo-button").click()
    page.locator('[data-testid="op-plan"][data-kind="redo"]').wait_for()
    page.locator('[data-testid="op-confirm-button"][data-armed="true"]').wait_for()
    confirm(page, "op-confirm-button")
    page.locator('[data-testid="restore-result"][data-kind="redo"]').wait_for()
    assert not (ws / "c.txt").exists() and (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"
    assert (ws / "m.txt").read_text() == eight.replace("8\n", "8 person\n")
    redo_after = page.get_by_test_id("after-checkpoint-id").get_attribute("data-checkpoint-id")
    row(page, redo_after).wait_for()
    page.screenshot(path=str(tmp_path / "dashboard-after-redo.png"), full_page=True)
    tools = [e.get("tool") for e in ctx.cli("journal", "log", "-n", "40")["events"] if e["kind"] == "started"]
    assert tools[:3] == ["chronos.redo", "chronos.undo", "chronos.agent_restore"], tools

    # ---- revert one call from the journal: previewed, then confirmed
    ctx.cli("write", "d.txt", "--content", "dee\n")
    d_op = next(e["operation_id"] for e in ctx.cli("journal", "log", "-n", "10")["events"]
                if e["kind"] == "started" and e.get("tool") == "write_file")
    page.get_by_test_id("refresh-button").click()
    revert = page.locator(f'[data-testid="revert-button"][data-operation-id="{d_op}"]')
    with page.expect_request(lambda q: q.url.endswith("/revert") and q.method == "POST") as dry:
        revert.click()
    assert json.loads(dry.value.post_data) == {"dry_run": True, "operation": d_op, "workspace": str(ws)}
    page.locator('[data-testid="op-plan"][data-kind="revert"]').wait_for()
    page.locator('[data-testid="op-confirm-button"][data-armed="true"]').wait_for()
    assert plan_items(page.get_by_test_id("op-plan")) == ["delete d.txt"]
    assert (ws / "d.txt").exists()
    confirm(page, "op-confirm-button")
    page.locator('[data-testid="restore-result"][data-kind="revert"]').wait_for()
    assert not (ws / "d.txt").exists() and (ws / "a.txt").read_text() == "one\ntwo person\nthree\n"

    # the journal's events name their tool where the events route declares it
    declared = "tool" in openapi_doc()["components"]["schemas"]["Event"].get("properties", {})
    table = page.get_by_test_id("journal-events")
    assert table.get_attribute("data-schema") == "host"          # Hermes' /openapi.json holds our routes
    assert table.get_attribute("data-tool-declared") == str(declared).lower()
    started = '[data-testid="journal-event"][data-kind="started"]'
    cells = page.locator(f'{started} [data-testid="journal-event-tool"]')
    if declared:                          # the list refreshes after the revert: its intent on top
        page.wait_for_function("""sel => {
            const c = document.querySelector(sel)
            return c && c.textContent === 'chronos.revert' }""", arg=f'{started} [data-testid="journal-event-tool"]')
        shown = cells.evaluate_all("els => els.map(e => e.textContent)")
        assert "write_file" in shown and "chronos.agent_restore" in shown, shown
        # a time-machine operation is taken back with Undo, not Revert: no button on its row
        tm_rows = page.locator(f'{started}:has([data-testid="journal-event-tool"]:text-is("chronos.undo"))')
        assert tm_rows.count() >= 1 and tm_rows.get_by_test_id("revert-button").count() == 0
    else:
        cells.first.wait_for()
        assert set(cells.evaluate_all("els => els.map(e => e.textContent)")) == {""}
    assert page.errors == []
    assert_reads_declared(page, "GET /checkpoints: checkpoints[].parents", "GET /checkpoints: checkpoints[].number",
                          "GET /checkpoints: checkpoints[].restored_from", "POST /restore: plan[].agent",
                          "POST /restore: plan[].person", "POST /undo: plan[].action", "POST /redo: after_checkpoint",
                          "POST /revert: plan_token", "POST /revert: calls")
