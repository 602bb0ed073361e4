"""The journal's CLI contract, through the `chronos-git` entry point (support.helpers.run_cli)."""
from __future__ import annotations

import json
import os
import stat
import sys

import pygit2
import pytest

from chronos_git.journal_refs.witness import read_doc
from support.helpers import git

PY = sys.executable


def init(cli, ws):
    r = cli("journal", "status", "--json", cwd=ws)
    assert r.rc == 0, r.stderr
    return r.json


def last_events(cli, n=50):
    r = cli("journal", "log", "--json", "--limit", n)
    assert r.rc == 0, r.stderr
    return r.json["events"]


def test_run_exit_code_and_single_json_document(cli, ws):
    r = cli("run", "--json", "--", PY, "-c",
            "import sys; print('to-stdout'); print('to-stderr', file=sys.stderr); sys.exit(7)", cwd=ws)
    assert r.rc == 7
    doc = r.json                                    # stdout is exactly one JSON document
    assert "to-stdout" not in r.stdout and "to-stdout" in r.stderr
    assert doc["exit_code"] == 7 and doc["outcome"] == "returned" and doc["recorded"] is True
    assert len(doc["operation_id"]) == 32 and doc["pre_checkpoint"]
    evs = last_events(cli, 2)
    assert [e["kind"] for e in evs] == ["returned", "started"]
    assert evs[0]["status"] == "error" and evs[0]["exit_code"] == 7
    assert evs[0]["operation_id"] == evs[1]["operation_id"] == doc["operation_id"]
    # a failing command is an ordinary error result: the gate stays open
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "open" and st["unresolved"] == []
    r = cli("run", "--json", "--", "true", cwd=ws)
    assert r.rc == 0 and r.json["exit_code"] == 0


def test_run_without_json_passes_output_through(cli, ws):
    r = cli("run", "--", PY, "-c", "print('hello-through')", cwd=ws)
    assert r.rc == 0
    assert r.stdout.splitlines()[0] == "hello-through"


