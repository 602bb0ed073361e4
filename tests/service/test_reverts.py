"""Issue 35: the agent-only restore, revert one call, undo and redo, through the service on a
real store.  The agent's changes are protected calls (write_file, a shell command); the
person's are edits made between them."""
from __future__ import annotations

import os

import pytest

from chronos_git.engine.errors import CallNotFound, CheckpointNotFound


def agent_write(s, ws, name, text):
    res = s.write_file(str(ws), name, text.encode())
    assert res.status == "ok", res
    return res.operation_id


def lines(n, tag="base"):
    return "".join(f"{tag} line {i}\n" for i in range(n))


def replace_line(path, i, text):
    rows = path.read_text().splitlines(keepends=True)
    rows[i] = text + "\n"
    path.write_text("".join(rows))


@pytest.fixture
def history(svc, ws):
    """A workspace where the agent and the person took turns: start (checkpoint), agent edits
    line 2 of a.txt and creates made.txt, person edits line 8 of a.txt and writes notes.txt,
    agent deletes old.txt (by a shell call) and edits line 15 of a.txt."""
    s = svc()
    (ws / "a.txt").write_text(lines(20))
    (ws / "old.txt").write_text("old\n")
    start = s.snapshot(str(ws), "start").checkpoint
    text = (ws / "a.txt").read_text().replace("base line 2\n", "agent line 2\n")
    agent_write(s, ws, "a.txt", text)
    agent_write(s, ws, "made.txt", "made by the agent\n")
    replace_line(ws / "a.txt", 8, "person line 8")                     # between calls: the person's
    (ws / "notes.txt").write_text("the person's notes\n")
    run = s.run_command(str(ws), ["rm", "old.txt"])
    assert run.exit_code == 0
    text = (ws / "a.txt").read_text().replace("base line 15\n", "agent line 15\n")
    agent_write(s, ws, "a.txt", text)
    return s, start


def test_agent_only_restore_keeps_the_persons_edits_in_the_same_file(history, ws):
    s, start = history
    dry = s.agent_restore(str(ws), start, dry_run=True)
    assert dry.dry_run and dry.plan_token and dry.conflicts == 0
    assert (ws / "made.txt").exists()                                  # a dry run changes nothing
    # a.txt keeps the person's line 8: merged; old.txt simply comes back as it was
    assert {i.path: (i.action, i.merged) for i in dry.plan} == {
        "a.txt": ("restore", True), "made.txt": ("delete", None), "old.txt": ("create", None)}, dry.plan
    res = s.agent_restore(str(ws), start, actor="test")
    assert res.status == "ok" and res.conflicts == 0, res
    a = (ws / "a.txt").read_text()
    assert "agent line" not in a and "person line 8\n" in a and "base line 2\n" in a and "base line 15\n" in a
    assert not (ws / "made.txt").exists()                              # the agent made it: removed
    assert (ws / "old.txt").read_text() == "old\n"                     # the agent deleted it: back
    assert (ws / "notes.txt").read_text() == "the person's notes\n"    # the person's file stays
    assert res.safety_checkpoint and res.after_checkpoint and res.kind == "agent-only restore"
    assert len(res.calls) == 4


def test_the_same_hunk_is_a_conflict_left_exactly_as_it_is(history, ws):
    s, start = history
    replace_line(ws / "a.txt", 15, "person rewrote line 15")          # over the agent's own change
    before = (ws / "a.txt").read_bytes()
    res = s.agent_restore(str(ws), start, actor="test")
    assert res.status == "ok" and res.conflicts == 1
    [c] = [i for i in res.plan if i.action == "conflict"]
    assert c.path == "a.txt" and "line 16" in (c.agent or "") and "line 16" in (c.person or "")
    assert (ws / "a.txt").read_bytes() == before                      # untouched
    assert not (ws / "made.txt").exists()                              # the rest still went
    # the text says how to get markers instead once (new-user trial: it said it twice)
    from chronos_git.cli.render import text
    assert text(res).count("--conflicts markers") == 1


def test_conflict_markers_by_choice(history, ws):
    s, start = history
    replace_line(ws / "a.txt", 15, "person rewrote line 15")
    res = s.agent_restore(str(ws), start, markers=True, actor="test")
    a = (ws / "a.txt").read_text()
    assert "<<<<<<< current" in a and ">>>>>>> before the agent's call" in a and res.status == "ok"
    [c] = [i for i in res.plan if i.path == "a.txt"]
    assert c.action == "conflict" and "markers" in c.reason and res.conflicts == 1     # told, not hidden
    from chronos_git.cli import render
    assert "--conflicts markers writes" not in render.text(res)      # not offered what was just done


