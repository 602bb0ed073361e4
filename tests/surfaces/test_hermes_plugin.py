"""The Hermes-facing pieces without a Hermes process: manifest, register(),
settings, result classification, declared paths, middleware semantics, /chronos.
Real stores on disk; the only fake is the plugin context (as newer
`hermes plugins validate` uses a stub context too)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from support.helpers import run_cli

import chronos_git
from chronos_git.hermes import plugin as hermes_glue, semantics as tool_semantics, slash
from chronos_git.hermes.tools import SCHEMAS
from chronos_git.journal_refs.evidence import UNKNOWN
from chronos_git.service import Call, Chronos, Outcome
from chronos_git.settings import INSPECTION_TOOLS, Settings

REPO = Path(chronos_git.__file__).resolve().parent
MANIFEST = yaml.safe_load((REPO / "plugin.yaml").read_text())


class RecordingContext:
    """What a stub context looks like: register_* recorders and nothing else."""

    def __init__(self, config: dict | None = None):
        self.tools, self.hooks, self.middleware, self.commands, self.cli = {}, {}, {}, {}, {}
        self._config = config or {}

    def register_tool(self, name, toolset, schema, handler, **kw):
        self.tools[name] = (toolset, schema, handler)

    def register_hook(self, name, cb):
        self.hooks.setdefault(name, []).append(cb)

    def register_middleware(self, kind, cb):
        self.middleware.setdefault(kind, []).append(cb)

    def register_command(self, name, handler, description="", args_hint=""):
        self.commands[name] = handler

    def register_cli_command(self, name, help, setup_fn, handler_fn=None, description=""):
        self.cli[name] = (setup_fn, handler_fn)

    def get_config(self, key, default=None):
        return self._config.get(key, default)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A registered plugin whose store lives in tmp; cwd is a workspace."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    monkeypatch.chdir(ws)
    monkeypatch.setenv("TERMINAL_CWD", str(ws))

    def make(**settings):
        ctx = RecordingContext({"store_dir": str(tmp_path / "store"), **settings})
        chronos_git.register(ctx)
        return ctx, hermes_glue._plugins[-1], ws
    return make


# ------------------------------------------------------------------ manifest
def test_manifest_declares_exactly_what_register_registers(tmp_path):
    ctx = RecordingContext({"store_dir": str(tmp_path / "store")})
    chronos_git.register(ctx)
    assert MANIFEST["name"] == "chronos-git"
    assert MANIFEST["requires_hermes"] == ">=0.19"
    assert set(MANIFEST["provides_tools"]) == set(ctx.tools) == set(SCHEMAS)
    assert set(MANIFEST["provides_hooks"]) == set(ctx.hooks) == set(hermes_glue.HOOKS)
    assert MANIFEST["provides_middleware"] == list(ctx.middleware) == list(hermes_glue.MIDDLEWARE)
    assert set(ctx.commands) == {"chronos"} and set(ctx.cli) == {"chronos-git"}
    assert not (tmp_path / "store").exists(), "register() must not touch the store"


def test_config_schema_matches_settings():
    schema = MANIFEST["config_schema"]
    assert set(schema) == set(Settings.model_fields)
    defaults = Settings()
    for key, spec in schema.items():
        assert spec["default"] == getattr(defaults, key), key
        assert spec["type"] in ("bool", "int", "float", "list", "str"), key
        assert spec["description"], key


def test_register_survives_a_bare_stub_and_is_idempotent(tmp_path):
    class Bare:            # no manifest, no get_config, only the registration calls
        def __init__(self):
            self.n = 0

        def __getattr__(self, name):
            def record(*a, **k):
                self.n += 1
            return record
    bare = Bare()
    chronos_git.register(bare)
    chronos_git.register(bare)
    assert bare.n > 0


def test_settings_are_lenient_with_bad_values():
    s, problems = Settings.from_mapping({"max_checkpoints": -3, "gate_mode": "sometimes", "strict_errors": True,
                                         "snapshot_budget_s": "fast", "unknown_key": 1})
    assert s.max_checkpoints == 200 and s.gate_mode == "block" and s.snapshot_budget_s == 8.0
    named = sorted(p.split(" ")[0].rsplit(".", 1)[1] for p in problems)
    assert named == ["gate_mode", "max_checkpoints", "snapshot_budget_s", "unknown_key"]   # each one named
    assert any("not a chronos-git setting" in p for p in problems)
    assert s.strict_errors is True
    assert all(s.is_read_only(t) for t in INSPECTION_TOOLS)
    assert not s.is_read_only("chronos_rollback") and not s.is_read_only("terminal")
    s, problems = Settings.from_mapping({"max_checkpoints": True, "auto_snapshot": 1})   # no lax coercion
    assert s.max_checkpoints == 200 and s.auto_snapshot is True and len(problems) == 2


# ------------------------------------------------------------ classification
@pytest.mark.parametrize("result,status,uncertain", [
    ('{"bytes_written": 3}', "ok", None),
    ('{"output": "x", "exit_code": 0, "error": null}', "ok", None),
    ('{"output": "x", "exit_code": 2, "error": null}', "error", None),
    ('{"error": "file not found"}', "error", None),
    ('{"success": false}', "error", None),
    ('{"error": "[TOOL_ERROR] Tool execution failed: ValueError: boom"}', "error", "exception"),
    ('{"error": "Command timed out after 180s"}', "error", "timeout"),
    ('{"error": "interrupted by the user"}', "error", "cancelled"),
    ("plain text result", "ok", None),
])
def test_classify(result, status, uncertain):
    o = tool_semantics.classify(result)
    assert (o.status, o.uncertain_reason) == (status, uncertain)
    assert len(o.result_hash) == 64


def test_declared_paths(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("one two one\n")
    (d,) = tool_semantics.declared_paths("write_file", {"path": "f.txt", "content": "x"}, str(tmp_path))
    assert d.path == str(f) and d.post == b"x"
    (d,) = tool_semantics.declared_paths("patch", {"mode": "replace", "path": str(f), "old_string": "two",
                                                   "new_string": "2"}, str(tmp_path))
    assert d.post == b"one 2 one\n"
    (d,) = tool_semantics.declared_paths("patch", {"path": str(f), "old_string": "one",
                                                   "new_string": "1"}, str(tmp_path))
    assert d.post == UNKNOWN                                        # ambiguous: Hermes would refuse
    (d,) = tool_semantics.declared_paths("patch", {"path": str(f), "old_string": "one", "new_string": "1",
                                                   "replace_all": True}, str(tmp_path))
    assert d.post == b"1 two 1\n"
    (d,) = tool_semantics.declared_paths("patch", {"path": str(f), "old_string": "zzz",
                                                   "new_string": "1"}, str(tmp_path))
    assert d.post == UNKNOWN                                        # fuzzy territory
    v4a = "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** Delete File: b.py\n*** End Patch\n"
    ds = tool_semantics.declared_paths("patch", {"mode": "patch", "patch": v4a}, str(tmp_path))
    assert [(x.path, x.post) for x in ds] == [(str(tmp_path / "a.py"), UNKNOWN), (str(tmp_path / "b.py"), None)]
    assert tool_semantics.declared_paths("terminal", {"command": "ls"}, str(tmp_path)) is None


# ---------------------------------------------------------------- middleware
def _mw(plugin_obj, tool, args, next_call, call_id="call_1", session="s1"):
    return plugin_obj.tool_execution(tool_name=tool, args=args, next_call=next_call, tool_call_id=call_id,
                                     session_id=session, turn_id="t1", task_id=session)


def test_middleware_journals_once_even_when_nested(plugin):
    ctx, p, ws = plugin()
    runs = []

    def inner(args):            # 0.19.0 nests the middleware for parallel batches
        runs.append(1)
        (ws / "b.txt").write_text(args["content"])
        return json.dumps({"bytes_written": 2})

    def outer(args):
        return _mw(p, "write_file", args, inner)

    out = _mw(p, "write_file", {"path": str(ws / "b.txt"), "content": "hi"}, outer)
    assert json.loads(out)["bytes_written"] == 2 and runs == [1]
    events = p.svc().journal_log(None).wire()["events"]
    assert [e["kind"] for e in events if e.get("tool") == "write_file"] == ["started"]
    assert sum(1 for e in events if e["kind"] == "returned") == 1


def test_the_model_request_releases_the_outcomes_behind(plugin, monkeypatch):
    """The llm_execution middleware passes the request through once and lets the outcome
    writer run while Hermes waits on the network, at the latest once the model has answered."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "RELEASE_AFTER_S", 30.0)
    monkeypatch.setattr(transaction, "SENT_AFTER_S", 30.0)       # only the answer lets it through
    ctx, p, ws = plugin()
    _mw(p, "terminal", {"command": "true"}, lambda args: json.dumps({"output": "", "exit_code": 0}))
    calls = p.svc().calls
    assert calls._behind.unfinished_tasks == 1                      # held for the release
    sent = []
    out = p.llm_execution(request={"messages": []}, next_call=lambda r: sent.append(r) or "response",
                          task_id="s1", session_id="s1")
    assert out == "response" and sent == [{"messages": []}]
    calls._behind.join()
    kinds = [e["kind"] for e in p.svc().journal_log(3).wire()["events"]]
    assert kinds[0] == "returned"


