"""Protected paths (issue 32): a call the plugin records may not change the plugin's own record
or code.  A file call (CLI `write`, Hermes write_file/patch, a replay) whose target is inside the
store, the witness (or another `<store>.*` sidecar) or the plugin's files is refused before it
runs and journaled as `refused`; a shell call that changed any of them is recorded against
that call (`protected_changed` in its outcome, `health`, the model's result).

The plugin's files here are a stand-in plugin folder under a temporary HERMES_HOME
(`$HERMES_HOME/plugins/chronos-git`), also standing in for the running package: on code
without the rule a test writes there, never into this checkout, and an engineer saving a file
in this checkout while a test's shell call runs is not that call's change.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import chronos_git
from chronos_git.engine.owner import ProcessIdentity
from chronos_git.engine.store import Store
from chronos_git.hermes import plugin as hermes_glue
from chronos_git.service import Call, Chronos, Declared
from chronos_git.service.errors import ProtectedPath
from chronos_git.service import protected as protected_mod
from chronos_git.service.protected import PACKAGE_DIR
from chronos_git.service.transaction import ProtectedCalls
from chronos_git.settings import Settings

_ME = ProcessIdentity.current()
DEAD = ProcessIdentity(pid=2 ** 22 + 13, start_time=1, boot_id=_ME.boot_id, host=_ME.host)


class StubContext:
    """A Hermes plugin context that only records (as tests/surfaces/test_hermes_plugin.py)."""

    def __init__(self, config: dict):
        self._config = config

    def register_tool(self, *a, **kw):
        pass

    register_hook = register_middleware = register_command = register_cli_command = register_tool

    def get_config(self, key, default=None):
        return self._config.get(key, default)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A HERMES_HOME with a stand-in chronos-git plugin folder and a profile config.yaml."""
    h = tmp_path / "home"
    plugin_dir = h / "plugins" / "chronos-git"
    (plugin_dir / "engine").mkdir(parents=True)
    (plugin_dir / "__init__.py").write_text("# the plugin\n")
    (plugin_dir / "plugin.yaml").write_text("name: chronos-git\n")
    (plugin_dir / "engine" / "__init__.py").write_text("")
    (plugin_dir / "engine" / "store.py").write_text("# engine\n")
    (h / "config.yaml").write_text("model: {default: some-model}\n")
    monkeypatch.setenv("HERMES_HOME", str(h))
    monkeypatch.setattr(protected_mod, "PACKAGE_DIR", plugin_dir)
    return h


def _events(store_dir, kind=None) -> list[dict]:
    Chronos.forget_instances()
    evs = Chronos.get(store_dir, Settings()).journal_log(None).wire()["events"]
    return [e for e in evs if kind is None or e["kind"] == kind]


def _targets(store: Path, ws: Path, home: Path) -> dict[str, Path]:
    """Each kind of protected target; the store exists (one snapshot was taken)."""
    (ws / "into-store").symlink_to(store)
    (store / "refs" / "heads").mkdir(parents=True, exist_ok=True)
    return {
        "store config": store / "config",
        "a file in the store's refs": store / "refs" / "heads" / "evil",
        "the witness": Path(str(store) + ".journal-witness.json"),
        "another sidecar": Path(str(store) + ".journal-witness.json.tmp"),
        "through a symlink into the store": ws / "into-store" / "HEAD",
        "a plugin file": home / "plugins" / "chronos-git" / "engine" / "store.py",
    }


def _content(p: Path) -> bytes | None:
    try:
        return p.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None


def _not_written(which: str, target: Path, before: bytes | None, attack: bytes) -> None:
    """The target holds what it held; the witness is rewritten by the refusal's own journal
    append, so of it only: the attack's bytes are not in it (and the journal verifies)."""
    if which == "the witness":
        assert attack not in (_content(target) or b"")
    else:
        assert _content(target) == before


TARGETS = ["store config", "a file in the store's refs", "the witness", "another sidecar",
           "through a symlink into the store", "a plugin file"]


