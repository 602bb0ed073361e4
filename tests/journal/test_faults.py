"""Crash recovery: every fault point SIGKILLs a real CLI process; the store must reopen, verify,
pass `git fsck --strict` and settle exactly as specified."""
from __future__ import annotations

import json
import os
import signal
import sys

import pygit2
import pytest

from chronos_git.journal_refs.events import parse_message
from chronos_git.journal_refs.witness import read_doc
from support.helpers import git


@pytest.fixture
def cli(cli, store_dir):
    """The conftest CLI runner, remembering its store for direct reads."""
    cli.store_dir = store_dir
    return cli

PY = sys.executable
KILLED = -signal.SIGKILL


def init(cli, ws):
    r = cli("journal", "status", "--json", cwd=ws)
    assert r.rc == 0, r.stderr
    return r.json


def status(cli, **kw):
    r = cli("journal", "status", "--json", **kw)
    assert r.rc == 0, r.stdout + r.stderr
    return r.json


def events(cli):
    """Oldest first, read straight from the store (the `journal log` CLI is tested elsewhere)."""
    store = cli.store_dir
    repo = pygit2.Repository(str(store))
    out = []
    cid = repo.references["refs/chronos/journal"].target
    while cid is not None:
        c = repo[cid]
        payload, _ = parse_message(c.message)
        out.append({**payload, "id": str(cid)})
        cid = c.parent_ids[0] if c.parent_ids else None
    return list(reversed(out))


def op_kinds(cli, op):
    return [e["kind"] for e in events(cli) if e.get("operation_id") == op]