def test_duplicate_guard_answers_from_the_journal(plugin):
    ctx, p, ws = plugin(duplicate_guard=True)
    runs = []

    def run(args):
        runs.append(1)
        return json.dumps({"output": "", "exit_code": 0})

    args = {"command": "make release"}
    _mw(p, "terminal", args, run, call_id="c1")
    again = json.loads(_mw(p, "terminal", args, run, call_id="c2"))
    assert runs == [1]
    assert again["chronos_duplicate"] is True and "not run again" in again["message"]
    _mw(p, "terminal", args, run, call_id="c3", session="another-session")
    assert runs == [1, 1]                       # only within the same session


def test_gate_blocks_protected_calls_but_not_read_only_ones(plugin, tmp_path):
    ctx, p, ws = plugin()
    svc = p.svc()
    t = svc.begin(Call(tool="terminal", args={"command": "deploy"}, workspace=str(ws)))
    svc.finish(t, Outcome(status="error", uncertain_reason="timeout"))
    block = p.on_pre_tool_call(tool_name="write_file", args={"path": "x", "content": "y"}, tool_call_id="c")
    assert block["action"] == "block"
    body = json.loads(block["message"])
    assert body["error"] == "chronos_blocked" and body["operation_ids"] == [t.operation_id]
    assert p.on_pre_tool_call(tool_name="read_file", args={"path": "a.txt"}) is None
    assert p.on_pre_tool_call(tool_name="chronos_status", args={}) is None
    # the middleware refuses too, without running the tool (defence in depth: hooks fail open)
    ran = []
    out = json.loads(_mw(p, "write_file", {"path": str(ws / "z"), "content": "z"}, lambda a: ran.append(1)))
    assert out["error"] == "chronos_blocked" and ran == []
    # both refusals are in the journal, each naming the call and what it waited on
    refused = [e for e in svc.journal_log(None).wire()["events"] if e["kind"] == "refused"]
    assert [(e["tool"], e["tool_call_id"], e["code"], e["blocked_by"]) for e in reversed(refused)] == [
        ("write_file", "c", "chronos_blocked", [t.operation_id]),
        ("write_file", refused[0]["tool_call_id"], "chronos_blocked", [t.operation_id])]
    alert = p.on_pre_llm_call(session_id="s1")["context"]
    assert "Waiting for the operator" in alert and t.operation_id[:12] in alert