# ------------------------------------------------------------------ the CLI's write
@pytest.mark.parametrize("which", TARGETS)
def test_cli_write_to_a_protected_path_is_refused_and_journaled(cli, store_dir, ws, home, which):
    env = {"HERMES_HOME": str(home)}
    assert cli("run", "--", "true", cwd=ws, env=env).rc == 0        # the store and its journal exist
    target = _targets(store_dir, ws, home)[which]
    before = _content(target)
    r = cli("--json", "write", str(target), "--content", "[core]\n\thooksPath = /tmp/evil\n", cwd=ws, env=env)
    assert r.rc == 1, r.stdout + r.stderr
    body = r.json
    assert body["code"] == "protected_path" and "refused" in body["error"] and "nothing was run" in body["error"]
    if which == "a plugin file":
        assert "CHRONOS_GIT_ALLOW_PLUGIN_EDITS" in body["error"] and "separate install" in body["error"]
    _not_written(which, target, before, b"hooksPath")
    (ev,) = _events(store_dir, "refused")
    assert ev["tool"] == "write_file" and ev["code"] == "protected_path" and ev["actor"] == "cli"
    assert [p["path"] for p in ev["paths"]] == [str(target)]
    assert ev["paths"][0]["what"] == ("plugin" if which == "a plugin file" else
                                      "witness" if "witness" in which or "sidecar" in which else "store")
    assert not [e for e in _events(store_dir, "started") if e.get("tool") == "write_file"], "nothing opened"
    shown = cli("journal", "show", ev["operation_id"][:12], env=env)
    assert shown.rc == 0 and "refused before it ran" in shown.stdout
    Chronos.forget_instances()
    assert Chronos.get(store_dir, Settings()).journal_verify().integrity == "ok"   # the new kind replays


def test_cli_write_to_a_workspace_file_is_still_allowed(cli, store_dir, ws, home):
    r = cli("--json", "write", "a.txt", "--content", "beta\n", cwd=ws, env={"HERMES_HOME": str(home)})
    assert r.rc == 0 and (ws / "a.txt").read_text() == "beta\n"
    assert _events(store_dir, "refused") == []