def assert_sound(cli, store_dir):
    """The store reopens, the whole chain verifies and git agrees."""
    v = cli("journal", "verify", "--json")
    assert v.rc == 0, v.stdout
    assert v.json["integrity"] == "ok" and v.json["problems"] == []
    fsck = git(f"--git-dir={store_dir}", "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def stat_of(p):
    st = os.stat(p)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


# ====================================================================== write
@pytest.mark.process
def test_write_after_dispatch_settles_completed_without_second_write(cli, ws, store_dir):
    init(cli, ws)
    target = ws / "a.txt"
    r = cli("write", "--json", "a.txt", "--content", "changed by the crashed call\n", cwd=ws,
            fault="after_dispatch")
    assert r.rc == KILLED, (r.rc, r.stdout, r.stderr)
    assert target.read_text() == "changed by the crashed call\n"     # the write happened
    before = stat_of(target)
    st = status(cli)
    settled = st["settled_at_start"]
    assert len(settled) == 1 and settled[0]["result"] == "completed"
    op = settled[0]["operation_id"]
    assert settled[0]["paths"] == [str(target)]
    assert st["unresolved"] == [] and st["gate"] == "open" and st["replayable"] == []
    assert op_kinds(cli, op) == ["started", "recovered"]
    rec = [e for e in events(cli) if e["kind"] == "recovered"][0]
    assert rec["outcome"] == "completed" and rec["evidence"][0]["at_post"] is True
    # recovery never wrote the file again
    assert stat_of(target) == before
    assert target.read_text() == "changed by the crashed call\n"
    # settled once: a second start does not settle again
    assert status(cli)["settled_at_start"] == []
    assert op_kinds(cli, op) == ["started", "recovered"]
    assert stat_of(target) == before
    assert_sound(cli, store_dir)
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


@pytest.mark.process
def test_write_after_intent_settles_not_applied_and_replays_exactly_once(cli, ws, store_dir):
    init(cli, ws)
    target = ws / "new" / "file.txt"
    r = cli("write", "--json", str(target), "--content", "payload\n", cwd=ws, fault="after_intent")
    assert r.rc == KILLED
    assert not target.exists()                          # never written
    st = status(cli)
    settled = st["settled_at_start"]
    assert [s["result"] for s in settled] == ["not_applied"]
    op = settled[0]["operation_id"]
    assert st["replayable"] == [op] and st["unresolved"] == [] and st["gate"] == "open"
    rec = [e for e in events(cli) if e["kind"] == "recovered"][0]
    assert rec["outcome"] == "not_applied" and rec["replayable"] is True
    assert_sound(cli, store_dir)

    rp = cli("journal", "recover", op[:12], "--replay", "--json")
    assert rp.rc == 0, rp.stdout
    assert target.read_text() == "payload\n"
    replayed = rp.json["replayed"]
    assert len(replayed) == 1 and replayed[0]["operation_id"] == op
    new_op = replayed[0]["replay_operation_id"]
    assert new_op != op
    assert op_kinds(cli, op) == ["started", "recovered", "replayed"]
    assert op_kinds(cli, new_op) == ["started", "returned"]
    rev = [e for e in events(cli) if e["kind"] == "replayed"]
    assert len(rev) == 1 and rev[0]["replay_operation_id"] == new_op and rev[0]["actor"] == "operator-cli"
    rs = [e for e in events(cli) if e["operation_id"] == new_op and e["kind"] == "started"][0]
    assert rs["replay_of"] == op and rs["actor"] == "operator-cli"
    after = stat_of(target)

    again = cli("journal", "recover", op, "--replay", "--json")
    assert again.rc == 1 and again.json["status"] == "error"
    assert stat_of(target) == after
    assert op_kinds(cli, op) == ["started", "recovered", "replayed"]
    assert status(cli)["replayable"] == []
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_replay_refused_when_the_file_changed_meanwhile(cli, ws, store_dir):
    init(cli, ws)
    target = ws / "a.txt"
    r = cli("write", "--json", "a.txt", "--content", "from the agent\n", cwd=ws, fault="after_intent")
    assert r.rc == KILLED
    st = status(cli)
    op = st["replayable"][0]
    target.write_text("the user edited it\n")
    rp = cli("journal", "recover", op, "--replay", "--json")
    assert rp.rc == 1 and "pre-image" in rp.json["error"]
    assert target.read_text() == "the user edited it\n"
    assert op_kinds(cli, op) == ["started", "recovered"]
    assert status(cli)["replayable"] == [op]             # still replayable if the edit is undone
    other = ws / "b.txt"
    r = cli("write", "--json", "b.txt", "--content", "second\n", cwd=ws, fault="after_intent")
    assert r.rc == KILLED
    (op_b,) = set(status(cli)["replayable"]) - {op}
    # every replayable one: the changed one is named and left alone, the others still replay
    rp = cli("journal", "recover", "--replay", "--json")
    assert rp.rc == 0, rp.stdout
    assert [x["operation_id"] for x in rp.json["replayed"]] == [op_b] and other.read_text() == "second\n"
    (nr,) = rp.json["not_replayed"]
    assert nr["operation_id"] == op and "neither pre- nor post-image" in nr["evidence"]
    assert target.read_text() == "the user edited it\n" and status(cli)["replayable"] == [op]
    text = cli("journal", "recover", "--replay")
    assert text.rc == 0 and f"not replayed {op[:12]}: later calls changed its paths" in text.stdout
    target.write_text("alpha\n")
    rp = cli("journal", "recover", "--replay", "--json")
    assert rp.rc == 0, rp.stdout
    assert [x["operation_id"] for x in rp.json["replayed"]] == [op] and rp.json["not_replayed"] == []
    assert target.read_text() == "from the agent\n"
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_write_partial_evidence_is_uncertain_then_rollback(cli, ws, store_dir):
    init(cli, ws)
    target = ws / "a.txt"
    r = cli("write", "--json", "a.txt", "--content", "agent version\n", cwd=ws, fault="after_intent")
    assert r.rc == KILLED
    target.write_text("a third version\n")               # neither pre- nor post-image
    st = status(cli)
    assert [s["result"] for s in st["settled_at_start"]] == ["partial"]
    (u,) = st["unresolved"]
    assert u["state"] == "uncertain" and u["reason"] == "partial" and u["tool"] == "write_file"
    assert u["declared_paths"] == [str(target)]
    assert st["gate"] == "closed"
    b = cli("run", "--json", "--", "true", cwd=ws)
    assert b.rc == 3 and b.json["operation_ids"] == [u["operation_id"]]
    rb = cli("journal", "recover", u["operation_id"], "--rollback", "--json")
    assert rb.rc == 0, rb.stdout
    assert rb.json["outcome"] == "rolled_back" and rb.json["gate"] == "open"
    assert target.read_text() == "alpha\n"                # pre-image of the crashed call
    assert op_kinds(cli, u["operation_id"]) == ["started", "uncertain", "resolved"]
    res = [e for e in events(cli) if e["kind"] == "resolved"][-1]
    assert res["outcome"] == "rolled_back"
    assert_sound(cli, store_dir)


# ====================================================================== run
@pytest.mark.process
@pytest.mark.parametrize("fault,ran", [("after_dispatch", True), ("after_intent", False)])
def test_run_crash_is_pending_and_blocks_until_resolved(cli, ws, store_dir, fault, ran):
    init(cli, ws)
    marker = ws / "ran.txt"
    r = cli("run", "--json", "--", PY, "-c", "open('ran.txt','a').write('x')", cwd=ws, fault=fault)
    assert r.rc == KILLED
    assert marker.exists() is ran
    st = status(cli)
    (u,) = st["unresolved"]
    assert u["state"] == "pending" and u["tool"] == "terminal" and st["gate"] == "closed"
    assert [s["result"] for s in st["settled_at_start"]] == ["needs_operator"]
    op = u["operation_id"]
    assert op_kinds(cli, op) == ["started", "maintenance"]     # the workspace as the crash was found
    assert u["boundary_checkpoint"]
    assert_sound(cli, store_dir)
    for _ in range(2):      # stays blocked across processes
        b = cli("run", "--json", "--", PY, "-c", "open('ran.txt','a').write('y')", cwd=ws)
        assert b.rc == 3 and b.json["operation_ids"] == [op] and b.json["blocked"] is True
    assert (marker.read_text() if marker.exists() else "") == ("x" if ran else "")
    # recovery by evidence cannot settle a shell command
    rec = cli("journal", "recover", "--json")
    assert rec.rc == 0 and rec.json["gate"] == "closed"
    assert [x["operation_id"] for x in rec.json["unresolved"]] == [op]
    res = cli("journal", "resolve", op, "--outcome", "completed" if ran else "not_applied",
              "--evidence", "checked ran.txt", "--json")
    assert res.rc == 0 and res.json["gate"] == "open"
    ok = cli("run", "--json", "--", PY, "-c", "open('ran.txt','a').write('z')", cwd=ws)
    assert ok.rc == 0
    assert marker.read_text() == ("xz" if ran else "z")
    assert op_kinds(cli, op) == ["started", "maintenance", "resolved"]
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_run_crash_rollback_restores_pre_checkpoint(cli, ws, store_dir):
    init(cli, ws)
    script = ("import os; open('a.txt','w').write('clobbered\\n'); open('extra.txt','w').write('e');"
              "os.remove('src/main.py')")
    r = cli("run", "--json", "--", PY, "-c", script, cwd=ws, fault="after_dispatch")
    assert r.rc == KILLED
    assert (ws / "a.txt").read_text() == "clobbered\n" and (ws / "extra.txt").exists()
    st = status(cli)
    (u,) = st["unresolved"]
    op, pre = u["operation_id"], u["pre_checkpoint"]
    assert pre
    rb = cli("journal", "recover", op, "--rollback", "--json")
    assert rb.rc == 0, rb.stdout
    assert rb.json["outcome"] == "rolled_back" and rb.json["gate"] == "open"
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert not (ws / "extra.txt").exists()
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"
    evs = events(cli)
    res = [e for e in evs if e["operation_id"] == op and e["kind"] == "resolved"][0]
    assert res["outcome"] == "rolled_back" and res["rollback"]["pre_checkpoint"] == pre
    safety = res["rollback"]["safety_checkpoint"]
    assert safety and set(res["rollback"]["paths"]) >= {"a.txt", "extra.txt", "src/main.py"}
    # the restore is journaled as an operation of its own
    rest = [e for e in evs if e["kind"] == "started" and e["tool"] == "chronos.rollback"]
    assert len(rest) == 1 and op_kinds(cli, rest[0]["operation_id"]) == ["started", "returned"]
    # rolling back twice is refused
    assert cli("journal", "recover", op, "--rollback", "--json").rc == 1
    # the safety checkpoint undoes the rollback
    back = cli("restore", safety, "--json", cwd=ws)
    assert back.rc == 0, back.stdout
    assert (ws / "a.txt").read_text() == "clobbered\n"
    assert_sound(cli, store_dir)


def test_rollback_refused_for_a_live_operation(svc, cli, ws, store_dir):
    # an op whose owner is alive (this test process) is running, not rollback-able
    from chronos_git.service import Call
    s = svc()
    t = s.begin(Call(tool="terminal", args={}, workspace=str(ws)))
    r = cli("journal", "recover", t.operation_id, "--rollback", "--json")
    assert r.rc == 1 and "running" in r.json["error"]
    r = cli("journal", "resolve", t.operation_id, "--outcome", "completed", "--evidence", "x", "--json")
    assert r.rc == 1 and "running" in r.json["error"]
    assert status(cli)["gate"] == "open"
    from chronos_git.service import Outcome
    s.finish(t, Outcome(status="ok"))


# ====================================================================== journal internals
@pytest.mark.process
def test_mid_append_loses_the_event_cleanly(cli, ws, store_dir):
    st0 = init(cli, ws)
    r = cli("run", "--json", "--", PY, "-c", "open('ran.txt','w').write('x')", cwd=ws, fault="mid_append")
    assert r.rc == KILLED
    assert not (ws / "ran.txt").exists()               # died before the intent was durable
    st = status(cli)
    assert st["integrity"] == "ok" and st["healed"] is None
    assert st["head"] == st0["head"] and st["events"] == 1 and st["unresolved"] == []
    assert_sound(cli, store_dir)
    ok = cli("run", "--json", "--", PY, "-c", "open('ran.txt','w').write('x')", cwd=ws)
    assert ok.rc == 0 and (ws / "ran.txt").read_text() == "x"
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_mid_append_of_genesis(cli, ws, store_dir):
    r = cli("journal", "status", "--json", fault="mid_append")
    assert r.rc == KILLED
    st = status(cli)
    assert st["integrity"] == "ok" and st["events"] == 1
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_after_witness_is_healed_on_next_open(cli, ws, store_dir):
    """Killed after the witness (the event is durable) and before the ref moved."""
    init(cli, ws)
    cp_file = store_dir.parent / (store_dir.name + ".journal-witness.json")
    ref0 = git(f"--git-dir={store_dir}", "rev-parse", "refs/chronos/journal").stdout.strip()
    r = cli("run", "--json", "--", PY, "-c", "open('ran.txt','w').write('x')", cwd=ws,
            fault="after_witness")
    assert r.rc == KILLED
    assert not (ws / "ran.txt").exists()
    written = json.loads(read_doc(cp_file))
    assert written["head"] != ref0 and written["seq"] == 1
    assert git(f"--git-dir={store_dir}", "rev-parse", "refs/chronos/journal").stdout.strip() == ref0
    st = status(cli)
    assert st["integrity"] == "ok"
    assert st["healed"] and "moved forward" in st["healed"]
    # then the crashed call's boundary checkpoint was journaled on top (issue 33)
    assert st["events"] == 3
    assert git(f"--git-dir={store_dir}", "rev-parse", "refs/chronos/journal~1").stdout.strip() == written["head"]
    # the started event did become durable: its op is pending (owner died)
    (u,) = st["unresolved"]
    assert u["state"] == "pending"
    assert status(cli)["healed"] is None                           # healed once
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_after_witness_of_genesis(cli, ws, store_dir):
    r = cli("journal", "status", "--json", fault="after_witness")
    assert r.rc == KILLED
    st = status(cli)
    assert st["integrity"] == "ok" and st["events"] == 1 and st["healed"]
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_after_witness_of_a_write_settles_not_applied(cli, ws, store_dir):
    """The post-image rides in the witness record and is written after it, with the event's
    own objects: killed in between, the store lacks it until the next open writes it back,
    and the replay then writes what the call asked for."""
    init(cli, ws)
    content = "zzz " * 500
    r = cli("write", "--json", "a.txt", "--content", content, cwd=ws, fault="after_witness")
    assert r.rc == KILLED
    post = str(pygit2.hash(content.encode()))
    assert git(f"--git-dir={store_dir}", "cat-file", "-e", post, check=False).returncode != 0
    st = status(cli)
    assert st["healed"] and [s["result"] for s in st["settled_at_start"]] == ["not_applied"]
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert st["gate"] == "open"
    assert git(f"--git-dir={store_dir}", "cat-file", "-p", post).stdout == content
    assert_sound(cli, store_dir)
    (op,) = st["replayable"]
    assert cli("journal", "recover", op, "--replay", "--json").rc == 0
    assert (ws / "a.txt").read_text() == content


@pytest.mark.process
def test_mid_snapshot_leaves_nothing_half_done(cli, ws, store_dir):
    init(cli, ws)
    (ws / "b.txt").write_text("b\n")
    r = cli("run", "--json", "--", PY, "-c", "open('ran.txt','w').write('x')", cwd=ws, fault="mid_snapshot")
    assert r.rc == KILLED
    assert not (ws / "ran.txt").exists()
    st = status(cli)
    assert st["events"] == 1 and st["unresolved"] == [] and st["gate"] == "open"
    ok = cli("run", "--json", "--", PY, "-c", "open('ran.txt','w').write('x')", cwd=ws)
    assert ok.rc == 0, ok.stdout + ok.stderr
    assert_sound(cli, store_dir)


# ====================================================================== restore / compact
def _checkpoints(cli, ws):
    r = cli("log", "--json", "--limit", "100", cwd=ws)
    assert r.rc == 0, r.stdout
    return [c["id"] for c in r.json["checkpoints"]]


@pytest.mark.process
def test_mid_restore_is_never_silent(cli, ws, store_dir):
    init(cli, ws)
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"original {i}\n")
    snap = cli("snapshot", "--json", "-m", "base", cwd=ws)
    assert snap.rc == 0, snap.stdout
    target = snap.json["checkpoint"]
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"edited {i}\n")
    edited = {i: f"edited {i}\n" for i in range(4)}
    r = cli("restore", target, "--json", cwd=ws, fault="mid_restore")
    assert r.rc == KILLED
    now = {i: (ws / f"f{i}.txt").read_text() for i in range(4)}
    n_restored = sum(1 for i in range(4) if now[i] == f"original {i}\n")
    assert 1 <= n_restored < 4                         # killed part-way
    st = status(cli)
    rest_ops = [e for e in events(cli) if e["kind"] == "started" and e["tool"] == "chronos.restore"]
    assert len(rest_ops) == 1
    op = rest_ops[0]["operation_id"]
    # never silent: either settled by evidence, or unresolved with the per-path evidence
    settled = {s["operation_id"]: s for s in st["settled_at_start"]}
    assert op in settled
    assert settled[op]["result"] == "partial"
    (u,) = st["unresolved"]
    assert u["operation_id"] == op and u["state"] == "uncertain" and u["reason"] == "partial"
    assert len(u["evidence"]) == 4
    assert sum(1 for e in u["evidence"] if e["at_post"]) == n_restored
    assert st["gate"] == "closed"
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3
    assert_sound(cli, store_dir)
    # the operator rolls the half-restore back to its safety checkpoint
    rb = cli("journal", "recover", op, "--rollback", "--json")
    assert rb.rc == 0, rb.stdout
    assert {i: (ws / f"f{i}.txt").read_text() for i in range(4)} == edited
    assert status(cli)["gate"] == "open"
    full = cli("restore", target, "--json", cwd=ws)
    assert full.rc == 0
    assert {i: (ws / f"f{i}.txt").read_text() for i in range(4)} == {i: f"original {i}\n" for i in range(4)}
    assert_sound(cli, store_dir)