def test_warn_mode_lets_calls_through_with_an_alert(plugin):
    ctx, p, ws = plugin(gate_mode="warn")
    svc = p.svc()
    t = svc.begin(Call(tool="terminal", args={}, workspace=str(ws)))
    svc.finish(t, Outcome(status="error", uncertain_reason="exception"))
    assert p.on_pre_tool_call(tool_name="write_file", args={"path": "x", "content": "y"}) is None
    assert "Waiting for the operator" in p.on_pre_llm_call(session_id="s")["context"]


def test_rollback_needs_approval_with_a_unique_rule_key(plugin):
    ctx, p, ws = plugin()
    cp = p.svc().snapshot(str(ws), "base").wire()["checkpoint"]
    d1 = p.on_pre_tool_call(tool_name="chronos_rollback", args={"checkpoint_id": cp}, tool_call_id="c1")
    d2 = p.on_pre_tool_call(tool_name="chronos_rollback", args={"checkpoint_id": cp}, tool_call_id="c2")
    assert d1["action"] == d2["action"] == "approve"
    assert d1["rule_key"] != d2["rule_key"] and cp[:12] in d1["message"]
    bad = p.on_pre_tool_call(tool_name="chronos_rollback", args={"checkpoint_id": "nope"}, tool_call_id="c3")
    assert bad["action"] == "block"


def test_failure_hint_names_the_checkpoint(plugin):
    ctx, p, ws = plugin()
    result = json.dumps({"output": "boom", "exit_code": 1})
    _mw(p, "terminal", {"command": "false"}, lambda a: result, call_id="c9")
    hinted = p.on_transform_tool_result(tool_name="terminal", result=result, tool_call_id="c9", status="ok")
    assert "chronos_rollback(checkpoint_id=" in hinted and hinted.startswith(result)
    ok = json.dumps({"output": "", "exit_code": 0})
    _mw(p, "terminal", {"command": "true"}, lambda a: ok, call_id="c10")
    assert p.on_transform_tool_result(tool_name="terminal", result=ok, tool_call_id="c10", status="ok") is None


