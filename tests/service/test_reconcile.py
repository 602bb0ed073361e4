"""Reconciliation in-process, beside the CLI crash tests (tests/journal/test_faults.py).

No subprocess is killed here: a crashed call is built by writing the journal the way a
dead process leaves it.  A "dead process" is a real service on the real store whose
process identity (the `owner` every Started event records) is one that cannot be alive
(a pid above any pid_max, on this boot and host); it begins the call through the real
transaction (`begin`: gate, pre-checkpoint, pre/post images, fsynced intent), does
whatever the crashed call did to the disk, and never records an outcome.  A *new*
process (a fresh service with fresh store objects) then finds the operation pending and
settles it.  Assertions are on the typed results (service.results), the journal events,
the gate and the disk.
"""
from __future__ import annotations

import array
import fcntl
import os
import re
import shlex
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from chronos_git.engine import restore as restore_mod
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.errors import ChronosError
from chronos_git.engine.owner import ProcessIdentity
from chronos_git.engine.store import Store
from chronos_git.journal_refs import events as ev
from chronos_git.journal_refs import evidence as evidence_mod
from chronos_git.service import Blocked, Call, Chronos, Declared, Outcome, results
from chronos_git.settings import Settings

_ME = ProcessIdentity.current()
# pid_max is at most 2**22: no process can have this pid, on this boot and host
DEAD = ProcessIdentity(pid=2 ** 22 + 11, start_time=1, boot_id=_ME.boot_id, host=_ME.host)


# ------------------------------------------------------------------ helpers
def process(store_dir, **settings) -> Chronos:
    """The service as a new process sees the store: no store, journal or workspace object
    of an earlier "process" is shared (each opens its own)."""
    Store._instances.clear()
    Chronos._instances.clear()
    return Chronos(Path(os.path.abspath(store_dir)), Settings(**settings))


def dead_process(store_dir, **settings) -> Chronos:
    """A process that will die before recording any outcome: what it journals names an
    owner that is not alive, so any other process sees its open operations as pending."""
    s = process(store_dir, **settings)
    s.core.journal.me = DEAD
    return s


def crash(store_dir, call: Call, effect=None, **settings):
    """`call` begun by a process that then died (after `effect`, what the call did to disk)."""
    t = dead_process(store_dir, **settings).begin(call)
    if effect is not None:
        effect()
    return t


def write_call(ws, path, content: bytes, tool="write_file") -> Call:
    return Call(tool=tool, args={"path": str(path), "content": content.decode()}, workspace=str(ws),
                session_id="sess-1", tool_call_id="call-1", declared=[Declared(str(path), content)])


def shell_call(ws, command="make build") -> Call:
    return Call(tool="terminal", args={"command": command}, workspace=str(ws), session_id="sess-1",
                tool_call_id="call-2")


def events_of(s: Chronos, op: str | None = None) -> list[dict]:
    """Oldest first; only `op`'s when given."""
    evs = list(reversed(s.core.journal.events(None)))
    return [e for e in evs if op is None or e.get("operation_id") == op]


def kinds(s: Chronos, op: str) -> list[str]:
    return [e["kind"] for e in events_of(s, op)]


def unresolved_ids(res: results.RecoverResult) -> list[str]:
    """Read from the wire document: `unresolved` holds dicts, not Operation models (see
    test_recover_result_unresolved_are_typed_operations)."""
    return [o["operation_id"] for o in res.wire()["unresolved"]]


def stat_of(p: Path):
    st = os.stat(p)
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_ctime_ns)


def assert_sound(s: Chronos):
    v = s.journal_verify()
    assert v.status == "ok" and v.integrity == "ok" and v.problems == [], v.problems


def temp_names(root: Path) -> list[str]:
    return [os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files if ".chronos" in n]


FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def _set_immutable(path: Path, on: bool) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] = (flags[0] | FS_IMMUTABLE_FL) if on else (flags[0] & ~FS_IMMUTABLE_FL)
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags)
    finally:
        os.close(fd)


@contextmanager
def unreplaceable(path: Path):
    """`path` cannot be replaced or removed, even by root: the immutable flag (root), else a
    read-only parent directory."""
    if os.geteuid() == 0:
        try:
            _set_immutable(path, True)
        except OSError as exc:
            pytest.skip(f"cannot make a file immutable here: {exc}")
        try:
            yield
        finally:
            _set_immutable(path, False)
    else:
        mode = os.stat(path.parent).st_mode & 0o7777
        os.chmod(path.parent, 0o555)
        try:
            yield
        finally:
            os.chmod(path.parent, mode)


