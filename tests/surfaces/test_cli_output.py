"""Text for people, JSON for programs: what the real `chronos-git` prints without --json.

Each test reproduces a finding of the new-user review: indented JSON where text was due,
options refused after a subcommand, a dry run worded as if it happened, misaligned
`diff --stat` columns, contradictory `journal status`, a restore that did not say where
it went, colour in pipes, no progress bar, errors with tracebacks.  Real CLI processes;
the terminal cases run in a pseudo-terminal (ptyprocess).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-7]|9[0-7])m")       # a foreground colour
PY = sys.executable


def text_of(r, rc: int = 0) -> str:
    """stdout of a text-mode command: for people (not JSON), plain, no trailing whitespace."""
    assert r.rc == rc, f"rc={r.rc}\nstdout={r.stdout}\nstderr={r.stderr}"
    assert "Traceback" not in r.stderr + r.stdout
    out = r.stdout
    assert out.strip(), "no output"
    assert not out.lstrip().startswith(("{", "[")), f"JSON where text was due:\n{out}"
    with pytest.raises(ValueError):
        json.loads(out)
    assert "\x1b" not in out, "escape codes in a pipe"
    for line in out.splitlines():
        assert line == line.rstrip(), f"trailing whitespace: {line!r}"
    return out


def one_error_line(r, rc: int = 1) -> str:
    """An error: nothing on stdout, exactly one line `error: ...` on stderr."""
    assert r.rc == rc, f"rc={r.rc}\nstdout={r.stdout}\nstderr={r.stderr}"
    assert r.stdout == "", r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > 12, r.stderr
    return lines[0]


def W(ws):
    return ("--workspace", str(ws))


def snapshots(cli, ws, n: int) -> list[str]:
    ids = []
    for i in range(n):
        (ws / "a.txt").write_text(f"version {i}\n")
        r = cli("snapshot", "-m", f"version {i}", *W(ws), "--json")
        assert r.rc == 0, r.stderr
        ids.append(r.json["checkpoint"])
    return ids


def in_pty(store_dir, *args, cwd, env: dict | None = None, timeout: float = 120) -> tuple[int, str]:
    """The CLI with stdin, stdout and stderr on a pseudo-terminal: (exit status, raw output)."""
    from ptyprocess import PtyProcess
    e = {k: v for k, v in os.environ.items()
         if k not in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_SETTINGS", "HERMES_HOME", "NO_COLOR")}
    e.update(CHRONOS_GIT_STORE=str(store_dir), TERM="xterm-256color")
    e.update(env or {})
    proc = PtyProcess.spawn([PY, "-m", "chronos_git.cli", *map(str, args)], cwd=str(cwd), env=e,
                            dimensions=(50, 200))
    chunks, deadline = [], time.time() + timeout
    while time.time() < deadline:
        try:
            chunks.append(proc.read(65536))
        except EOFError:
            break
    proc.wait()
    return proc.exitstatus, b"".join(chunks).decode("utf-8", "replace")


# ---------------------------------------------------------------- every command prints text
def test_every_command_prints_text_with_its_facts(cli, ws):
    out = text_of(cli("snapshot", "-m", "first version", *W(ws)))
    assert "new checkpoint" in out and "first version" in out and str(ws) in out and "files" in out
    first = cli("log", *W(ws), "--json").json["checkpoints"][0]["id"]
    assert first[:12] in out
    assert "nothing changed" in text_of(cli("snapshot", *W(ws)))

    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "new.txt").write_text("new\n")
    text_of(cli("snapshot", "-m", "second version", *W(ws)))

    out = text_of(cli("log", *W(ws)))
    assert "newest first" in out and "first version" in out and "second version" in out
    assert out.index("second version") < out.index("first version")

    out = text_of(cli("show", "1", *W(ws)))
    assert "second version" in out and "modified" in out and "a.txt" in out and "+beta" in out
    first = cli("--json", "log", *W(ws)).json["checkpoints"][-1]["id"]
    out = text_of(cli("show", "2", *W(ws)))
    assert "the first checkpoint" in out and f"chronos-git diff {first[:12]}" in out, out

    out = text_of(cli("diff", "2", "1", *W(ws)))
    assert "2 files changed" in out and "+beta" in out and "new.txt" in out

    out = text_of(cli("health", *W(ws)))
    assert "protection ON" in out and "journal" in out and "2 checkpoints" in out

    out = text_of(cli("write", "notes.txt", "--content", "hello\n", *W(ws)))
    assert "wrote" in out and "notes.txt" in out and "6 bytes" in out and "operation" in out

    out = text_of(cli("run", *W(ws), "--", PY, "-c", "print('from the command')"))
    assert out.splitlines()[0] == "from the command"             # its own output passes through
    assert "exit code 0" in out and "operation" in out

    out = text_of(cli("journal", "status", *W(ws)))
    assert "integrity ok" in out and "recovery gate open" in out and "nothing unresolved" in out

    out = text_of(cli("journal", "log", "-n", "5", *W(ws)))
    assert "returned" in out and "started" in out and "terminal" in out
    op = cli("journal", "log", "-n", "1", "--json").json["events"][0]["operation_id"]
    out = text_of(cli("journal", "show", op, *W(ws)))
    assert op in out and "started" in out and "returned" in out

    out = text_of(cli("journal", "checkpoint", *W(ws)))
    head = cli("journal", "checkpoint", "--json").json["checkpoint"]["head"]
    assert head in out and "journal verify --head" in out

    out = text_of(cli("journal", "verify", *W(ws)))
    assert "journal verified" in out and "integrity ok" in out

    out = text_of(cli("journal", "recover", *W(ws)))
    assert "nothing to settle" in out and "recovery gate open" in out

    out = text_of(cli("compact", *W(ws)))
    assert "compacted the store" in out and "->" in out


def test_json_stays_one_document_for_the_same_commands(cli, ws):
    for args in (("snapshot",), ("log",), ("show", "1"), ("diff",), ("health",), ("compact",),
                 ("journal", "status"), ("journal", "log"), ("journal", "checkpoint")):
        r = cli(*args, *W(ws), "--json")
        assert r.rc == 0 and r.json["status"] == "ok", (args, r.stdout, r.stderr)
        assert r.stderr == "", (args, r.stderr)


def test_help_with_json_is_one_document_too(cli):
    for args in (("--help", "--json"), ("log", "--json", "--help"), ("journal", "resolve", "-h", "--json")):
        r = cli(*args)
        assert r.rc == 0 and r.json["status"] == "ok", (args, r.stdout, r.stderr)
        assert r.json["usage"].startswith("usage: chronos-git") and "--json" in r.json["usage"]
        assert r.json["command"] == " ".join(["chronos-git", *[a for a in args if not a.startswith("-")]])
    plain = cli("log", "--help")
    assert plain.rc == 0 and plain.stdout.startswith("usage: chronos-git log")
    own = cli("windtunnel", "--help", "--json", "out.json")          # there --json names its output file
    assert own.rc == 0 and own.stdout.startswith("usage: chronos-git windtunnel")


def test_help_with_json_inside_hermes_parser_is_one_document(monkeypatch, capsys):
    """`hermes chronos-git journal status --json --help`: Hermes' own parser holds ours."""
    import argparse

    from chronos_git.cli.main import configure
    host = argparse.ArgumentParser(prog="hermes chronos-git")
    configure(host)
    argv = ["journal", "status", "--json", "--help"]
    monkeypatch.setattr(sys, "argv", ["hermes", "chronos-git", *argv])
    with pytest.raises(SystemExit) as done:
        host.parse_args(argv)
    assert done.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "ok" and doc["usage"].startswith("usage: hermes chronos-git journal status")
    monkeypatch.setattr(sys, "argv", ["hermes", "chronos-git", "journal", "--help"])
    with pytest.raises(SystemExit):
        host.parse_args(["journal", "--help"])
    assert capsys.readouterr().out.startswith("usage: hermes chronos-git journal")


