"""desktop/plugin.js (the Hermes Desktop pane) outside Electron.

Node runs the plugin file as ESM through module hooks (tests/desktop_harness/)
that resolve `@hermes/plugin-sdk` to a stub and `react` / `react/jsx-runtime` to
the React the Desktop ships (19, apps/desktop/package.json), installed with npm
into a cache directory outside the repo beside the Desktop's state library
(nanostores + @nanostores/react: the stub's `host.state` atoms and `useValue`),
and refuse any other import from the plugin, like the Desktop loader.  The pane is
rendered with react-test-renderer (no DOM) against a fake `ctx` that behaves like
the Desktop's rest door (apps/desktop/src/api/plugins.ts, electron/api-transport.ts):
it forwards only method, body and timeoutMs (the pane's own headers are dropped, a
body goes as JSON), gives up on a request silent for longer than its default
deadline unless `timeoutMs` allows more, and throws a non-2xx answer as an Error
whose message is "NNN: <body>" (through Electron's IPC, "Error invoking remote
method 'hermes:api': Error: NNN: <body>"; a 404 keeps `statusCode`).  Its backend
answers with the API's typed results — or, in the last tests, the real HTTP API
(uvicorn on 127.0.0.1) and a real store, so operations change files.
Every scenario also reports the fields the pane read (its answers come behind
recording Proxies, desktop_harness/field_recorder.js) and the answers it was
given: each read must be declared by the route's OpenAPI schema, each answer
must validate against the route's model.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support.server import Server
from surfaces.test_api_schema import openapi_doc, undeclared, validate

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "desktop" / "plugin.js"
HARNESS = Path(__file__).resolve().parent / "desktop_harness"
REACT = "19.2.7"                  # apps/desktop/package.json: react, react-dom 19.2.7
PACKAGES = {"react": REACT, "react-test-renderer": REACT, "react-dom": REACT,
            "nanostores": "1.4.2", "@nanostores/react": "1.1.0",   # the Desktop's state library
            "esbuild": "0.28.1"}                                    # bundles them for the chromium page
NODE = shutil.which("node")
NPM = shutil.which("npm")


def _node_version() -> tuple[int, ...]:
    try:
        out = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30).stdout
        return tuple(int(x) for x in out.strip().lstrip("v").split(".")[:2])
    except (OSError, ValueError, subprocess.SubprocessError):
        return (0,)


pytestmark = [
    pytest.mark.process,                      # a real node process runs the pane
    pytest.mark.skipif(NODE is None, reason="node is not installed (Node >= 20.6 runs the desktop plugin harness)"),
    pytest.mark.skipif(NPM is None, reason="npm is not installed (it installs react for the desktop plugin harness)"),
]


@pytest.fixture(scope="session")
def node_modules() -> Path:
    if _node_version() < (20, 6):
        pytest.skip(f"node {'.'.join(map(str, _node_version()))} is too old: module.register() needs >= 20.6")
    root = Path(os.environ.get("CHRONOS_DESKTOP_HARNESS_DIR")
                or Path(tempfile.gettempdir()) / "chronos-git-desktop-harness") / f"react-{REACT}"
    root.mkdir(parents=True, exist_ok=True)
    nm = root / "node_modules"

    def ready() -> bool:
        try:
            return all(json.loads((nm / pkg / "package.json").read_text())["version"] == version
                       for pkg, version in PACKAGES.items())
        except (OSError, ValueError, KeyError):
            return False

    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready():
            p = subprocess.run([NPM, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(root),
                                *(f"{pkg}@{version}" for pkg, version in PACKAGES.items())],
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0 or not ready():
                pytest.skip(f"npm could not install {PACKAGES} for the harness (rc {p.returncode}): "
                            f"{(p.stderr or p.stdout)[-600:]}")
    return nm


def run(node_modules: Path, scenario: str, *, sdk: str = "full", cwd: str | None = "/w/proj/sub",
        plugin: Path = PLUGIN, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update(HARNESS_NODE_MODULES=str(node_modules), HARNESS_PLUGIN=str(plugin), HARNESS_SDK=sdk)
    if cwd:
        env["HARNESS_CWD"] = cwd
    env.update({f"HARNESS_{k.upper()}": str(v) for k, v in env_extra.items()})
    p = subprocess.run([NODE, "--import", "./register.mjs", "scenarios.mjs", scenario], cwd=HARNESS, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"scenario {scenario} failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    last = p.stdout.strip().splitlines()[-1]
    res = json.loads(last)
    assert res["ok"] is True and res["scenario"] == scenario
    bad = undeclared(openapi_doc(), res["reads"])
    assert not bad, f"scenario {scenario}: the pane read fields its routes' schemas do not declare:\n" + "\n".join(bad)
    for answer in res["served"]:
        validate(openapi_doc(), *answer["route"].split(" ", 1), answer["body"])
    return res


# ----------------------------------------------------------- static checks
def test_plugin_file_is_plain_esm_within_the_desktop_sdk_surface(tmp_path):
    src = PLUGIN.read_text()
    code = re.sub(r"/\*.*?\*/|(?<![:\w])//[^\n]*", "", src, flags=re.S)      # comments out
    specs = re.findall(r"""\bfrom\s*['"]([^'"]+)['"]|\bimport\s*['"]([^'"]+)['"]""", code)
    assert sorted({a or b for a, b in specs}) == ["@hermes/plugin-sdk", "react", "react/jsx-runtime"]
    assert not re.search(r"\bimport\s*\(", code), "no dynamic import"
    assert not re.search(r"(?<![\w$.])eval\(|\bnew\s+Function\(", code), "no dynamic code evaluation"
    assert not re.search(r"\.prototype\.[\w$]+\s*=[^=]|__proto__\s*=", code), "no prototype patching"
    assert not re.search(r"createElement\(\s*['\"]script['\"]", code), "no script injection"
    assert not re.search(r"(return|\(|=|,|\?|:)\s*<[A-Za-z]", code), "no JSX"
    assert not re.search(r"\bwindow\.setInterval|\bfetch\(", code), "timers through ctx, HTTP through ctx.rest"
    assert re.search(r"^export default \{", code, flags=re.M)
    assert "'chronos-git'" in code and "placement: 'right'" in code and "ctx.rest(" in code
    # valid module syntax (node --check wants an .mjs name for ESM)
    copy = tmp_path / "plugin.mjs"
    copy.write_text(src)
    p = subprocess.run([NODE, "--check", str(copy)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------- canned backend
def test_register_contributes_one_right_pane(node_modules):
    res = run(node_modules, "register")
    assert res["contribution"] == {"id": "pane", "area": "panes", "title": "chronos",
                                   "data": {"placement": "right", "width": "380px"}}


def test_timeline_follows_the_session_cwd_and_shows_diffs(node_modules):
    res = run(node_modules, "timeline")
    # the recording works: reads of the typed results, by route
    assert {"GET /workspaces: workspaces[].root", "GET /checkpoints: checkpoints[].short_id",
            f"GET /checkpoints/{'b' * 40}: changes.patch", "GET /diff: files[].status",
            "GET /journal/status: protection.state", "GET /journal/log: events[].kind"} <= set(res["reads"])


def test_protection_off_or_degraded_is_shown_with_its_reason_and_fix(node_modules):
    res = run(node_modules, "protection")
    assert {"GET /journal/status: protection.reason", "GET /journal/status: protection.fix",
            "GET /journal/status: settled_at_start[].result"} <= set(res["reads"])


def test_two_click_restore_then_undo(node_modules):
    """Dry run, then the confirm with the dry run's plan_token; undo is previewed and confirmed too."""
    res = run(node_modules, "restore")
    assert [c["checkpoint"][0] for c in res["restore_calls"]] == ["c", "e"]      # target, then safety
    assert all(c["dry_run"] is False and c["workspace"] == "/w/proj" for c in res["restore_calls"])
    assert [c["plan_token"] for c in res["restore_calls"]] == ["plan-1", "plan-2"]