# ====================================================== settled by evidence
def test_file_call_at_its_post_image_settles_completed_and_is_never_written_again(store_dir, ws):
    target = ws / "a.txt"
    t = crash(store_dir, write_call(ws, target, b"from the crashed call\n"),
              effect=lambda: target.write_bytes(b"from the crashed call\n"))
    op = t.operation_id
    before = stat_of(target)

    s = process(store_dir)
    startup = s.start()
    (settled,) = startup["settled"]
    assert isinstance(settled, results.Settled)
    assert settled.operation_id == op and settled.tool == "write_file" and settled.result == "completed"
    assert settled.paths == [str(target)] and settled.evidence == f"{target}: at post-image"
    assert kinds(s, op) == ["started", "recovered"]
    started, rec = events_of(s, op)
    assert started["owner"] == DEAD.to_dict()
    assert rec["outcome"] == "completed" and rec["actor"] == "chronos-git recovery"
    assert "replayable" not in rec
    (item,) = rec["evidence"]
    assert item["path"] == str(target) and item["at_post"] is True and item["at_pre"] is False
    assert item["now"] == item["post"] == t.declared[0]["post"] and item["pre"] == t.declared[0]["pre"]

    st = s.journal_status()
    assert st.unresolved == [] and st.running == [] and st.replayable == [] and st.gate == "open"
    assert [x.operation_id for x in st.settled_at_start] == [op]
    assert s.gate.state() is None
    # nothing wrote the file again, and it cannot be replayed
    assert stat_of(target) == before
    with pytest.raises(ChronosError, match="no operation"):
        s.recover(op, replay=True)
    again = s.recover()
    assert isinstance(again, results.RecoverResult)
    assert again.settled == [] and again.unresolved == [] and again.gate == "open"
    assert again.replayed is None

    # settled once: the next process finds nothing to settle
    s2 = process(store_dir)
    assert s2.start()["settled"] == []
    assert kinds(s2, op) == ["started", "recovered"]
    assert stat_of(target) == before and target.read_bytes() == b"from the crashed call\n"
    assert s2.write_file(str(ws), "b.txt", b"later\n").recorded is True     # the gate is open
    assert_sound(s2)


def test_file_call_at_its_pre_image_settles_not_applied_and_replays_exactly_once(store_dir, ws):
    a, new = ws / "a.txt", ws / "new" / "file.txt"
    call = Call(tool="patch", args={"files": [str(a), str(new)]}, workspace=str(ws), session_id="sess-1",
                declared=[Declared(str(a), b"alpha 2\n"), Declared(str(new), b"payload\n")])
    t = crash(store_dir, call)                      # died after its intent: nothing written
    op = t.operation_id
    assert t.declared[1]["pre"] is None             # the new file did not exist

    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.result == "not_applied" and settled.paths == [str(a), str(new)]
    assert settled.evidence == f"{a}: at pre-image; {new}: at pre-image"
    rec = events_of(s, op)[-1]
    assert rec["kind"] == "recovered" and rec["outcome"] == "not_applied" and rec["replayable"] is True
    assert all(i["at_pre"] and not i["at_post"] for i in rec["evidence"])
    st = s.journal_status()
    assert st.replayable == [op] and st.unresolved == [] and st.gate == "open"
    assert a.read_text() == "alpha\n" and not new.exists()

    out = s.recover(op[:12], replay=True)
    assert isinstance(out, results.RecoverResult) and out.gate == "open" and out.unresolved == []
    assert out.settled == []                        # settled already, at start
    (rp,) = out.replayed
    assert isinstance(rp, results.Replayed)
    assert rp.operation_id == op and rp.replay_operation_id != op and rp.outcome == "returned"
    assert rp.paths == [str(a), str(new)] and rp.post_checkpoint
    assert a.read_text() == "alpha 2\n" and new.read_text() == "payload\n"
    assert kinds(s, op) == ["started", "recovered", "replayed"]
    assert events_of(s, op)[-1]["replay_operation_id"] == rp.replay_operation_id
    assert kinds(s, rp.replay_operation_id) == ["started", "returned"]
    rstart = events_of(s, rp.replay_operation_id)[0]
    assert rstart["replay_of"] == op and rstart["actor"] == "operator" and rstart["tool"] == "patch"
    assert s.journal_status().replayable == []

    # a second replay is refused and writes nothing
    after, seq = (stat_of(a), stat_of(new)), s.core.journal.state.seq
    with pytest.raises(ChronosError):
        s.recover(op, replay=True)
    assert s.recover(replay=True).replayed == []    # none left to replay
    s2 = process(store_dir)
    with pytest.raises(ChronosError):
        s2.recover(op, replay=True)
    assert (stat_of(a), stat_of(new)) == after and s2.core.journal.state.seq == seq
    assert kinds(s2, op) == ["started", "recovered", "replayed"]
    assert_sound(s2)


def test_not_applied_with_an_unknown_post_image_is_not_replayable(store_dir, ws):
    """A fuzzy patch: its result could not be computed before the call, so it cannot be replayed."""
    a = ws / "a.txt"
    t = crash(store_dir, Call(tool="patch", args={"path": str(a), "patch": "@@ fuzzy @@"},
                              workspace=str(ws), declared=[Declared(str(a))]))
    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.result == "not_applied"
    rec = events_of(s, t.operation_id)[-1]
    assert rec["outcome"] == "not_applied" and rec["replayable"] is False
    assert rec["evidence"][0]["post"] == "unknown"
    assert s.journal_status().replayable == [] and s.gate.state() is None
    with pytest.raises(ChronosError):
        s.recover(t.operation_id, replay=True)
    assert a.read_text() == "alpha\n"


