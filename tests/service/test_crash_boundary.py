"""Finding 5 of issue 33: `journal recover OP --rollback` of a crashed shell call reverted
everything that differed from the call's pre-checkpoint, the operator's own later edits too,
with no dry run.  Now the start that finds the crash checkpoints the workspace then (journaled),
a rollback reverts only what differs between the pre-checkpoint and that boundary, keeps and
lists later changes, and `--dry-run` shows the plan first."""
from __future__ import annotations

import pytest


def _crash_a_shell_call(cli, ws):
    """A shell call that changed a.txt and made new.txt, killed before its outcome was written."""
    cmd = "echo agent > a.txt; echo made > new.txt"
    assert cli("run", "--json", "--", "sh", "-c", cmd, cwd=ws, fault="after_dispatch").rc == -9
    status = cli("journal", "status", "--json").json           # this start finds the crash
    (op,) = status["unresolved"]
    return op


@pytest.mark.process
def test_rollback_reverts_the_crashed_call_and_keeps_later_work(cli, ws):
    op = _crash_a_shell_call(cli, ws)
    assert op["state"] == "pending" and op["boundary_checkpoint"], op
    # the operator works on after the crash was found
    (ws / "a.txt").write_text("operator\n")
    (ws / "later.txt").write_text("mine\n")

    plan = cli("journal", "recover", op["operation_id"], "--rollback", "--dry-run", "--json").json
    assert plan["dry_run"] and plan["outcome"] is None
    assert sorted(plan["kept"]) == ["a.txt", "later.txt"]
    assert [(i["path"], i["action"]) for i in plan["restore"]["plan"]] == [("new.txt", "delete")]
    assert (ws / "new.txt").exists() and cli("journal", "status", "--json").json["unresolved"], "a dry run acted"
    text = cli("journal", "recover", op["operation_id"][:12], "--rollback", "--dry-run").stdout
    assert "dry run" in text and "kept (changed after the crash was found): a.txt, later.txt" in text

    done = cli("journal", "recover", op["operation_id"], "--rollback", "--json").json
    assert done["outcome"] == "rolled_back" and sorted(done["kept"]) == ["a.txt", "later.txt"]
    assert not (ws / "new.txt").exists()                        # the call's own change is undone
    assert (ws / "a.txt").read_text() == "operator\n"           # later work is kept
    assert (ws / "later.txt").read_text() == "mine\n"
    assert cli("journal", "status", "--json").json["unresolved"] == []
    ev = [e for e in cli("journal", "log", "--json", "--limit", 10).json["events"] if e["kind"] == "resolved"][0]
    assert ev["rollback"]["boundary_checkpoint"] == op["boundary_checkpoint"]


@pytest.mark.process
def test_the_boundary_is_journaled_once_and_named_by_the_journal(cli, ws):
    op = _crash_a_shell_call(cli, ws)
    cli("journal", "status", "--json")                          # a second start marks nothing again
    marks = [e for e in cli("journal", "log", "--json", "--limit", 20).json["events"]
             if e.get("action") == "crash_boundary" and e["operation_id"] == op["operation_id"]]
    assert len(marks) == 1 and marks[0]["checkpoint"] == op["boundary_checkpoint"]
    assert cli("journal", "verify", "--json").json["status"] == "ok"


def test_dry_run_needs_rollback(cli, ws):
    assert cli("write", "a.txt", "--content", "x", cwd=ws).rc == 0
    res = cli("journal", "recover", "--dry-run", "--json")
    assert res.rc != 0 and "--rollback" in res.json["error"]