def test_revert_one_call_only(history, ws):
    s, start = history
    made = _op(s, "made.txt")
    res = s.revert(str(ws), made[:10], actor="test")
    assert res.status == "ok" and res.calls == [made]
    assert not (ws / "made.txt").exists()
    assert "agent line 2\n" in (ws / "a.txt").read_text()             # the other calls stay
    assert not (ws / "old.txt").exists()
    with pytest.raises(CheckpointNotFound):
        s.revert(str(ws), "ffffffff", actor="test")


def test_a_dry_run_s_plan_is_named_as_a_plan_not_shown_as_a_checkpoint(history, ws):
    """New-user trial: a dry run's `restored_checkpoint` (the tree a revert would put in place)
    was shown as `the first checkpoint (0 files)` and refused by `restore` as fetched."""
    s, _start = history
    dry = s.revert(str(ws), _op(s, "made.txt"), actor="test", dry_run=True)
    assert dry.dry_run and (ws / "made.txt").exists()
    for look in (lambda: s.show(str(ws), dry.restored_checkpoint),
                 lambda: s.restore(str(ws), dry.restored_checkpoint, dry_run=True)):
        with pytest.raises(CheckpointNotFound, match="what a revert, undo or redo puts in place"):
            look()


def test_undo_and_redo_are_byte_identical_with_nothing_changed_between(history, ws):
    s, start = history

    def files():
        return {str(p.relative_to(ws)): (p.read_bytes(), os.stat(p).st_mode)
                for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts}

    before = files()
    s.agent_restore(str(ws), start, actor="test")
    after = files()
    assert after != before
    plan = s.undo(str(ws), actor="test", dry_run=True)
    assert plan.target.files == len(before)            # what the undo puts in place, counted
    u = s.undo(str(ws), actor="test")
    assert u.status == "ok" and files() == before, u
    r = s.redo(str(ws), actor="test")
    assert r.status == "ok" and files() == after, r
    s.undo(str(ws), actor="test")
    assert files() == before
    # a new operation clears what could be redone
    s.restore(str(ws), start, actor="test")
    with pytest.raises(ValueError, match="nothing to redo"):
        s.redo(str(ws), actor="test")


def test_undo_twice_redo_twice(history, ws):
    s, start = history

    def files():
        return {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts}

    states = [files()]
    s.restore(str(ws), start, actor="test")
    (ws / "later.txt").write_text("typed after the restore\n")
    agent_write(s, ws, "agent2.txt", "the agent again\n")
    states.append(files())
    s.agent_restore(str(ws), start, actor="test")                      # takes agent2.txt back
    assert not (ws / "agent2.txt").exists() and (ws / "later.txt").exists()
    s.undo(str(ws), actor="test")
    assert files() == states[1]
    s.undo(str(ws), actor="test")                                     # undoes the restore, keeps the rest
    now = files()
    assert now.pop("later.txt") == b"typed after the restore\n" and now.pop("agent2.txt") and now == states[0]
    s.redo(str(ws), actor="test")
    assert files() == states[1]
    s.redo(str(ws), actor="test")
    assert not (ws / "agent2.txt").exists() and (ws / "later.txt").exists()
    with pytest.raises(ValueError, match="nothing to redo"):
        s.redo(str(ws), actor="test")


def _op(s, name):
    return next(e.operation_id for e in s.journal_log(50).events
                if e.kind == "started" and name in str(e.model_dump()))


def test_an_operation_without_its_checkpoint_after_is_undone_as_conflicts_never_silently(history, ws,
                                                                                        monkeypatch):
    from chronos_git.service.timemachine import TimeMachine
    s, start = history
    monkeypatch.setattr(TimeMachine, "_after", lambda self, ws, op, prepared, session_id: None)  # as a crash
    s.restore(str(ws), start, actor="test")
    monkeypatch.undo()
    res = s.undo(str(ws), dry_run=True)
    assert res.conflicts >= 1 and res.files_changed == 0
    assert all("boundary" in (i.reason or "") or "not known" in (i.reason or "") for i in res.plan
               if i.action == "conflict"), res.plan