def test_unknown_post_image_and_a_changed_file_is_uncertain(store_dir, ws):
    a = ws / "a.txt"
    t = crash(store_dir, Call(tool="patch", args={"path": str(a)}, workspace=str(ws),
                              declared=[Declared(str(a))]),
              effect=lambda: a.write_text("patched somehow\n"))
    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.result == "partial" and settled.evidence == f"{a}: neither pre- nor post-image"
    (u,) = s.journal_status().unresolved
    assert u.operation_id == t.operation_id and u.state == "uncertain"
    assert s.gate.state() is not None


def test_a_mix_settles_uncertain_with_per_path_evidence_and_closes_the_gate(store_dir, ws):
    a, main, third = ws / "a.txt", ws / "src" / "main.py", ws / "third.txt"
    call = Call(tool="patch", args={"n": 3}, workspace=str(ws), session_id="sess-1",
                declared=[Declared(str(a), b"A2\n"), Declared(str(main), b"M2\n"),
                          Declared(str(third), b"T2\n")])

    def half_done():
        a.write_bytes(b"A2\n")                      # at its post-image
        third.write_bytes(b"T2 half")               # at neither (it did not exist before)
    t = crash(store_dir, call, effect=half_done)    # src/main.py: still at its pre-image
    op = t.operation_id

    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.result == "partial" and settled.paths == [str(a), str(main), str(third)]
    assert settled.evidence == (f"{a}: at post-image; {main}: at pre-image; "
                                f"{third}: neither pre- nor post-image")
    assert kinds(s, op) == ["started", "uncertain"]
    unc = events_of(s, op)[-1]
    assert unc["reason"] == "partial"
    assert [(i["path"], i["at_pre"], i["at_post"]) for i in unc["evidence"]] == [
        (str(a), False, True), (str(main), True, False), (str(third), False, False)]
    assert unc["evidence"][2]["pre"] is None and unc["evidence"][2]["now"] is not None

    (u,) = s.journal_status().unresolved
    assert isinstance(u, results.Operation)
    assert u.operation_id == op and u.state == "uncertain" and u.reason == "partial" and u.tool == "patch"
    assert u.declared_paths == [str(a), str(main), str(third)] and len(u.evidence) == 3
    g = s.gate.state()
    assert isinstance(g, results.Refusal) and g.operation_ids == [op] and g.mode == "block"
    assert g.operations[0].state == "uncertain" and op[:12] in g.message
    with pytest.raises(Blocked) as blocked:
        s.write_file(str(ws), "z.txt", b"z\n")
    assert blocked.value.refusal.operation_ids == [op]
    assert not (ws / "z.txt").exists()

    # nothing settles an uncertain operation by itself, in this process or the next
    out = s.recover()
    assert out.settled == [] and unresolved_ids(out) == [op] and out.gate == "closed"
    s2 = process(store_dir)
    assert s2.start()["settled"] == [] and kinds(s2, op) == ["started", "uncertain"]
    assert s2.gate.state().operation_ids == [op]

    # the operator rolls it back to its pre-checkpoint: every declared path at its pre-image
    rb = s2.recover(op, rollback=True)
    assert isinstance(rb, results.RollbackResult) and rb.outcome == "rolled_back" and rb.gate == "open"
    assert a.read_text() == "alpha\n" and main.read_text() == "print('hi')\n" and not third.exists()
    assert kinds(s2, op) == ["started", "uncertain", "resolved"]
    assert_sound(s2)


def test_a_call_the_gate_refuses_is_journaled_as_refused(store_dir, ws):
    """The audit trail shows what was tried while the gate was closed: a `refused` event per
    refused call (nothing run, no operation opened), naming the operations it waited on."""
    op = crash(store_dir, shell_call(ws)).operation_id
    s = process(store_dir)
    s.start()
    with pytest.raises(Blocked) as blocked:
        s.write_file(str(ws), "z.txt", b"z\n", session_id="sess-2")
    r = blocked.value.refusal
    assert r.recorded is True and r.refused_operation_id and not (ws / "z.txt").exists()
    (ev,) = [e for e in events_of(s) if e["kind"] == "refused"]
    assert ev["operation_id"] == r.refused_operation_id and ev["code"] == "chronos_blocked"
    assert ev["blocked_by"] == [op] and ev["tool"] == "write_file" and ev["session_id"] == "sess-2"
    assert s.refusal() is not None and s.refusal().recorded is None        # asked without a call: not journaled
    again = s.refusal(shell_call(ws, "rm -rf build"))                        # the Hermes hook's question
    assert again.recorded is True
    assert [e["tool"] for e in events_of(s) if e["kind"] == "refused"] == ["write_file", "terminal"]
    assert [u.operation_id for u in s.journal_status().unresolved] == [op]  # nothing opened or closed
    assert_sound(s)

    # nothing is added on top of a history in doubt: a damaged chain, a tampered store
    head = s.core.journal.head
    s.core.tampered = "the store holds a hook chronos-git never writes (test)"
    r = s.refusal(shell_call(ws))
    assert r.recorded is False and r.refused_operation_id is None and s.core.journal.head == head
    s.core.tampered = None
    s.core.journal.integrity = "the chain is damaged (test)"
    assert s.refusal(shell_call(ws)).recorded is False and s.core.journal.head == head