def _five_versions(cli, ws, settings):
    """A journal and five checkpoints of a.txt ("version 0" to "version 4")."""
    init(cli, ws)
    for i in range(5):
        (ws / "a.txt").write_text(f"version {i}\n")
        assert cli("snapshot", "--json", "-m", f"v{i}", cwd=ws, settings=settings).rc == 0


@pytest.mark.process
def test_mid_compact_keeps_store_sound_and_checkpoints_restorable(cli, ws, store_dir):
    settings = {"max_checkpoints": 2, "compact_grace_s": 0}
    _five_versions(cli, ws, settings)
    assert len(_checkpoints(cli, ws)) == 5
    r = cli("compact", "--json", settings=settings, fault="mid_compact")
    assert r.rc == KILLED
    st = status(cli)
    assert st["integrity"] == "ok" and st["gate"] == "open"
    assert_sound(cli, store_dir)
    kept = _checkpoints(cli, ws)
    assert len(kept) >= 2
    for cp in kept:
        assert git(f"--git-dir={store_dir}", "cat-file", "-t", cp).stdout.strip() == "commit"
    oldest_kept = kept[-1]
    res = cli("restore", oldest_kept, "--json", cwd=ws)
    assert res.rc == 0, res.stdout
    shown = cli("show", oldest_kept, "--json", cwd=ws)
    assert shown.rc == 0
    # a later compaction finishes the job and everything is still sound
    again = cli("compact", "--json", settings=settings)
    assert again.rc == 0, again.stdout
    assert_sound(cli, store_dir)
    assert cli("restore", _checkpoints(cli, ws)[0], "--json", cwd=ws).rc == 0
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_retention_keeps_checkpoint_of_unresolved_operation(cli, ws, store_dir):
    settings = {"max_checkpoints": 1, "compact_grace_s": 0}
    init(cli, ws)
    for i in range(3):          # older checkpoints: these are what retention may drop
        (ws / "c.txt").write_text(f"old {i}\n")
        assert cli("snapshot", "--json", "-m", f"old {i}", cwd=ws, settings=settings).rc == 0
    old = _checkpoints(cli, ws)
    (ws / "a.txt").write_text("before the crash\n")
    r = cli("run", "--json", "--", PY, "-c", "open('a.txt','w').write('crashed call\\n')", cwd=ws,
            fault="after_dispatch", settings=settings)
    assert r.rc == KILLED
    (u,) = status(cli)["unresolved"]
    pre = u["pre_checkpoint"]
    # more checkpoints on top, so retention (max 1) would drop `pre`
    for i in range(4):
        (ws / "b.txt").write_text(f"later {i}\n")
        assert cli("snapshot", "--json", "-m", f"later {i}", cwd=ws, settings=settings).rc == 0
    c = cli("compact", "--json", settings=settings)
    assert c.rc == 0, c.stdout
    dropped = [cp["id"] for d in c.json["dropped"] for cp in d["checkpoints"]]
    assert set(old) <= set(dropped)                   # retention did drop the older ones...
    assert pre not in dropped                         # ...but never the pinned checkpoint
    assert pre in _checkpoints(cli, ws)
    assert git(f"--git-dir={store_dir}", "cat-file", "-t", pre).stdout.strip() == "commit"
    maint = [e for e in events(cli) if e["kind"] == "maintenance"]
    assert maint and all(e["operation_id"] is None for e in maint if e.get("action") != "crash_boundary")
    assert {cp for e in maint for d in e.get("dropped", []) for cp in d["checkpoints"]} == set(dropped)
    assert_sound(cli, store_dir)
    dry = cli("restore", pre, "--dry-run", "--json", cwd=ws)
    assert dry.rc == 0, dry.stdout
    rb = cli("journal", "recover", u["operation_id"], "--rollback", "--json")
    assert rb.rc == 0, rb.stdout
    assert (ws / "a.txt").read_text() == "before the crash\n"
    assert_sound(cli, store_dir)