def test_permissions_come_back_with_the_content(svc, ws):
    s = svc()
    secret = ws / "secret.env"
    secret.write_text("KEY=1\n")
    secret.chmod(0o600)
    start = s.snapshot(str(ws), "start").checkpoint
    agent_write(s, ws, "secret.env", "KEY=changed by the agent\n")
    secret.chmod(0o644)                       # as a tool that rewrites a file may leave it
    s.snapshot(str(ws), "after")
    res = s.agent_restore(str(ws), start, actor="test")
    assert res.status == "ok" and secret.read_text() == "KEY=1\n"
    assert os.stat(secret).st_mode & 0o777 == 0o600


def test_a_file_call_is_taken_back_exactly_even_when_its_checkpoint_after_holds_a_later_edit(svc, ws,
                                                                                          monkeypatch):
    """Its change is the journal's images, not the step to a checkpoint taken behind it."""
    from chronos_git.service.snapshots import Snapshots
    s = svc()
    (ws / "a.txt").write_text(lines(20))
    start = s.snapshot(str(ws), "start").checkpoint
    real = Snapshots.for_call

    def later_edit_first(self, call, when, budget):       # the person saves before the snapshot after
        if when == "after":
            replace_line(ws / "a.txt", 15, "person line 15")
        return real(self, call, when, budget)
    monkeypatch.setattr(Snapshots, "for_call", later_edit_first)
    agent_write(s, ws, "a.txt", (ws / "a.txt").read_text().replace("base line 2\n", "agent line 2\n"))
    monkeypatch.undo()
    assert "person line 15" in (ws / "a.txt").read_text()
    res = s.agent_restore(str(ws), start, actor="test")
    a = (ws / "a.txt").read_text()
    assert res.status == "ok" and "agent line 2" not in a and "person line 15\n" in a, (res, a)


def test_a_file_call_with_no_checkpoint_around_it_is_taken_back_from_its_images(svc, ws, monkeypatch):
    """The first calls in a new workspace run while its first snapshot is still being taken
    (no checkpoint before or after them): the journal's images are still their exact change."""
    from chronos_git.service.snapshots import Snapshots
    s = svc()
    (ws / "a.txt").write_text(lines(20))
    monkeypatch.setattr(Snapshots, "for_call",
                        lambda self, call, when, budget: {"kind": "none", "pending_baseline": True})
    edit = agent_write(s, ws, "a.txt", (ws / "a.txt").read_text().replace("base line 2\n", "agent line 2\n"))
    made = agent_write(s, ws, "made.txt", "made by the agent\n")
    monkeypatch.undo()
    replace_line(ws / "a.txt", 15, "person line 15")             # the person's, kept
    (ws / "notes.txt").write_text("the person's notes\n")
    events = [e for e in s.core.journal.walk() if e.get("operation_id") in (edit, made)]
    assert all(e.get("pre_checkpoint") is None and e.get("post_checkpoint") is None for e in events), events

    res = s.revert(str(ws), made, actor="test")
    assert res.status == "ok" and not (ws / "made.txt").exists(), res
    res = s.revert(str(ws), edit, actor="test")
    a = (ws / "a.txt").read_text()
    assert res.status == "ok" and "agent line 2" not in a and "base line 2\n" in a and "person line 15\n" in a, \
        (res, a)
    assert (ws / "notes.txt").read_text() == "the person's notes\n"


@pytest.mark.parametrize("checkpoint_before", [True, False])
def test_a_deleted_executable_or_link_comes_back_as_it_was_or_the_revert_is_refused(svc, ws, monkeypatch,
                                                                                   checkpoint_before):
    """Its pre-image is content only: the kind and mode of a file it deleted come from the
    checkpoint before it; with none, the revert says so and changes nothing (never a plain file)."""
    from chronos_git.service import Call, Declared, Outcome
    from chronos_git.service.snapshots import Snapshots
    s = svc()
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws / "run.sh", 0o755)
    os.symlink("run.sh", ws / "link")
    if checkpoint_before:
        s.snapshot(str(ws), "start")
    else:
        monkeypatch.setattr(Snapshots, "for_call",
                            lambda self, call, when, budget: {"kind": "none", "pending_baseline": True})
    ops = {}
    for name in ("run.sh", "link"):
        with s.protect(Call(tool="patch", args={"path": str(ws / name)}, workspace=str(ws),
                            declared=[Declared(str(ws / name), None)])) as t:
            os.unlink(ws / name)
            t.outcome = Outcome(status="ok")
        ops[name] = t.ticket.operation_id
    monkeypatch.undo()
    for name, op in ops.items():
        if checkpoint_before:
            res = s.revert(str(ws), op, actor="test")
            assert res.status == "ok", res
        else:
            with pytest.raises(ValueError, match="kind and mode"):
                s.revert(str(ws), op, actor="test")
    if checkpoint_before:
        assert os.stat(ws / "run.sh").st_mode & 0o111 and os.readlink(ws / "link") == "run.sh"
    else:
        assert not os.path.lexists(ws / "run.sh") and not os.path.lexists(ws / "link")