# ====================================================== shell calls and the operator
def test_shell_call_stays_pending_until_resolved_with_evidence(store_dir, ws):
    t = crash(store_dir, shell_call(ws), effect=lambda: (ws / "built.txt").write_text("x"))
    op = t.operation_id
    assert t.pre_checkpoint                         # a full checkpoint was taken before

    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.operation_id == op and settled.result == "needs_operator" and settled.tool == "terminal"
    assert "no declared paths" in settled.why and settled.evidence is None and settled.paths is None
    # settling by evidence wrote nothing but the boundary: the workspace as the crash was found
    # (issue 33: what a rollback reverts ends there)
    assert kinds(s, op) == ["started", "maintenance"]
    (u,) = s.journal_status().unresolved
    assert u.state == "pending" and u.owner == DEAD.to_dict() and u.pre_checkpoint == t.pre_checkpoint
    assert u.boundary_checkpoint and u.boundary_checkpoint != t.pre_checkpoint    # built.txt is in it
    assert f"checkpoint {u.boundary_checkpoint[:12]}" in settled.why
    assert s.journal_status().gate == "closed"
    g = s.gate.state()
    assert g.operation_ids == [op] and "pending" in g.message
    with pytest.raises(Blocked):
        s.write_file(str(ws), "z.txt", b"z\n")
    assert not (ws / "z.txt").exists()
    out = s.recover()
    assert [x.result for x in out.settled] == ["needs_operator"] and out.gate == "closed"
    assert unresolved_ids(out) == [op]

    s2 = process(store_dir)                         # still pending in the next process
    assert [x.result for x in s2.start()["settled"]] == ["needs_operator"]
    assert s2.gate.state().operation_ids == [op] and kinds(s2, op) == ["started", "maintenance"]  # once

    res = s2.resolve(op[:8], "completed", "  checked built.txt: the build ran  ")
    assert isinstance(res, results.ResolveResult)
    assert res.operation_id == op and res.outcome == "completed" and res.gate == "open"
    assert kinds(s2, op) == ["started", "maintenance", "resolved"]
    resolved = events_of(s2, op)[-1]
    assert resolved["seq"] == res.event and resolved["outcome"] == "completed"
    assert resolved["evidence"] == "checked built.txt: the build ran" and resolved["actor"] == "operator"
    assert s2.gate.state() is None
    assert s2.write_file(str(ws), "z.txt", b"z\n").recorded is True
    with pytest.raises(ChronosError):
        s2.resolve(op, "completed", "again")       # closed
    assert process(store_dir).start()["settled"] == []
    assert_sound(s2)


def test_recover_result_unresolved_are_typed_operations(store_dir, ws):
    from chronos_git.cli import render
    t = crash(store_dir, shell_call(ws))
    s = process(store_dir)
    out = s.recover()
    assert out.wire()["unresolved"][0]["operation_id"] == t.operation_id      # the wire is right
    assert all(isinstance(o, results.Operation) for o in out.unresolved)
    assert t.operation_id[:12] in render.text(out)


def test_resolve_refuses_empty_evidence_bad_ids_and_running_operations(store_dir, ws):
    s = process(store_dir)
    s.start()
    ids = ["abcdef" + "0" * 26, "abcdef" + "1" * 26]
    for op in ids:                                  # two crashed calls whose ids share a prefix
        s.core.journal.append(ev.Started, {"operation_id": op, "tool": "terminal", "workspace": str(ws),
                                      "owner": DEAD.to_dict()})
    live = s.begin(shell_call(ws, "sleep 1"), gate=False)      # this process: running
    seq = s.core.journal.state.seq
    refusals = [
        ((ids[0], "completed", ""), "evidence"),
        ((ids[0], "completed", " \n\t "), "evidence"),
        ((ids[0], "completed", None), "evidence"),
        (("abcde", "completed", "x"), "at least 6"),
        (("", "completed", "x"), "at least 6"),
        (("abcdef", "completed", "x"), "ambiguous"),
        (("fedcba987654", "completed", "x"), "no operation"),
        ((live.operation_id, "completed", "x"), "still running"),
        ((ids[0], "rolled_back", "x"), "outcome must be"),
        ((ids[0], "uncertain", "x"), "outcome must be"),
    ]
    for args, why in refusals:
        with pytest.raises(ChronosError, match=why):
            s.resolve(*args)
    with pytest.raises(ChronosError, match="still running"):
        s.recover(live.operation_id, rollback=True)
    with pytest.raises(ChronosError, match="choose"):
        s.recover(ids[0], replay=True, rollback=True)
    with pytest.raises(ChronosError, match="operation id"):
        s.recover(rollback=True)
    assert s.core.journal.state.seq == seq              # nothing was journaled
    assert sorted(s.gate.state().operation_ids) == ids

    r = s.resolve("ABCDEF1", "not_applied", "never ran")       # unique, any case
    assert r.operation_id == ids[1] and r.gate == "closed"
    r = s.resolve("abcdef", "completed", "ran")                # unique now
    assert r.operation_id == ids[0] and r.gate == "open"
    with pytest.raises(ChronosError, match="no operation"):
        s.resolve(ids[0], "completed", "twice")
    assert [e["kind"] for e in events_of(s)[-2:]] == ["resolved", "resolved"]
    s.finish(live, Outcome(status="ok"))
    assert_sound(s)


