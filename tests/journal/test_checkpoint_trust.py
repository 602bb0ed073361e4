"""Checkpoints in the chain of trust (issue 32, finding 2; docs/design.md): the checkpoints the
journal names must stay where it says, a checkpoint ref moves only forward or by a journaled
event, and deleting chronos-git's own state files does not turn tampering into a repair.
The legitimate moves (calls, restores, a restore into a new folder, retention and compaction,
orphan pruning, a real power-cut repair, an old store) never alarm."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine import compaction, powercut
from chronos_git.journal_refs import IntegrityError, checkpoints
from chronos_git.journal_refs.checkpoints import MARKER
from chronos_git.service import Chronos
from chronos_git.settings import Settings

from support.helpers import run_cli


# ---------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _no_second_look(monkeypatch):
    """A problem is read again after pauses (a concurrent append); nothing runs beside these."""
    monkeypatch.setattr(checkpoints, "RETRY_AFTER_S", ())


def _next_process(store_dir: Path, **settings) -> Chronos:
    Chronos.forget_instances()
    s = Chronos.get(store_dir, Settings(**settings))
    s.start()
    return s


def _calls(s: Chronos, ws: Path, n: int = 3) -> list[dict]:
    """`n` journaled file calls; their returned events (with post-checkpoints), oldest first."""
    for i in range(n):
        res = s.write_file(str(ws), "a.txt", f"call {i}\n".encode())
        assert res.status == "ok", res
    return [e for e in reversed(s.core.journal.events(None)) if e.get("post_checkpoint")]


def _forge(store_dir: Path, ws: Path, genuine: str) -> str:
    """What the agent can do: a commit with the genuine one's label, time and parent but another
    tree, and the workspace's checkpoint ref (and HEAD) pointed at it."""
    repo = pygit2.Repository(str(store_dir))
    g = repo[genuine]
    blob = repo.create_blob(b"forged\n")
    tb = repo.TreeBuilder(g.tree)
    tb.insert("a.txt", blob, pygit2.GIT_FILEMODE_BLOB)
    forged = repo.create_commit(None, g.author, g.committer, g.message, tb.write(), list(g.parent_ids))
    w = Chronos.get(store_dir, Settings()).core.store.workspace(str(ws))
    repo.references.create(w.ref, forged, force=True)
    (w.gitdir / "HEAD").write_text(f"{forged}\n")
    return str(forged)