def test_revert_undo_revert_again_each_time_changes_the_file(history, ws):
    s, start = history
    made = _op(s, "made.txt")
    for _ in range(3):
        r = s.revert(str(ws), made, actor="test")
        assert r.status == "ok" and r.files_changed + r.untracked_removed == 1 and not (ws / "made.txt").exists(), r
        u = s.undo(str(ws), actor="test")
        assert u.status == "ok" and (ws / "made.txt").read_text() == "made by the agent\n", u
        log = s.log(str(ws), 3).checkpoints
        assert log[0].role == "restored"


def test_an_operation_that_changed_nothing_is_not_on_the_undo_stack(history, ws):
    s, start = history
    made = _op(s, "made.txt")
    first = s.revert(str(ws), made, actor="test")
    again = s.revert(str(ws), made, actor="test")
    assert first.files_changed + first.untracked_removed == 1
    assert again.files_changed + again.untracked_removed == 0 and "nothing was left" in again.note
    from chronos_git.cli import render
    said = render.text(again)                           # the text says so, and offers no undo of it
    assert "nothing was left" in said and "undo: chronos-git undo" not in said, said
    assert "undo: chronos-git undo" in render.text(first)
    s.undo(str(ws), actor="test")                       # undoes the first, the real one
    assert (ws / "made.txt").read_text() == "made by the agent\n"


def test_a_reused_checkpoint_lists_every_role_it_served(history, ws):
    s, _start = history
    listed = s.log(str(ws), None, all=True).checkpoints
    served = {c.id: c for c in listed}
    calls = [c for c in s.reverts._calls(s.time.existing(str(ws))) if c.pre]
    assert any(c.pre == d.post for d in calls for c in calls), "no call began at the checkpoint another ended at"
    for c in calls:
        assert "before_call" in served[c.pre].roles, (c.tool, served[c.pre])
        if c.post:
            assert "after_call" in served[c.post].roles, (c.tool, served[c.post])
    both = [c for c in listed if {"before_call", "after_call"} <= set(c.roles)]
    assert both and all(c.roles == ["before_call", "after_call"] for c in both)        # in ROLES' order
    from chronos_git.cli.render import _role
    assert {_role(c) for c in both} == {"after call + before call"}        # its own role first


def test_the_conversation_is_told_what_each_time_machine_operation_changed_once(history, ws):
    s, start = history
    base = s.disk_changes(str(ws), None)
    assert base.changes == [] and base.position
    assert s.disk_changes(str(ws), base.position).changes == []
    s.restore(str(ws), start, actor="person")
    told = s.disk_changes(str(ws), base.position)
    (c,) = told.changes
    assert c.what == "restore" and c.actor == "person"
    assert c.back_to == "back to checkpoint @1, taken by hand", c.back_to
    assert set(c.paths) == {"a.txt", "made.txt", "notes.txt", "old.txt"} and c.count == 4
    assert s.disk_changes(str(ws), told.position).changes == []                 # told once
    s.undo(str(ws), actor="person")
    s.redo(str(ws), actor="person")
    later = s.disk_changes(str(ws), told.position).changes
    assert [x.what for x in later] == ["undo", "redo"]
    assert later[0].back_to.startswith("undid operation ") and set(later[0].paths) == set(c.paths)


def test_a_call_that_changed_nothing_lists_its_checkpoint_as_after_call_too(svc, ws):
    s = svc()
    cp = s.snapshot(str(ws), "mine").checkpoint
    assert s.run_command(str(ws), ["true"]).exit_code == 0          # nothing changed: the same checkpoint after
    (listed,) = [c for c in s.log(str(ws), None, all=True).checkpoints if c.id == cp]
    assert listed.roles == ["before_call", "after_call", "manual"], listed.roles