def test_a_workspace_that_is_not_utf8_is_named_by_its_bytes(node_modules):
    run(node_modules, "non-utf8", sdk="minimal", cwd=None)


def test_arming_expires_and_belongs_to_one_checkpoint(node_modules):
    run(node_modules, "arm-expiry")


@pytest.mark.parametrize("error_style", ["host", "fields"])
def test_blocked_restore_resolve_and_verify(node_modules, error_style):
    run(node_modules, "blocked-and-resolve", error_style=error_style)


def test_polls_through_ctx_set_interval_and_stops_on_unmount(node_modules):
    run(node_modules, "polling")


def test_older_host_without_optional_sdk_members(node_modules):
    run(node_modules, "minimal-host", sdk="minimal", cwd=None)


def test_error_envelopes_are_normalised(node_modules):
    run(node_modules, "errors")


def test_long_operations_name_their_own_timeout(node_modules):
    """Restore, undo, verify and resolve that answer after 20 s still succeed: the host's rest
    door gives up on a silent request after its default deadline unless `timeoutMs` allows more."""
    res = run(node_modules, "long-requests")
    assert all(t >= 20_000 for t in res["timeouts"])


@pytest.mark.parametrize("missing", ["404", "html"])
def test_a_profile_without_chronos_git_is_named_with_the_fix(node_modules, missing):
    run(node_modules, "not-installed", missing=missing)


