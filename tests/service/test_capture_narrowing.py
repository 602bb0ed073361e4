"""Issue 32, "narrow what is captured": a workspace `.gitignore` of `*` keeps what checkpoints
already hold, but leaves every file created after it out, and nothing said so.  Now a snapshot
whose ignore rules changed records how many captured paths they now ignore (journal:
`capture_narrowed`); a large narrowing makes `health` DEGRADED until the rule is undone or an
operator runs `chronos-git capture accept`.  The user's global excludes never narrow anything."""
from __future__ import annotations

import base64
import os

import pytest

from chronos_git.engine import processes
from chronos_git.service import operators


def _fill(ws, n=30):
    (ws / "lib").mkdir()
    for i in range(n):
        (ws / "lib" / f"m{i}.py").write_text(f"x = {i}\n")


def _events(cli, action):
    return [e for e in cli("journal", "log", "--json", "--limit", 100).json["events"] if e.get("action") == action]


def _health(cli, ws):
    return cli("health", "--json", "--workspace", ws).json


@pytest.mark.parametrize("how", ["snapshot", "write"])
def test_a_star_gitignore_is_journaled_and_degrades_health(cli, ws, how):
    _fill(ws)
    assert cli("snapshot", "--json", "--workspace", ws).json["created"]
    if how == "write":              # a protected write_file: the declared-path snapshot after it
        assert cli("write", ".gitignore", "--content", "*\n", "--json", cwd=ws).rc == 0
    else:                           # a shell call wrote it: the next full scan finds it (self-ignored)
        (ws / ".gitignore").write_text("*\n")
        snap = cli("snapshot", "--json", "--workspace", ws).json
        change = snap["ignore_change"]
        assert change["count"] == 32 and change["files"] == 32 and change["large"], change
        assert change["sources"] == [".gitignore"] and len(change["sample"]) == 10
    (ev,) = _events(cli, "capture_narrowed")
    assert ev["workspace"] == str(ws) and ev["count"] == 32 and ev["sources"] == [".gitignore"]
    assert ev["sample"][0] == "a.txt" and ev["checkpoint"] and ev["large"] is True
    h = _health(cli, ws)
    assert h["protection"]["state"] == "degraded", h["protection"]
    reason = h["protection"]["reason"]
    assert str(ws) in reason and "32 of its 32" in reason and ".gitignore" in reason and "a.txt" in reason
    assert h["protection"]["fix"].endswith(f"chronos-git capture accept --workspace {ws}`")
    assert [n["count"] for n in h["capture_narrowed"]] == [32]
    assert "capture narrowed" in cli("health", "--workspace", ws).stdout
    # the same finding is journaled once, however many snapshots see it again
    (ws / "new.txt").write_text("left out\n")
    cli("snapshot", "--json", "--workspace", ws)
    assert len(_events(cli, "capture_narrowed")) == 1


def test_a_small_change_is_recorded_not_alarmed(cli, ws):
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    (ws / ".gitignore").write_text("lib/m1.py\n")
    snap = cli("snapshot", "--json", "--workspace", ws).json
    assert snap["ignore_change"]["count"] == 1 and not snap["ignore_change"]["large"]
    (ev,) = _events(cli, "capture_narrowed")
    assert ev["sample"] == ["lib/m1.py"] and ev["large"] is False
    h = _health(cli, ws)
    assert h["protection"]["state"] != "degraded" and "capture_narrowed" not in h


def test_non_utf8_names_are_recorded_exactly(cli, ws):
    root = os.fsencode(ws)
    sub = os.path.join(root, b"d\xe9")
    os.mkdir(sub)
    for i in range(25):
        with open(os.path.join(sub, b"caf\xe9%d.log" % i), "wb") as f:
            f.write(b"x\n")
    cli("snapshot", "--json", "--workspace", ws)
    with open(os.path.join(sub, b".gitignore"), "wb") as f:
        f.write(b"*.log\n")
    snap = cli("snapshot", "--json", "--workspace", ws).json
    assert snap["ignore_change"]["count"] == 25
    (ev,) = _events(cli, "capture_narrowed")
    assert [base64.b64decode(x) for x in ev["sources_b64"]] == [b"d\xe9/.gitignore"]
    assert base64.b64decode(ev["sample_b64"][0]) == b"d\xe9/caf\xe90.log"
    h = _health(cli, ws)
    assert h["protection"]["state"] == "degraded" and "d\\xe9/.gitignore" in h["protection"]["reason"]


def test_undoing_the_rule_clears_the_report(cli, ws):
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    (ws / ".gitignore").write_text("*\n")
    cli("snapshot", "--json", "--workspace", ws)
    assert _health(cli, ws)["protection"]["state"] == "degraded"
    (ws / ".gitignore").unlink()            # self-ignored: in no tree, only its ignore file's change shows
    (ws / "new.txt").write_text("captured again\n")
    snap = cli("snapshot", "--json", "--workspace", ws).json
    assert snap["created"]
    (ev,) = _events(cli, "capture_restored")
    assert ev["workspace"] == str(ws) and ev["sources"] == [".gitignore"]
    assert _health(cli, ws)["protection"]["state"] != "degraded"
    assert "new.txt" in cli("show", "latest", "--json", "--workspace", ws).stdout