def test_an_edited_journal_event_of_odd_types_does_not_stop_a_listing_or_a_revert(svc, ws, store_dir):
    from chronos_git.journal_refs import events
    s = svc()
    s.snapshot(str(ws), "mine")
    op = agent_write(s, ws, "a.txt", "agent\n")
    for n, odd in enumerate(({"pre_checkpoint": ["x"]}, {"workspace": ["x"]}, {"tool": ["x"], "args": ["y"]},
                {"snapshot": 3, "declared": "all", "session_id": {"a": 1}}, {"declared": [1, {"path": 2}]})):
        s.core.journal.append(events.Started, {"operation_id": f"odd{n}", **odd})
    for fresh in (False, True):            # a warm reader, then a new process's first listing
        if fresh:
            type(s).forget_instances()
            s = svc()
        assert len(s.log(str(ws), None, all=True).checkpoints) >= 2
        assert s.revert(str(ws), op, dry_run=True).calls == [op]
        assert s.disk_changes(str(ws), None).position


def test_listing_the_newest_checkpoints_reads_only_the_journal_events_since_them(svc, ws, monkeypatch):
    s = svc()
    for i in range(30):
        agent_write(s, ws, "a.txt", f"v{i}\n")
    type(s).forget_instances()
    s = svc()
    read = []
    real = type(s.core.journal).walk

    def counted(journal):
        for p in real(journal):
            read.append(p)
            yield p
    monkeypatch.setattr(type(s.core.journal), "walk", counted)
    monkeypatch.setattr(type(s.core.journal), "payloads_since",
                        lambda *a: (_ for _ in ()).throw(AssertionError("read the whole journal")))
    newest = s.log(str(ws), 2).checkpoints
    assert "before_call" in newest[1].roles
    assert 0 < len(read) < 20, len(read)          # 30 calls are 60+ events


def test_a_restore_whose_checkpoint_after_failed_is_still_told(history, ws, monkeypatch):
    from chronos_git.engine import faults
    s, start = history
    base = s.disk_changes(str(ws), None).position
    monkeypatch.setattr(faults, "_ARMED", faults._parse("after_timeop_files:enospc"))
    monkeypatch.setattr(faults, "_hits", 0)
    assert s.restore(str(ws), start, actor="person").status == "ok"
    assert not (ws / "made.txt").exists()
    (c,) = s.disk_changes(str(ws), base).changes
    assert c.what == "restore" and c.count == -1 and c.after_checkpoint is None


def test_disk_changes_read_only_the_events_since_the_position(history, ws, monkeypatch):
    s, start = history
    type(s).forget_instances()
    from chronos_git.service import Chronos
    fresh = Chronos.get(s.core.store_dir, s.core.settings)
    base = fresh.disk_changes(str(ws), None)
    assert base.position == fresh.core.journal.ref_tip()              # a fresh service knows where it stands
    agent_write(fresh, ws, "more.txt", "more\n")                      # an ordinary call: nothing to tell
    monkeypatch.setattr(type(fresh.core.journal), "walk",
                        lambda *a: (_ for _ in ()).throw(AssertionError("walked the journal")))
    real = type(fresh.core.journal).payloads_since

    def only_since(journal, base_id):
        assert base_id is not None, "read the whole journal"
        return real(journal, base_id)
    monkeypatch.setattr(type(fresh.core.journal), "payloads_since", only_since)
    got = fresh.disk_changes(str(ws), base.position)
    assert got.changes == [] and got.position != base.position


def test_the_report_lists_a_reused_checkpoints_roles_its_own_first(history, ws):
    import re

    from chronos_git import report
    s, _ = history
    html = report.build(s)
    rows = re.findall(r'((?:<span class="kind k-[a-z_]+">[^<]*</span>)+)</td>', html)
    kinds = [re.findall(r'k-([a-z_]+)"', r) for r in rows]
    assert ["after_call", "before_call"] in kinds, kinds
    assert ["manual", "before_call"] in kinds, kinds


@pytest.mark.process
def test_a_shell_call_cut_off_by_a_crash_is_taken_back_as_conflicts_never_as_nothing(svc, ws, cli):
    (ws / "f.txt").write_text("1\n2\n3\n")
    assert cli("snapshot", cwd=ws).rc == 0
    crashed = cli("--json", "run", "--", "sh", "-c", "echo AG >> f.txt", cwd=ws, fault="after_dispatch")
    assert crashed.rc == -9
    (ws / "notes.txt").write_text("the person's, after the crash\n")
    s = svc()
    s.start()
    (op,) = [c.operation_id for c in s.reverts._calls(s.time.existing(str(ws))) if c.tool == "terminal"]
    for res in (s.revert(str(ws), op, dry_run=True), s.agent_restore(str(ws), "@1", dry_run=True)):
        conflicts = {i.path for i in res.plan if i.action == "conflict"}
        assert "f.txt" in conflicts and res.conflicts == len(conflicts), res.plan
        assert not [i for i in res.plan if i.action != "conflict"], res.plan      # nothing guessed
    assert (ws / "f.txt").read_text() == "1\n2\n3\nAG\n"