def test_timeline_is_a_tree_with_branch_points_and_dimmed_lines(node_modules):
    res = run(node_modules, "tree", cwd="/w/tree/src")
    assert res["lanes"] == [0, 1, 1, 0, 0]
    assert {"GET /checkpoints: checkpoints[].parents", "GET /checkpoints: checkpoints[].number",
            "GET /checkpoints: checkpoints[].restored_from", "GET /checkpoints: checkpoints[].role",
            "GET /checkpoints: checkpoints[].roles"} <= set(res["reads"])


def test_scrubbing_names_each_checkpoint_and_loads_its_diff_when_it_rests(node_modules):
    run(node_modules, "scrub", cwd="/w/tree")


def test_agent_only_restore_previews_merges_and_conflicts(node_modules):
    res = run(node_modules, "agent-only")
    assert {"POST /restore: plan[].agent", "POST /restore: plan[].person", "POST /restore: kind",
            "POST /restore: calls", "POST /restore: conflicts"} <= set(res["reads"])


def test_undo_redo_and_revert_are_previewed_then_confirmed(node_modules):
    res = run(node_modules, "undo-redo-revert")
    assert {"POST /undo: plan", "POST /redo: plan_token", "POST /revert: plan_token"} <= set(res["reads"])


def test_harness_refuses_imports_outside_the_sdk(node_modules, tmp_path):
    """The harness would catch a plugin importing anything else (as Hermes Desktop does)."""
    bad = tmp_path / "plugin.js"
    bad.write_text("import fs from 'node:fs'\n" + PLUGIN.read_text())
    with pytest.raises(AssertionError, match="only @hermes/plugin-sdk, react, react/jsx-runtime"):
        run(node_modules, "register", plugin=bad)


# --------------------------------------------------------- real backend
def test_pane_against_the_real_http_api(node_modules, store_dir, ws, cli):
    from chronos_git.api import create_app
    from chronos_git.settings import Settings

    first = cli("--json", "snapshot", "-m", "first", cwd=ws).json["checkpoint"]
    (ws / "a.txt").write_text("changed by the agent\n")
    (ws / "new.txt").write_text("new\n")
    assert cli("--json", "snapshot", "-m", "after the agent", cwd=ws).rc == 0
    server = Server(create_app(store_dir, Settings(), token="desk-token"))
    try:
        res = run(node_modules, "real-backend", cwd=str(ws / "src"), api=f"http://127.0.0.1:{server.port}/api/plugins/chronos-git",
                  token="desk-token", target=first)
    finally:
        server.stop()
    log = cli("--json", "log", "--all", "-n", "20", cwd=ws).json["checkpoints"]
    assert first in res["rows"] and res["rows"][0] != first
    assert sorted(res["plan"]) == ["delete new.txt", "restore a.txt"]
    assert res["after_first_click"] == 0
    [confirm] = res["confirm"]                  # the dry run's request, its plan_token, the full id
    assert confirm["checkpoint"] == first and confirm["workspace"] == str(ws) and confirm["plan_token"]
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "new.txt").exists()
    assert res["safety"] == log[1]["id"] and log[0]["restored_from"] == first   # log[0]: the restore's own
    assert res["gate"] == "gate open"
    assert "chronos.restore" in res["event_tools"], res["event_tools"]      # the journal list names each call's tool
    assert res["revert_buttons"] and not any(res["revert_buttons"])          # a restore is undone, not reverted
    events = cli("--json", "journal", "log", "-n", "5", cwd=ws).json["events"]
    assert [e["kind"] for e in events[:2]] == ["returned", "started"]
    assert events[1]["tool"] == "chronos.restore" and events[1]["actor"] == "user (HTTP API)"