def test_the_operator_accepts_it_and_the_agent_cannot(cli, ws, monkeypatch):
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    (ws / ".gitignore").write_text("*\n")
    cli("snapshot", "--json", "--workspace", ws)
    # an act from a process below a live dispatcher of protected calls is refused
    parent = processes.ancestry()[1]
    monkeypatch.setattr(operators, "_agent_processes",
                        lambda core: {(parent.pid, parent.start): "which dispatched the protected call x"})
    refused = cli("capture", "accept", "--json", "--workspace", ws).json
    assert refused["status"] == "error" and refused["code"] == "agent_descendant"
    assert _health(cli, ws)["protection"]["state"] == "degraded"
    monkeypatch.undo()
    done = cli("capture", "accept", "--json", "--workspace", ws).json
    assert done["accepted"] and done["count"] == 32
    (ev,) = _events(cli, "capture_accepted")
    assert ev["actor"] == "operator-cli" and ev["operator"]["uid"] >= 0
    assert _health(cli, ws)["protection"]["state"] != "degraded"
    assert not cli("capture", "accept", "--json", "--workspace", ws).json["accepted"]


def test_the_stores_info_exclude_is_an_ignore_source(cli, ws, store_dir):
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    with open(store_dir / "info" / "exclude", "a") as f:
        f.write("*\n")
    change = cli("snapshot", "--json", "--workspace", ws).json["ignore_change"]
    assert change["sources"] == [str(store_dir / "info" / "exclude")] and change["large"]


def test_global_excludes_never_narrow_capture(cli, ws, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*\n")
    (home / "global-ignore").write_text("*\n")
    (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {home / 'global-ignore'}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    (ws / "after.txt").write_text("made after the global rules\n")
    (home / ".config" / "git" / "ignore").write_text("*\n# touched\n")
    snap = cli("snapshot", "--json", "--workspace", ws).json
    assert snap["created"] and snap.get("ignore_change") is None and not _events(cli, "capture_narrowed")
    assert "after.txt" in cli("show", "latest", "--json", "--workspace", ws).stdout
    (ws / ".gitignore").write_text("*\n")          # the control: a workspace rule does narrow
    change = cli("snapshot", "--json", "--workspace", ws).json["ignore_change"]
    assert change["sources"] == [".gitignore"] and change["count"] == 33


def test_a_rule_written_before_file_calls_is_still_found(cli, ws):
    """Declared checkpoints read only their paths: the next full scan looks back past them."""
    _fill(ws)
    cli("snapshot", "--json", "--workspace", ws)
    (ws / ".gitignore").write_text("*\n")
    assert cli("write", "lib/m0.py", "--content", "y = 1\n", "--json", cwd=ws).rc == 0   # declared checkpoints
    assert not _events(cli, "capture_narrowed")
    change = cli("snapshot", "--json", "--workspace", ws).json["ignore_change"]
    assert change["count"] == 32 and change["sources"] == [".gitignore"]
    assert len(_events(cli, "capture_narrowed")) == 1


def test_a_gitignore_that_is_a_symlink_is_followed(cli, ws, tmp_path):
    """Red team: a `.gitignore` linked to a file outside the workspace, `*` written into the
    target; the link itself never changes, libgit2 follows it."""
    _fill(ws)
    target = tmp_path / "rules-elsewhere"
    target.write_text("# nothing\n")
    (ws / ".gitignore").symlink_to(target)
    cli("snapshot", "--json", "--workspace", ws)
    target.write_text("*\n")
    (ws / "new.txt").write_text("left out\n")
    cli("snapshot", "--json", "--workspace", ws)
    h = _health(cli, ws)
    assert h["protection"]["state"] == "degraded" and h["capture_narrowed"], h["protection"]


def test_a_failure_to_judge_the_rules_does_not_undo_the_checkpoint(svc, ws, monkeypatch):
    """Review: the narrowing check runs after the checkpoint is committed; an error in it (a
    damaged store, say) must not turn a made checkpoint into a failed one."""
    from chronos_git.engine import narrowing

    def broken(*_a, **_k):
        raise KeyError("a missing subtree")
    s = svc()
    _fill(ws)
    s.snapshot(str(ws), "first")
    monkeypatch.setattr(narrowing.RulesWatch, "change", broken)
    (ws / ".gitignore").write_text("*\n")
    (ws / "lib" / "m0.py").write_text("changed\n")
    res = s.snapshot(str(ws), "second")
    assert res.created and res.checkpoint
