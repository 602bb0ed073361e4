"""A checkpoint that cannot be taken never passes silently (new-user trial: garbage in a
workspace's checkpoint ref made every later call run without one, exit 0, health "ON")."""
from __future__ import annotations

from chronos_git.service import Call, Declared
from chronos_git.service.calls import Outcome


def _write(svc, ws, name: str, text: str):
    path = str(ws / name)
    with svc.calls.protect(Call(tool="write_file", args={"path": path, "content": text}, workspace=str(ws),
                                declared=[Declared(path, text.encode())])) as t:
        (ws / name).write_text(text)
        t.outcome = Outcome(status="ok")
    return t


def test_a_garbled_checkpoint_ref_is_mended_by_the_next_call(svc, ws, store_dir):
    s = svc()
    _write(s, ws, "f1", "v1")
    (ref,) = (store_dir / "refs" / "chronos" / "snapshots").iterdir()
    ref.write_text("garbage\n")
    t = _write(s, ws, "f2", "v2")
    assert t.ticket.snapshot.get("kind") != "failed" and t.record.pre_checkpoint, t.ticket.snapshot
    assert t.record.post_checkpoint and ref.read_text().strip() == t.record.post_checkpoint
    assert s.protection().state == "on"


def test_a_failed_checkpoint_degrades_protection_until_one_succeeds(svc, ws, cli, monkeypatch):
    s = svc()
    _write(s, ws, "f1", "v1")
    from chronos_git.engine.workspace import Workspace
    real = Workspace.snapshot

    def broken(self, *a, **kw):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(Workspace, "snapshot", broken)
    t = _write(s, ws, "f2", "v2")
    assert t.ticket.snapshot["kind"] == "failed" and t.record.pre_checkpoint is None
    prot = s.protection()
    assert prot.state == "degraded" and "the last checkpoint of" in prot.reason and "Input/output" in prot.reason
    assert "chronos-git snapshot" in prot.fix
    assert s.health(str(ws)).protection.state == "degraded"
    monkeypatch.setattr(Workspace, "snapshot", real)
    _write(s, ws, "f3", "v3")
    assert s.protection().state == "on"


def test_the_cli_says_when_a_call_ran_without_its_checkpoint(cli, ws):
    assert cli("write", "f1", "--content", "v1", cwd=ws).rc == 0
    (ws / "new.txt").write_text("new\n")         # the pre-snapshot has trees to write: it fails there
    r = cli("run", "--", "true", cwd=ws, fault="mid_snapshot:eio")
    assert r.rc == 0 and "warning: no checkpoint was taken before this call" in r.stdout, r.stdout + r.stderr
    assert "Input/output error" in r.stdout
    ok = cli("run", "--", "true", cwd=ws)
    assert ok.rc == 0 and "no checkpoint was taken" not in ok.stdout, ok.stdout