def test_rollback_of_a_shell_call_restores_its_pre_checkpoint_and_can_be_undone(store_dir, ws):
    def clobber():
        (ws / "a.txt").write_text("clobbered\n")
        (ws / "extra.txt").write_text("extra\n")
        (ws / "src" / "main.py").unlink()
    t = crash(store_dir, shell_call(ws, "./clobber.sh"), effect=clobber)
    op, pre = t.operation_id, t.pre_checkpoint

    s = process(store_dir)
    s.start()
    rb = s.recover(op[:10], rollback=True)
    assert isinstance(rb, results.RollbackResult)
    assert rb.operation_id == op and rb.outcome == "rolled_back" and rb.gate == "open"
    res = rb.restore
    assert isinstance(res, results.RestoreResult) and res.status == "ok" and not res.dry_run
    assert res.restored_checkpoint == pre and res.safety_checkpoint and res.failed == 0
    assert res.files_changed == 2 and res.untracked_removed == 1
    safety = res.safety_checkpoint
    assert rb.evidence == (f"rolled back to pre-checkpoint {pre[:12]}: 3 paths restored, the paths it "
                           f"changed up to checkpoint {rb.boundary_checkpoint[:12]} (taken when its crash was "
                           f"found); safety checkpoint {safety[:12]}")
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "extra.txt").exists()
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"

    assert kinds(s, op) == ["started", "maintenance", "resolved"]
    resolved = events_of(s, op)[-1]
    assert resolved["outcome"] == "rolled_back" and resolved["evidence"] == rb.evidence
    assert resolved["actor"] == "operator"
    assert resolved["rollback"] == {"pre_checkpoint": pre, "safety_checkpoint": safety,
                                    "paths": ["a.txt", "extra.txt", "src/main.py"],
                                    "boundary_checkpoint": rb.boundary_checkpoint, "kept": []}
    # the rollback is a journaled restore of its own, whose pre-checkpoint is the safety one
    (rop,) = [e for e in events_of(s) if e["kind"] == "started" and e["tool"] == "chronos.rollback"]
    assert rop["pre_checkpoint"] == safety and rop["actor"] == "operator"
    assert {d["path"] for d in rop["declared"]} == {str(ws / "a.txt"), str(ws / "extra.txt"),
                                                   str(ws / "src" / "main.py")}
    assert kinds(s, rop["operation_id"]) == ["started", "returned"]
    assert events_of(s, rop["operation_id"])[-1]["status"] == "ok"
    assert s.gate.state() is None
    seq = s.core.journal.state.seq
    with pytest.raises(ChronosError):
        s.recover(op, rollback=True)               # rolled back already
    assert s.core.journal.state.seq == seq

    # `undo` takes the rollback back, as the text after it says; `redo` does it again
    back = s.undo(str(ws))
    assert back.status == "ok"
    assert (ws / "a.txt").read_text() == "clobbered\n" and (ws / "extra.txt").read_text() == "extra\n"
    assert not (ws / "src" / "main.py").exists()
    assert s.redo(str(ws)).status == "ok"
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "extra.txt").exists()
    # and so does the safety checkpoint
    back = s.restore(str(ws), safety)
    assert back.status == "ok"
    assert (ws / "a.txt").read_text() == "clobbered\n" and (ws / "extra.txt").read_text() == "extra\n"
    assert not (ws / "src" / "main.py").exists()
    assert_sound(s)