def test_run_tool_and_workspace_options(cli, ws, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    r = cli("run", "--workspace", ws, "--tool", "deploy", "--json", "--",
            PY, "-c", "open('made.txt','w').write('x')", cwd=other)
    assert r.rc == 0, r.stderr
    assert (ws / "made.txt").read_text() == "x"          # the command ran in the workspace
    assert not (other / "made.txt").exists()
    started = [e for e in last_events(cli) if e["kind"] == "started"][0]
    assert started["tool"] == "deploy" and started["workspace"] == str(ws.resolve())
    assert "args" not in started and len(started["args_hash"]) == 64


def test_run_without_command_is_an_error(cli, ws):
    r = cli("run", "--json", "--", cwd=ws)
    assert r.rc == 1 and r.json["status"] == "error"


def crashed_op(cli, ws) -> str:
    """A shell call cut off by a crash right after its intent: pending until resolved."""
    assert cli("run", "--json", "--", "true", cwd=ws, fault="after_intent").rc == -9
    (u,) = cli("journal", "status", "--json").json["unresolved"]
    return u["operation_id"]


def test_run_of_a_command_that_cannot_start_is_a_known_error(cli, ws):
    """exec failed: the command never ran, so nothing is unknown and the gate stays open."""
    init(cli, ws)
    r = cli("run", "--json", "--", "/nonexistent/cmd-xyz", cwd=ws)
    assert r.rc == 127
    doc = r.json
    assert doc["status"] == "error" and doc["outcome"] == "returned" and "could not run" in doc["error"]
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "open" and st["unresolved"] == []
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


@pytest.mark.process
def test_a_shell_call_cut_off_by_a_crash_blocks(cli, ws):
    init(cli, ws)
    op = crashed_op(cli, ws)
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "closed"
    assert [(u["operation_id"], u["state"]) for u in st["unresolved"]] == [(op, "pending")]
    b = cli("run", "--json", "--", "true", cwd=ws)
    assert b.rc == 3
    assert b.json["error"] == "chronos_blocked" and b.json["blocked"] is True
    assert b.json["operation_ids"] == [op]


def test_strict_errors_makes_nonzero_exit_uncertain(cli, ws):
    init(cli, ws)
    r = cli("run", "--json", "--", "false", cwd=ws, settings={"strict_errors": True})
    assert r.rc == 1 and r.json["outcome"] == "uncertain"
    b = cli("run", "--json", "--", "true", cwd=ws, settings={"strict_errors": True})
    assert b.rc == 3 and b.json["operation_ids"] == [r.json["operation_id"]]
    # without strict_errors the same failure would not have closed it: prove the difference
    ok = cli("journal", "resolve", r.json["operation_id"], "--outcome", "completed",
             "--evidence", "false always fails", "--json")
    assert ok.rc == 0
    r2 = cli("run", "--json", "--", "false", cwd=ws)
    assert r2.rc == 1 and r2.json["outcome"] == "returned"
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


def test_write_content_and_from_file(cli, ws, tmp_path):
    r = cli("write", "--json", "notes/n.txt", "--content", "hello\n", cwd=ws)
    assert r.rc == 0, r.stderr
    assert (ws / "notes" / "n.txt").read_text() == "hello\n"
    assert r.json["bytes_written"] == 6 and r.json["path"] == str(ws / "notes" / "n.txt")
    src = tmp_path / "payload.bin"
    src.write_bytes(b"\x00\x01binary\xff")
    r = cli("write", "--workspace", ws, "--json", str(ws / "b.bin"), "--from", src, cwd=tmp_path)
    assert r.rc == 0, r.stderr
    assert (ws / "b.bin").read_bytes() == b"\x00\x01binary\xff"
    started = [e for e in last_events(cli) if e["kind"] == "started"][0]
    assert started["tool"] == "write_file"
    assert started["declared"] == [{"path": str(ws / "b.bin"), "pre": None,
                                    "post": str(pygit2.hash(b"\x00\x01binary\xff"))}]
    # --content and --from are exclusive, one is required
    assert cli("write", "--json", "x.txt", cwd=ws).rc == 1
    assert cli("write", "--json", "x.txt", "--content", "a", "--from", src, cwd=ws).rc == 1


def test_status_shape(cli, ws, store_dir):
    st = init(cli, ws)
    assert st["status"] == "ok" and st["integrity"] == "ok"
    assert st["unresolved"] == [] and st["running"] == [] and st["replayable"] == []
    assert st["events"] == 1 and st["gate"] == "open" and st["head"] and st["journal_id"]
    assert st["checkpoint_file"].endswith("store.journal-witness.json")
    assert st["healed"] is None
    # the local checkpoint lives beside the store, not inside it
    cp = json.loads(read_doc(st["checkpoint_file"]))
    assert cp["head"] == st["head"] and cp["seq"] == 0 and cp["journal_id"] == st["journal_id"]
    assert os.path.dirname(st["checkpoint_file"]) == os.path.dirname(str(store_dir))
    assert stat.S_IMODE(os.stat(st["checkpoint_file"]).st_mode) == 0o600


def test_log_limit_and_fields(cli, ws):
    init(cli, ws)
    for _ in range(3):
        assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    all_ev = cli("journal", "log", "--json").json
    assert all_ev["status"] == "ok"
    seqs = [e["seq"] for e in all_ev["events"]]
    assert seqs == list(range(6, -1, -1))              # newest first, contiguous
    lim = cli("journal", "log", "--json", "--limit", "2").json["events"]
    assert [e["seq"] for e in lim] == [6, 5]
    for e in all_ev["events"]:
        assert {"seq", "kind", "operation_id", "id", "timestamp_ns", "schema"} <= set(e)
    assert all_ev["events"][-1]["kind"] == "genesis" and all_ev["events"][-1]["operation_id"] is None


def test_checkpoint_export_and_verify_roundtrip(cli, ws, tmp_path):
    init(cli, ws)
    cli("run", "--json", "--", "true", cwd=ws)
    r = cli("journal", "checkpoint", "--json")
    assert r.rc == 0
    doc = r.json
    assert doc["status"] == "ok"
    cp = doc["checkpoint"]
    assert cp["schema"] == "chronos-git.journal-checkpoint.v1"
    assert cp["seq"] == 2 and len(cp["head"]) == 40 and cp["journal_id"]
    whole = tmp_path / "exported.json"
    whole.write_text(r.stdout)                       # exactly what the command printed
    inner = tmp_path / "inner.json"
    inner.write_text(json.dumps(cp))
    h = cli("journal", "export")                      # text for people: the head and how to use it
    assert h.rc == 0 and cp["head"] in h.stdout and "journal verify --head" in h.stdout
    again = cli("journal", "export", "--json").json["checkpoint"]    # `checkpoint` is export's older name
    assert {k: again[k] for k in ("journal_id", "head", "seq")} == {k: cp[k] for k in ("journal_id", "head", "seq")}
    for f, option in ((whole, "--checkpoint"), (inner, "--head")):
        v = cli("journal", "verify", option, f, "--json")
        assert v.rc == 0, v.stdout
        assert v.json["status"] == "ok" and v.json["external_checkpoint"] == "ok"
    # still an ancestor after more events
    for _ in range(2):
        cli("run", "--json", "--", "true", cwd=ws)
    v = cli("journal", "verify", "--checkpoint", whole, "--json")
    assert v.rc == 0 and v.json["events"] == 7 and v.json["external_checkpoint"] == "ok"


def test_verify_rejects_bad_checkpoint_files(cli, ws, tmp_path):
    init(cli, ws)
    cp = cli("journal", "checkpoint", "--json").json["checkpoint"]
    cases = {
        "other-journal": {**cp, "journal_id": "00000000-0000-0000-0000-000000000000"},
        "unknown-head": {**cp, "head": "1" * 40},
        "wrong-seq": {**cp, "seq": cp["seq"] + 1},
        "bad-schema": {**cp, "schema": "nope"},
    }
    for name, bad in cases.items():
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(bad))
        v = cli("journal", "verify", "--checkpoint", f, "--json")
        assert v.rc == 1, name
        assert v.json["status"] == "error" and v.json["external_checkpoint"] != "ok", name
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    v = cli("journal", "verify", "--checkpoint", garbage, "--json")
    assert v.rc == 1 and v.json["status"] == "error"
    for unreadable in (tmp_path / "missing.json", tmp_path):     # absent, a directory: said plainly
        v = cli("journal", "verify", "--checkpoint", unreadable, "--json")
        assert v.rc != 0 and v.json["status"] == "error", v.stdout
        assert "cannot read the journal head" in json.dumps(v.json) and "os_error" not in v.stdout, v.stdout
    # a wrong *external* file must not brick the journal
    assert cli("journal", "verify", "--json").rc == 0
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