def test_write_outside_workspace_is_refused_before_anything_is_journaled(cli, ws, store_dir, tmp_path):
    """`write` is confined to the workspace: a path outside it is refused up front."""
    st0 = init(cli, ws)
    outside = tmp_path / "outside.cfg"
    outside.write_text("original outside\n")
    r = cli("write", "--json", str(outside), "--content", "agent outside\n", cwd=ws)
    assert r.rc == 1 and "outside the workspace" in r.json["error"]
    assert outside.read_text() == "original outside\n"
    assert status(cli)["events"] == st0["events"]             # nothing journaled
    assert_sound(cli, store_dir)


def test_rollback_of_a_call_outside_the_workspace_names_the_manual_recipe(svc, ws, store_dir, tmp_path):
    """A Hermes file call outside the workspace is journaled with its pre-image, but a rollback
    only writes inside the workspace: it refuses and says how to put the pre-image back by hand."""
    from chronos_git.service.calls import Call, Declared, Outcome
    s = svc()
    outside = tmp_path / "outside.cfg"
    outside.write_text("original outside\n")
    t = s.begin(Call(tool="write_file", args={"path": str(outside)}, workspace=str(ws),
                     declared=[Declared(str(outside), b"agent outside\n")]))
    outside.write_text("half-written garbage")
    s.finish(t, Outcome(status="error", uncertain_reason="exception: Killed"))
    (u,) = s.core.journal.unresolved()
    with pytest.raises(Exception) as exc:
        s.recover(u.operation_id, rollback=True)
    msg = str(exc.value)
    assert str(outside) in msg and "outside the workspace" in msg and "cat-file" in msg
    assert outside.read_text() == "half-written garbage"        # nothing written outside
    pre = t.declared[0]["pre"]
    blob = git(f"--git-dir={store_dir}", "cat-file", "blob", pre).stdout
    assert blob == "original outside\n"                        # the recipe's blob is there
    assert s.core.journal.unresolved()                                # still for the operator