def test_snapshot_budget_records_a_partial_checkpoint(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    svc = Chronos.get(tmp_path / "store", Settings(snapshot_budget_s=5))
    svc.snapshot(str(ws), "empty baseline")
    for i in range(50):
        (ws / f"f{i:02d}.txt").write_text(f"{i}\n")

    class Clock:              # every file the scan looks at costs "one second"
        t = 1000.0

        @classmethod
        def monotonic(cls):
            cls.t += 1.0
            return cls.t
    import chronos_git.engine.scan as scan_mod
    import chronos_git.service.snapshots as service_mod
    monkeypatch.setattr(scan_mod, "time", Clock)
    monkeypatch.setattr(service_mod.time, "monotonic", Clock.monotonic)
    t = svc.begin(Call(tool="terminal", args={}, workspace=str(ws)))
    started = [e for e in svc.journal_log(5).wire()["events"] if e["kind"] == "started"][0]
    assert started["snapshot"]["partial"] is True and started["snapshot"]["kind"] == "partial"
    assert svc.health(str(ws)).wire()["last_snapshot"]["partial"] is True
    cp = svc.log(str(ws), 1).wire()["checkpoints"][0]
    assert cp["id"] == started["pre_checkpoint"]
    assert cp["kind"] == "partial" and "budget" in cp["note"]
    assert 0 < cp["files"] < 50                     # some progress, not the whole tree
    svc.finish(t, Outcome(status="ok"))


# -------------------------------------------------------------------- /chronos
def test_slash_two_step_restore(plugin):
    ctx, p, ws = plugin()
    svc = p.svc()
    first = svc.snapshot(str(ws), "v1").wire()["checkpoint"]
    (ws / "a.txt").write_text("changed\n")
    svc.snapshot(str(ws), "v2")
    cmd = ctx.commands["chronos"]
    listing = cmd("")
    assert "v1" in listing and "v2" in listing
    armed = cmd(first[:10])
    assert "/chronos confirm" in armed and (ws / "a.txt").read_text() == "changed\n"
    restored = cmd("confirm")
    assert "restored" in restored and "undo: hermes chronos-git restore " in restored, restored
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert "nothing to confirm" in cmd("confirm")
    cmd("2")
    slash.CONFIRM_WINDOW_S, saved = 0, slash.CONFIRM_WINDOW_S
    try:
        cmd(first[:10])
        from support.helpers import wait_for
        armed_by = time.monotonic()                    # its 0 s window ended by then: wait until past it
        wait_for(lambda: time.monotonic() > armed_by, message="the monotonic clock did not move")
        assert "expired" in cmd("confirm")
    finally:
        slash.CONFIRM_WINDOW_S = saved
    assert "usage" in cmd("resolve abc")
    assert "error" in cmd("resolve abcdef completed it ran")
    assert "integrity ok" in cmd("status")


@pytest.mark.process
def test_newer_hosts_get_the_alert_in_the_system_prompt_section(tmp_path, monkeypatch):
    import subprocess
    import sys
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    monkeypatch.setenv("TERMINAL_CWD", str(ws))
    store = tmp_path / "store"
    env = dict(os.environ, CHRONOS_GIT_STORE=str(store), CHRONOS_GIT_FAULT="after_dispatch")
    r = subprocess.run([sys.executable, "-m", "chronos_git.cli", "write", "w.txt", "--content", "landed"],
                       cwd=ws, env=env, capture_output=True)
    assert r.returncode == -9 and (ws / "w.txt").read_text() == "landed"

    class NewerContext(RecordingContext):
        def register_system_prompt_section(self, section_id, content, **kw):
            self.section = (section_id, content)

    ctx = NewerContext({"store_dir": str(store)})
    chronos_git.register(ctx)
    p = hermes_glue._plugins[-1]
    assert p.section_registered and ctx.section[0] == "chronos-git-recovery"
    text = ctx.section[1]({"session_id": "s"})
    assert "[chronos-git recovery alert]" in text and "do NOT repeat it" in text and "w.txt" in text
    assert p.on_pre_llm_call(session_id="s") is None        # told once, not twice
    assert ctx.section[1]({"session_id": "s2"}) == ""       # nothing left to tell


def test_own_tools_list_matches_the_registered_tools():
    assert hermes_glue.OWN_TOOLS == set(SCHEMAS)


# ------------------------------------------------------- never silently off
def test_a_store_that_cannot_take_writes_is_told_on_the_first_turn(plugin, monkeypatch, capsys):
    """Full disk or read-only store: the model's first turn and the user's terminal say OFF,
    why and the fix; once per session (and again if the reason changes)."""
    ctx, p, ws = plugin()
    svc = p.svc()
    from chronos_git.service.results import Protection
    off = Protection(state="off", reason="the disk holding the store /s is full (0 bytes free)",
                     fix="free space on the filesystem of /s")
    monkeypatch.setattr(type(svc), "protection", lambda self, **kw: off)
    first = p.on_pre_llm_call(session_id="s1", is_first_turn=True)
    assert "protection is OFF" in first["context"] and "full" in first["context"]
    assert "free space" in first["context"]
    assert "protection is OFF" in capsys.readouterr().err
    assert p.on_pre_llm_call(session_id="s1") is None                  # told once per session
    assert capsys.readouterr().err == ""
    assert "protection is OFF" in p.on_pre_llm_call(session_id="s2")["context"]
    monkeypatch.setattr(type(svc), "protection", lambda self, **kw: Protection(state="on"))
    assert p.on_pre_llm_call(session_id="s1") is None
    status = json.loads(ctx.tools["chronos_status"][2]({}))
    assert status["protection"] == {"state": "on"}


def test_slash_report_writes_the_html_beside_the_store_or_where_asked(plugin, tmp_path):
    ctx, p, ws = plugin()
    p.svc().snapshot(str(ws), "v1")
    cmd = ctx.commands["chronos"]
    out = cmd("report")
    folder = p.svc().core.store_dir.parent / "chronos-git-reports"
    (page,) = folder.glob("chronos-git-report-*.html")
    assert "report written" in out and str(page) in out and "<script" not in page.read_text()
    target = tmp_path / "mine.html"
    assert str(target) in cmd(f"report {target}") and target.read_text().startswith("<!")
    assert "inside the store" in cmd(f"report {p.svc().core.store_dir / 'x.html'}")


def test_an_alert_with_nothing_left_to_tell_is_not_sent():
    """Regression (demo): settlements that only needed an operator, resolved since, left a bare
    '[chronos-git recovery alert]' header in the model's context."""
    from types import SimpleNamespace

    from chronos_git.hermes.alerts import recovery_alert
    assert recovery_alert([SimpleNamespace(result="needs_operator", tool="terminal", paths=[])], [], "ok") == ""
    done = recovery_alert([SimpleNamespace(result="completed", tool="write_file", paths=["/w/a.txt"])], [], "ok")
    assert "do NOT repeat it" in done and "/w/a.txt" in done


# ------------------------------------------------------- the person, not only the model
def _crashed_write(ws, store):
    """A write_file cut off by a crash after it landed: the next start settles it as completed."""
    import subprocess
    import sys
    env = dict(os.environ, CHRONOS_GIT_STORE=str(store), CHRONOS_GIT_FAULT="after_dispatch")
    env.pop("CHRONOS_GIT_SETTINGS", None)
    r = subprocess.run([sys.executable, "-m", "chronos_git.cli", "write", "w.txt", "--content", "landed"],
                       cwd=ws, env=env, capture_output=True)
    assert r.returncode == -9 and (ws / "w.txt").read_text() == "landed"


@pytest.mark.process
def test_the_person_is_told_of_a_crash_and_a_closed_gate_once(plugin, capsys):
    """Issue 31: under `hermes chat -Q` only the model learned that a crash was settled or that
    the recovery gate closed.  The person reads it on stderr, once per occurrence."""
    ctx, p, ws = plugin()
    _crashed_write(ws, p.store_dir())
    svc = p.svc()
    t = svc.begin(Call(tool="terminal", args={"command": "deploy"}, workspace=str(ws)))
    svc.finish(t, Outcome(status="error", uncertain_reason="timeout"))
    capsys.readouterr()

    model = p.on_pre_llm_call(session_id="s1", platform="cli")["context"]
    assert "do NOT repeat it" in model and "Waiting for the operator" in model      # the model, as before
    err = capsys.readouterr().err
    assert "cut off during 1 tool call;" in err and "w.txt: had completed" in err
    assert "the recovery gate is CLOSED: 1 tool call with an unknown outcome waits for you" in err
    assert f"{t.operation_id[:12]} (terminal): timeout" in err
    assert f"hermes chronos-git journal resolve {t.operation_id[:12]} " in err

    # the next turn: the model is reminded (it is refused every call), the person is not told again
    assert "Waiting for the operator" in p.on_pre_llm_call(session_id="s1", platform="cli")["context"]
    assert p.on_transform_llm_output(response_text="done", session_id="s1", platform="cli") is None
    assert capsys.readouterr().err == ""                     # and on the CLI the answer stays as it was

    svc.resolve(t.operation_id, "completed", "checked by hand", actor="test")
    assert p.on_pre_llm_call(session_id="s1", platform="cli") is None
    assert capsys.readouterr().err == ""


def test_a_gate_closed_during_the_turn_is_told_where_the_person_reads(plugin, capsys, monkeypatch):
    """A `-q` run has no next turn: a gate that closes during it is told at its end.  Where
    stderr is not the person's (a gateway platform, `hermes -z`, which sends stderr to
    /dev/null) the notice ends the answer instead, once."""
    ctx, p, ws = plugin()
    assert p.on_pre_llm_call(session_id="tg", platform="telegram") is None
    svc = p.svc()
    t = svc.begin(Call(tool="terminal", args={"command": "deploy"}, workspace=str(ws)))
    svc.finish(t, Outcome(status="error", uncertain_reason="timeout"))
    capsys.readouterr()

    out = p.on_transform_llm_output(response_text="All done.  ", session_id="tg", platform="telegram")
    assert out.startswith("All done.\n\n⚠ chronos-git: the recovery gate is CLOSED") and t.operation_id[:12] in out
    assert "recovery gate is CLOSED" in capsys.readouterr().err
    assert p.on_transform_llm_output(response_text="Next.", session_id="tg", platform="telegram") is None
    assert "Waiting for the operator" in p.on_pre_llm_call(session_id="tg", platform="telegram")["context"]
    assert p.on_transform_llm_output(response_text="Later.", session_id="tg", platform="telegram") is None
    assert capsys.readouterr().err == ""                     # the next turn: told already

    svc.resolve(t.operation_id, "not_applied", "nothing ran", actor="test")
    assert p.on_pre_llm_call(session_id="z", platform="cli") is None
    t2 = svc.begin(Call(tool="terminal", args={"command": "again"}, workspace=str(ws)))
    svc.finish(t2, Outcome(status="error", uncertain_reason="exception"))
    with open(os.devnull, "w") as devnull:                  # `hermes -z`: stderr is /dev/null
        monkeypatch.setattr("sys.stderr", devnull)
        out = p.on_transform_llm_output(response_text="Done.", session_id="z", platform="cli")
    assert out.startswith("Done.\n\n⚠ chronos-git: the recovery gate is CLOSED") and t2.operation_id[:12] in out
    assert t.operation_id[:12] not in out                   # settled since: not news


def test_a_weakening_edit_of_config_yaml_mid_session_is_held_and_told(tmp_path, monkeypatch, capsys):
    """Issue 32, finding 1, inside Hermes: a call rewrites config.yaml so that terminal is read-only.
    The next call of any tool notices it; terminal stays protected; the person is told how to
    accept it, the model only that a change waits for the operator."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.chdir(ws)
    monkeypatch.setenv("TERMINAL_CWD", str(ws))

    def config(**block):
        (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
            "chronos-git": {"settings": {"store_dir": str(tmp_path / "store"), **block}}}}}))
    config()
    ctx = RecordingContext()
    chronos_git.register(ctx)
    p = hermes_glue._plugins[-1]
    _mw(p, "write_file", {"path": str(ws / "a.txt"), "content": "a"}, lambda a: json.dumps({"ok": 1}))
    config(read_only_tools=["read_file", "search_files", "terminal"])
    assert p.on_pre_tool_call(tool_name="read_file", args={"path": "a.txt"}, session_id="s1") is None
    assert "waits for you" in capsys.readouterr().err
    _mw(p, "terminal", {"command": "true"}, lambda a: json.dumps({"output": ""}), call_id="call_2")
    events = p.svc().journal_log(None).wire()["events"]
    assert [e["tool"] for e in events if e["kind"] == "started"][0] == "terminal"
    context = p.on_pre_llm_call(session_id="s2", is_first_turn=True)["context"]
    assert hermes_glue.HELD_FOR_MODEL in context and "settings accept" not in context


def test_ignore_rules_that_narrow_capture_are_told_to_the_person_and_the_model(tmp_path, monkeypatch, capsys):
    """Issue 32, capture that narrows, inside Hermes: a call writes a `*` .gitignore; the next turn
    tells the person what and how to accept it (once), the model only that it happened."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    (ws / "lib").mkdir(parents=True)
    for i in range(30):
        (ws / "lib" / f"m{i}.py").write_text(f"x = {i}\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.chdir(ws)
    monkeypatch.setenv("TERMINAL_CWD", str(ws))
    (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
        "chronos-git": {"settings": {"store_dir": str(tmp_path / "store")}}}}}))
    ctx = RecordingContext()
    chronos_git.register(ctx)
    p = hermes_glue._plugins[-1]
    _mw(p, "write_file", {"path": str(ws / "a.txt"), "content": "a"}, lambda a: json.dumps({"ok": 1}))
    assert p.svc().snapshots.wait(p.svc().core.store.workspace(str(ws)), 60)    # the first checkpoint
    _mw(p, "write_file", {"path": str(ws / ".gitignore"), "content": "*\n"}, lambda a: (
        (ws / ".gitignore").write_text("*\n"), json.dumps({"ok": 1}))[1], call_id="call_2")
    p.llm_execution(request={}, next_call=lambda r: "the model's answer")     # the outcome is written
    p.svc().flush()
    capsys.readouterr()
    context = (p.on_pre_llm_call(session_id="s1", is_first_turn=False) or {}).get("context", "")
    told = capsys.readouterr().err
    assert "now leave out" in told and "capture accept --workspace" in told
    assert hermes_glue.NARROWED_FOR_MODEL in context and "capture accept" not in context
    assert p.on_pre_llm_call(session_id="s1", is_first_turn=False) is None or \
        hermes_glue.NARROWED_FOR_MODEL not in p.on_pre_llm_call(session_id="s1", is_first_turn=False)["context"]
    assert "now leave out" not in capsys.readouterr().err                 # once