def _branching_workspace(ws, cli) -> str:
    """@1 first; two agent calls (@2 a.txt, @3 b.txt); a full restore back to @2, which leaves @3 on a
    line of its own; the agent writes b.txt again; then the person edits a.txt's last line and b.txt
    (where the agent wrote). Returns a.txt as the agent left it."""
    lines = [f"line {i}\n" for i in range(1, 8)]
    (ws / "a.txt").write_text("".join(lines))
    (ws / "b.txt").write_text("bee\n")
    assert cli("--json", "snapshot", "-m", "first", cwd=ws).rc == 0                         # @1
    agent_a = "".join(["LINE 1 (agent)\n", *lines[1:]])
    assert cli("--json", "write", "a.txt", "--content", agent_a, cwd=ws).rc == 0           # a call: @2
    assert cli("--json", "write", "b.txt", "--content", "attempt 1\n", cwd=ws).rc == 0     # a call: @3
    log = cli("--json", "log", "--all", cwd=ws).json["checkpoints"]
    after_a = next(c for c in log if c["number"] == 2)["id"]
    assert cli("--json", "restore", after_a, cwd=ws).rc == 0                                # back to @2: @3 left behind
    assert cli("--json", "write", "b.txt", "--content", "agent b\n", cwd=ws).rc == 0       # the agent again
    (ws / "a.txt").write_text(agent_a.replace("line 7\n", "line 7 (person)\n"))            # the person, after the calls
    (ws / "b.txt").write_text("person b\n")
    return agent_a


def test_tree_agent_only_restore_and_undo_against_the_real_http_api(node_modules, store_dir, ws, cli):
    """A real store whose timeline branches (a full restore left a line behind) and an agent-only
    restore that meets the person's edit: the tree, the preview's merge and conflict, the confirm
    and the time machine's undo, all through the real API."""
    from chronos_git.api import create_app
    from chronos_git.settings import Settings

    agent_a = _branching_workspace(ws, cli)
    after_a = next(c for c in cli("--json", "log", "--all", cwd=ws).json["checkpoints"] if c["number"] == 2)["id"]
    before = {p: (ws / p).read_text() for p in ("a.txt", "b.txt")}
    server = Server(create_app(store_dir, Settings(), token="desk-token"))
    try:
        res = run(node_modules, "real-tree", cwd=str(ws / "src"), api=f"http://127.0.0.1:{server.port}/api/plugins/chronos-git",
                  token="desk-token")
    finally:
        server.stop()
    log = cli("--json", "log", "--all", cwd=ws).json["checkpoints"]
    by_number = {c["number"]: c for c in log}
    left_behind = {f"@{c['number']}" for c in log if c["number"] is not None} - {n for n, on, _, _ in res["rows"] if on == "true"}
    assert "@3" in left_behind and all(lane > 0 for n, on, lane, _ in res["rows"] if on == "false")
    assert "@2" in res["branch_rows"] and any(o.startswith("↩ restored @2") for o in res["origins"])
    assert by_number[2]["id"] == after_a
    # the preview: a.txt merged (the agent's line 1 back, the person's line 7 kept), b.txt a conflict
    assert sorted(res["plan"])[0].startswith("conflict ") and any(p.startswith("restore merge a.txt") for p in res["plan"]), res["plan"]
    assert "agent" in res["conflict"][0] and "later" in res["conflict"][1]
    assert res["summary"].startswith("Agent-only dry run:") and "conflict" in res["summary"]
    [confirm] = res["after_restore"]
    assert confirm["agent_only"] is True and confirm["plan_token"] and confirm["checkpoint"] == by_number[1]["id"]
    assert "conflict(s) left as they are" in res["result"]
    # ... and undone by the time machine: the files as they were before the agent-only restore
    assert res["undo"] == [[True, False], [False, True]]
    assert {p: (ws / p).read_text() for p in ("a.txt", "b.txt")} == before
    events = cli("--json", "journal", "log", "-n", "12", cwd=ws).json["events"]
    assert {"chronos.agent_restore", "chronos.undo"} <= {e.get("tool") for e in events}


# ------------------------------------------------------------ real chromium
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
try:
    from playwright.sync_api import sync_playwright
    _PW_ERROR = None