def _cut(store_dir: Path, oid: str) -> None:
    path = store_dir / "objects" / oid[:2] / oid[2:]
    raw = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(raw[: len(raw) // 2])


def _reboot(store_dir: Path) -> None:
    (store_dir / "chronos" / powercut.MARKER).write_text(json.dumps({"boot_id": "the boot before the cut"}))


def _clean(s: Chronos) -> None:
    assert s.core.journal.integrity == "ok", s.core.journal.integrity
    res = s.journal_verify()
    assert res.status == "ok", res.error
    assert s.refusal() is None


# ------------------------------------------------------------- forgeries
def test_a_forged_checkpoint_ref_fails_verify_and_closes_the_gate(svc, ws, store_dir, cli):
    s = svc()
    ret = _calls(s, ws)
    genuine = ret[-1]["post_checkpoint"]
    forged = _forge(store_dir, ws, genuine)
    r = cli("journal", "verify", "--json")
    assert r.rc == 1, r.stdout
    err = r.json["error"]
    assert str(ws) in err and genuine[:12] in err and forged[:12] in err, err
    assert f"seq {ret[-1]['seq']}" in err and "post-checkpoint" in err, err
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3          # the gate is closed
    # ... in every later process, and the file that vouched for it is not restorable over it
    s2 = _next_process(store_dir)
    assert s2.refusal() is not None and genuine[:12] in s2.refusal().message


def test_the_next_start_finds_a_forgery_without_a_verify_and_again_once_the_alarm_file_is_gone(svc, ws, store_dir):
    s = svc()
    ret = _calls(s, ws)
    genuine = ret[-1]["post_checkpoint"]
    _forge(store_dir, ws, genuine)
    s2 = _next_process(store_dir)
    assert s2.core.journal.integrity != "ok" and genuine[:12] in s2.core.journal.integrity
    # a forgery that later calls built on is still found: the genuine one is not below the tip
    (store_dir / "chronos" / "journal-alarm.json").unlink()
    s3 = _next_process(store_dir)
    assert s3.core.journal.integrity != "ok"                 # found again at this start
    assert genuine[:12] in s3.core.journal.integrity


def test_a_forgery_under_later_calls_is_found_at_the_next_start(svc, ws, store_dir):
    s = svc()
    ret = _calls(s, ws)
    genuine = ret[-1]["post_checkpoint"]
    s.journal_verify()                                  # the incremental record is at the head
    _forge(store_dir, ws, genuine)
    s.write_file(str(ws), "b.txt", b"on top of the forgery\n")   # this process checked at its start
    s2 = _next_process(store_dir)
    assert s2.core.journal.integrity != "ok" and genuine[:12] in s2.core.journal.integrity


def test_compaction_after_a_forgery_refuses_and_keeps_the_genuine_checkpoint(svc, ws, store_dir):
    s = svc(compact_grace_s=0)
    ret = _calls(s, ws)
    genuine = ret[-1]["post_checkpoint"]
    _forge(store_dir, ws, genuine)                      # after this process's start
    with pytest.raises(IntegrityError, match=genuine[:12]):
        s.compact(max_checkpoints=1, grace_s=0)
    assert isinstance(pygit2.Repository(str(store_dir))[genuine], pygit2.Commit)
    assert s.refusal() is not None and genuine[:12] in s.refusal().message


def test_named_checkpoints_are_roots_of_a_compaction_even_when_no_ref_reaches_them(svc, ws, store_dir):
    """The window between the check and the deletion: a ref moved then loses nothing named."""
    s = svc()
    ret = _calls(s, ws)
    genuine = ret[-1]["post_checkpoint"]
    _forge(store_dir, ws, genuine)
    store = s.core.store
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0, keep={genuine})
    store.forget_repos()
    assert isinstance(pygit2.Repository(str(store_dir))[genuine], pygit2.Commit)


def test_a_deleted_checkpoint_ref_or_a_named_checkpoint_s_files_deleted_is_an_alarm(svc, ws, store_dir, tmp_path):
    s = svc()
    ret = _calls(s, ws, 2)
    w = s.core.store.workspace(str(ws))
    (store_dir / w.ref).unlink()                                   # no orphan pruning journaled
    (w.gitdir / "HEAD").write_text("ref: refs/heads/chronos-unborn\n")
    s2 = _next_process(store_dir)
    assert s2.core.journal.integrity != "ok" and "is gone" in s2.core.journal.integrity and str(ws) in s2.core.journal.integrity
    # another store: a named checkpoint's root tree deleted under its commit
    other_store, other_ws = tmp_path / "store2", tmp_path / "ws2"
    other_ws.mkdir()
    s3 = Chronos.get(other_store, Settings())
    ret = _calls(s3, other_ws, 2)
    repo = pygit2.Repository(str(other_store))
    tree = str(repo[ret[-1]["post_checkpoint"]].tree_id)
    (other_store / "objects" / tree[:2] / tree[2:]).unlink()
    s4 = _next_process(other_store)
    assert s4.core.journal.integrity != "ok" and "root tree" in s4.core.journal.integrity


# ------------------------------------------------------------ power cuts
def test_deleting_boot_json_on_the_same_boot_is_an_alarm_not_a_repair(svc, ws, store_dir):
    s = svc()
    ret = _calls(s, ws, 2)
    newest = s.log(str(ws), 1).checkpoints[0].id
    assert newest == ret[-1]["post_checkpoint"]
    _cut(store_dir, newest)                             # damage that a power cut could explain ...
    (store_dir / "chronos" / powercut.MARKER).unlink()  # ... and the record that there was none
    s2 = _next_process(store_dir)
    assert "refused" in s2.startup["power_cut_repair"]
    assert s2.core.journal.integrity != "ok" and "this very boot" in s2.core.journal.integrity
    assert "boot.json" in s2.core.journal.integrity
    # nothing was moved back or quarantined, and no repair was journaled
    w = s2.core.store.workspace(str(ws))
    assert (store_dir / w.ref).read_text().strip() == newest
    assert (store_dir / "objects" / newest[:2] / newest[2:]).exists()
    assert not (store_dir / "chronos" / "quarantine").exists()
    repo = pygit2.Repository(str(store_dir))
    assert "power_cut_repair" not in repo[repo.references["refs/chronos/journal"].target].message
    assert s2.refusal() is not None
    # verify does not lift it while the store stays as it is (the whole verify would read the
    # truncated checkpoint: the check it runs is called here), nor does the next start
    assert any("this very boot" in p for p in checkpoints.check(s2.core.journal, full=True).problems)
    assert _next_process(store_dir).core.journal.integrity != "ok"


def test_deleting_boot_json_with_nothing_damaged_does_nothing(svc, ws, store_dir):
    s = svc()
    _calls(s, ws, 2)
    (store_dir / "chronos" / powercut.MARKER).unlink()
    s2 = _next_process(store_dir)
    assert "power_cut_repair" not in s2.startup
    assert json.loads((store_dir / "chronos" / powercut.MARKER).read_text())["boot_id"] == powercut.current_boot()
    _clean(s2)


def test_a_real_power_cut_repair_does_not_alarm(svc, ws, store_dir):
    s = svc()
    _calls(s, ws, 2)
    newest = s.log(str(ws), 1).checkpoints[0].id
    _cut(store_dir, newest)
    _reboot(store_dir)
    s2 = _next_process(store_dir)
    repair = s2.startup["power_cut_repair"]
    assert repair["refs_repaired"] and "refused" not in repair
    ev = [e for e in s2.core.journal.events(5) if e.get("action") == "power_cut_repair"][0]
    assert ev["boot_id"] == powercut.current_boot()
    _clean(s2)
    s2.write_file(str(ws), "a.txt", b"after the cut\n")
    _clean(_next_process(store_dir))


def test_a_checkpoint_the_cut_took_while_the_ref_survived_is_journaled_as_lost(svc, ws, store_dir):
    """The journal synced the call's post-checkpoint, the cut took the commit and the ref's
    last move: nothing is damaged, the chain is merely short. The repair event lists it."""
    s = svc()
    ret = _calls(s, ws, 2)
    post = ret[-1]["post_checkpoint"]
    repo = pygit2.Repository(str(store_dir))
    parent = str(repo[post].parent_ids[0])
    w = s.core.store.workspace(str(ws))
    (store_dir / w.ref).write_text(parent + "\n")
    (w.gitdir / "HEAD").write_text(parent + "\n")
    (store_dir / "objects" / post[:2] / post[2:]).unlink()
    _reboot(store_dir)
    s2 = _next_process(store_dir)
    lost = s2.startup["power_cut_repair"]["checkpoints_lost"]
    assert [e["workspace"] for e in lost] == [str(ws)] and lost[0]["now"] == parent
    _clean(s2)
    _clean(_next_process(store_dir))


# ---------------------------------------------------- legitimate moves
def test_a_session_of_calls_and_restores_never_alarms(svc, ws, store_dir, cli):
    s = svc()
    first = s.snapshot(str(ws), "first").checkpoint
    ret = _calls(s, ws, 3)
    r = s.restore(str(ws), first)                      # safety checkpoint, target on the chain
    assert r.status == "ok" and r.safety_checkpoint
    s.write_file(str(ws), "c.txt", b"after the restore\n")
    r2 = s.restore(str(ws), ret[0]["post_checkpoint"], paths=[str(ws / "a.txt")])
    assert r2.status == "ok"
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    _clean(s)
    s2 = _next_process(store_dir)
    assert s2.startup["checkpoints_checked"]["full"] is False
    _clean(s2)


def test_retention_cut_and_compaction_never_alarm(svc, ws, store_dir):
    s = svc(max_checkpoints=0, compact_grace_s=0)
    ret = _calls(s, ws, 6)
    s.journal_verify()
    rep = s.compact(max_checkpoints=2, grace_s=0)
    assert rep.dropped
    dropped = {c.id for d in rep.dropped for c in d.checkpoints}
    assert ret[0]["post_checkpoint"] in dropped
    s.write_file(str(ws), "a.txt", b"after the cut\n")
    _clean(s)
    s2 = _next_process(store_dir)                      # incremental, over the retention event
    assert s2.startup["checkpoints_checked"]["full"] is False
    _clean(s2)
    s2.compact(max_checkpoints=1, grace_s=0)           # again: the boundary itself dropped
    _clean(_next_process(store_dir))


def test_orphan_workspace_pruning_never_alarms(svc, ws, store_dir, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    s = svc(orphan_days=1, compact_grace_s=0)
    _calls(s, ws, 1)
    _calls(s, other, 2)
    s.journal_verify()
    gone = s.core.store.workspace(str(other))
    (store_dir / "chronos" / "missing.json").write_text(json.dumps({gone.id: time.time() - 3 * 86400}))
    other.rename(tmp_path / "moved-away")
    rep = s.compact(grace_s=0)
    assert [p.workspace for p in rep.pruned] == [str(other)]
    _clean(s)
    _clean(_next_process(store_dir, orphan_days=1))


def test_an_old_store_upgrades_without_an_alarm(svc, ws, store_dir):
    """A store written before the check: no record of it (a full replay, once) and no boot.json."""
    s = svc()
    _calls(s, ws, 3)
    s.restore(str(ws), "2")
    for name in (MARKER, powercut.MARKER):
        (store_dir / "chronos" / name).unlink(missing_ok=True)
    s2 = _next_process(store_dir)
    assert s2.startup["checkpoints_checked"]["full"] is True
    assert "power_cut_repair" not in s2.startup
    _clean(s2)
    assert _next_process(store_dir).startup["checkpoints_checked"]["full"] is False


def test_a_restore_into_a_new_folder_of_a_fetched_checkpoint_never_alarms(tmp_path):
    remote = tmp_path / "shared.git"
    a_store, a_ws = tmp_path / "a" / "store", tmp_path / "a" / "ws"
    c_store = tmp_path / "c" / "store"
    a_ws.mkdir(parents=True)

    def a(*args):
        return run_cli(a_store, *args, "--json", env={"CHRONOS_GIT_HOST_ID": "alpha"})

    def c(*args):
        return run_cli(c_store, *args, "--json", env={"CHRONOS_GIT_HOST_ID": "gamma"})
    assert a("write", "notes.txt", "--content", "from alpha\n", "--workspace", a_ws).rc == 0
    assert a("snapshot", "--workspace", a_ws).rc == 0
    assert a("remote", "add", "shared", str(remote), "--snapshots").rc == 0
    assert a("push", "shared").rc == 0
    assert c("remote", "add", "shared", str(remote)).rc == 0
    f = c("fetch", "shared")
    assert f.rc == 0, f.stdout + f.stderr
    (h,) = f.json["hosts"]
    latest = h["workspaces"][0]["latest"]
    dest = tmp_path / "restored"
    rr = c("restore", latest, "--workspace", dest)
    assert rr.rc == 0, rr.stdout + rr.stderr
    v = c("journal", "verify")
    assert v.rc == 0 and v.json["status"] == "ok", v.stdout
    assert c("write", "more.txt", "--content", "x\n", "--workspace", dest).rc == 0
    assert c("compact").rc == 0
    v = c("journal", "verify")
    assert v.rc == 0 and v.json["status"] == "ok", v.stdout
    assert isinstance(pygit2.Repository(str(c_store))[latest], pygit2.Commit)   # a root of the packing
