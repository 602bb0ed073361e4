"""Issue 31, the surface fixes a new user's trial found: where `report` writes by default (and
that no checkpoint ever holds a report), plurals, `journal show` without the call's facts, one
meaning per column name, and `health` saying the same thing twice.  The Hermes notices for the
person are in test_hermes_plugin.py."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from chronos_git import report
from chronos_git.engine.wording import plural
from chronos_git.service import Chronos
from chronos_git.settings import Settings

REPORT_NAME = re.compile(r"chronos-git-report-[\w-]+\.html")


def W(ws):
    return ("--workspace", str(ws))


def ok(r):
    assert r.rc == 0, f"rc={r.rc}\nstdout={r.stdout}\nstderr={r.stderr}"
    assert "Traceback" not in r.stdout + r.stderr
    return r


# ------------------------------------------------------------------ 1. report: where it goes
def test_report_goes_beside_the_store_by_default_and_says_where(cli, ws, store_dir):
    """It was written into the current folder, usually the workspace, and the next clean
    restore deleted it."""
    ok(cli("snapshot", *W(ws)))
    before = sorted(p.name for p in ws.iterdir())
    folder = store_dir.parent / "chronos-git-reports"

    out = ok(cli("report", cwd=ws)).stdout
    (page,) = folder.glob("chronos-git-report-*.html")
    assert out.splitlines()[0] == f"report written: {page}"          # the full path, in text
    assert sorted(p.name for p in ws.iterdir()) == before             # nothing in the workspace

    doc = ok(cli("report", "--json", cwd=ws)).json
    path = Path(doc["path"])
    assert path.is_absolute() and path.parent == folder and path.exists() and REPORT_NAME.fullmatch(path.name)
    assert sorted(p.name for p in ws.iterdir()) == before

    rel = ok(cli("report", "--out", "mine.html", "--json", cwd=store_dir.parent)).json["path"]
    assert rel == str(store_dir.parent / "mine.html")                 # a relative --out, said in full


def test_a_report_is_never_captured_by_a_checkpoint(cli, ws, store_dir):
    """A report asked for inside the workspace keeps out of every checkpoint (its names are in
    the snapshots' ignore rules) and so survives a clean restore; a file of another name
    inside a workspace is refused rather than checkpointed and later deleted."""
    (ws / "chronos-git-report-old.html").write_text("<!doctype html>")  # one from before, at the first import
    first = ok(cli("snapshot", *W(ws), "--json")).json
    assert first["scan"] == "bulk" and first["files"] == 2                # a.txt, src/main.py

    written = Path(ok(cli("report", "--out", ws, *W(ws), "--json")).json["path"])
    assert written.parent == ws and REPORT_NAME.fullmatch(written.name)
    (ws / "sub").mkdir()
    named = ws / "sub" / "chronos-git-report-mine.html"
    assert ok(cli("report", "--out", named, "--json")).json["path"] == str(named)
    assert ok(cli("snapshot", *W(ws), "--json")).json["created"] is False   # nothing new to capture

    for extra in (W(ws), ()):            # named, or a workspace the store knows
        r = cli("report", "--out", ws / "mine.html", *extra, "--json")
        assert r.rc == 1 and "inside the workspace" in r.json["error"], r.stdout
        assert "chronos-git-report-" in r.json["error"] and not (ws / "mine.html").exists()

    (ws / "a.txt").write_text("changed\n")
    ok(cli("snapshot", *W(ws)))
    ok(cli("restore", first["checkpoint"], *W(ws)))                     # clean: removes what it did not hold
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert written.exists() and named.exists() and (ws / "chronos-git-report-old.html").exists()
    files = ok(cli("diff", first["checkpoint"], *W(ws), "--json")).json["files"]
    assert files == []                   # the reports are not even seen as new files


# ------------------------------------------------------------------ 3. plurals
def test_plural_helper():
    assert plural(0, "file") == "0 files"
    assert plural(1, "file") == "1 file"
    assert plural(2, "file") == "2 files"
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def test_counts_are_worded_in_proper_plurals(cli, tmp_path, store_dir):
    ws = tmp_path / "one"
    ws.mkdir()
    (ws / "only.txt").write_text("v1\n")
    first = ok(cli("snapshot", *W(ws))).stdout
    assert ": 1 file," in first
    (ws / "only.txt").write_text("v2\n")
    ok(cli("snapshot", *W(ws)))
    outs = {
        "diff": ok(cli("diff", "2", "1", *W(ws))).stdout,
        "dry run": ok(cli("restore", "2", "--dry-run", *W(ws))).stdout,
        "health": ok(cli("health", *W(ws))).stdout,
        "write": ok(cli("write", "b.txt", "--content", "x", *W(ws))).stdout,
    }
    keep = len(ok(cli("log", *W(ws), "--json")).json["checkpoints"]) - 1      # retention drops one
    outs["compact"] = ok(cli("compact", "--dry-run", *W(ws),
                             env={"CHRONOS_GIT_SETTINGS": json.dumps({"max_checkpoints": keep})})).stdout
    assert "1 file changed" in outs["diff"]
    assert "would write 1 file and" in outs["dry run"]
    assert "1 workspace)" in outs["health"] and ": 2 checkpoints" in outs["health"]
    assert "(1 byte)" in outs["write"]
    assert "would drop 1 checkpoint," in outs["compact"]
    op = ok(cli("journal", "log", "--json")).json["events"][0]["operation_id"]
    outs["journal show"] = ok(cli("journal", "show", op)).stdout
    assert ": 2 events" in outs["journal show"]
    outs["report"] = report.build(Chronos.get(store_dir, Settings(), create=False))
    for what, out in outs.items():
        assert "(s)" not in out, (what, out)
        assert not re.search(r"(?<![\d.])1 (files|events|checkpoints|workspaces|paths|bytes)\b", out), (what, out)


# ------------------------------------------------------------------ 4. journal show
def test_journal_show_says_exit_code_checkpoints_and_actor(cli, ws):
    ok(cli("snapshot", *W(ws)))
    r = cli("run", "--json", "--", "sh", "-c", "echo x > made.txt; exit 3", cwd=ws)
    assert r.rc == 3
    op, pre, post = r.json["operation_id"], r.json["pre_checkpoint"], r.json["post_checkpoint"]
    out = ok(cli("journal", "show", op)).stdout
    assert re.search(r"^\s+exit code\s+3$", out, re.M), out
    assert re.search(rf"^\s+checkpoints\s+before {pre[:12]}, after {post[:12]}$", out, re.M), out
    assert re.search(r"^\s+actor\s+cli$", out, re.M), out
    assert re.search(r"^\s+tool\s+terminal$", out, re.M) and re.search(r"^\s+outcome\s+returned error$", out, re.M)
    started = next(e for e in ok(cli("journal", "show", op, "--json")).json["events"] if e["kind"] == "started")
    assert started["actor"] == "cli" and started["pre_checkpoint"] == pre     # the JSON had them all along

    strict = {"CHRONOS_GIT_SETTINGS": json.dumps({"strict_errors": True})}
    u = cli("run", "--json", "--", "false", cwd=ws, env=strict)
    assert u.rc == 1 and u.json["outcome"] == "uncertain"
    ok(cli("journal", "resolve", u.json["operation_id"], "--outcome", "completed", "--evidence", "checked"))
    out = ok(cli("journal", "show", u.json["operation_id"])).stdout
    assert re.search(r"^\s+actor\s+cli; resolved by operator-cli$", out, re.M), out
    assert re.search(rf"^\s+checkpoints\s+{u.json['pre_checkpoint'][:12]} \(nothing changed\)$", out, re.M), out
    assert re.search(r"^\s+outcome\s+resolved by an operator: completed$", out, re.M), out


# ------------------------------------------------------------------ 5. one meaning per column name
def test_the_report_calls_its_diffstat_column_changed(cli, ws, store_dir):
    """`log`'s "files" counts the files in a checkpoint; the report's column counted changed files."""
    ok(cli("snapshot", "-m", "v1", *W(ws)))
    (ws / "a.txt").write_text("beta\n")
    ok(cli("snapshot", "-m", "v2", *W(ws)))
    log = ok(cli("log", *W(ws))).stdout
    assert re.search(r"\bfiles\b", log.splitlines()[1])                # log: files in the checkpoint (2)
    html = report.build(Chronos.get(store_dir, Settings(), create=False))
    head = re.search(r'<th class="w-id">checkpoint</th>.*?</tr>', html, re.S).group(0)
    assert ">changed</th>" in head and ">files</th>" not in head
    assert "the oldest kept checkpoint (2 files in it)" in html


# ------------------------------------------------------------------ 6. health on a fresh store
def test_health_on_a_fresh_store_says_it_once(cli, ws, store_dir):
    assert not store_dir.exists()
    out = ok(cli("health", *W(ws))).stdout
    assert out.count(str(store_dir)) == 1, out
    assert out.count("yet") == 1 and "protection READY" in out
    assert not store_dir.exists()


def test_health_and_log_say_when_the_store_path_can_never_be_a_store(cli, ws, tmp_path, store_dir):
    """A file, or someone's git repository, at the store path: not "no store yet" (round 6
    trial), but what the first call would hit, with the fix."""
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    repo = tmp_path / "theirs"
    repo.mkdir()
    (repo / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "config").write_text("[core]\n\tbare = true\n")
    for store, what in ((afile, "exists and is not a directory"), (repo, "did not create")):
        h = cli("--store", str(store), "--json", "health", *W(ws))
        assert h.rc == 0 and h.json["protection"]["state"] == "off", h.stdout
        assert what in h.json["protection"]["reason"] and "store_dir" in h.json["protection"]["fix"]
        text = cli("--store", str(store), "health", *W(ws)).stdout
        assert "protection OFF" in text and what in text and "yet" not in text, text
        log = cli("--store", str(store), "log", *W(ws))
        assert log.rc == 1 and what in log.stderr and "Traceback" not in log.stderr, log.stdout + log.stderr
    assert afile.read_text() == "x\n" and sorted(p.name for p in repo.iterdir()) == ["HEAD", "config"]
    ok(cli("health", *W(ws)))                                            # a missing one: still READY


def test_run_and_write_in_a_workspace_that_does_not_exist_are_refused_before_the_journal(cli, tmp_path, ws):
    nope = tmp_path / "nope"
    assert cli("snapshot", cwd=ws).rc == 0
    before = cli("--json", "journal", "log", cwd=ws).json["events"]
    for argv in (("run", "-w", nope, "--", "true"), ("write", "-w", nope, "x", "--content", "y")):
        r = cli("--json", *argv, cwd=ws)
        assert r.rc == 1 and f"workspace {nope} does not exist" in r.json["error"], r.json
        assert "b'" not in r.json["error"]
    assert cli("--json", "journal", "log", cwd=ws).json["events"] == before       # nothing journaled
    assert not nope.exists()


def test_the_undo_hint_of_a_write_is_a_command_that_pastes(cli, ws):
    import subprocess
    assert cli("snapshot", cwd=ws).rc == 0
    for name in ("with space.txt", "new\nline.txt", os.fsdecode(b"caf\xff.txt")):
        (ws / name).write_text("before\n")
        r = cli("write", name, "--content", "after\n", cwd=ws)
        hint = next(line for line in r.stdout.splitlines() if line.startswith("undo: chronos-git restore"))
        word = hint.split(" --path ", 1)[1]
        echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True).stdout
        assert echoed == os.fsencode(str(ws / name)), (name, hint)