except ImportError as exc:          # pragma: no cover - depends on the environment
    sync_playwright = None
    _PW_ERROR = str(exc)


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (Debian package `chromium`)")
@pytest.mark.skipif(sync_playwright is None, reason=f"the Python package playwright is not installed ({_PW_ERROR})")
def test_pane_renders_in_chromium_against_the_real_api(node_modules, store_dir, ws, cli, tmp_path):
    """The pane as the Desktop renders it: desktop/plugin.js imported by a page through an import map
    onto React 19 (production), react-dom and nanostores (desktop_harness/build-browser.mjs), a host
    ctx like the Desktop's (host-browser.mjs), the real API over HTTP and a store whose timeline
    branches.  Screenshots of the tree, a scrub in progress and an agent-only preview with a conflict
    go to $CHRONOS_DESKTOP_SCREENSHOTS (docs/panes/desktop-*.png were made so), else tmp_path."""
    from chronos_git.api import create_app
    from chronos_git.settings import Settings

    built = tmp_path / "browser-modules"
    p = subprocess.run([NODE, str(HARNESS / "build-browser.mjs"), str(node_modules), str(built)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    shots = Path(os.environ.get("CHRONOS_DESKTOP_SCREENSHOTS") or tmp_path)
    _branching_workspace(ws, cli)
    files = {"index.html": HARNESS / "browser.html", "host.mjs": HARNESS / "host-browser.mjs",
             "sdk.mjs": HARNESS / "sdk-browser.mjs", "plugin.js": PLUGIN,
             "vendor.mjs": built / "vendor.mjs", "react.mjs": built / "react.mjs", "jsx.mjs": built / "jsx.mjs"}

    def serve(route):
        name = route.request.url.split("/__desktop/", 1)[1].split("?", 1)[0]
        f = files.get(name)
        if f is None:
            return route.fulfill(status=404, body="no such harness file")
        kind = "text/html" if name.endswith(".html") else "text/javascript"
        return route.fulfill(status=200, body=f.read_text(), headers={"Content-Type": f"{kind}; charset=utf-8"})

    server = Server(create_app(store_dir, Settings(), token="desk-token"))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                context = browser.new_context(viewport={"width": 900, "height": 1180}, device_scale_factor=1)
                context.add_init_script(f"window.__HARNESS = {json.dumps({'token': 'desk-token', 'cwd': str(ws / 'src')})}")
                page = context.new_page()
                page.set_default_timeout(20_000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.route("**/__desktop/**", serve)
                page.goto(f"http://127.0.0.1:{server.port}/__desktop/index.html")
                pane = page.locator("#pane")
                rows = page.get_by_test_id("checkpoint-row")
                rows.first.wait_for()
                assert page.evaluate("window.__contributions") == ["panes:pane", "palette:open", "statusBar.right:status"]
                assert rows.count() == 5
                assert [rows.nth(i).get_attribute("data-on-line") for i in range(5)] == ["true", "true", "false", "true", "true"]
                assert page.get_by_test_id("branch-point").count() == 1
                # the tree, the branch point selected
                rows.nth(3).click()
                page.get_by_test_id("diff-patch").wait_for()
                pane.screenshot(path=str(shots / "desktop-tree.png"))
                # a scrub in progress: each checkpoint named as it is passed, its diff held until the scrub rests
                page.evaluate("window.__holdScrub = true")
                page.get_by_test_id("scrub").focus()
                page.keyboard.press("ArrowRight")
                page.keyboard.press("ArrowRight")
                page.get_by_test_id("scrub-pending").wait_for()
                assert page.get_by_test_id("scrub-label").inner_text().startswith("@4 ")
                pane.screenshot(path=str(shots / "desktop-scrub.png"))
                page.evaluate("window.__releaseScrub()")
                page.get_by_test_id("scrub-pending").wait_for(state="detached")
                # an agent-only preview that meets the person's edit
                rows.nth(4).click()
                page.get_by_test_id("agent-only-button").click()
                page.get_by_test_id("restore-plan-conflicts").wait_for()
                assert "agent: the agent changed line 1" in page.get_by_test_id("conflict-agent").inner_text()
                assert page.get_by_test_id("agent-only-button").inner_text() == "Confirm agent-only"
                page.get_by_test_id("restore-plan").scroll_into_view_if_needed()
                pane.screenshot(path=str(shots / "desktop-agent-only-conflict.png"))
                assert errors == [], errors
                assert page.get_by_test_id("chronos-error").count() == 0
            finally:
                browser.close()
    finally:
        server.stop()
    for name in ("desktop-tree.png", "desktop-scrub.png", "desktop-agent-only-conflict.png"):
        assert (shots / name).stat().st_size > 10_000
