"""Tamper evidence: every way of damaging or rewriting the journal is detected by `journal verify`
(exit 1) and closes the recovery gate for every later process (`run` exits 3)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zlib

import pygit2
import pytest

from chronos_git.journal_refs.events import SCHEMA, canonical, message
from chronos_git.journal_refs.journal import REF
from chronos_git.journal_refs.state import JournalState
from chronos_git.journal_refs.witness import read_doc, write_doc

from support.helpers import git, run_command

PY = sys.executable


# ---------------------------------------------------------------- helpers
def checkpoint_file(store_dir):
    return store_dir.parent / (store_dir.name + ".journal-witness.json")


@pytest.fixture
def populate(svc, ws):
    """A healthy journal with a few real protected calls (made in-process: fast)."""
    def make(n_runs=3):
        s = svc()
        for _ in range(n_runs):
            rc, _info = run_command(s, ws, ["true"])
            assert rc == 0
        st = s.journal_status().wire()
        assert st["events"] == 1 + 2 * n_runs and st["integrity"] == "ok" and st["gate"] == "open"
        return st
    return make


def chain(store_dir):
    """Commit ids of the journal, oldest first."""
    repo = pygit2.Repository(str(store_dir))
    out = []
    cid = repo.references[REF].target
    while cid is not None:
        out.append(str(cid))
        c = repo[cid]
        cid = c.parent_ids[0] if c.parent_ids else None
    return list(reversed(out))


def assert_detected(cli, ws, store_dir, *, fsck_fails=False, full=False):
    v = cli("journal", "verify", "--json")
    assert v.rc == 1, v.stdout
    assert v.json["status"] == "error" and v.json["integrity"] != "ok" and v.json["problems"]
    if full:
        st = cli("journal", "status", "--json")
        assert st.json["integrity"] != "ok" and st.json["gate"] == "closed", st.stdout
    marker = ws / "must-not-run.txt"
    r = cli("run", "--json", "--", PY, "-c", "open('must-not-run.txt','w').write('x')", cwd=ws)
    assert r.rc == 3, r.stdout + r.stderr
    assert r.json["error"] == "chronos_blocked" and r.json["blocked"] is True
    assert not marker.exists()
    if full:
        w = cli("write", "--json", "w.txt", "--content", "w", cwd=ws)
        assert w.rc == 3 and not (ws / "w.txt").exists()
        # no checkpoint is exported from a journal in doubt
        assert cli("journal", "checkpoint", "--json").rc == 1
    if fsck_fails:
        assert git(f"--git-dir={store_dir}", "fsck", "--strict", check=False).returncode != 0
    return v.json


def loose_path(store_dir, oid: str):
    return store_dir / "objects" / oid[:2] / oid[2:]


def rewrite_loose(store_dir, oid: str, mutate) -> None:
    p = loose_path(store_dir, oid)
    raw = zlib.decompress(p.read_bytes())
    new = mutate(raw)
    assert new != raw
    os.chmod(p, 0o644)
    p.write_bytes(zlib.compress(new))


def forge(repo, events, *, parent=None, state=None):
    """Append well-formed events (valid messages and state.json) below `parent`; returns (tip, state)."""
    state = state or JournalState()
    head = parent
    for fields in events:
        payload = {"schema": SCHEMA, "seq": state.seq + 1, "timestamp_ns": time.time_ns(), **fields}
        state = state.apply(payload)
        tb = repo.TreeBuilder()
        tb.insert("state.json", repo.create_blob(state.to_json().encode()), pygit2.GIT_FILEMODE_BLOB)
        sig = pygit2.Signature("chronos-git", "chronos-git@localhost", int(time.time()), 0)
        head = str(repo.create_commit(None, sig, sig, message(payload), tb.write(),
                                      [pygit2.Oid(hex=head)] if head else []))
    return head, state


def state_at(repo, commit_id):
    return JournalState.from_json(repo[repo[commit_id].tree["state.json"].id].data)


def write_witness(store_dir, journal_id, head, seq):
    data = canonical({"schema": "chronos-git.journal-checkpoint.v1", "journal_id": journal_id,
                      "head": head, "seq": seq, "store": str(store_dir)})
    checkpoint_file(store_dir).write_text(data)


# ---------------------------------------------------------------- baseline
def test_untouched_store_is_ok(populate, cli, ws, store_dir):
    populate()
    v = cli("journal", "verify", "--json")
    assert v.rc == 0 and v.json["integrity"] == "ok"
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


# ---------------------------------------------------------------- object tampering
def test_edited_loose_object_of_an_older_event(populate, cli, ws, store_dir):
    populate()
    ids = chain(store_dir)
    victim = ids[1]                                     # the first `started`, far below the head
    rewrite_loose(store_dir, victim, lambda raw: raw.replace(b"terminal", b"terminaX"))
    res = assert_detected(cli, ws, store_dir, fsck_fails=True, full=True)
    assert any(victim[:12] in p or "hash" in p.lower() for p in res["problems"])


def test_edited_head_event_object(populate, cli, ws, store_dir):
    populate()
    head = chain(store_dir)[-1]
    rewrite_loose(store_dir, head, lambda raw: raw.replace(b"status=ok", b"status=no"))
    assert_detected(cli, ws, store_dir, fsck_fails=True)


def test_edited_state_blob_of_head(populate, cli, ws, store_dir):
    populate()
    repo = pygit2.Repository(str(store_dir))
    head = chain(store_dir)[-1]
    blob = str(repo[head].tree["state.json"].id)
    rewrite_loose(store_dir, blob, lambda raw: raw.replace(b'"open":{}', b'"open":{ }'))
    assert_detected(cli, ws, store_dir, fsck_fails=True)


def test_consistently_forged_event_with_wrong_state(populate, cli, ws, store_dir):
    """A well-formed commit whose state.json lies (opens a fake op) is caught by the replay."""
    populate()
    repo = pygit2.Repository(str(store_dir))
    head = chain(store_dir)[-1]
    st = state_at(repo, head)
    payload = {"schema": SCHEMA, "seq": st.seq + 1, "timestamp_ns": time.time_ns(), "kind": "maintenance",
               "operation_id": None}
    lie = st.apply(payload)
    lie.open["f" * 32] = {"state": "uncertain", "tool": "fake", "started_seq": 0}
    tb = repo.TreeBuilder()
    tb.insert("state.json", repo.create_blob(lie.to_json().encode()), pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("x", "x@x", int(time.time()), 0)
    new = repo.create_commit(None, sig, sig, message(payload), tb.write(), [pygit2.Oid(hex=head)])
    repo.references[REF].set_target(new)
    v = cli("journal", "verify", "--json")
    assert v.rc == 1
    assert any("state.json" in p for p in v.json["problems"]), v.json["problems"]
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3


def test_non_canonical_payload_is_detected(populate, cli, ws, store_dir):
    populate()
    repo = pygit2.Repository(str(store_dir))
    head = chain(store_dir)[-1]
    st = state_at(repo, head)
    payload = {"schema": SCHEMA, "seq": st.seq + 1, "timestamp_ns": 1, "kind": "maintenance",
               "operation_id": None}
    new_state = st.apply(payload)
    msg = message(payload).replace(canonical(payload), json.dumps(payload, indent=1))
    tb = repo.TreeBuilder()
    tb.insert("state.json", repo.create_blob(new_state.to_json().encode()), pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("x", "x@x", 1, 0)
    new = repo.create_commit(None, sig, sig, msg, tb.write(), [pygit2.Oid(hex=head)])
    repo.references[REF].set_target(new)
    v = cli("journal", "verify", "--json")
    assert v.rc == 1 and any("canonical" in p for p in v.json["problems"]), v.json["problems"]


# ---------------------------------------------------------------- ref tampering
def test_ref_rolled_back_to_an_ancestor(populate, cli, ws, store_dir):
    populate()
    ids = chain(store_dir)
    git(f"--git-dir={store_dir}", "update-ref", REF, ids[2])
    res = assert_detected(cli, ws, store_dir, full=True)
    assert "rolled back" in res["integrity"]


def test_ref_deleted(populate, cli, ws, store_dir):
    populate()
    git(f"--git-dir={store_dir}", "update-ref", "-d", REF)
    assert_detected(cli, ws, store_dir)


def test_chain_replaced_by_a_valid_new_chain(populate, cli, ws, store_dir):
    st = populate()
    repo = pygit2.Repository(str(store_dir))
    tip, _ = forge(repo, [{"kind": "genesis", "operation_id": None, "journal_id": st["journal_id"]}]
                   + [{"kind": "maintenance", "operation_id": None}] * 8)
    repo.references.create(REF, pygit2.Oid(hex=tip), force=True)
    res = assert_detected(cli, ws, store_dir)
    assert "diverged" in res["integrity"] or "rewritten" in res["integrity"]


def test_chain_replaced_with_another_journal_id(populate, cli, ws, store_dir):
    populate()
    repo = pygit2.Repository(str(store_dir))
    tip, _ = forge(repo, [{"kind": "genesis", "operation_id": None, "journal_id": "someone-else"}])
    repo.references.create(REF, pygit2.Oid(hex=tip), force=True)
    assert_detected(cli, ws, store_dir)


def test_a_rollback_of_the_ref_and_the_checkpoint_file_together_is_not_cleared_by_verify(
        populate, cli, ws, store_dir):
    """New-user trial: both files copied aside and back after two writes closed the gate at
    the next start, but `journal verify` (the whole chain valid) then said ok and opened it."""
    populate(1)
    ref_file, cp = store_dir / REF, checkpoint_file(store_dir)
    saved = (ref_file.read_bytes(), cp.read_bytes())
    for _ in range(2):
        assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    assert cli("journal", "verify", "--json").rc == 0
    ref_file.write_bytes(saved[0])
    cp.write_bytes(saved[1])
    for _ in range(2):
        v = cli("journal", "verify", "--json")
        assert v.rc == 1 and "no longer contains the last verified event" in v.json["integrity"], v.stdout
        assert v.json["code"] == "integrity"
        blocked = cli("run", "--json", "--", "true", cwd=ws)              # the gate stays closed
        assert blocked.rc == 3 and "journal verify" in blocked.json["message"], blocked.stdout
        assert blocked.json["code"] == "chronos_blocked"
        assert "journal resolve" not in blocked.json["message"] and ".." not in blocked.json["message"]
    (store_dir / "chronos" / "journal-verified.json").unlink()             # "it was deliberate"
    assert cli("journal", "verify", "--json").rc == 0
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


def test_history_rewritten_below_head(populate, cli, ws, store_dir):
    """Fork from an ancestor with different (valid) events, same length: diverged."""
    populate()
    repo = pygit2.Repository(str(store_dir))
    ids = chain(store_dir)
    base = ids[2]
    tip, _ = forge(repo, [{"kind": "maintenance", "operation_id": None}] * (len(ids) - 3),
                   parent=base, state=state_at(repo, base))
    repo.references.create(REF, pygit2.Oid(hex=tip), force=True)
    assert_detected(cli, ws, store_dir)


# ---------------------------------------------------------------- checkpoint file tampering
def test_checkpoint_file_deleted(populate, cli, ws, store_dir):
    populate()
    checkpoint_file(store_dir).unlink()
    res = assert_detected(cli, ws, store_dir)
    assert "missing" in res["integrity"]


@pytest.mark.parametrize("edit", ["seq+1", "seq-1", "head-random", "head-ancestor", "journal_id",
                                  "garbage", "schema"])
def test_checkpoint_file_edited(populate, cli, ws, store_dir, edit):
    populate()
    f = checkpoint_file(store_dir)
    w = json.loads(read_doc(f))
    ids = chain(store_dir)
    if edit == "seq+1":
        w["seq"] += 1
    elif edit == "seq-1":
        w["seq"] -= 1
    elif edit == "head-random":
        w["head"] = "0123456789abcdef0123456789abcdef01234567"
    elif edit == "head-ancestor":
        w["head"] = ids[-3]                         # seq left as it was: inconsistent
    elif edit == "journal_id":
        w["journal_id"] = "00000000-0000-0000-0000-000000000000"
    elif edit == "schema":
        w["schema"] = "chronos-git.journal-checkpoint.v0"
    if edit == "garbage":
        f.write_text("{{{ not json")
    else:
        write_doc(f, json.dumps(w).encode())      # sealed: the edit is the newest record
    assert_detected(cli, ws, store_dir)


def test_checkpoint_lagging_consistently_is_healed_not_tampering(populate, cli, ws, store_dir):
    """A checkpoint one event behind with the matching seq is what a crash leaves: healed."""
    st = populate()
    ids = chain(store_dir)
    write_witness(store_dir, st["journal_id"], ids[-2], len(ids) - 2)
    s2 = cli("journal", "status", "--json").json
    assert s2["integrity"] == "ok" and s2["healed"]
    assert json.loads(read_doc(checkpoint_file(store_dir)))["head"] == ids[-1]
    assert cli("journal", "verify", "--json").rc == 0
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


# ---------------------------------------------------------------- store tampering
def test_store_deleted_while_checkpoint_survives(populate, cli, ws, store_dir):
    populate()
    shutil.rmtree(store_dir)
    res = assert_detected(cli, ws, store_dir, full=True)
    assert "deleted" in res["integrity"] or "missing" in res["integrity"]
    # the checkpoint file is not silently replaced by a fresh journal's
    w = json.loads(read_doc(checkpoint_file(store_dir)))
    assert w["seq"] == 6


def test_deliberate_fresh_start_needs_moving_the_checkpoint(populate, cli, ws, store_dir):
    populate()
    shutil.rmtree(store_dir)
    checkpoint_file(store_dir).rename(store_dir.parent / "old-checkpoint.json")
    st = cli("journal", "status", "--json").json
    assert st["integrity"] == "ok" and st["events"] == 1
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


# ---------------------------------------------------------------- exported checkpoints
def test_exported_checkpoint_survives_appends_but_catches_a_rewrite(populate, cli, ws, store_dir, tmp_path):
    """Rewrite the ref AND the local checkpoint consistently: only the exported one can tell."""
    populate()
    exp = cli("journal", "checkpoint", "--json")
    assert exp.rc == 0
    cp_path = tmp_path / "anchor.json"
    cp_path.write_text(exp.stdout)
    for _ in range(2):
        assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    ok = cli("journal", "verify", "--checkpoint", cp_path, "--json")
    assert ok.rc == 0 and ok.json["external_checkpoint"] == "ok"

    # rewrite: drop everything after event #2 and grow a different history of the same length
    repo = pygit2.Repository(str(store_dir))
    ids = chain(store_dir)
    base = ids[2]
    st = state_at(repo, base)
    tip, new_state = forge(repo, [{"kind": "maintenance", "operation_id": None}] * (len(ids) - 3),
                           parent=base, state=st)
    repo.references.create(REF, pygit2.Oid(hex=tip), force=True)
    write_witness(store_dir, new_state.journal_id, tip, new_state.seq)
    (store_dir / "chronos" / "journal-verified.json").unlink()
    # locally the rewrite is undetectable (every local record of the head was rewritten)...
    local = cli("journal", "verify", "--json")
    assert local.rc == 0, local.stdout
    # ...but the exported checkpoint is no longer an ancestor
    bad = cli("journal", "verify", "--checkpoint", cp_path, "--json")
    assert bad.rc == 1 and bad.json["external_checkpoint"] != "ok"
    assert "ancestor" in bad.json["external_checkpoint"] or "rewritten" in bad.json["external_checkpoint"]


def test_exported_checkpoint_catches_truncation(populate, cli, ws, store_dir, tmp_path):
    populate()
    cp_path = tmp_path / "anchor.json"
    cp_path.write_text(cli("journal", "checkpoint", "--json").stdout)
    ids = chain(store_dir)
    repo = pygit2.Repository(str(store_dir))
    git(f"--git-dir={store_dir}", "update-ref", REF, ids[-3])
    st = state_at(repo, ids[-3])
    write_witness(store_dir, st.journal_id, ids[-3], st.seq)
    found = cli("journal", "verify", "--json")           # the last verified head is gone
    assert found.rc == 1 and "no longer contains the last verified event" in found.json["integrity"]
    (store_dir / "chronos" / "journal-verified.json").unlink()      # that record rolled back too
    assert cli("journal", "verify", "--json").rc == 0
    bad = cli("journal", "verify", "--checkpoint", cp_path, "--json")
    assert bad.rc == 1 and bad.json["external_checkpoint"] != "ok"


# ---------------------------------------------------------------- the alarm: verify's findings reach every process
def alarm_file(store_dir):
    return store_dir / "chronos" / "journal-alarm.json"


def test_older_damage_reaches_a_long_running_process(populate, svc, cli, ws, store_dir):
    """A Hermes-like process opened before the damage: after any verify finds it, its gate closes."""
    from chronos_git.service import Blocked
    populate()
    s = svc()
    assert s.gate.state() is None
    victim = chain(store_dir)[1]
    rewrite_loose(store_dir, victim, lambda raw: raw.replace(b"terminal", b"terminaX"))
    assert cli("journal", "verify", "--json").rc == 1
    assert alarm_file(store_dir).exists()
    assert json.loads(alarm_file(store_dir).read_text())["problem"]
    g = s.gate.state()
    assert g is not None and g.integrity != "ok" and "verify" in g.integrity
    with pytest.raises(Blocked):
        run_command(s, ws, ["true"])


def test_an_alarm_that_cannot_be_looked_for_is_still_an_alarm(tmp_path, monkeypatch):
    """The check looks for the file with one lstat; only 'not there' means no alarm (a folder
    that cannot be searched is not)."""
    import errno

    from chronos_git.journal_refs import verify
    from chronos_git.journal_refs.commits import AlarmRaised
    path = tmp_path / "journal-alarm.json"
    alarm = verify.AlarmFile(path)
    alarm.check()                                        # not there: no alarm
    path.write_text(json.dumps({"problem": "a damaged event"}))
    with pytest.raises(AlarmRaised, match="a damaged event"):
        alarm.check()

    def denied(p, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", p)
    monkeypatch.setattr(verify.os, "lstat", denied)
    with pytest.raises(AlarmRaised, match="a damaged event"):
        alarm.check()                                    # read through load(), never skipped


def test_repaired_chain_lifts_the_alarm(populate, cli, ws, store_dir):
    populate()
    victim = chain(store_dir)[1]
    original = loose_path(store_dir, victim).read_bytes()
    rewrite_loose(store_dir, victim, lambda raw: raw.replace(b"terminal", b"terminaX"))
    assert cli("journal", "verify", "--json").rc == 1
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3
    loose_path(store_dir, victim).write_bytes(original)        # e.g. restored from a backup
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3   # not before a clean verify
    v = cli("journal", "verify", "--json")
    assert v.rc == 0, v.stdout
    assert not alarm_file(store_dir).exists()
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


def test_verify_without_damage_never_raises_the_alarm(populate, cli, ws, store_dir):
    populate()
    assert cli("journal", "verify", "--json").rc == 0
    assert not alarm_file(store_dir).exists()


def test_foreign_exported_checkpoint_does_not_close_the_gate(populate, svc, ws):
    populate()
    s = svc()
    own = s.journal_export().checkpoint.model_dump(by_alias=True)
    for bad in ({**own, "journal_id": "someone-else"}, {"schema": "x"}, ["not", "a", "dict"]):
        res = s.journal_verify(bad).wire()
        assert res["status"] == "error" and res["external_checkpoint"] != "ok"
        assert s.gate.state() is None                 # a wrong argument is not evidence of tampering
    # our own journal's checkpoint that does not fit is evidence: the gate closes in-process
    res = s.journal_verify({**own, "head": "1" * 40}).wire()
    assert res["status"] == "error"
    assert s.gate.state() is not None


@pytest.mark.process
def test_verify_heals_a_lag_that_appeared_after_open(populate, svc, cli, ws, store_dir):
    """Another process crashed between its witness write and its ref update after we opened."""
    populate()
    s = svc()
    assert s.journal_verify().wire()["status"] == "ok"
    r = cli("run", "--json", "--", "true", cwd=ws, fault="after_witness")
    assert r.rc == -9
    res = s.journal_verify().wire()
    assert res["status"] == "ok", res["problems"]
    assert res["healed"] and res["events"] == 8
    w = json.loads(read_doc(checkpoint_file(store_dir)))
    assert w["head"] == res["head"] and w["seq"] == 7
    assert not alarm_file(store_dir).exists()


def test_alarm_lifted_elsewhere_reopens_a_long_running_process(populate, svc, cli, ws, store_dir):
    populate()
    s = svc()
    victim = chain(store_dir)[1]
    original = loose_path(store_dir, victim).read_bytes()
    rewrite_loose(store_dir, victim, lambda raw: raw.replace(b"terminal", b"terminaX"))
    assert s.journal_verify().wire()["status"] == "error"          # found in-process
    assert s.gate.state() is not None
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3   # ...and by every other process
    loose_path(store_dir, victim).write_bytes(original)
    assert s.gate.state() is not None                             # repair alone is not enough
    assert cli("journal", "verify", "--json").rc == 0       # a clean verify elsewhere
    assert s.gate.state() is None
    rc, _ = run_command(s, ws, ["true"])
    assert rc == 0


@pytest.mark.parametrize("edit", ["delete", "other-journal", "seq"])
def test_checkpoint_tampered_while_a_process_runs(populate, svc, cli, ws, store_dir, edit):
    """A long-running process must not paper over a deleted or edited checkpoint by rewriting it
    on its next append."""
    from chronos_git.journal_refs import JournalError
    from chronos_git.service import Blocked
    populate()
    s = svc()
    assert s.gate.state() is None
    f = checkpoint_file(store_dir)
    if edit == "delete":
        f.unlink()
    else:
        w = json.loads(read_doc(f))
        if edit == "other-journal":
            w["journal_id"] = "00000000-0000-0000-0000-000000000000"
        else:
            w["seq"] += 3
        write_doc(f, json.dumps(w).encode())
    tampered = f.read_bytes() if f.exists() else None
    with pytest.raises((JournalError, Blocked)):
        run_command(s, ws, [PY, "-c", "open('must-not-run.txt','w').write('x')"])
    assert not (ws / "must-not-run.txt").exists()
    assert (f.read_bytes() if f.exists() else None) == tampered      # evidence left as found
    assert s.gate.state() is not None
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3


def test_checkpoint_with_wrong_types_is_an_integrity_error_not_a_crash(populate, cli, ws, store_dir):
    populate()
    f = checkpoint_file(store_dir)
    w = json.loads(read_doc(f))
    for bad in ({**w, "head": 12345}, {**w, "seq": "7"}, {**w, "head": "zz" * 20}, [w]):
        write_doc(f, json.dumps(bad).encode())
        st = cli("journal", "status", "--json")
        assert st.rc == 0, st.stdout + st.stderr
        assert st.json["integrity"] != "ok" and "checkpoint" in st.json["integrity"]
        assert cli("run", "--json", "--", "true", cwd=ws).rc == 3


def test_the_store_reached_through_a_symlink_is_the_same_store(populate, cli, ws, store_dir, tmp_path):
    """New-user trial: `--store LINK` looked for the journal checkpoint beside the link, called
    the store copied from elsewhere and closed the gate."""
    populate(1)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "st"
    link.symlink_to(store_dir)
    for store in (link, store_dir):
        st = cli("--store", store, "journal", "status", "--json")
        assert st.rc == 0 and st.json["integrity"] == "ok" and st.json["gate"] == "open", st.stdout
        assert cli("--store", store, "run", "--json", "--", "true", cwd=ws).rc == 0
    assert not (tmp_path / "links" / "st.journal-witness.json").exists()
    assert cli("journal", "verify", "--json").rc == 0