def test_an_operation_whose_checkpoints_retention_dropped_says_so(ws, cli):
    assert cli("snapshot", cwd=ws).rc == 0
    for i in range(2):
        assert cli("run", "--", "sh", "-c", f"echo {i} >> a.txt", cwd=ws).rc == 0
    assert cli("write", "b.txt", "--content", "b\n", cwd=ws).rc == 0
    ops = [e["operation_id"] for e in cli("--json", "journal", "log", cwd=ws).json["events"] if e["kind"] == "started"]
    assert cli("revert", ops[0], cwd=ws).rc == 0
    tight = {"max_checkpoints": 1, "compact_grace_s": 0}
    assert cli("compact", cwd=ws, settings=tight).rc == 0
    for argv in (("undo", "--dry-run"), ("revert", ops[-1], "--dry-run")):
        r = cli("--json", *argv, cwd=ws, settings=tight)
        assert r.rc == 1 and r.json["code"] != "internal", r.json
        assert "no longer in the store" in r.json["error"] and "Traceback" not in r.stderr, r.json


def test_a_merging_operation_names_its_checkpoint_after_not_its_merge(history, ws, cli):
    s, start = history
    res = s.agent_restore(str(ws), start, actor="test")
    (after,) = [c for c in s.log(str(ws), 1).checkpoints]
    assert after.id == res.after_checkpoint and after.description == "after agent-only restore", after
    (merge,) = [e["post_checkpoint"] for e in cli("--json", "journal", "show", res.operation_id, cwd=ws).json["events"]
                if e["kind"] == "returned"]
    assert merge not in (res.after_checkpoint, start)                  # the journal's post: the merge put in place
    shown = cli("journal", "show", res.operation_id, cwd=ws).stdout
    assert res.after_checkpoint[:12] in shown and merge[:12] not in shown, shown


def test_a_conflict_says_what_each_side_did_in_words_that_fit(svc, ws):
    s = svc()
    (ws / "f.txt").write_text("l1\nl2\nl3\n")
    (ws / "g.txt").write_text("l1\nl2\nl3\n")
    start = s.snapshot(str(ws), "start").checkpoint
    agent_write(s, ws, "f.txt", "l1\nl2 AG\nl3\n")
    agent_write(s, ws, "g.txt", "l1\nl3\n")                          # the agent removed l2
    (ws / "f.txt").write_text("l1\nl2 AG\nADDED\nl3\n")                # the person adds a line in its hunk
    (ws / "g.txt").write_text("l1\nl3 person\n")
    plan = {i.path: i for i in s.agent_restore(str(ws), start, dry_run=True).plan}
    assert plan["f.txt"].action == "conflict" and plan["g.txt"].action == "conflict", plan
    assert plan["f.txt"].agent.startswith("the agent changed line 2"), plan["f.txt"].agent
    assert plan["f.txt"].person == "added lines after line 2", plan["f.txt"].person
    assert plan["g.txt"].agent.startswith("the agent removed lines after line 1"), plan["g.txt"].agent


def test_revert_of_an_id_that_is_not_this_workspaces_call_says_where_it_is(history, ws, tmp_path):
    s, start = history
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = agent_write(s, other, "x.txt", "x\n")
    with pytest.raises(CallNotFound, match=f"ran in workspace {other}, not {ws}: revert it there"):
        s.revert(str(ws), elsewhere[:8])
    undo_me = s.revert(str(ws), _op(s, "made.txt"), actor="test").operation_id
    # a time-machine operation is there, but not a call: bad input (400), not "not found"
    with pytest.raises(ValueError, match="is a time-machine operation, not a call: take it back with undo"):
        s.revert(str(ws), undo_me[:8])
    with pytest.raises(CallNotFound, match="no protected call 'abcdef12' in the journal") as exc:
        s.revert(str(ws), "abcdef12")
    assert exc.value.code == "call_not_found"