def test_verify_ok_and_fsck_clean(cli, ws, store_dir):
    init(cli, ws)
    cli("run", "--json", "--", "true", cwd=ws)
    cli("write", "--json", "w.txt", "--content", "w", cwd=ws)
    v = cli("journal", "verify", "--json")
    assert v.rc == 0 and v.json["integrity"] == "ok" and v.json["problems"] == [] and v.json["events"] == 5
    fsck = git(f"--git-dir={store_dir}", "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_show_lists_one_operations_events(cli, ws):
    init(cli, ws)
    op = cli("run", "--json", "--", "true", cwd=ws).json["operation_id"]
    cli("run", "--json", "--", "true", cwd=ws)
    r = cli("journal", "show", op[:8], "--json")
    assert r.rc == 0, r.stdout
    assert [e["kind"] for e in r.json["events"]] == ["started", "returned"]
    assert r.json["operation_id"] == op


@pytest.mark.process
def test_resolve_contract(cli, ws):
    init(cli, ws)
    op = crashed_op(cli, ws)
    # evidence is required, outcome restricted
    assert cli("journal", "resolve", op, "--outcome", "completed", "--json").rc == 1
    assert cli("journal", "resolve", op, "--outcome", "rolled_back", "--evidence", "x", "--json").rc == 1
    r = cli("journal", "resolve", op, "--outcome", "completed", "--evidence", "   ", "--json")
    assert r.rc == 1 and r.json["status"] == "error"
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 3        # still blocked
    r = cli("journal", "resolve", op[:10], "--outcome", "not_applied", "--evidence",
            "binary does not exist", "--json")
    assert r.rc == 0, r.stdout
    assert r.json["operation_id"] == op and r.json["outcome"] == "not_applied" and r.json["gate"] == "open"
    ev = last_events(cli, 1)[0]
    assert ev["kind"] == "resolved" and ev["evidence"] == "binary does not exist"
    assert ev["actor"] == "operator-cli"
    # resolving twice is refused, the journal does not grow
    again = cli("journal", "resolve", op, "--outcome", "completed", "--evidence", "x", "--json")
    assert again.rc == 1
    assert last_events(cli, 1)[0]["seq"] == ev["seq"]
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


@pytest.mark.process
def test_blocked_doc_shape(cli, ws):
    init(cli, ws)
    op = crashed_op(cli, ws)
    for args in (("run", "--json", "--", "true"), ("write", "--json", "z.txt", "--content", "z")):
        b = cli(*args, cwd=ws)
        assert b.rc == 3, b.stdout
        d = b.json
        assert d["status"] == "error" and d["error"] == "chronos_blocked" and d["blocked"] is True
        assert d["operation_ids"] == [op]
        assert "journal resolve" in d["message"]
    assert not (ws / "z.txt").exists()
    # without --json the refusal goes to stderr, exit code unchanged
    b = cli("run", "--", "true", cwd=ws)
    assert b.rc == 3 and "recovery gate is closed" in b.stderr


def test_recover_without_anything_to_do(cli, ws):
    init(cli, ws)
    r = cli("journal", "recover", "--json")
    assert r.rc == 0 and r.json["settled"] == [] and r.json["unresolved"] == [] and r.json["gate"] == "open"
    r = cli("journal", "recover", "--replay", "--rollback", "--json")
    assert r.rc == 1
    r = cli("journal", "recover", "--rollback", "--json")
    assert r.rc == 1 and "operation id" in r.json["error"]


def test_raw_results_and_args_never_reach_the_journal(cli, ws, store_dir):
    init(cli, ws)
    r = cli("run", "--json", "--", PY, "-c", "print('RESULT-SECRET-' + '4711')", "ARG-SECRET-0815", cwd=ws)
    assert r.rc == 0 and "RESULT-SECRET-4711" in r.stderr
    repo = pygit2.Repository(str(store_dir))
    cid = repo.references["refs/chronos/journal"].target
    seen = 0
    while cid is not None:
        c = repo[cid]
        texts = [c.message] + [repo[e.id].data.decode("utf-8", "replace") for e in c.tree]
        for t in texts:
            assert "RESULT-SECRET" not in t and "ARG-SECRET" not in t
        seen += 1
        cid = c.parent_ids[0] if c.parent_ids else None
    assert seen == 3
    # with store_args the arguments (never the output) are kept
    r = cli("run", "--json", "--", PY, "-c", "print('RESULT-SECRET-' + '4711')", "ARG-SECRET-0815", cwd=ws,
            settings={"store_args": True})
    started = [e for e in last_events(cli, 2) if e["kind"] == "started"][0]
    assert "ARG-SECRET-0815" in started["args"]["argv"]
    assert "RESULT-SECRET-4711" not in json.dumps(last_events(cli, 2))