def agent_then_person(plugin):
    """A checkpoint, then a file the agent made (a protected call), then one the person made."""
    ctx, p, ws = plugin()
    svc = p.svc()
    first = svc.snapshot(str(ws), "v1").wire()["checkpoint"]
    assert svc.write_file(str(ws), "made.txt", b"by the agent\n").status == "ok"
    (ws / "mine.txt").write_text("the person's\n")
    return ctx, p, ws, first


def test_slash_previews_then_confirms_undo_redo_and_the_agent_only_restore(plugin):
    ctx, p, ws, first = agent_then_person(plugin)
    cmd = ctx.commands["chronos"]
    armed = cmd(f"{first[:10]} --agent-only")
    assert "would do: 0 files written, 1 removed, 0 conflicts" in armed and "/chronos confirm" in armed, armed
    assert (ws / "made.txt").exists()
    done = cmd("confirm")
    assert "agent-only restore done" in done and not (ws / "made.txt").exists(), done
    assert (ws / "mine.txt").read_text() == "the person's\n"
    assert "To undo it type /chronos confirm" in cmd("undo") and not (ws / "made.txt").exists()
    assert "undo done" in cmd("confirm") and (ws / "made.txt").exists()
    assert "To redo it" in cmd("redo")
    assert "redo done" in cmd("confirm") and not (ws / "made.txt").exists()
    assert "nothing to redo" in cmd("redo")
    assert "unknown option --bogus" in cmd(f"{first[:10]} --bogus")
    assert "conflicts is one of leave, markers" in cmd(f"{first[:10]} --agent-only --conflicts maybe")
    before = (ws / "mine.txt").read_bytes()
    assert "apply to an agent-only restore" in cmd(f"{first[:10]} --conflicts markers")   # not silently ignored
    assert (ws / "mine.txt").read_bytes() == before