def test_rollback_of_a_file_call_outside_the_workspace_is_refused_with_the_git_recipe(store_dir, ws,
                                                                                      tmp_path):
    outside, created = tmp_path / "outside.cfg", tmp_path / "new outside.cfg"
    outside.write_text("original outside\n")
    call = Call(tool="patch", args={"n": 2}, workspace=str(ws),
                declared=[Declared(str(outside), b"agent outside\n"), Declared(str(created), b"made\n")])

    def half_done():
        outside.write_text("half-written garbage")
        created.write_text("made\n")
    t = crash(store_dir, call, effect=half_done)
    op, pre = t.operation_id, t.declared[0]["pre"]

    s = process(store_dir)
    assert [x.result for x in s.start()["settled"]] == ["partial"]
    seq = s.core.journal.state.seq
    with pytest.raises(ChronosError) as exc:
        s.recover(op, rollback=True)
    msg = str(exc.value)
    root = shlex.quote(str(s.core.store.root))
    cat = f"git --git-dir {root} cat-file blob {pre} > {shlex.quote(str(outside))}"
    rm = f"rm -- {shlex.quote(str(created))}"
    assert "outside the workspace" in msg and f"`{cat}`" in msg and f"`{rm}` (it did not exist before)" in msg
    assert f"journal resolve {op[:12]} --outcome not_applied" in msg
    # nothing written anywhere, nothing journaled, still for the operator
    assert outside.read_text() == "half-written garbage" and created.read_text() == "made\n"
    assert s.core.journal.state.seq == seq
    assert s.gate.state().operation_ids == [op]

    # the recipe, run as given, puts the pre-images back
    for recipe in re.findall(r"`((?:git|rm) [^`]*)`", msg):
        subprocess.run(recipe, shell=True, check=True, capture_output=True)
    assert outside.read_text() == "original outside\n" and not created.exists()
    r = s.resolve(op, "not_applied", "pre-images put back by hand")
    assert r.gate == "open"
    assert_sound(s)


# ====================================================== alerts
def test_alerts_are_queued_once_and_taken_once(store_dir, ws):
    target = ws / "a.txt"
    dead = dead_process(store_dir)
    t1 = dead.begin(write_call(ws, target, b"done\n"))
    target.write_bytes(b"done\n")
    t2 = dead.begin(shell_call(ws), gate=False)      # a second call of the same process, then it died

    s1 = process(store_dir)
    assert [x.result for x in s1.start()["settled"]] == ["completed", "needs_operator"]
    s2 = process(store_dir)                          # another start before any session was told
    assert [x.result for x in s2.start()["settled"]] == ["needs_operator"]
    alerts_file = s2.core.store.meta_dir / "pending-alerts.json"
    assert alerts_file.exists()

    alerts = s2.take_alerts()
    assert all(isinstance(a, results.Settled) for a in alerts)
    assert [(a.operation_id, a.result) for a in alerts] == [(t1.operation_id, "completed"),
                                                           (t2.operation_id, "needs_operator")]
    assert alerts[0].paths == [str(target)] and alerts[0].evidence == f"{target}: at post-image"
    assert alerts[1].why and alerts[1].paths is None
    assert s2.take_alerts() == [] and s1.take_alerts() == []     # taken once, by any process
    assert not alerts_file.exists()
    s2.resolve(t2.operation_id, "not_applied", "never ran")
    s3 = process(store_dir)
    assert s3.start()["settled"] == [] and s3.take_alerts() == []


# ====================================================== two processes settle one operation
def _interleave(monkeypatch, other: Chronos):
    """Let `other` run its whole start between this process's look at a pending operation
    and its append (the evidence read is the moment in between)."""
    real = evidence_mod.evidence
    fired = []

    def evidence(declared):
        if not fired:
            fired.append(True)
            other.start()
        return real(declared)
    monkeypatch.setattr(evidence_mod, "evidence", evidence)
    return fired


@pytest.mark.parametrize("effect,verdict,kind", [
    ("post", "completed", "recovered"),
    ("none", "not_applied", "recovered"),
])
def test_two_processes_settling_the_same_operation_one_wins(store_dir, ws, monkeypatch, effect, verdict, kind):
    target = ws / "a.txt"
    t = crash(store_dir, write_call(ws, target, b"new\n"),
              effect=(lambda: target.write_bytes(b"new\n")) if effect == "post" else None)
    op = t.operation_id
    winner = process(store_dir)
    loser = process(store_dir)
    fired = _interleave(monkeypatch, winner)
    lost = loser.start()                             # does not fail
    assert fired and lost["integrity"] == "ok" and lost["settled"] == []
    assert [x.result for x in winner.startup["settled"]] == [verdict]
    assert kinds(loser, op) == ["started", kind]
    assert [(a.operation_id, a.result) for a in loser.take_alerts()] == [(op, verdict)]
    for s in (winner, loser):
        assert s.gate.state() is None and s.core.journal.integrity == "ok" and s.core.journal.poisoned is None
    assert loser.write_file(str(ws), "b.txt", b"b\n").recorded is True
    assert_sound(loser)


def test_two_processes_settling_the_same_partial_operation_one_wins(store_dir, ws, monkeypatch):
    a, main = ws / "a.txt", ws / "src" / "main.py"
    call = Call(tool="patch", args={}, workspace=str(ws),
                declared=[Declared(str(a), b"A2\n"), Declared(str(main), b"M2\n")])
    t = crash(store_dir, call, effect=lambda: a.write_bytes(b"A2\n"))
    op = t.operation_id
    winner = process(store_dir)
    loser = process(store_dir)
    _interleave(monkeypatch, winner)
    lost = loser.start()
    assert [x.result for x in winner.startup["settled"]] == ["partial"]
    assert kinds(loser, op) == ["started", "uncertain"]         # settled once
    assert lost["settled"] == []