def test_a_store_inside_the_workspace_protects_only_its_own_subtree(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    store = proj / ".chronos-store"
    (proj / "README").write_text("hi\n")
    assert run_cli_in(store, proj, "write", "README", "--content", "new\n").rc == 0
    r = run_cli_in(store, proj, "--json", "write", ".chronos-store/description", "--content", "x")
    assert r.rc == 1 and r.json["code"] == "protected_path"
    assert (proj / "README").read_text() == "new\n"


def run_cli_in(store, cwd, *args):
    from support.helpers import run_cli
    return run_cli(store, *args, cwd=cwd)


# ------------------------------------------------------------------ Hermes write_file / patch
@pytest.fixture
def hermes(tmp_path, monkeypatch, home):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    monkeypatch.chdir(ws)
    monkeypatch.setenv("TERMINAL_CWD", str(ws))
    store = tmp_path / "store"
    chronos_git.register(StubContext({"store_dir": str(store)}))
    p = hermes_glue._plugins[-1]
    _mw(p, "terminal", {"command": "true"}, lambda a: json.dumps({"output": "", "exit_code": 0}),
        call_id="setup")                           # the store and its journal exist, as after any call
    p.svc().calls.settle_behind()
    return p, ws, store


def _mw(p, tool, args, next_call, call_id="call_1"):
    return p.tool_execution(tool_name=tool, args=args, next_call=next_call, tool_call_id=call_id,
                            session_id="s1", turn_id="t1", task_id="s1")


def _hermes_args(tool: str, target: Path) -> dict:
    if tool == "write_file":
        return {"path": str(target), "content": "[core]\n\tfsmonitor = evil\n"}
    if tool == "patch-replace":
        return {"path": str(target), "old_string": "a", "new_string": "b"}
    return {"mode": "patch", "patch": f"*** Begin Patch\n*** Update File: {target}\n@@\n-a\n+b\n*** End Patch\n"}


@pytest.mark.parametrize("tool", ["write_file", "patch-replace", "patch-v4a"])
@pytest.mark.parametrize("which", TARGETS + ["a hard link of the store config"])
def test_hermes_file_calls_to_a_protected_path_are_refused(hermes, home, tool, which, capsys):
    p, ws, store = hermes
    if which == "a hard link of the store config":
        os.link(store / "config", ws / "linked-config")
        target = ws / "linked-config"
    else:
        target = _targets(store, ws, home)[which]
    before = _content(target)
    ran = []

    def tool_itself(args):                         # what Hermes would run: it writes the target
        ran.append(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("tampered\n")
        return json.dumps({"bytes_written": 9})

    out = json.loads(_mw(p, tool.split("-")[0], _hermes_args(tool, target), tool_itself))
    assert ran == []
    _not_written(which, target, before, b"tampered")
    assert p.svc().journal_verify().integrity == "ok"
    assert out["error"] == "protected_path" and out["refused"] is True
    assert out["paths"] == [str(target)] and "nothing was run" in out["message"]
    assert "what_you_can_do" in out
    assert "chronos-git refused" in capsys.readouterr().err         # the person is told too
    (ev,) = [e for e in p.svc().journal_log(None).wire()["events"] if e["kind"] == "refused"]
    assert ev["operation_id"] == out["operation_id"] and ev["tool_call_id"] == "call_1"
    assert ev["tool"] == tool.split("-")[0] and ev["session_id"] == "s1"


def test_the_pre_tool_call_hook_blocks_a_protected_target_too(hermes, home):
    """Defence in depth (a middleware that raised would fail open): the hook's block directive."""
    p, ws, store = hermes
    block = p.on_pre_tool_call(tool_name="write_file", args={"path": str(store / "config"), "content": "x"},
                               tool_call_id="c9", session_id="s1")
    assert block["action"] == "block"
    body = json.loads(block["message"])
    assert body["error"] == "protected_path" and body["paths"] == [str(store / "config")]
    (ev,) = [e for e in p.svc().journal_log(None).wire()["events"] if e["kind"] == "refused"]
    assert ev["tool_call_id"] == "c9"
    assert p.on_pre_tool_call(tool_name="write_file", args={"path": str(ws / "ok.txt"), "content": "x"},
                              tool_call_id="c10") is None


@pytest.mark.parametrize("where", ["workspace", "profile config.yaml"])
def test_hermes_writes_elsewhere_still_run(hermes, home, where):
    p, ws, store = hermes
    target = ws / "b.txt" if where == "workspace" else home / "config.yaml"

    def tool_itself(args):
        target.write_text(args["content"])
        return json.dumps({"bytes_written": len(args["content"])})

    out = json.loads(_mw(p, "write_file", {"path": str(target), "content": "model: other\n"}, tool_itself))
    assert out == {"bytes_written": 13} and target.read_text() == "model: other\n"
    p.svc().calls.settle_behind()
    kinds = [e["kind"] for e in p.svc().journal_log(None).wire()["events"]]
    assert "refused" not in kinds and kinds[:2] == ["returned", "started"]


def test_hermes_shell_call_that_changes_a_plugin_file_is_told(hermes, home, capsys):
    p, ws, store = hermes
    plugin_file = home / "plugins" / "chronos-git" / "__init__.py"

    def terminal(args):
        with open(plugin_file, "a") as fh:
            fh.write("import os  # disable chronos-git\n")
        return json.dumps({"output": "", "exit_code": 0})

    out = json.loads(_mw(p, "terminal", {"command": "echo >> plugin"}, terminal))
    assert str(plugin_file) in out["chronos_warning"] and "journal show" in out["chronos_warning"]
    assert str(plugin_file) in capsys.readouterr().err
    p.svc().calls.settle_behind()
    ret = p.svc().journal_log(1).wire()["events"][0]
    assert ret["kind"] == "returned" and ret["protected_changed"] == [str(plugin_file)]


# ------------------------------------------------------------------ shell calls: detection
def _with_home(cli, home):
    return lambda *a, **kw: cli(*a, env={"HERMES_HOME": str(home)}, **kw)


def test_run_that_changes_the_store_config_is_recorded_against_it(cli, store_dir, ws, home):
    cli = _with_home(cli, home)
    assert cli("snapshot", cwd=ws).rc == 0
    cfg = store_dir / "config"
    r = cli("--json", "run", "--", "sh", "-c", f"printf '[x]\\n' >> '{cfg}'", cwd=ws)
    assert r.rc == 0, r.stdout + r.stderr                         # shell calls run: they cannot be refused
    body = r.json
    assert body["protected_changed"] == [str(cfg)]
    op = body["operation_id"]
    (ret,) = [e for e in _events(store_dir, "returned") if e["operation_id"] == op]
    assert ret["protected_changed"] == [str(cfg)] and ret["status"] == "ok"
    shown = cli("journal", "show", op[:12])
    assert "changed chronos-git's own files" in shown.stdout and "config" in shown.stdout
    health = cli("--json", "health", cwd=ws).json
    (change,) = health["protected_changes"]
    assert change["operation_id"] == op and change["paths"] == [str(cfg)] and change["tool"] == "terminal"
    assert op[:12] in cli("health", cwd=ws).stdout


def test_run_that_adds_a_hook_to_the_store_is_recorded(cli, store_dir, ws, home):
    cli = _with_home(cli, home)
    assert cli("snapshot", cwd=ws).rc == 0
    hook = store_dir / "hooks" / "post-checkout"
    r = cli("--json", "run", "--", "sh", "-c", f"echo 'curl evil' > '{hook}'", cwd=ws)
    assert r.rc == 0 and str(hook) in r.json["protected_changed"]


def test_run_that_changes_nothing_protected_records_nothing(cli, store_dir, ws, home):
    cli = _with_home(cli, home)
    assert cli("snapshot", cwd=ws).rc == 0
    r = cli("--json", "run", "--", "sh", "-c", "echo more >> a.txt; mkdir -p d; echo x > d/y", cwd=ws)
    assert r.rc == 0 and "protected_changed" not in r.json
    assert all("protected_changed" not in e for e in _events(store_dir))
    assert "protected_changes" not in cli("--json", "health", cwd=ws).json


def test_concurrent_calls_in_one_process_are_not_mistaken_for_tampering(store_dir, tmp_path, home):
    """Another thread's calls, first snapshots of new workspaces, checkpoints, journal appends
    and a compaction whose retention cut writes `shallow` all happen while a shell call runs:
    none of that is the shell call's change."""
    svc = Chronos.get(store_dir, Settings(max_checkpoints=2))
    wss = []
    for i in range(4):
        w = tmp_path / f"w{i}"
        w.mkdir()
        (w / "f").write_text("0\n")
        wss.append(w)
    svc.snapshot(str(wss[0]))
    results, errors = [], []
    done = threading.Event()

    def shell_calls():                        # until the other thread is done (bounded)
        try:
            for _ in range(60):
                results.append(svc.run_command(str(wss[0]), ["sh", "-c", "sleep 0.02; echo 1 >> f"]))
                if done.is_set():
                    break
        except Exception as exc:              # noqa: BLE001
            errors.append(exc)

    def busy():
        try:
            for n in range(4):
                for w in wss[1:]:
                    svc.write_file(str(w), "f", f"{n}\n".encode())
                    results.append(svc.run_command(str(w), ["true"]))
                svc.compact()
        except Exception as exc:              # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=shell_calls), threading.Thread(target=busy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) > 14
    assert [r.protected_changed for r in results if r.protected_changed] == []
    evs = svc.journal_log(None).wire()["events"]
    assert all("protected_changed" not in e for e in evs)
    assert any(e.get("action") == "retention" for e in evs)        # the cuts did happen meanwhile
    assert (store_dir / "shallow").exists()


def test_the_fingerprint_is_cheap(store_dir, ws):
    """The cost per shell call (two fingerprints): measured, bounded loosely here (CI may be
    loaded); docs/design.md gives the figure."""
    import time
    svc = Chronos.get(store_dir, Settings())
    svc.background = True                     # a long-lived host: the code is watched (inotify)
    svc.snapshot(str(ws))
    ps = svc.calls.protected()
    assert str(PACKAGE_DIR) in ps.plugin and len(ps._code) > 50 and ps._watch is not None
    ps.fingerprint()
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        ps.changed(ps.fingerprint(), ps.fingerprint())
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 0.02, per_call


# ------------------------------------------------------------------ replays
def test_replay_of_a_write_to_a_protected_path_is_refused(tmp_path, monkeypatch):
    """A not-applied call whose target is in the store (journaled before the rule, or by an
    older version) is never replayed: `journal recover OP --replay` refuses it, journaled."""
    from support.helpers import run_cli
    proj = tmp_path / "proj"
    proj.mkdir()
    store = proj / ".store"
    (proj / "README").write_text("hi\n")
    Chronos.get(store, Settings()).snapshot(str(proj))
    target = store / "description"
    before = target.read_bytes()

    # a process that journals the intent and dies (the rule bypassed: an older version)
    with monkeypatch.context() as m:
        m.setattr(ProtectedCalls, "check_protected", lambda self, call: None)
        Store._instances.clear()
        Chronos._instances.clear()
        dead = Chronos(Path(os.path.abspath(store)), Settings())
        dead.core.journal.me = DEAD
        t = dead.begin(Call(tool="write_file", args={"path": str(target)}, workspace=str(proj),
                            declared=[Declared(str(target), b"evil\n")]))
    op = t.operation_id
    Chronos.forget_instances()
    svc = Chronos.get(store, Settings())
    (settled,) = svc.start()["settled"]
    assert settled.result == "not_applied" and svc.journal_status().replayable == [op]

    with pytest.raises(ProtectedPath):
        svc.recover(op, replay=True)
    assert target.read_bytes() == before
    batch = svc.recover(replay=True)
    assert batch.replayed == [] and [n.operation_id for n in batch.not_replayed] == [op]
    r = run_cli(store, "--json", "journal", "recover", op[:12], "--replay", cwd=proj)
    assert r.rc == 1 and r.json["code"] == "protected_path"
    assert target.read_bytes() == before
    refused = _events(store, "refused")
    assert len(refused) == 3 and all(e["replay_of"] == op for e in refused)
    assert Chronos.get(store, Settings()).journal_status().replayable == [op]   # still only named


# ------------------------------------------------------------------ the event kind
def test_a_refused_event_opens_nothing_and_never_reuses_an_open_id():
    from chronos_git.journal_refs.state import JournalState, TransitionError
    st = JournalState().apply({"seq": 0, "kind": "genesis", "journal_id": "j"})
    running = st.apply({"seq": 1, "kind": "started", "operation_id": "a"})
    after = running.apply({"seq": 2, "kind": "refused", "operation_id": "b", "code": "protected_path"})
    assert after.open == running.open and after.replayable == {} and after.totals["refused"] == 1
    with pytest.raises(TransitionError):
        running.apply({"seq": 2, "kind": "refused", "operation_id": "a", "code": "protected_path"})
    with pytest.raises(TransitionError):          # a refusal says why
        running.apply({"seq": 2, "kind": "refused", "operation_id": "c"})


def test_what_the_plugin_loads_is_protected_not_the_rest_of_its_checkout(tmp_path, monkeypatch):
    """A checkout also holds tests, docs, a venv and the benchmark's workspaces (.bench-cache/):
    writing there is not writing chronos-git's code; a planted .pyc in a package is."""
    root = tmp_path / "checkout"
    for rel in ("__init__.py", "plugin.yaml", "engine/__init__.py", "engine/store.py", "dashboard/index.js",
                "tests/test_x.py", "docs/a.md", "README.md", ".bench-cache/runs/ws/f.txt", ".venv/lib/x.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    ps = protected_mod.ProtectedSet(tmp_path / "store", str(tmp_path / "store.journal-witness.json"), [root])
    for rel in ("__init__.py", "plugin.yaml", "engine/store.py", "engine/__pycache__/store.cpython-311.pyc",
                "engine/new.py", "dashboard/index.js", "dashboard/dist/x.js",
                # the red team's: a new package shadows a module, a top-level .pyc, an extension module
                "settings/__init__.py", "__pycache__/settings.cpython-311.pyc", "settings.abi3.so",
                "deployment.cpython-311-x86_64-linux-gnu.so", "notes/new.txt"):
        assert ps.classify(os.path.realpath(root / rel)) == "plugin", rel
    for rel in ("tests/test_x.py", "docs/a.md", "README.md", ".bench-cache/runs/ws/f.txt", ".venv/lib/x.py",
                "scripts/demo.sh", "bench/x.py"):
        assert ps.classify(os.path.realpath(root / rel)) is None, rel


def test_holding_the_compaction_lock_does_not_hide_a_planted_setting(cli, store_dir, ws, home):
    """A change of the store's config during a compaction is chronos-git's own (journaled), but
    an agent that holds the compaction lock itself must not hide a planted setting that way."""
    import fcntl
    cli = _with_home(cli, home)
    assert cli("snapshot", cwd=ws).rc == 0
    cfg = store_dir / "config"
    fd = os.open(store_dir / "chronos" / "compact.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                       # "a compaction is running"
        r = cli("--json", "run", "--", "git", "config", "--file", str(cfg), "core.pager", "touch /tmp/x", cwd=ws)
    finally:
        os.close(fd)
    assert r.rc == 0, r.stdout + r.stderr
    assert r.json["protected_changed"] == [str(cfg)]