def test_the_models_rollback_takes_back_only_the_agents_changes_by_default(plugin):
    from chronos_git.hermes.tools import handlers
    ctx, p, ws, first = agent_then_person(plugin)
    out = json.loads(handlers(p)["chronos_rollback"]({"checkpoint_id": first}))
    assert out["status"] == "ok" and out["kind"] == "agent-only restore", out
    assert not (ws / "made.txt").exists() and (ws / "mine.txt").exists()
    out = json.loads(handlers(p)["chronos_rollback"]({"checkpoint_id": first, "mode": "full"}))
    assert out["status"] == "ok" and not (ws / "mine.txt").exists() and "mode=full" in out["undo"]


def test_the_rollbacks_approval_answer_is_journaled(plugin):
    from chronos_git.hermes.tools import handlers
    ctx, p, ws = plugin()
    assert "post_approval_response" in ctx.hooks
    svc = p.svc()
    first = svc.snapshot(str(ws), "v1").wire()["checkpoint"]
    assert svc.write_file(str(ws), "made.txt", b"by the agent\n").status == "ok"
    directive = p.on_pre_tool_call(tool_name="chronos_rollback", args={"checkpoint_id": first},
                                   tool_call_id="call_1", session_id="s1")
    assert directive["action"] == "approve" and "only what tool calls changed" in directive["message"]
    p.on_approval(choice="deny", pattern_key=directive["rule_key"], session_key="s1", tool_call_id="call_1")
    refused = [e for e in svc.journal_log(20).events if e.kind == "refused"]
    assert refused and refused[0].model_dump().get("code") == "approval_denied"
    p.on_approval(choice="once", pattern_key=directive["rule_key"], session_key="s1", tool_call_id="call_1")
    out = json.loads(handlers(p)["chronos_rollback"]({"checkpoint_id": first}, session_id="s1"))
    assert out["status"] == "ok", out
    started = [e for e in svc.journal_log(20).events if e.kind == "started"][0]
    assert started.model_dump()["actor"] == "model (through Hermes' approval: approved at the prompt (once))"
    p.on_approval(choice="once", pattern_key="some-other-rule")          # not ours: ignored


