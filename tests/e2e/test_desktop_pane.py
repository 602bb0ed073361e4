"""desktop/plugin.js (the Hermes Desktop pane) outside Electron.

Node runs the plugin file as ESM through module hooks (tests/desktop_harness/)
that resolve `@hermes/plugin-sdk` to a stub and `react` / `react/jsx-runtime` to
a real React 18 installed with npm into a cache directory outside the repo, and
refuse any other import from the plugin, like the Desktop loader.  The pane is
rendered with react-test-renderer (no DOM) against a fake `ctx` whose `rest`
answers with the API's typed results — or, in the last test, against the real
HTTP API (uvicorn on 127.0.0.1) and a real store, so the restore changes files.
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
REACT = "18.3.1"
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
            return all(json.loads((nm / pkg / "package.json").read_text())["version"] == REACT
                       for pkg in ("react", "react-test-renderer"))
        except (OSError, ValueError, KeyError):
            return False

    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready():
            p = subprocess.run([NPM, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(root),
                                f"react@{REACT}", f"react-test-renderer@{REACT}"],
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0 or not ready():
                pytest.skip(f"npm could not install react@{REACT} for the harness (rc {p.returncode}): "
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


@pytest.mark.parametrize("error_style", ["fields", "message"])
def test_blocked_restore_resolve_and_verify(node_modules, error_style):
    run(node_modules, "blocked-and-resolve", error_style=error_style)


def test_polls_through_ctx_set_interval_and_stops_on_unmount(node_modules):
    run(node_modules, "polling")


def test_older_host_without_optional_sdk_members(node_modules):
    run(node_modules, "minimal-host", sdk="minimal", cwd=None)


def test_error_envelopes_are_normalised(node_modules):
    run(node_modules, "errors")


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
    events = cli("--json", "journal", "log", "-n", "5", cwd=ws).json["events"]
    assert [e["kind"] for e in events[:2]] == ["returned", "started"]
    assert events[1]["tool"] == "chronos.restore" and events[1]["actor"] == "user (HTTP API)"