# ---------------------------------------------------------------- options after subcommands
SUBCOMMANDS = [
    ("snapshot",), ("log",), ("show", "1"), ("diff",), ("diff", "--stat"), ("restore", "1", "--dry-run"),
    ("compact", "--dry-run"), ("health",), ("journal", "status"), ("journal", "verify"),
    ("journal", "checkpoint"), ("journal", "log"), ("journal", "recover"),
]


@pytest.mark.parametrize("args", SUBCOMMANDS, ids=" ".join)
def test_workspace_and_json_after_every_subcommand(cli, ws, tmp_path, args):
    snapshots(cli, ws, 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli(*args, "--workspace", ws, "--json", cwd=elsewhere)
    assert r.rc == 0 and r.json["status"] == "ok", (r.stdout, r.stderr)
    r = cli(*args, "-w", ws, cwd=elsewhere)
    text_of(r)


def test_workspace_after_run_write_show_and_resolve(cli, ws, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("write", "w.txt", "--content", "x", "-w", ws, "--json", cwd=elsewhere)
    assert r.rc == 0 and (ws / "w.txt").read_text() == "x"
    op = r.json["operation_id"]
    r = cli("run", "-w", ws, "--json", "--", PY, "-c", "open('r.txt', 'w').write('y')", cwd=elsewhere)
    assert r.rc == 0 and (ws / "r.txt").read_text() == "y"
    assert cli("journal", "show", op, "-w", ws, "--json", cwd=elsewhere).json["operation_id"] == op
    e = cli("journal", "resolve", "abcdef", "--outcome", "completed", "--evidence", "x", "-w", ws, "--json")
    assert e.rc == 1 and "abcdef" in e.json["error"]           # parsed; the operation is unknown


# ---------------------------------------------------------------- bad values, missing workspace
@pytest.mark.parametrize("args", [("log", "--limit", "0"), ("log", "--limit", "-3"), ("log", "-n", "0"),
                                  ("journal", "log", "-n", "0"), ("journal", "log", "--limit", "-3")],
                         ids=" ".join)
def test_limits_below_one_are_errors(cli, ws, args):
    line = one_error_line(cli(*args, *W(ws)))
    assert "at least 1" in line
    r = cli(*args, *W(ws), "--json")
    assert r.rc == 1 and r.json["status"] == "error" and "at least 1" in r.json["error"]


def test_log_of_a_missing_workspace_fails_clearly(cli, ws, tmp_path):
    snapshots(cli, ws, 1)                                  # a store exists
    line = one_error_line(cli("log", "-w", "/nonexistent"))
    assert "/nonexistent" in line and "does not exist" in line
    r = cli("log", "-w", "/nonexistent", "--json")
    assert r.rc == 1 and "does not exist" in r.json["error"]
    fresh = tmp_path / "no-store"                           # and before any store exists
    line = one_error_line(cli("--store", fresh, "log", "-w", tmp_path / "missing"))
    assert "does not exist" in line and not fresh.exists()


@pytest.mark.parametrize("args", [
    ("snapshot", "-w", "/nonexistent/ws"),
    ("show", "zzz"),
    ("diff", "1", "nope!"),
    ("restore", "notacheckpoint"),
    ("restore", "42", "--dry-run"),
    ("run",),
    ("write", "x.txt"),
    ("frobnicate",),
    ("journal", "show", "0123456789"),
    ("journal", "resolve", "0123456789", "--outcome", "completed", "--evidence", "e"),
    ("journal", "recover", "0123456789", "--rollback"),
    ("journal", "verify", "--checkpoint", "/nonexistent/head.json"),
    ("journal",),
], ids=" ".join)
def test_errors_are_one_line_on_stderr(cli, ws, args):
    snapshots(cli, ws, 1)
    one_error_line(cli(*args, cwd=ws))


def test_a_settings_problem_is_one_line_too(cli, ws):
    line = one_error_line(cli("compact", *W(ws), settings={"max_checkpoints": "many"}))
    assert "max_checkpoints" in line


# ---------------------------------------------------------------- health, dry runs, restores
def test_health_names_the_last_snapshot_beside_the_newest_checkpoint(cli, ws):
    ids = snapshots(cli, ws, 2)
    h = cli("health", *W(ws), "--json").json
    assert h["workspace"]["latest"]["id"] == ids[-1]
    assert h["last_snapshot"] is not None and h["last_snapshot"]["checkpoint"] == ids[-1]
    out = text_of(cli("health", *W(ws)))
    line = next(line for line in out.splitlines() if "last snapshot" in line)
    assert ids[-1][:12] in line and "none" not in line
    assert "null" not in out and "None" not in out


def test_dry_runs_say_they_changed_nothing(cli, ws):
    ids = snapshots(cli, ws, 4)
    for name in ("b.txt", "c.txt", "d.txt"):
        (ws / name).write_text("later\n")
    before = {p.name: p.read_bytes() for p in ws.iterdir() if p.is_file()}
    out = text_of(cli("restore", ids[0], "--dry-run", *W(ws)))
    first = out.splitlines()[0]
    assert first.startswith("dry run:") and "would write 1 file and" in first and "remove 3" in first
    assert "Nothing was changed." in first
    assert "written" not in out and "restored " not in out and "undo" not in out
    assert {p.name: p.read_bytes() for p in ws.iterdir() if p.is_file()} == before

    out = text_of(cli("compact", "--dry-run", *W(ws), settings={"max_checkpoints": 1}))
    assert out.startswith("dry run: retention would drop 3 checkpoints") and "Nothing was changed." in out
    assert "dropped" not in out and "compacted" not in out
    assert "version 0" in out                                  # which ones it would drop
    assert len(cli("log", *W(ws), "--json").json["checkpoints"]) == 4


def test_hints_name_the_command_the_reader_types():
    import argparse

    from chronos_git.cli import render
    from chronos_git.cli.main import build_parser
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(render.COMMANDS) == set(sub.choices)        # every command is rewritten, no other word
    said = ("undo: chronos-git restore 0123abcd --path a; run `chronos-git journal status` (in Hermes: "
            "`hermes chronos-git journal ...`); the chronos-git recovery gate is closed; /opt/chronos-git push")
    assert render.for_prog(said) == said
    assert render.for_prog(said, "hermes chronos-git") == (
        "undo: hermes chronos-git restore 0123abcd --path a; run `hermes chronos-git journal status` (in Hermes: "
        "`hermes chronos-git journal ...`); the chronos-git recovery gate is closed; /opt/chronos-git push")


def test_restore_names_its_target_and_the_undo(cli, ws):
    ids = snapshots(cli, ws, 2)
    (ws / "agent.txt").write_text("made by the agent\n")
    out = text_of(cli("restore", ids[0], *W(ws)))
    target = next(c for c in cli("log", *W(ws), "--json").json["checkpoints"] if c["id"] == ids[0])
    when = datetime.fromtimestamp(target["time"]).strftime("%Y-%m-%d %H:%M:%S")
    assert out.splitlines()[0] == (f'restored checkpoint {ids[0][:12]} ("version 0", {when}): '
                                   "1 file written, 1 removed")
    undo = re.search(r"undo: (chronos-git restore ([0-9a-f]{12}))", out)
    assert undo, out
    assert (ws / "a.txt").read_text() == "version 0\n" and not (ws / "agent.txt").exists()
    # the undo command, as printed, brings everything back
    back = text_of(cli(*undo.group(1).split()[1:], *W(ws)))
    assert f"restored checkpoint {undo.group(2)[:12]}" in back
    assert (ws / "a.txt").read_text() == "version 1\n" and (ws / "agent.txt").exists()


# ---------------------------------------------------------------- diff --stat
def test_diff_stat_columns_line_up(cli, ws):
    snapshots(cli, ws, 1)
    deep = ws / "some" / "much" / "deeper" / "directory"
    deep.mkdir(parents=True)
    (deep / "with_a_long_file_name.py").write_text("".join(f"line {i}\n" for i in range(120)))
    (ws / "a.txt").write_text("changed\n")
    (ws / "b.md").write_text("x\n" * 7)
    out = text_of(cli("diff", "--stat", *W(ws)))
    assert "diff --git" not in out
    row = re.compile(r"^\s*(added|modified|deleted|renamed)\s+(\S+)\s+(\d+|bin)\s+(\d+|bin)$")
    rows = [m for m in map(row.match, out.splitlines()) if m]
    assert {m.group(2) for m in rows} == {"a.txt", "b.md", "some/much/deeper/directory/with_a_long_file_name.py"}
    assert len({m.start(2) for m in rows}) == 1                 # paths start in one column
    assert len({m.end(3) for m in rows}) == 1                   # + right-aligned
    assert len({m.end(4) for m in rows}) == 1                   # - right-aligned
    header = next(line for line in out.splitlines() if "status" in line and "path" in line)
    assert header.index("+") == rows[0].end(3) - 1 and header.rindex("-") == rows[0].end(4) - 1
    counts = {m.group(2): (m.group(3), m.group(4)) for m in rows}
    assert counts["some/much/deeper/directory/with_a_long_file_name.py"] == ("120", "0")
    assert counts["a.txt"] == ("1", "1")


# ---------------------------------------------------------------- journal status after a crash
@pytest.mark.process
def test_a_crashed_shell_call_is_shown_once_as_waiting_for_an_operator(cli, ws):
    snapshots(cli, ws, 1)
    crashed = cli("run", "--", "sh", "-c", "echo hi > c.txt", cwd=ws, fault="after_intent")
    assert crashed.rc == -9
    st = cli("journal", "status", "--json", cwd=ws).json
    [op] = [u["operation_id"] for u in st["unresolved"]]
    # the data has both views (settled at this start as needs_operator, and unresolved) ...
    assert [s["result"] for s in st["settled_at_start"] if s["operation_id"] == op] == ["needs_operator"]
    for args in (("journal", "status"), ("journal", "recover")):
        out = text_of(cli(*args, cwd=ws))
        # ... the text shows it once: waiting for an operator, with why
        rows = [line for line in out.splitlines() if op[:12] in line and "pending" in line]
        assert len(rows) == 1, out
        assert "waiting for an operator" in out and "cannot be settled by evidence" in rows[0]
        assert "needs_operator" not in out and "needs operator" not in out
        assert "settled by evidence at this start" not in out and "settled:" not in out
        assert "recovery gate CLOSED" in out
        assert f"journal resolve {op[:12]} --outcome" in out and f"journal recover {op[:12]} --rollback" in out
    # health does not say "protection ON" alone while protected calls are refused
    first = text_of(cli("health", cwd=ws)).splitlines()[0]
    assert first.startswith("protection ON") and "recovery gate is CLOSED" in first, first
    # a protected call is refused: one line, exit 3
    line = one_error_line(cli("run", "--", "true", cwd=ws), rc=3)
    assert "recovery gate is closed" in line and op[:12] in line
    out = text_of(cli("journal", "resolve", op[:12], "--outcome", "not_applied", "--evidence", "c.txt absent",
                      cwd=ws))
    assert f"operation {op[:12]} resolved as not_applied" in out and "recovery gate open" in out
    assert "CLOSED" not in text_of(cli("health", cwd=ws)).splitlines()[0]


@pytest.mark.process
def test_a_crashed_write_is_shown_as_settled_by_evidence(cli, ws):
    snapshots(cli, ws, 1)
    assert cli("write", "w.txt", "--content", "new", cwd=ws, fault="after_intent").rc == -9
    out = text_of(cli("journal", "status", cwd=ws))
    assert "settled by evidence at this start" in out and "not applied" in out and "write_file" in out
    assert "waiting for an operator" not in out and "replayable" in out
    assert "journal recover" in out and "--replay" in out


# ---------------------------------------------------------------- names that are not UTF-8
def test_undecodable_and_control_character_names_are_escaped(cli, ws, store_dir):
    snapshots(cli, ws, 1)
    with open(os.path.join(os.fsencode(ws), b"bad-\xff.txt"), "wb") as fh:
        fh.write(b"x\n")
    (ws / "esc-\x1b[31mred.txt").write_text("y\n")
    for args in (("snapshot",), ("diff", "--stat", "2", "1"), ("diff", "2", "1"), ("show", "1"),
                 ("restore", "2", "--dry-run"), ("log",)):
        r = cli(*args, *W(ws))                     # text=True: stdout must decode as UTF-8
        out = text_of(r)
        if args[0] != "log" and args[0] != "snapshot":
            assert "bad-\\xff.txt" in out and "esc-\\x1b[31mred.txt" in out, (args, out)


# ---------------------------------------------------------------- colour and progress on a terminal
@pytest.mark.process
def test_colour_only_on_a_terminal_without_no_color(cli, ws, store_dir):
    snapshots(cli, ws, 2)
    (ws / "a.txt").write_text("edited\n")
    for args in (("health",), ("diff", "--stat"), ("journal", "status")):
        rc, out = in_pty(store_dir, *args, *W(ws), cwd=ws)
        assert rc == 0 and COLOUR.search(out), (args, out)
        rc, out = in_pty(store_dir, *args, *W(ws), cwd=ws, env={"NO_COLOR": "1"})
        assert rc == 0 and "\x1b" not in out, (args, out)
        text_of(cli(*args, *W(ws)))                           # a pipe: no escapes at all
    rc, out = in_pty(store_dir, "log", *W(ws), "--json", cwd=ws)
    assert rc == 0 and "\x1b" not in out and json.loads(out)["status"] == "ok"
    rc, out = in_pty(store_dir, "show", "zzz", *W(ws), cwd=ws, env={"NO_COLOR": "1"})
    lines = out.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("error: "), out


def test_slash_text_is_plain_even_when_colour_is_forced(svc, ws, monkeypatch):
    from chronos_git.cli import render
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    s = svc()
    s.snapshot(str(ws), "one")
    (ws / "a.txt").write_text("two\n")
    s.snapshot(str(ws), "two")
    for res in (s.log(str(ws)), s.diff(str(ws), "2", "1"), s.health(str(ws)), s.journal_status(),
                s.restore(str(ws), "2", dry_run=True)):
        out = render.text(res)
        assert out and "\x1b" not in out and not out.lstrip().startswith("{")
        assert all(line == line.rstrip() for line in out.splitlines())


@pytest.mark.process
def test_progress_bar_for_a_first_snapshot_on_a_terminal(cli, tmp_path, store_dir):
    big = tmp_path / "big"
    for d in range(30):
        sub = big / f"dir{d:02d}"
        sub.mkdir(parents=True)
        for i in range(100):
            (sub / f"f{i:03d}.txt").write_text(f"{d} {i}\n")
    rc, out = in_pty(store_dir, "snapshot", "-w", big, cwd=tmp_path)
    assert rc == 0, out
    plain = ANSI.sub("", out)
    assert "first snapshot:" in plain and re.search(r"\d+/3000 files", plain), plain
    assert "new checkpoint" in plain and "3000 files" in plain
    # not for a later snapshot (no bulk import), never beside --json or into a pipe
    (big / "dir00" / "f000.txt").write_text("changed\n")
    rc, out = in_pty(store_dir, "snapshot", "-w", big, cwd=tmp_path)
    assert rc == 0 and "first snapshot:" not in ANSI.sub("", out)
    other = tmp_path / "other-store"
    rc, out = in_pty(other, "snapshot", "-w", big, "--json", cwd=tmp_path)
    assert rc == 0 and "first snapshot:" not in out and json.loads(out)["files"] == 3000
    r = cli("--store", tmp_path / "third-store", "snapshot", "-w", big)
    assert r.rc == 0 and r.stderr == "" and "first snapshot:" not in r.stdout


@pytest.mark.process
def test_compact_shows_its_steps_on_a_terminal_only(cli, ws, store_dir):
    snapshots(cli, ws, 3)
    rc, out = in_pty(store_dir, "compact", *W(ws), cwd=ws, env={"NO_COLOR": "1"})
    plain = ANSI.sub("", out)
    assert rc == 0 and "compacting the store" in plain and "packed" in plain and "compacted the store" in plain
    r = cli("compact", *W(ws))
    assert r.stderr == "" and "compacting the store" not in text_of(r)


def test_a_failing_command_says_so_on_stderr_in_one_line(cli, ws):
    r = cli("run", *W(ws), "--", PY, "-c", "import sys; sys.exit(5)")
    assert r.rc == 5 and "Traceback" not in r.stderr
    assert "exit code 5" in r.stdout and "operation" in r.stdout
    assert r.stderr.splitlines() == ["error: the command exited with status 5"]


@pytest.mark.process
def test_a_failing_command_has_the_error_shape_in_json_too(cli, ws):
    """New-user trial: `--json run -- false` gave status "error" with no "error" key."""
    r = cli("--json", "run", "--workspace", ws, "--", PY, "-c", "import sys; sys.exit(5)")
    assert r.rc == 5 and r.json["status"] == "error" and r.json["exit_code"] == 5
    assert r.json["error"] == "the command exited with status 5"
    ok = cli("--json", "run", "--workspace", ws, "--", PY, "-c", "pass")
    assert ok.rc == 0 and ok.json["status"] == "ok" and ok.json.get("error") is None
    ro = cli("--json", "run", "--tool", "read_file", "--workspace", ws, "--", PY, "-c", "import sys; sys.exit(3)")
    assert ro.rc == 3 and ro.json["read_only"] is True and ro.json["status"] == "error"
    assert ro.json["error"] == "the command exited with status 3"


def test_careless_paths_get_a_clear_error_and_nothing_written(cli, ws, tmp_path, store_dir):
    """New-user trial: `write d/` made a file named d; a deleted current folder and a report
    into a missing folder gave bare `[Errno 2]` messages."""
    before = sorted(os.listdir(ws))
    for target in ("newdir/", "src"):                  # a trailing slash; an existing folder
        r = cli("write", target, "--content", "x", "--workspace", ws)
        assert r.rc == 1 and "names a folder" in r.stderr and "Traceback" not in r.stderr
    assert sorted(os.listdir(ws)) == before and (ws / "src").is_dir()
    os.symlink("src", ws / "to-src")                   # a symlink to a folder is a folder here too
    r = cli("write", "to-src", "--content", "x", "--workspace", ws)
    assert r.rc == 1 and "names a folder" in r.stderr and os.readlink(ws / "to-src") == "src", r
    os.unlink(ws / "to-src")
    gone = tmp_path / "gone"
    gone.mkdir()
    env = {**os.environ, "CHRONOS_GIT_STORE": str(store_dir)}
    p = subprocess.run(["sh", "-c", 'rmdir "$PWD" && exec "$0" -m chronos_git.cli snapshot --json', PY],
                       cwd=gone, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "current folder no longer exists" in json.loads(p.stdout)["error"], p
    gone.mkdir()
    p = subprocess.run(["sh", "-c", 'rmdir "$PWD" && exec "$0" -m chronos_git.cli --store rel-store --json '
                        'snapshot --workspace "$1"', PY, str(ws)], cwd=gone, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1 and "'rel-store' is relative" in json.loads(p.stdout)["error"], p
    assert not (tmp_path / "rel-store").exists()
    gone.mkdir()
    p = subprocess.run(["sh", "-c", 'rmdir "$PWD" && exec "$0" -m chronos_git.cli --json snapshot --workspace rel-ws',
                        PY], cwd=gone, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "'rel-ws' is relative" in json.loads(p.stdout)["error"], p
    r = cli("report", "--out", tmp_path / "no" / "such" / "r.html", "--json")
    assert r.rc == 1 and "does not exist" in r.json["error"] and "Traceback" not in r.stderr
    r = cli("report", "--out", "/proc/no-report-here.html", "--json")     # the folder is there: no "does not exist"
    assert r.rc == 1 and "does not exist" not in r.json["error"] and "/proc/no-report-here.html" in r.json["error"]


def test_a_mistyped_restore_path_is_an_error_not_nothing_to_change(cli, ws):
    """New-user trial: `restore 1 --path nonexist.txt --dry-run` said the workspace already matched."""
    assert cli("snapshot", "--workspace", ws).rc == 0
    r = cli("restore", "1", "--path", "nonexist.txt", "--dry-run", "--workspace", ws, "--json")
    assert r.rc == 1 and "'nonexist.txt' is in neither checkpoint" in r.json["error"]
    r = cli("restore", "1", "--path", "a.txt", "--dry-run", "--workspace", ws, "--json")
    assert r.rc == 0 and r.json["dry_run"] is True


@pytest.mark.process
def test_reading_commands_never_create_a_store_at_a_mistyped_path(tmp_path):
    """New-user trial: `--store TYPO journal verify` made a new, empty store and called it
    verified (exit 0); `journal log`, `compact --dry-run` and `remote list` made one too."""
    typo = tmp_path / "store-typo"
    for args in (["journal", "verify"], ["journal", "log"], ["journal", "show", "abc"], ["journal", "checkpoint"],
                 ["compact", "--dry-run"], ["remote", "list"], ["log"], ["health"]):
        p = subprocess.run([PY, "-m", "chronos_git.cli", "--store", str(typo), "--json", *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        doc = json.loads(p.stdout)
        assert os.listdir(tmp_path) == [], (args, os.listdir(tmp_path))
        if args[0] not in ("log", "health"):
            assert p.returncode == 1 and f"no chronos-git store at {typo}" in doc["error"], (args, p.stdout)
    # `journal status` starts a journal, and says that it made the store
    p = subprocess.run([PY, "-m", "chronos_git.cli", "--store", str(typo), "journal", "status"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and f"there was no store at {typo}, so this made a new, empty one" in p.stdout, p
    again = subprocess.run([PY, "-m", "chronos_git.cli", "--store", str(typo), "--json", "journal", "status"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout).get("new_store") is None


def test_pseudo_filesystems_shared_folders_and_endless_sources_are_refused(cli, ws, tmp_path):
    """New-user trial: `snapshot -w /proc/self` read until the kernel killed it for memory,
    `snapshot -w /tmp` imported all of /tmp, `write x --from /dev/zero` ended in a MemoryError."""
    for root in ("/proc/self", "/sys/kernel", "/dev/shm", "/tmp", "/var"):
        r = cli("--json", "snapshot", "--workspace", root, timeout=60)
        assert r.rc == 1 and r.json["code"] == "workspace_refused" and "refusing to use" in r.json["error"], (root, r)
    for limit in (1, 0):                               # 0: no size cap, and still no device
        r = cli("--json", "write", "z", "--from", "/dev/zero", "--workspace", ws,
                settings={"max_file_size_mb": limit}, timeout=60)
        assert r.rc == 1 and "is a device" in r.json["error"] and not (ws / "z").exists(), r
    big = tmp_path / "big.bin"
    big.write_bytes(b"y" * (2 << 20))
    r = cli("--json", "write", "z", "--from", big, "--workspace", ws, settings={"max_file_size_mb": 1})
    assert r.rc == 1 and "more than max_file_size_mb (1 MB)" in r.json["error"] and not (ws / "z").exists(), r
    git_dir = tmp_path / "repo" / ".git" / "hooks"   # a trial restored a fetched hook here, and git ran it
    git_dir.mkdir(parents=True)
    for root in (git_dir, git_dir.parent, tmp_path / "repo" / ".GIT"):
        r = cli("--json", "snapshot", "--workspace", root)
        assert r.rc == 1 and r.json["code"] == "workspace_refused" and ".git" in r.json["error"], (root, r)
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 1024)
    ok = cli("--json", "write", "z", "--from", src, "--workspace", ws, settings={"max_file_size_mb": 1})
    assert ok.rc == 0 and (ws / "z").read_bytes() == b"x" * 1024, ok


def test_empty_names_and_argument_errors_are_named_with_a_code(cli, ws):
    """New-user trial: `-w ""` meant the current folder, `write .` said the workspace was outside
    itself, and argument errors had no `code` in their JSON."""
    r = cli("--json", "snapshot", "--workspace", "", cwd=ws)
    assert r.rc == 1 and r.json["code"] == "bad_input" and "--workspace is empty" in r.json["error"], r
    for name in ("", ".", str(ws)):
        r = cli("--json", "write", name, "--content", "x", "--workspace", ws)
        assert r.rc == 1 and "names the workspace folder itself" in r.json["error"] and r.json["code"], r
    for args in (["bogus-cmd"], ["log", "--limit", "0"]):
        r = cli("--json", *args, cwd=ws)
        assert r.rc != 0 and r.json["code"] == "bad_arguments" and r.json["status"] == "error", r


@pytest.mark.process
def test_an_unset_variable_in_the_store_path_and_an_unknown_operation_are_named(cli, ws, tmp_path):
    """New-user trial: `--store '$NOPE/x'` made a folder literally named `$NOPE`; `journal show
    nosuch` said the operation "is open"."""
    env = {k: v for k, v in os.environ.items() if k != "NOPE_CHRONOS"}
    p = subprocess.run([PY, "-m", "chronos_git.cli", "--store", "$NOPE_CHRONOS/x", "--json", "journal", "status"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "$NOPE_CHRONOS, which is not set" in json.loads(p.stdout)["error"], p
    assert not any("NOPE" in name for name in os.listdir(tmp_path))
    assert cli("write", "a.txt", "--content", "x", "--workspace", ws).rc == 0
    r = cli("--json", "journal", "show", "abcdef12")
    assert r.rc == 1 and r.json["error"] == "no operation 'abcdef12' in the journal", r


def test_a_label_with_nothing_to_checkpoint_is_said_to_be_dropped(cli, ws):
    """New-user trial: `snapshot -m "before refactor"` with nothing changed dropped the label silently."""
    assert cli("snapshot", "-m", "first", cwd=ws).rc == 0
    r = cli("snapshot", "-m", "before refactor", cwd=ws)
    assert r.rc == 0 and "the label 'before refactor' was not kept" in r.stdout, r.stdout
    plain = cli("--json", "snapshot", cwd=ws)
    assert plain.rc == 0 and plain.json.get("note") is None, plain.stdout


@pytest.mark.process
@pytest.mark.parametrize("json_flag", [False, True])
def test_a_broken_dependency_is_one_message_with_the_fix_not_a_traceback(tmp_path, json_flag):
    fake = tmp_path / "fake"
    (fake / "pygit2").mkdir(parents=True)
    (fake / "pygit2" / "__init__.py").write_text("raise ImportError('libgit2.so.1.9: cannot open shared object')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    argv = [PY, "-m", "chronos_git.cli", "--store", str(tmp_path / "s"), *(["--json"] if json_flag else []), "log"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr + p.stdout, p.stderr
    said = json.loads(p.stdout)["error"] if json_flag else p.stderr
    assert "libgit2.so.1.9" in said and "pip install pygit2==" in said and "hermes chronos-git setup" in said


def test_journal_show_says_after_none_yet_only_while_the_call_is_open():
    """New-user trial: a call settled (or rolled back) with no checkpoint after it read as
    `after none yet`, as if one were still coming."""
    from rich.console import Console
    from chronos_git.cli import render
    from chronos_git.service import results as r

    def ev(seq, kind, **extra):
        return r.Event(schema="chronos-git.journal.v1", seq=seq, timestamp_ns=seq, kind=kind,
                       operation_id="ab" * 16, id=f"{seq:040x}", **extra)

    def said(events):
        console = Console(width=200, record=True, file=open(os.devnull, "w"))
        console.print(render._operation_facts(events))
        return console.export_text()
    started = ev(1, "started", tool="terminal", pre_checkpoint="c" * 40)
    assert "after none yet" in said([started])
    done = said([started, ev(2, "resolved", outcome="completed", evidence="looked")])
    assert "after none" in done and "none yet" not in done