def test_stale_git_lock_of_the_journal_ref_does_not_block(cli, ws, store_dir):
    """A process killed inside the ref update leaves refs/chronos/journal.lock behind."""
    st0 = init(cli, ws)
    lock = store_dir / "refs" / "chronos" / "journal.lock"
    lock.write_text(st0["head"] + "\n")
    r = cli("run", "--json", "--", "true", cwd=ws)
    assert r.rc == 0, r.stdout + r.stderr
    assert not lock.exists()
    assert_sound(cli, store_dir)


@pytest.mark.process
def test_a_pack_renamed_without_its_index_is_swept_by_the_next_compaction(cli, ws, store_dir):
    settings = {"max_checkpoints": 0, "compact_grace_s": 0}
    _five_versions(cli, ws, settings)
    r = cli("compact", "--json", settings=settings, fault="compact_pack_before_idx")
    assert r.rc == KILLED
    pack_dir = store_dir / "objects" / "pack"

    def orphans():
        return [p for p in pack_dir.glob("pack-*.pack") if not p.with_suffix(".idx").exists()]
    assert len(orphans()) == 1                  # the state the point names
    st = status(cli)
    assert st["integrity"] == "ok" and st["gate"] == "open"
    assert_sound(cli, store_dir)
    again = cli("compact", "--json", settings=settings)
    assert again.rc == 0, again.stdout
    assert orphans() == [] and not list(pack_dir.glob("tmp-compact-*"))
    assert_sound(cli, store_dir)
    kept = _checkpoints(cli, ws)
    assert len(kept) == 5
    assert cli("restore", kept[-1], "--json", cwd=ws).rc == 0
    assert (ws / "a.txt").read_text() == "version 0\n"