def test_one_subagents_calls_are_reverted_by_its_id_or_the_call_that_started_it(plugin):
    """subagent_start names a child session; its calls are journaled with what the host said
    (0.19: the subagent's id and parent session; newer hosts also the parent tool call), and
    `revert --subagent` takes back that subagent's calls only."""
    ctx, p, ws = plugin()
    [start] = ctx.hooks["subagent_start"]
    start(parent_session_id="s1", parent_turn_id="t1", parent_subagent_id=None, child_session_id="child-a",
          child_subagent_id="sa-1", child_role="leaf", child_goal="write a file",
          parent_tool_call_id="call_delegate")                      # a newer host's extra field
    start(parent_session_id="s1", child_session_id="child-b", child_subagent_id="sa-2")     # 0.19's fields
    start(child_session_id="child-c", child_subagent_id=["not", "a", "string"])            # nothing usable
    svc = p.svc()
    svc.snapshot(str(ws), "before")

    def write(name, session, call):
        def run(args):
            (ws / name).write_text(args["content"])
            return json.dumps({"bytes_written": 3})
        _mw(p, "write_file", {"path": str(ws / name), "content": "new"}, run, call_id=call, session=session)

    write("by-parent.txt", "s1", "call_1")
    write("by-a.txt", "child-a", "call_2")
    write("by-b.txt", "child-b", "call_3")
    write("by-c.txt", "child-c", "call_4")
    started = {e["tool_call_id"]: e for e in svc.journal_log(None).wire()["events"] if e["kind"] == "started"
               and e.get("tool") == "write_file"}
    assert started["call_2"]["subagent_id"] == "sa-1" and started["call_2"]["parent_tool_call_id"] == "call_delegate"
    assert started["call_3"]["subagent_id"] == "sa-2" and "parent_tool_call_id" not in started["call_3"]
    assert not {"subagent_id", "parent_session_id"} & (set(started["call_4"]) | set(started["call_1"]))

    shown = run_cli(p.store_dir(), "journal", "show", started["call_2"]["operation_id"], cwd=ws)
    assert "sa-1 (started by call call_delegate)" in shown.stdout, shown.stdout
    listed = run_cli(p.store_dir(), "journal", "log", cwd=ws).stdout      # the ids revert takes, in text
    assert "child-a subagent sa-1" in listed and "child-b subagent sa-2" in listed, listed

    res = svc.revert(str(ws), subagent="call_delegate", actor="person")
    assert res.status == "ok", res
    assert not (ws / "by-a.txt").exists()
    assert all((ws / n).exists() for n in ("by-parent.txt", "by-b.txt", "by-c.txt"))
    assert svc.revert(str(ws), subagent="sa-2", actor="person").status == "ok"
    assert not (ws / "by-b.txt").exists() and (ws / "by-parent.txt").exists() and (ws / "by-c.txt").exists()
    with pytest.raises(Exception, match="no call of subagent 'sa-9'"):
        svc.revert(str(ws), subagent="sa-9", actor="person")
    with pytest.raises(ValueError, match="not a session and a subagent"):
        svc.revert(str(ws), session="s1", subagent="sa-1", actor="person")


