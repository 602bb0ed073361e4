"""Event kinds and their fields, result classification and the gate, in-process on a real store."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pygit2
import pytest

from chronos_git.journal_refs import events as kinds
from chronos_git.journal_refs.events import SCHEMA, parse_message
from chronos_git.journal_refs.journal import REF
from chronos_git.engine.owner import ProcessIdentity
from chronos_git.service import Blocked, Call, Declared, Outcome

from support.helpers import git, run_command


def events(svc_obj, kinds=None):
    """Oldest first."""
    return list(reversed(svc_obj.core.journal.events(None, kinds=kinds)))


def op_events(svc_obj, op):
    return [e for e in events(svc_obj) if e.get("operation_id") == op]


def tree_of(svc_obj, commit_id):
    repo = svc_obj.core.store.repo()
    return {e.name: str(e.id) for e in repo[commit_id].tree}


# ------------------------------------------------------------------ genesis
def test_genesis_event_and_state_blob(svc, ws):
    s = svc()
    s.start()
    evs = events(s)
    assert len(evs) == 1
    g = evs[0]
    assert g["kind"] == "genesis" and g["seq"] == 0 and g["schema"] == SCHEMA
    assert g["journal_id"] and g["created_by"]["pid"] == os.getpid()
    assert isinstance(g["timestamp_ns"], int)
    repo = s.core.store.repo()
    commit = repo[g["id"]]
    assert commit.parent_ids == []
    state = json.loads(repo[commit.tree["state.json"].id].data)
    assert state["seq"] == 0 and state["journal_id"] == g["journal_id"] and state["open"] == {}


# ------------------------------------------------------------------ started / returned
def test_started_and_returned_fields_for_a_shell_call(svc, ws):
    s = svc()
    call = Call(tool="terminal", args={"command": "make secret=hunter2"}, workspace=str(ws),
                session_id="sess-1", turn_id="turn-9", tool_call_id="call-42")
    t = s.begin(call)
    st = op_events(s, t.operation_id)
    assert [e["kind"] for e in st] == ["started"]
    ev = st[0]
    assert ev["tool"] == "terminal"
    assert ev["session_id"] == "sess-1" and ev["turn_id"] == "turn-9" and ev["tool_call_id"] == "call-42"
    canon = json.dumps(call.args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert ev["args_hash"] == hashlib.sha256(canon.encode()).hexdigest()
    assert len(ev["fingerprint"]) == 64 and ev["fingerprint"] != ev["args_hash"]
    me = ProcessIdentity.current()
    assert ev["owner"]["pid"] == os.getpid()
    assert ev["owner"]["start_time"] == me.start_time and ev["owner"]["boot_id"] == me.boot_id
    assert ev["pre_checkpoint"] and ev["pre_checkpoint"] == t.pre_checkpoint
    assert s.core.store.repo()[ev["pre_checkpoint"]].message.startswith("chronos checkpoint:")
    assert "declared" not in ev
    # raw args of a non-file tool are never stored (hash only)
    assert "args" not in ev
    raw = s.core.store.repo()[ev["id"]].message
    assert "hunter2" not in raw
    # the op is open and running (owner alive: this process), gate open
    assert s.core.journal.state.open[t.operation_id]["state"] == "running"
    assert s.gate.state() is None
    assert [r.operation_id for r in s.core.journal.running()] == [t.operation_id]

    (ws / "out.txt").write_text("made\n")
    info = s.finish(t, Outcome(status="ok", result_hash="r" * 64, exit_code=0)).wire()
    assert info["outcome"] == "returned" and info["recorded"] is True
    ret = op_events(s, t.operation_id)[-1]
    assert ret["kind"] == "returned" and ret["status"] == "ok" and ret["result_hash"] == "r" * 64
    assert ret["post_checkpoint"] == info["post_checkpoint"] and ret["post_checkpoint"]
    assert ret["post_checkpoint"] != ev["pre_checkpoint"]
    assert ret["exit_code"] == 0
    assert not any(k in ret for k in ("result", "stdout", "output", "args"))
    assert s.core.journal.state.open == {}


def test_store_args_keeps_raw_args(svc, ws):
    s = svc(store_args=True)
    t = s.begin(Call(tool="terminal", args={"command": "echo visible"}, workspace=str(ws)))
    ev = op_events(s, t.operation_id)[0]
    assert ev["args"] == {"command": "echo visible"}
    s.finish(t, Outcome(status="ok"))


def test_file_tool_declared_paths_and_image_blobs(svc, ws):
    s = svc()
    target = ws / "a.txt"
    new_file = ws / "sub" / "new.txt"
    big = "B" * 5000
    call = Call(tool="write_file", args={"path": str(target), "content": big}, workspace=str(ws),
                declared=[Declared(str(target), big.encode()), Declared(str(new_file), b"fresh\n")])
    t = s.begin(call)
    ev = op_events(s, t.operation_id)[0]
    repo = s.core.store.repo()
    decl = {d["path"]: d for d in ev["declared"]}
    assert decl[str(target)]["pre"] == str(pygit2.hash(b"alpha\n"))
    assert decl[str(target)]["post"] == str(pygit2.hash(big.encode()))
    assert decl[str(new_file)]["pre"] is None
    assert decl[str(new_file)]["post"] == str(pygit2.hash(b"fresh\n"))
    # the images are reachable from the event's tree, and the content is the post-image blob
    tree = tree_of(s, ev["id"])
    assert set(tree) >= {"state.json", "pre-0000", "post-0000", "post-0001"}
    assert "pre-0001" not in tree                     # absent file: no pre blob
    assert repo[tree["post-0000"]].data == big.encode()
    assert repo[tree["pre-0000"]].data == b"alpha\n"
    assert repo[tree["post-0001"]].data == b"fresh\n"
    # long content is not inlined in the payload
    assert ev["args"]["content"] == {"sha256": hashlib.sha256(big.encode()).hexdigest(), "chars": 5000,
                                     "stored_as": "post-image blob"}
    assert big not in repo[ev["id"]].message
    assert ev["snapshot"]["kind"] in ("declared", "full")   # first checkpoint of a workspace may be full
    s.finish(t, Outcome(status="ok"))


def test_state_blob_after_each_event_matches_replay(svc, ws):
    s = svc()
    t = s.begin(Call(tool="terminal", args={}, workspace=str(ws)))
    repo = s.core.journal.repo()        # the intent is published in the background: this settles it
    head = repo.references[REF].target
    st = json.loads(repo[repo[head].tree["state.json"].id].data)
    assert st["seq"] == 1 and st["open"][t.operation_id]["state"] == "running"
    s.finish(t, Outcome(status="ok"))
    head = repo.references[REF].target
    st = json.loads(repo[repo[head].tree["state.json"].id].data)
    assert st["seq"] == 2 and st["open"] == {}
    assert s.journal_verify().wire()["status"] == "ok"


# ------------------------------------------------------------------ classification
def test_error_result_returns_with_status_error_gate_open(svc, ws):
    s = svc()
    rc, info = run_command(s, ws, [sys.executable, "-c", "import sys; sys.exit(5)"],
                             stdout=subprocess.DEVNULL)
    assert rc == 5
    ret = events(s)[-1]
    assert ret["kind"] == "returned" and ret["status"] == "error" and ret["exit_code"] == 5
    assert s.gate.state() is None


def test_error_result_strict_errors_is_uncertain_gate_closed(svc, ws):
    s = svc(strict_errors=True)
    rc, info = run_command(s, ws, [sys.executable, "-c", "import sys; sys.exit(5)"],
                             stdout=subprocess.DEVNULL)
    assert rc == 5 and info["outcome"] == "uncertain"
    ev = events(s)[-1]
    assert ev["kind"] == "uncertain" and "strict_errors" in ev["reason"]
    g = s.gate.state()
    assert g is not None and g.operation_ids == [info["operation_id"]]
    assert g.operations[0].state == "uncertain"
    with pytest.raises(Blocked):
        run_command(s, ws, ["true"])
    # a success under strict_errors is still a normal return
    s.resolve(info["operation_id"], "completed", "exit 5 was expected")
    rc, info = run_command(s, ws, ["true"])
    assert rc == 0 and events(s)[-1]["kind"] == "returned"


def _failing_subprocess(monkeypatch):
    """A command whose start fails in a way that does not prove it never ran (EIO)."""
    import errno

    from chronos_git.service import direct_calls as transaction  # where `run` starts its command

    def call(*a, **kw):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(transaction.subprocess, "call", call)


def test_exception_is_uncertain_and_closes_gate(svc, ws, monkeypatch):
    s = svc()
    _failing_subprocess(monkeypatch)
    rc, info = run_command(s, ws, ["make"])
    monkeypatch.undo()
    assert rc is None and info["outcome"] == "uncertain"
    ev = events(s)[-1]
    assert ev["kind"] == "uncertain" and ev["reason"].startswith("exception: ")
    g = s.gate.state()
    assert g and g.blocked is True and g.operation_ids == [info["operation_id"]]
    # an uncertain op is never settled by the recovery pass, even though it has no live owner issue
    assert s.reconcile.settle_by_evidence() == []
    assert s.gate.state() is not None


def test_resolve_refuses_running_and_unknown_and_empty_evidence(svc, ws):
    from chronos_git.engine.errors import ChronosError
    s = svc()
    t = s.begin(Call(tool="terminal", args={}, workspace=str(ws)))
    with pytest.raises(ChronosError, match="still running"):
        s.resolve(t.operation_id, "completed", "it is fine")
    with pytest.raises(ChronosError, match="evidence"):
        s.resolve(t.operation_id, "completed", "  ")
    with pytest.raises(ChronosError):
        s.resolve("ffffffffffff", "completed", "x")
    with pytest.raises(ChronosError):
        s.resolve(t.operation_id, "rolled_back", "x")
    s.finish(t, Outcome(status="ok"))
    with pytest.raises(ChronosError):
        s.resolve(t.operation_id, "completed", "x")      # closed already


# ------------------------------------------------------------------ owner liveness
HOLDER = textwrap.dedent("""
    import sys, time
    from chronos_git.service import Chronos, Call
    from chronos_git.settings import Settings
    s = Chronos.get(sys.argv[1], Settings())
    t = s.begin(Call(tool="long_job", args={"n": 1}, workspace=sys.argv[2]))
    s.core.journal.settle()    # the intent is published in the background: other processes see it then
    print(t.operation_id, flush=True)
    time.sleep(600)