# ====================================================== restores
def test_a_restore_whose_paths_partly_fail_returns_partial_and_keeps_the_gate_open(store_dir, ws):
    s = process(store_dir)
    base = s.snapshot(str(ws), "base").checkpoint
    (ws / "a.txt").write_text("edited\n")
    stuck = ws / "src" / "main.py"
    stuck.write_text("edited main\n")
    with unreplaceable(stuck):
        res = s.restore(str(ws), base)
    assert isinstance(res, results.RestoreResult)
    assert res.status == "error" and "restore incomplete: 1 path " in res.error
    assert res.failed == 1 and res.files_changed == 1 and res.safety_checkpoint and res.operation_id
    (failed,) = [i for i in res.plan if i.action == "failed"]
    assert failed.path == "src/main.py" and failed.reason.endswith("left as it was")
    assert (ws / "a.txt").read_text() == "alpha\n"                # the rest was restored
    assert stuck.read_text() == "edited main\n"
    assert temp_names(ws) == []

    op = res.operation_id
    assert kinds(s, op) == ["started", "returned"]
    started, returned = events_of(s, op)
    assert started["tool"] == "chronos.restore" and started["pre_checkpoint"] == res.safety_checkpoint
    assert {d["path"] for d in started["declared"]} == {str(ws / "a.txt"), str(stuck)}
    assert returned["status"] == "partial" and returned["post_checkpoint"] == base
    (nr,) = returned["not_restored"]
    assert nr["path"] == "src/main.py"
    assert nr["now"] == [d for d in started["declared"] if d["path"] == str(stuck)][0]["pre"]
    assert s.gate.state() is None and s.journal_status().unresolved == []   # a known outcome
    assert process(store_dir).start()["settled"] == []
    # with the obstacle gone the same restore finishes
    assert s.restore(str(ws), base).status == "ok" and stuck.read_text() == "print('hi')\n"
    assert_sound(s)


def _someone_edits_during_the_restore(monkeypatch, path: Path, content: bytes):
    """`path` changes after the restore wrote it and before the restore reads its outcome back
    (another process writing the same file): the real bytes on disk change, nothing else."""
    real = restore_mod.evidence

    def evidence(ws, items):
        path.write_bytes(content)
        return real(ws, items)
    monkeypatch.setattr(restore_mod, "evidence", evidence)


def test_a_restore_whose_path_ends_at_neither_image_is_uncertain_and_closes_the_gate(store_dir, ws,
                                                                                     monkeypatch):
    s = process(store_dir)
    base = s.snapshot(str(ws), "base").checkpoint
    a = ws / "a.txt"
    a.write_text("edited\n")
    (ws / "src" / "main.py").write_text("edited main\n")
    with monkeypatch.context() as m:
        _someone_edits_during_the_restore(m, a, b"someone else\n")
        res = s.restore(str(ws), base)
    op = res.operation_id
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n" and a.read_text() == "someone else\n"
    assert kinds(s, op) == ["started", "uncertain"]
    unc = events_of(s, op)[-1]
    assert "neither" in unc["reason"] and unc["post_checkpoint"] == base
    (item,) = unc["evidence"]                          # only the path at neither image
    assert item["path"] == "a.txt" and item["at_pre"] is False and item["at_post"] is False

    (u,) = s.journal_status().unresolved
    assert u.operation_id == op and u.state == "uncertain" and u.tool == "chronos.restore"
    assert u.pre_checkpoint == res.safety_checkpoint
    g = s.gate.state()
    assert g is not None and g.operation_ids == [op]
    with pytest.raises(Blocked):
        s.restore(str(ws), base)
    assert process(store_dir).start()["settled"] == []       # never settled by itself

    rb = s.recover(op, rollback=True)                          # back to the safety checkpoint
    assert rb.outcome == "rolled_back" and rb.gate == "open"
    assert a.read_text() == "edited\n" and (ws / "src" / "main.py").read_text() == "edited main\n"
    # what the other writer left is in the rollback's own safety checkpoint
    undo = s.restore(str(ws), rb.restore.safety_checkpoint, paths=[str(a)])
    assert undo.status == "ok" and a.read_text() == "someone else\n"
    assert_sound(s)


def test_a_restore_with_an_unknown_outcome_says_so(store_dir, ws, monkeypatch):
    s = process(store_dir)
    base = s.snapshot(str(ws), "base").checkpoint
    a = ws / "a.txt"
    a.write_text("edited\n")
    _someone_edits_during_the_restore(monkeypatch, a, b"someone else\n")
    res = s.restore(str(ws), base)
    assert s.gate.state() is not None                         # the gate closed on it...
    assert res.status == "error" and res.error                # ...and the answer should say so