@pytest.mark.process
def test_mid_compact_drop_is_still_journaled(cli, ws, store_dir):
    """Phase A cuts old checkpoints off before the crash point: the decision must already be in
    the journal (a later compact finds nothing left to drop and cannot record it)."""
    settings = {"max_checkpoints": 2, "compact_grace_s": 0}
    _five_versions(cli, ws, settings)
    before = _checkpoints(cli, ws)
    assert cli("compact", "--json", settings=settings, fault="mid_compact").rc == KILLED
    assert cli("compact", "--json", settings=settings).rc == 0
    gone = set(before) - set(_checkpoints(cli, ws))
    assert gone                                          # checkpoints were dropped...
    recorded = {cp for e in events(cli) if e["kind"] == "maintenance"
                for d in e.get("dropped", []) for cp in d["checkpoints"]}
    assert gone <= recorded                              # ...and the journal says so


@pytest.mark.process
def test_restore_killed_after_its_writes_settles_completed(cli, ws, store_dir):
    init(cli, ws)
    snap = cli("snapshot", "--json", "-m", "base", cwd=ws)
    target = snap.json["checkpoint"]
    (ws / "a.txt").write_text("edited\n")
    (ws / "new.txt").write_text("untracked\n")
    r = cli("restore", target, "--json", cwd=ws, fault="after_dispatch")
    assert r.rc == KILLED
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "new.txt").exists()
    st = status(cli)
    (s,) = st["settled_at_start"]
    assert s["result"] == "completed" and st["gate"] == "open"
    op = s["operation_id"]
    assert op_kinds(cli, op) == ["started", "recovered"]
    started = [e for e in events(cli) if e["operation_id"] == op][0]
    assert started["tool"] == "chronos.restore" and started["pre_checkpoint"]
    assert {d["path"] for d in started["declared"]} == {str(ws / "a.txt"), str(ws / "new.txt")}
    assert_sound(cli, store_dir)