""")


@pytest.mark.process
def test_live_owner_does_not_block_dead_owner_does(svc, ws, store_dir):
    s = svc()
    s.start()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(store_dir), str(ws)],
                            stdout=subprocess.PIPE, text=True)
    try:
        op = proc.stdout.readline().strip()
        assert len(op) == 32, op
        # running elsewhere: visible, not blocking
        assert s.gate.state() is None
        running = s.core.journal.running()
        assert [r.operation_id for r in running] == [op]
        assert running[0].owner["pid"] == proc.pid
        assert s.core.journal.unresolved() == []
        # this process can still do protected work meanwhile
        rc, _ = run_command(s, ws, ["true"])
        assert rc == 0
    finally:
        proc.kill()
        proc.wait()
    g = s.gate.state()
    assert g is not None and g.operation_ids == [op]
    assert g.operations[0].state == "pending" and g.operations[0].tool == "long_job"
    assert s.core.journal.running() == []
    with pytest.raises(Blocked):
        run_command(s, ws, ["true"])


def test_owner_identity_pid_reuse_is_dead():
    me = ProcessIdentity.current()
    assert me.alive()
    assert not ProcessIdentity(me.pid, (me.start_time or 0) + 1, me.boot_id, me.host).alive()
    assert not ProcessIdentity(me.pid, me.start_time, "another-boot", me.host).alive()
    assert not ProcessIdentity(2 ** 22 + 7, 1, me.boot_id, me.host).alive()
    assert ProcessIdentity(2 ** 22 + 7, 1, "x", "some-other-host").alive()   # unknown: never dead
    z = subprocess.Popen(["true"])
    import time
    deadline = time.monotonic() + 10
    zid = None
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{z.pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    zid = ProcessIdentity(z.pid, None, me.boot_id, me.host)
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    assert zid is not None, "the child never showed up as a zombie"
    assert not zid.alive()              # a zombie is dead
    z.wait()


# ------------------------------------------------------------------ git readability
def test_git_log_shows_readable_events_and_fsck_clean(svc, ws, store_dir):
    s = svc()
    run_command(s, ws, ["true"], stdout=subprocess.DEVNULL)
    s.write_file(str(ws), "w.txt", b"x\n")
    out = git(f"--git-dir={store_dir}", "log", "--format=%s", REF).stdout.splitlines()
    assert len(out) == 5
    assert out[-1] == "journal #0 genesis"
    assert out[0].startswith("journal #4 returned op=") and "status=ok" in out[0]
    assert out[1].startswith("journal #3 started write_file op=")
    assert out[3].startswith("journal #1 started terminal op=")
    body = git(f"--git-dir={store_dir}", "log", "-1", "--format=%B", REF).stdout
    payload, raw = parse_message(body)
    assert payload["seq"] == 4 and payload["kind"] == "returned"
    show = git(f"--git-dir={store_dir}", "show", f"{REF}:state.json").stdout
    assert json.loads(show)["seq"] == 4
    fsck = git(f"--git-dir={store_dir}", "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr + fsck.stdout


# ------------------------------------------------------------------ admission reads the head
@pytest.mark.slow
def test_admission_after_2000_appends_uses_head_state(svc, ws, store_dir):
    s = svc()
    s.start()
    j = s.core.journal
    import uuid
    ops = [uuid.uuid4().hex for _ in range(1000)]
    for op in ops:
        j.append(kinds.Started, {"operation_id": op, "tool": "bulk", "owner": j.me.to_dict()})
        j.append(kinds.Returned, {"operation_id": op, "status": "ok"})
    # one op left open by a dead owner, deep in the history: still found at the head
    dead = {"pid": 2 ** 22 + 3, "start_time": 1, "boot_id": j.me.boot_id, "host": j.me.host}
    j.append(kinds.Started, {"operation_id": "d" * 32, "tool": "bulk", "owner": dead})
    assert j.state.seq == 2001
    # a brand-new process view (fresh service) admits from the head's state.json
    from chronos_git.engine.store import Store
    from chronos_git.service import Chronos
    Store._instances.clear()
    Chronos._instances.clear()
    s2 = svc()
    g = s2.gate.state()
    assert g is not None and g.operation_ids == ["d" * 32]
    assert s2.core.journal.state.seq == 2001 and s2.core.journal.state.totals["started"] == 1001
    s2.resolve("d" * 32, "not_applied", "synthetic")
    assert s2.gate.state() is None
    res = s2.journal_verify().wire()
    assert res["status"] == "ok" and res["events"] == 2003


def test_warn_mode_admits_but_integrity_failure_still_blocks(svc, ws, store_dir, monkeypatch):
    s = svc(gate_mode="warn")
    _failing_subprocess(monkeypatch)
    rc, info = run_command(s, ws, ["make"])
    monkeypatch.undo()
    assert rc is None and info["outcome"] == "uncertain"
    t = s.begin(Call(tool="terminal", args={}, workspace=str(ws)))     # warned, not refused
    assert "recovery gate is closed" in t.gate_warning
    s.finish(t, Outcome(status="ok"))
    s.core.journal.integrity = "simulated damage"
    with pytest.raises(Blocked):
        s.begin(Call(tool="terminal", args={}, workspace=str(ws)))


@pytest.mark.parametrize("tool, args", [
    ("write_file", {"path": "a.txt", "content": "x" * 5000}),
    ("terminal", {"command": "echo \ud800 \u2028 \"q\" \\ \n", "timeout": 3, "env": None}),
    ("mcp_tool", {"z": [1, 2.5, {"b": True, "a": None}], "a": "ü", "bytes": b"\x00\xff", "set": {3, 1}}),
    ("t\ud83d", ["not", "a", "dict"]),
    ("", {}),
])
def test_call_hashes_are_the_fingerprint_and_the_args_hash_computed_apart(tool, args):
    """One encoding of the arguments serves both hashes (a write_file call's hold the file)."""
    assert kinds.call_hashes(tool, args) == (kinds.fingerprint(tool, args), kinds.args_hash(args))


def test_canonical_escapes_lone_surrogates_and_keeps_other_text_as_is():
    """Lone surrogates (from surrogateescape'd names) become \\uXXXX escapes, so the text
    encodes to UTF-8; ASCII and other characters are left as json.dumps writes them."""
    text = kinds.canonical({"b": "caf\udce9 \ud800", "a": "ü \u2028 plain \"q\"\n"})
    assert text == '{"a":"ü \u2028 plain \\"q\\"\\n","b":"caf\\udce9 \\ud800"}'
    assert text.encode("utf-8")
    assert kinds.canonical({"x": "ascii only"}) == '{"x":"ascii only"}'