@pytest.mark.parametrize("written,verdict", [(4, "completed"), (2, "partial")])
def test_a_restore_cut_off_by_a_crash_settles_by_evidence(store_dir, ws, written, verdict):
    """The journal a restore leaves when its process dies after `written` of its 4 files
    (after_restore_files / mid_restore): its intent names each path's pre- and post-image."""
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"original {i}\n")
    base = process(store_dir).snapshot(str(ws), "base").checkpoint
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"edited {i}\n")
    dead = dead_process(store_dir)
    w = dead.core.store.workspace(str(ws))
    with w.exclusive():
        prepared = restore_mod.prepare(w, base, meta=CheckpointMeta(description="", tool="chronos.restore"))
        declared = [Declared(str(ws / it.path), pre_id=it.current_blob, post_id=it.blob)
                    for it in prepared.items if it.declared]
        t = dead.begin(Call(tool="chronos.restore", args={"checkpoint": base}, workspace=str(ws),
                            declared=declared, pre_checkpoint=prepared.safety.id, snapshots=False))
    for i in range(written):
        (ws / f"f{i}.txt").write_text(f"original {i}\n")
    op = t.operation_id

    s = process(store_dir)
    (settled,) = s.start()["settled"]
    assert settled.operation_id == op and settled.result == verdict and len(settled.paths) == 4
    if verdict == "completed":
        assert kinds(s, op) == ["started", "recovered"] and s.gate.state() is None
        return
    (u,) = s.journal_status().unresolved
    assert u.state == "uncertain" and u.reason == "partial" and len(u.evidence) == 4
    assert sum(1 for e in u.evidence if e["at_post"]) == 2 and sum(1 for e in u.evidence if e["at_pre"]) == 2
    assert s.gate.state().operation_ids == [op]
    rb = s.recover(op, rollback=True)
    assert rb.gate == "open" and rb.restore.restored_checkpoint == prepared.safety.id
    assert [(ws / f"f{i}.txt").read_text() for i in range(4)] == [f"edited {i}\n" for i in range(4)]
    assert s.restore(str(ws), base).status == "ok"
    assert [(ws / f"f{i}.txt").read_text() for i in range(4)] == [f"original {i}\n" for i in range(4)]
    assert_sound(s)


def test_a_restore_that_leaves_a_concurrently_changed_file_alone_is_a_known_outcome(store_dir, ws, monkeypatch):
    """Another process writes a file between the restore's plan and its write: the restore
    keeps the new bytes (nobody captured them) and knows it did not write that path, so the
    outcome is partial, not unknown, and the gate stays open (wind tunnel: race seed 3)."""
    from chronos_git.engine import restore as restore_mod
    svc = Chronos.get(store_dir, Settings())
    first = svc.snapshot(str(ws), "first").checkpoint
    (ws / "a.txt").write_text("second\n")
    (ws / "src" / "main.py").write_text("print('second')\n")
    svc.snapshot(str(ws), "second")
    real = restore_mod.apply

    def apply_after_a_concurrent_write(w, prepared):
        (ws / "a.txt").write_text("written by another process meanwhile\n")
        return real(w, prepared)
    monkeypatch.setattr(restore_mod, "apply", apply_after_a_concurrent_write)
    res = svc.restore(str(ws), first, actor="test")
    assert (ws / "a.txt").read_text() == "written by another process meanwhile\n"
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"
    kept = [i for i in res.plan if i.path == "a.txt"]
    assert kept and kept[0].action == "keep"
    assert res.status != "error"
    assert svc.refusal() is None
    ops = svc.core.journal.unresolved()
    assert not ops, [o.operation_id for o in ops]


def test_rollback_of_a_file_call_whose_new_file_is_gone_again_still_resolves(store_dir, ws):
    """A person's `restore --path` must name a path in the checkpoint or the workspace (a typo
    is an error), but a recovery's rollback of a call that created a file passes that path
    even when it is in neither any more."""
    new = ws / "new.txt"
    t = crash(store_dir, write_call(ws, new, b"the whole content\n"), effect=lambda: new.write_text("the wh"))
    s = process(store_dir)
    s.start()
    assert t.operation_id in [o.operation_id for o in s.core.journal.unresolved()]      # partial: for an operator
    new.unlink()
    rb = s.recover(t.operation_id[:10], rollback=True)
    assert rb.outcome == "rolled_back" and rb.gate == "open" and not new.exists()
    with pytest.raises(ChronosError, match="in neither checkpoint"):
        s.restore(str(ws), t.pre_checkpoint, paths=[str(new)], dry_run=True)
    assert_sound(s)


def test_a_session_is_told_only_of_calls_in_its_own_workspace(store_dir, ws, tmp_path):
    """New-user trial: a crashed write in one project was told to the model of a session in
    another ("do NOT repeat it"), and then not to the project's own next session."""
    other = tmp_path / "other"
    other.mkdir()
    target = ws / "a.txt"
    t = crash(store_dir, write_call(ws, target, b"done\n"), effect=lambda: target.write_bytes(b"done\n"))
    s = process(store_dir)
    assert [x.result for x in s.start()["settled"]] == ["completed"]
    assert s.take_alerts(str(other)) == []
    (mine,) = s.take_alerts(str(ws / "src" / ".."))          # the same folder, named another way
    assert mine.operation_id == t.operation_id and mine.workspace == str(ws)
    assert s.take_alerts(str(ws)) == [] and s.take_alerts() == []
