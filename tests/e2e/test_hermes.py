"""End-to-end against the real hermes-agent 0.19.0 from PyPI: a scripted model
on 127.0.0.1, an isolated HERMES_HOME, chronos-git installed as a user plugin.
Every scenario asserts on disk, in the store and in what the model received.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest


from support.hermes_env import HermesEnv  # noqa: E402

pytestmark = [pytest.mark.hermes,
              pytest.mark.skipif(shutil.which("hermes", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}") is None,
                                 reason="hermes-agent is not installed in this environment")]


def store_git(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={env.store}", *args], capture_output=True, text=True)


def write(path: str, content: str, call_id: str) -> dict:
    return {"name": "write_file", "arguments": {"path": path, "content": content}, "id": call_id}


def term(command: str, call_id: str) -> dict:
    return {"name": "terminal", "arguments": {"command": command}, "id": call_id}


STATUS = {"tool_calls": [{"name": "chronos_status", "id": "call_status1", "arguments": {}}]}


# --------------------------------------------------------------- scenario 1
def test_file_and_terminal_calls_are_checkpointed_and_journaled(henv):
    (henv.ws / "a.txt").write_text("hello\n")
    henv.set_script([{"match": "*", "steps": [
        {"tool_calls": [write("__WS__/b.txt", "bee\n", "call_write1")]},
        {"tool_calls": [{"name": "patch", "id": "call_patch1", "arguments": {
            "mode": "replace", "path": "__WS__/a.txt", "old_string": "hello", "new_string": "hello world"}}]},
        {"tool_calls": [term("echo hi > __WS__/c.txt", "call_term1")]},
        STATUS,
        {"content": "all done"}]}])
    r = henv.chat("do the work")
    assert r.returncode == 0, r.stderr
    assert (henv.ws / "b.txt").read_text() == "bee\n"
    assert (henv.ws / "a.txt").read_text() == "hello world\n"
    assert (henv.ws / "c.txt").read_text() == "hi\n"

    log = json.loads(henv.chronos("log", "--workspace", henv.ws, "--limit", "50", "--json").stdout)
    ids = {c["tool_call_id"] for c in log["checkpoints"]}
    assert {"call_write1", "call_patch1", "call_term1"} <= ids

    git_log = store_git(henv, "log", "--all", "--format=%B")
    assert git_log.returncode == 0
    for call in ("call_write1", "call_patch1", "call_term1"):
        assert f"Tool-Call: {call}" in git_log.stdout

    events = henv.journal()
    for call, tool in (("call_write1", "write_file"), ("call_patch1", "patch"), ("call_term1", "terminal")):
        started = [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == call]
        assert len(started) == 1 and started[0]["tool"] == tool
        op = started[0]["operation_id"]
        returned = [e for e in events if e["kind"] == "returned" and e["operation_id"] == op]
        assert len(returned) == 1 and returned[0]["status"] == "ok"
        # a small new workspace: even its first call has a checkpoint before and after it
        assert started[0]["pre_checkpoint"] and returned[0]["post_checkpoint"]
    # the write_file intent carried the expected post-image
    w = next(e for e in events if e.get("tool_call_id") == "call_write1" and e["kind"] == "started")
    assert w["declared"][0]["path"] == str(henv.ws / "b.txt")
    assert w["declared"][0]["pre"] is None
    blob = store_git(henv, "cat-file", "-p", w["declared"][0]["post"])
    assert blob.stdout == "bee\n"
    # terminal args are hashes only
    t = next(e for e in events if e.get("tool_call_id") == "call_term1" and e["kind"] == "started")
    assert "args" not in t and len(t["args_hash"]) == 64
    assert store_git(henv, "fsck", "--strict").returncode == 0


def test_a_big_workspace_s_first_snapshot_runs_in_a_child_process(henv):
    """Beyond a small tree the first import runs in a child process at low priority, not on a
    thread of Hermes (engine/offload.py), and the calls meanwhile are journaled."""
    from chronos_git.service.snapshots import SMALL_TREE_ENTRIES
    vendor = henv.ws / "vendor"
    vendor.mkdir(parents=True)
    for i in range(SMALL_TREE_ENTRIES + 100):
        (vendor / f"f{i}.txt").write_text(f"{i}\n")
    henv.set_script([{"match": "*", "steps": [
        {"tool_calls": [write("__WS__/b.txt", "bee\n", "call_write1")]},
        {"tool_calls": [term("echo hi > __WS__/c.txt", "call_term1")]},
        STATUS,
        {"content": "all done"}]}])
    r = henv.chat("do the work")
    assert r.returncode == 0, r.stderr
    status = henv.tool_results_seen()[-1]
    assert "a child process" in status and "this process:" not in status, status
    events = henv.journal()
    for call in ("call_write1", "call_term1"):
        started = [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == call]
        assert len(started) == 1
        assert [e for e in events if e["kind"] == "returned" and e["operation_id"] == started[0]["operation_id"]]
    log = json.loads(henv.chronos("log", "--workspace", henv.ws, "--limit", "50", "--json").stdout)
    assert max(c["files"] for c in log["checkpoints"]) >= SMALL_TREE_ENTRIES + 100


# --------------------------------------------------------------- scenario 2
def test_crash_after_write_landed_is_settled_completed_and_alerted(henv):
    henv.set_script([
        {"match": "CRASH", "steps": [{"tool_calls": [write("__WS__/crash.txt", "landed once\n", "call_crash")]},
                                     {"content": "unreachable"}]},
        {"match": "*", "steps": [{"content": "resumed fine"}]}])
    r = henv.chat("CRASH now", env={"CHRONOS_GIT_FAULT": "after_dispatch"})
    assert r.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), (r.returncode, r.stderr[-2000:])
    target = henv.ws / "crash.txt"
    assert target.read_text() == "landed once\n"
    st = target.stat()

    r2 = henv.chat("carry on")
    assert r2.returncode == 0, r2.stderr
    assert "resumed fine" in r2.stdout
    # the person too, not only the model (issue 31: under -Q nothing said so): on stderr, once
    assert "cut off during 1 tool call" in r2.stderr and f"{target}: had completed" in r2.stderr, r2.stderr
    assert "chronos-git" not in r2.stdout
    # written once: recovery did not touch the file
    st2 = target.stat()
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert target.read_text() == "landed once\n"

    events = henv.journal()
    op = next(e for e in events if e["kind"] == "started" and e.get("tool_call_id") == "call_crash")["operation_id"]
    kinds = [e["kind"] for e in events if e.get("operation_id") == op]
    assert kinds == ["started", "recovered"]
    rec = next(e for e in events if e.get("operation_id") == op and e["kind"] == "recovered")
    assert rec["outcome"] == "completed"
    assert sum(1 for e in events if e["kind"] == "started" and e.get("tool") == "write_file") == 1

    # the first model turn of the next session carried the recovery alert
    seen = "\n".join(henv.user_messages_seen())
    assert "[chronos-git recovery alert]" in seen
    assert "do NOT repeat it" in seen and str(target) in seen
    status = json.loads(henv.chronos("journal", "status", "--json").stdout)
    assert status["unresolved"] == [] and status["gate"] == "open"


# --------------------------------------------------------------- scenario 3
def test_crashed_terminal_call_blocks_until_operator_resolves(henv):
    (henv.ws / "notes.txt").write_text("readable\n")
    henv.set_script([
        {"match": "CRASH", "steps": [{"tool_calls": [{"name": "terminal", "id": "call_t",
                                                      "arguments": {"command": "echo ran > __WS__/ran.txt"}}]},
                                     {"content": "unreachable"}]},
        {"match": "AFTER", "steps": [{"tool_calls": [write("__WS__/blocked.txt", "x\n", "call_blocked")]},
                                     {"tool_calls": [{"name": "read_file", "id": "call_read",
                                                      "arguments": {"path": "__WS__/notes.txt"}}]},
                                     {"content": "saw the block"}]},
        {"match": "AGAIN", "steps": [{"tool_calls": [write("__WS__/allowed.txt", "ok\n", "call_ok")]},
                                     {"content": "written"}]}])
    r = henv.chat("CRASH it", env={"CHRONOS_GIT_FAULT": "after_dispatch"})
    assert r.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
    assert (henv.ws / "ran.txt").exists()

    r2 = henv.chat("AFTER the crash")
    assert r2.returncode == 0, r2.stderr
    assert not (henv.ws / "blocked.txt").exists()
    assert r2.stderr.count("the recovery gate is CLOSED") == 1, r2.stderr      # the person reads it, once
    results = henv.tool_results_seen()
    assert any("chronos_blocked" in t for t in results), results
    assert any("readable" in t for t in results), results
    seen = "\n".join(henv.user_messages_seen())
    assert "Waiting for the operator" in seen

    status = json.loads(henv.chronos("journal", "status", "--json").stdout)
    assert [u["tool"] for u in status["unresolved"]] == ["terminal"]
    assert status["unresolved"][0]["state"] == "pending"
    op = status["unresolved"][0]["operation_id"]
    blocked = henv.chronos("run", "--json", "--", "true")
    assert blocked.returncode == 3 and json.loads(blocked.stdout)["error"] == "chronos_blocked"
    for bad in (("journal", "resolve", op, "--outcome", "maybe", "--json"), ("--json", "log", "--bogus")):
        r = henv.chronos(*bad)                                   # a bad argument: one JSON document too
        assert r.returncode == 1 and json.loads(r.stdout)["code"] == "bad_arguments", (bad, r.stdout, r.stderr)
    text = henv.chronos("journal", "status").stdout            # hints name what to type inside Hermes
    assert f"hermes chronos-git journal resolve {op[:12]}" in text, text
    assert " chronos-git journal" not in text.replace("hermes chronos-git journal", ""), text

    res = henv.chronos("journal", "resolve", op, "--outcome", "completed",
                       "--evidence", "ran.txt exists: the command completed", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    r3 = henv.chat("AGAIN please")
    assert r3.returncode == 0
    assert (henv.ws / "allowed.txt").read_text() == "ok\n"
    events = henv.journal()
    resolved = [e for e in events if e["kind"] == "resolved"]
    assert resolved and resolved[0]["operation_id"] == op and resolved[0]["outcome"] == "completed"


# --------------------------------------------------------------- scenario 6
def test_parallel_writes_journal_one_operation_each(henv):
    henv.set_script([{"match": "*", "steps": [
        {"tool_calls": [write("__WS__/p1.txt", "one\n", "call_par1"), write("__WS__/p2.txt", "two\n", "call_par2")]},
        {"content": "parallel done"}]}])
    r = henv.chat("parallel writes")
    assert r.returncode == 0, r.stderr
    assert (henv.ws / "p1.txt").read_text() == "one\n" and (henv.ws / "p2.txt").read_text() == "two\n"
    events = henv.journal()
    for call in ("call_par1", "call_par2"):
        started = [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == call]
        assert len(started) == 1, [e for e in events if e.get("tool_call_id") == call]
        assert sum(1 for e in events if e["kind"] == "returned"
                   and e["operation_id"] == started[0]["operation_id"]) == 1
    assert sum(1 for e in events if e["kind"] == "started") == 2


# ------------------------------------------------------------ failure hint
def test_failed_call_gets_a_rollback_hint(henv):
    henv.set_script([{"match": "*", "steps": [
        {"tool_calls": [{"name": "terminal", "id": "call_fail", "arguments": {"command": "echo partial > __WS__/p.txt; exit 3"}}]},
        {"content": "noted"}]}])
    r = henv.chat("fail once")
    assert r.returncode == 0
    results = henv.tool_results_seen()
    hint = [t for t in results if "[chronos-git]" in t]
    assert hint and "chronos_rollback(checkpoint_id=" in hint[0] and "chronos_diff(from_checkpoint=" in hint[0]
    # a returned error is a known outcome: the gate stays open
    status = json.loads(henv.chronos("journal", "status", "--json").stdout)
    assert status["gate"] == "open"
    ret = [e for e in henv.journal() if e["kind"] == "returned"]
    assert ret[-1]["status"] == "error" and ret[-1]["exit_code"] == 3


# --------------------------------------------------------------- scenario 4
def _two_versions(env) -> str:
    """v1 then v2 of keep.txt; returns the id of the checkpoint holding v1."""
    env.set_script([{"match": "*", "steps": [
        {"tool_calls": [write("__WS__/keep.txt", "v1\n", "call_v1")]},
        {"tool_calls": [write("__WS__/keep.txt", "v2\n", "call_v2")]},
        {"content": "two versions"}]}])
    r = env.chat("make versions")
    assert r.returncode == 0
    assert (env.ws / "keep.txt").read_text() == "v2\n"
    events = env.journal()
    return next(e for e in events if e["kind"] == "started" and e.get("tool_call_id") == "call_v2")["pre_checkpoint"]


def _rollback_script(env, cp: str) -> None:
    env.set_script([{"match": "ROLLBACK", "steps": [
        {"tool_calls": [{"name": "chronos_rollback", "id": "call_rb", "arguments": {"checkpoint_id": cp}}]},
        {"content": "rollback step finished"}]}])


def test_model_rollback_is_denied_under_chat_q(henv):
    cp = _two_versions(henv)
    _rollback_script(henv, cp)
    r = henv.chat("ROLLBACK please")
    assert r.returncode == 0
    assert (henv.ws / "keep.txt").read_text() == "v2\n"
    assert any("BLOCKED" in t or "denied" in t.lower() for t in henv.tool_results_seen())


def test_model_rollback_allow_once_in_repl_restores(henv):
    cp = _two_versions(henv)
    _rollback_script(henv, cp)
    ok, text = henv.repl([{"wait": "❯|>|Type", "timeout": 90}, {"sleep": 2},
                          {"send": "ROLLBACK please\r"}, {"wait": "Allow once", "timeout": 90}, {"sleep": 1},
                          {"send": "\r"}, {"wait": "rollback step finished", "timeout": 90},
                          {"sleep": 1}, {"send": "/quit\r"}, {"sleep": 2}])
    assert ok, text[-3000:]
    assert "chronos-git rollback" in text
    assert (henv.ws / "keep.txt").read_text() == "v1\n"
    events = henv.journal()
    rb = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos_rollback"]
    assert len(rb) == 1 and rb[0]["pre_checkpoint"]          # the safety checkpoint
    # undo the undo: the safety checkpoint holds v2
    r = henv.chronos("restore", rb[0]["pre_checkpoint"], "--workspace", henv.ws, "--json")
    assert r.returncode == 0 and (henv.ws / "keep.txt").read_text() == "v2\n"


def test_model_rollback_deny_in_repl_changes_nothing(henv):
    cp = _two_versions(henv)
    _rollback_script(henv, cp)
    before = json.loads(henv.chronos("log", "--workspace", henv.ws, "--json").stdout)["checkpoints"]
    ok, text = henv.repl([{"wait": "❯|>|Type", "timeout": 90}, {"sleep": 2},
                          {"send": "ROLLBACK please\r"}, {"wait": "Allow once", "timeout": 90}, {"sleep": 1},
                          {"key": "\x1b[B"}, {"sleep": 0.3}, {"key": "\x1b[B"}, {"sleep": 0.3},
                          {"key": "\x1b[B"}, {"sleep": 0.5}, {"send": "\r"},
                          {"wait": "rollback step finished", "timeout": 90}, {"sleep": 1},
                          {"send": "/quit\r"}, {"sleep": 2}])
    assert ok, text[-3000:]
    assert (henv.ws / "keep.txt").read_text() == "v2\n"
    assert not [e for e in henv.journal() if e.get("tool") == "chronos_rollback"]
    after = json.loads(henv.chronos("log", "--workspace", henv.ws, "--json").stdout)["checkpoints"]
    assert [c["id"] for c in after if c["kind"] == "safety"] == [c["id"] for c in before if c["kind"] == "safety"]


# --------------------------------------------------------------- scenario 5
def test_slash_chronos_lists_and_restores_with_two_step_confirmation(henv):
    cp = _two_versions(henv)
    (henv.ws / "agent_new.txt").write_text("created later\n")
    ok, text = henv.repl([{"wait": "❯|>|Type", "timeout": 90}, {"sleep": 2},
                          {"send": "/chronos\r"}, {"wait": "checkpoints of", "timeout": 30}, {"sleep": 1},
                          {"send": f"/chronos {cp[:10]}\r"}, {"wait": "/chronos confirm", "timeout": 30},
                          {"sleep": 1}, {"send": "/chronos confirm\r"}, {"wait": "safety checkpoint", "timeout": 30},
                          {"sleep": 1}, {"send": "/quit\r"}, {"sleep": 2}])
    assert ok, text[-3000:]
    assert "keep.txt" in text
    assert (henv.ws / "keep.txt").read_text() == "v1\n"
    # the agent-created file is not in the checkpoint: clean mode removed it
    assert not (henv.ws / "agent_new.txt").exists()


def test_slash_chronos_restore_needs_confirmation(henv):
    cp = _two_versions(henv)
    ok, text = henv.repl([{"wait": "❯|>|Type", "timeout": 90}, {"sleep": 2},
                          {"send": f"/chronos {cp[:10]}\r"}, {"wait": "/chronos confirm", "timeout": 30},
                          {"sleep": 1}, {"send": "/chronos cancel\r"}, {"wait": "dropped", "timeout": 30},
                          {"send": "/chronos confirm\r"}, {"wait": "nothing to confirm", "timeout": 30},
                          {"sleep": 1}, {"send": "/quit\r"}, {"sleep": 2}])
    assert ok, text[-3000:]
    assert (henv.ws / "keep.txt").read_text() == "v2\n"


# --------------------------------------------------------------- off the machine
def test_a_session_pushes_its_journal_to_the_remote_in_the_background(tmp_path):
    env = HermesEnv(tmp_path, settings={"host_id": "e2e-host"}).start()
    try:
        remote = tmp_path / "fleet.git"
        r = env.chronos("remote", "add", "fleet", str(remote), "--snapshots", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["remote"] == "fleet", r.stdout + r.stderr
        env.set_script([{"match": "*", "steps": [
            {"tool_calls": [write("__WS__/pushed.txt", "off the machine\n", "call_push1")]},
            {"content": "done"}]}])
        c = env.chat("write it")
        assert c.returncode == 0, c.stderr
        log = subprocess.run(["git", "--git-dir", str(remote), "log", "--format=%B",
                              "refs/chronos/hosts/e2e-host/journal"], capture_output=True, text=True)
        assert log.returncode == 0, log.stderr
        assert '"tool_call_id":"call_push1"' in log.stdout.replace(" ", "")     # the turn's events went
        tree = subprocess.run(["git", "--git-dir", str(remote), "ls-tree", "-r", "--name-only",
                               "refs/chronos/hosts/e2e-host/snapshots/" + _ws_id(env.ws)],
                              capture_output=True, text=True)
        assert "pushed.txt" in tree.stdout.split()
        health = json.loads(env.chronos("health", "--json").stdout)
        (fleet,) = health["remotes"]
        assert fleet["last_push"] and fleet["last_error"] is None and fleet["behind"] == 0
    finally:
        env.stop()


def _ws_id(path: Path) -> str:
    import hashlib
    return hashlib.sha256(os.fsencode(path.resolve())).hexdigest()[:16]