def test_the_next_turn_is_told_what_a_restore_changed_on_disk_once(plugin, capsys):
    """A restore from /chronos between turns (or from any surface: it is journaled): the
    model's next turn carries the notice, the person sees it on stderr, and only once."""
    ctx, p, ws, first = agent_then_person(plugin)

    def ctx_of(out):
        return (out or {}).get("context") or ""
    assert "files on disk changed" not in ctx_of(p.on_pre_llm_call(session_id="s1", is_first_turn=True))
    cmd = ctx.commands["chronos"]
    cmd(f"{first[:10]}")
    assert "restored checkpoint" in cmd("confirm")
    capsys.readouterr()
    told = ctx_of(p.on_pre_llm_call(session_id="s1", is_first_turn=False))
    assert "the files on disk changed since your last turn" in told, told
    assert ("- restore by user (/chronos confirm): back to checkpoint @1, taken by hand; "
            "2 files changed: made.txt, mine.txt (operation ") in told, told
    assert told in capsys.readouterr().err                                      # the person: the same words
    assert "files on disk changed" not in ctx_of(p.on_pre_llm_call(session_id="s1", is_first_turn=False))
    # the model's own rollback in a turn, then the dashboard's undo (another process: the journal)
    from chronos_git.hermes.tools import handlers
    assert p.svc().write_file(str(ws), "again.txt", b"by the agent\n").status == "ok"
    assert json.loads(handlers(p)["chronos_rollback"]({"checkpoint_id": first}))["status"] == "ok"
    assert not (ws / "again.txt").exists()
    other = Chronos.get(p.store_dir(), p.settings)
    assert other.undo(str(ws), actor="dashboard").status == "ok" and (ws / "again.txt").exists()
    told = ctx_of(p.on_pre_llm_call(session_id="s1", is_first_turn=False))
    assert told.count("\n- ") == 2, told
    assert "- restore (the model's rollback) by model" in told and "1 file changed: again.txt" in told, told
    assert "- undo by dashboard: undid operation " in told, told
    # a conversation new to this process has no last turn to correct: nothing old is told to it
    assert "files on disk changed" not in ctx_of(p.on_pre_llm_call(session_id="s2", is_first_turn=True))
