"""The standalone CLI contract for the snapshot engine, run as a real subprocess.

chronos-git [--store DIR] <command> [--workspace DIR] [--json]
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pygit2
import pytest

from chronos_git.engine.store import Store
from support.helpers import git, tree_fingerprint

HEX40 = re.compile(r"^[0-9a-f]{40}$")
GIT_ID = ("-c", "user.name=Test", "-c", "user.email=test@example.com")


def ok(r):
    assert r.rc == 0, f"rc={r.rc}\nstdout={r.stdout}\nstderr={r.stderr}"
    assert "Traceback" not in r.stderr
    data = r.json
    assert data["status"] == "ok", data
    return data


def err(r):
    assert r.rc == 1, f"rc={r.rc}\nstdout={r.stdout}\nstderr={r.stderr}"
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    data = r.json                          # exactly one JSON document on stdout
    assert data["status"] == "error", data
    assert isinstance(data["error"], str) and len(data["error"]) > 10
    return data


def W(ws):
    return ("--workspace", str(ws), "--json")


def quick_snapshot(store_dir, ws, desc="setup") -> str:
    """Setup without a subprocess (the contract under test still goes through the CLI)."""
    from chronos_git.engine.checkpoint import CheckpointMeta
    return Store.open(store_dir).workspace(ws).snapshot(CheckpointMeta(description=desc)).checkpoint.id


# ------------------------------------------------------------------ snapshot
def test_snapshot_contract_and_unchanged_reuse(cli, ws, store_dir):
    first = ok(cli("snapshot", "-m", "first one", *W(ws)))
    assert HEX40.match(first["checkpoint"]) and first["created"] is True
    again = ok(cli("snapshot", "-m", "nothing changed", *W(ws)))
    assert again["created"] is False and again["checkpoint"] == first["checkpoint"]
    (ws / "a.txt").write_text("edited\n")
    third = ok(cli("snapshot", *W(ws)))
    assert third["created"] is True and third["checkpoint"] != first["checkpoint"]
    # the store is a plain git repo and the checkpoint is a commit in it
    repo = pygit2.Repository(str(store_dir))
    assert repo[third["checkpoint"]].parent_ids[0] == pygit2.Oid(hex=first["checkpoint"])
    assert repo[third["checkpoint"]].message.startswith("chronos checkpoint: manual checkpoint")


def test_workspace_defaults_to_cwd_and_store_option(cli, ws, tmp_path, store_dir):
    a = ok(cli("snapshot", "--json", cwd=ws))
    assert a["workspace"] == str(ws)
    b = ok(cli("log", *W(ws)))
    assert b["checkpoints"][0]["id"] == a["checkpoint"]
    # a subdirectory is a different workspace
    sub = ok(cli("log", "--json", cwd=ws / "src"))
    assert sub["checkpoints"] == []
    # --store overrides $CHRONOS_GIT_STORE
    other = tmp_path / "other-store"
    c = ok(cli("--store", other, "snapshot", *W(ws)))
    assert HEX40.match(c["checkpoint"]) and c["created"] is True
    assert (other / "HEAD").exists()
    assert len(ok(cli("--store", other, "log", *W(ws)))["checkpoints"]) == 1
    # global --json before the command works too
    d = cli("--json", "log", "--workspace", ws)
    assert d.rc == 0 and d.json["status"] == "ok"


def test_declared_path_snapshot_via_cli(cli, ws, store_dir):
    ok(cli("snapshot", *W(ws)))
    (ws / "a.txt").write_text("declared\n")
    (ws / "src" / "main.py").write_text("not declared\n")
    r = ok(cli("snapshot", "--path", ws / "a.txt", *W(ws)))
    assert r["created"] is True and r["kind"] == "declared"
    repo = pygit2.Repository(str(store_dir))
    tree = repo[r["checkpoint"]].tree
    assert repo[tree["a.txt"].id].data == b"declared\n"
    assert repo[tree["src/main.py"].id].data == b"print('hi')\n"
    row = ok(cli("log", *W(ws)))["checkpoints"][0]
    assert row["kind"] == "declared"


def test_first_snapshot_with_path_is_a_full_baseline(cli, ws, store_dir):
    r = ok(cli("snapshot", "--path", "a.txt", "--json", cwd=ws))
    repo = pygit2.Repository(str(store_dir))
    tree = repo[r["checkpoint"]].tree
    assert "src/main.py" in tree and "a.txt" in tree
    # so restoring it never deletes files the snapshot did not look at
    (ws / "a.txt").write_text("changed\n")
    ok(cli("restore", r["checkpoint"], *W(ws)))
    assert (ws / "src" / "main.py").exists()


# ------------------------------------------------------------------ log
def test_log_contract(cli, ws):
    ids = []
    for i in range(4):
        (ws / "a.txt").write_text(f"{i}\n")
        ids.append(ok(cli("snapshot", "-m", f"step {i}", *W(ws)))["checkpoint"])
    log = ok(cli("log", *W(ws)))
    rows = log["checkpoints"]
    assert [r["id"] for r in rows] == list(reversed(ids))
    assert [r["description"] for r in rows] == ["step 3", "step 2", "step 1", "step 0"]
    for r in rows:
        assert {"id", "time", "description", "tool"} <= set(r)
        assert isinstance(r["time"], (int, float))
    assert [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
    limited = ok(cli("log", "--limit", "2", *W(ws)))["checkpoints"]
    assert [r["id"] for r in limited] == list(reversed(ids))[:2]
    assert ok(cli("log", "-n", "1", *W(ws)))["checkpoints"][0]["id"] == ids[-1]


# ------------------------------------------------------------------ diff
def test_diff_contract_with_rename(cli, ws):
    body = "".join(f"line {i}\n" for i in range(30))
    (ws / "long.txt").write_text(body)
    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    os.rename(ws / "long.txt", ws / "renamed.txt")
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "new.txt").write_text("new\n")
    (ws / "src" / "main.py").unlink()
    # newest checkpoint vs working tree (no args)
    d = ok(cli("diff", *W(ws)))
    st = {f["path"]: f["status"] for f in d["files"]}
    assert st == {"renamed.txt": "renamed", "a.txt": "modified", "new.txt": "added", "src/main.py": "deleted"}
    ren = next(f for f in d["files"] if f["path"] == "renamed.txt")
    assert ren["old_path"] == "long.txt"
    assert "rename from long.txt" in d["patch"] and "+beta" in d["patch"]
    a = next(f for f in d["files"] if f["path"] == "a.txt")
    assert (a["additions"], a["deletions"]) == (1, 0)
    c2 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    # FROM TO between checkpoints, by index and by id
    d2 = ok(cli("diff", "2", "1", *W(ws)))
    assert {f["path"]: f["status"] for f in d2["files"]} == st
    d3 = ok(cli("diff", c1, c2, *W(ws)))
    assert d3["files"] == d2["files"] and d3["patch"] == d2["patch"]
    # FROM only: against the working tree (clean now)
    d4 = ok(cli("diff", c2, *W(ws)))
    assert d4["files"] == [] and d4["patch"] == ""
    d5 = ok(cli("diff", c1, *W(ws)))
    assert {f["path"] for f in d5["files"]} == set(st)
    # --stat: no patch
    assert "patch" not in ok(cli("diff", "2", "1", "--stat", *W(ws)))
    # a change of the executable bit alone is named as one (new-user trial: `modified 0 0`)
    os.chmod(ws / "a.txt", 0o755)
    (m,) = ok(cli("diff", *W(ws)))["files"]
    assert m["path"] == "a.txt" and m["mode"] == "100644 -> 100755" and m["additions"] == m["deletions"] == 0
    assert "a.txt (mode 100644 -> 100755)" in cli("diff", "--stat", "--workspace", ws).stdout


# ------------------------------------------------------------------ restore
def test_restore_contract(cli, ws):
    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    (ws / "a.txt").write_text("changed\n")
    (ws / "agent.txt").write_text("created by the agent\n")
    (ws / "src" / "main.py").unlink()
    c2 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    (ws / "later.txt").write_text("after c2\n")

    before = tree_fingerprint(ws)
    dry = ok(cli("restore", c1[:7], "--dry-run", *W(ws)))
    assert tree_fingerprint(ws) == before
    assert dry["restored_checkpoint"] == c1 and dry["safety_checkpoint"] is None
    assert {(p["path"], p["action"]) for p in dry["plan"]} == {
        ("a.txt", "restore"), ("src/main.py", "create"), ("agent.txt", "delete"), ("later.txt", "delete")}
    assert (dry["files_changed"], dry["untracked_removed"]) == (2, 2)
    assert len(ok(cli("log", *W(ws)))["checkpoints"]) == 2           # dry run: no safety checkpoint

    # per path, several --path options
    r = ok(cli("restore", c1, "--path", "a.txt", "--path", ws / "src", *W(ws)))
    assert {(p["path"], p["action"]) for p in r["plan"]} == {("a.txt", "restore"), ("src/main.py", "create")}
    assert (ws / "a.txt").read_text() == "alpha\n" and (ws / "src" / "main.py").exists()
    assert (ws / "agent.txt").exists() and (ws / "later.txt").exists()
    assert HEX40.match(r["safety_checkpoint"])

    # --no-clean keeps files absent from the checkpoint
    r = ok(cli("restore", c2, "--no-clean", *W(ws)))
    assert (ws / "later.txt").exists() and (ws / "a.txt").read_text() == "changed\n"
    assert r["untracked_removed"] == 0
    assert (ws / "src" / "main.py").exists()        # absent from c2 (re-created above): kept
    assert {p["path"] for p in r["plan"] if p["action"] == "skip"} == {"later.txt", "src/main.py"}


def test_restore_full_clean_and_safety_undo(cli, ws):
    (ws / ".gitignore").write_text("*.log\n")
    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    (ws / "agent.txt").write_text("agent\n")
    (ws / "run.log").write_text("ignored\n")
    (ws / "a.txt").write_text("edited\n")
    before = tree_fingerprint(ws)
    r = ok(cli("restore", "latest", *W(ws)))
    assert r["restored_checkpoint"] == c1
    assert not (ws / "agent.txt").exists() and (ws / "run.log").exists()
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert r["files_changed"] == 1 and r["untracked_removed"] == 1
    # undo = restore the safety checkpoint
    u = ok(cli("restore", r["safety_checkpoint"], *W(ws)))
    assert u["restored_checkpoint"] == r["safety_checkpoint"]
    assert tree_fingerprint(ws) == before


def test_checkpoint_spec_forms(cli, ws, store_dir):
    ids = []
    for i in range(3):
        (ws / "a.txt").write_text(f"{i}\n")
        ids.append(quick_snapshot(store_dir, ws))
    for spec, want in ((ids[0], ids[0]), (ids[0][:7], ids[0]), (ids[1][:12].upper(), ids[1]),
                       ("1", ids[2]), ("3", ids[0]), ("latest", ids[2])):
        r = ok(cli("restore", spec, "--dry-run", *W(ws)))
        assert r["restored_checkpoint"] == want, spec


# ------------------------------------------------------------------ errors
COLLIDING = ("12d464fa34e9fd0d76961acb1635b34d8f32fae1", "12d464fbb9a220f9647706fc2b75d40947d64638")


def _install_colliding_chain(store_dir, ws) -> None:
    """Two checkpoints whose ids share 7 hex digits (nonce found offline by brute force)."""
    store = Store.open(store_dir)
    w = store.workspace(ws)
    repo = pygit2.Repository(str(store_dir))
    tree = repo.TreeBuilder().write()
    sig = pygit2.Signature("chronos-git", "chronos-git@localhost", 1700000000, 0)
    q = repo.create_commit(None, sig, sig, "chronos checkpoint: collision base\n", tree, [])
    p = repo.create_commit(None, sig, sig, "chronos checkpoint: collision nonce %010d\n" % 103103791, tree, [q])
    assert (str(q), str(p)) == COLLIDING
    repo.references.create(w.ref, p, force=True)


def test_ambiguous_prefix(cli, ws, store_dir):
    _install_colliding_chain(store_dir, ws)
    assert [c["id"] for c in ok(cli("log", *W(ws)))["checkpoints"]] == [COLLIDING[1], COLLIDING[0]]
    e = err(cli("restore", "12d464f", "--dry-run", *W(ws)))
    assert "ambiguous" in e["error"]
    e = err(cli("diff", "12d464f", *W(ws)))
    assert "ambiguous" in e["error"]
    assert ok(cli("restore", "12d464fa", "--dry-run", *W(ws)))["restored_checkpoint"] == COLLIDING[0]
    assert ok(cli("restore", "12d464fb", "--dry-run", *W(ws)))["restored_checkpoint"] == COLLIDING[1]


@pytest.mark.parametrize("args,needle", [
    (("restore", "notacheckpoint"), "not a checkpoint"),
    (("restore", "abc12"), "too short"),
    (("restore", "0"), "start at 1"),
    (("restore", "42"), "no checkpoint 42 (1 = newest"),
    (("restore", "@42"), "no checkpoint @42"),
    (("restore", "@x"), "not a checkpoint number"),
    (("restore", "@0"), "not a checkpoint number"),
    (("restore", "ffffffffff"), "no checkpoint"),
    (("restore", "f" * 40), "no checkpoint"),
    (("diff", "zzz"), "not a checkpoint"),
    (("diff", "1", "nope!"), "not a checkpoint"),
])
def test_bad_checkpoint_errors(cli, ws, store_dir, args, needle):
    quick_snapshot(store_dir, ws)
    e = err(cli(*args, *W(ws)))
    assert needle in e["error"]


def test_checkpoint_of_another_workspace_is_refused(cli, ws, tmp_path, store_dir):
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("other project\n")
    foreign = quick_snapshot(store_dir, other)
    quick_snapshot(store_dir, ws)
    e = err(cli("restore", foreign, *W(ws)))
    assert str(other) in e["error"]
    assert (ws / "a.txt").exists() and not (ws / "o.txt").exists()


def test_no_checkpoints_yet_errors(cli, ws):
    assert "no checkpoints" in err(cli("diff", *W(ws)))["error"]
    assert "no checkpoints" in err(cli("restore", "latest", *W(ws)))["error"]
    assert ok(cli("log", *W(ws)))["checkpoints"] == []


@pytest.mark.process
def test_refused_workspaces(cli, ws, tmp_path):
    for cmd in (("snapshot",), ("restore", "latest")):
        e = err(cli(*cmd, "--workspace", "/", "--json"))
        assert "refusing" in e["error"]
    home = tmp_path / "home"
    home.mkdir()
    (home / "f.txt").write_text("x")
    e = err(cli("snapshot", "--workspace", home, "--json", env={"HOME": str(home)}))
    assert "refusing" in e["error"]
    e = err(cli("snapshot", "--json", cwd=home, env={"HOME": str(home)}))
    assert "refusing" in e["error"]
    # a symlink to $HOME is $HOME
    os.symlink(home, tmp_path / "home-link")
    e = err(cli("snapshot", "--workspace", tmp_path / "home-link", "--json", env={"HOME": str(home)}))
    assert "refusing" in e["error"]


def test_missing_workspace(cli, tmp_path):
    missing = tmp_path / "does-not-exist"
    e = err(cli("snapshot", *W(missing)))
    assert "does not exist" in e["error"]
    assert not missing.exists()
    f = tmp_path / "a-file"
    f.write_text("x")
    assert "not a directory" in err(cli("snapshot", *W(f)))["error"]
    # the commands about a workspace's history say which it is, before any checkpoint is looked for
    assert "is not a folder" in err(cli("log", *W(f)))["error"]
    for cmd in (("log",), ("restore", "@1", "--dry-run"), ("diff",)):
        e = err(cli(*cmd, *W(missing)))
        assert "does not exist and the store has no checkpoints for it" in e["error"], (cmd, e)


def test_a_subfolder_of_a_workspace_is_pointed_to_it(cli, ws):
    """`log` in a subfolder (git would find its repository from there) names the workspace."""
    ok(cli("snapshot", *W(ws)))
    got = ok(cli("log", *W(ws / "src")))
    assert got["checkpoints"] == [] and f"--workspace {ws}" in got["note"]
    assert ok(cli("log", *W(ws))).get("note") is None


@pytest.mark.parametrize("args", [
    ("frobnicate", "--json"),
    ("--json",),
    ("log", "--limit", "abc", "--json"),
    ("restore", "--json"),
    ("snapshot", "--bogus-flag", "--json"),
    ("diff", "1", "2", "3", "--json"),
])
def test_bad_arguments(cli, ws, args):
    err(cli(*args, cwd=ws))


def test_errors_without_json_are_one_line_no_traceback(cli, ws):
    r = cli("restore", "nothex!", "--workspace", ws)
    assert r.rc == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and r.stdout == ""


# ------------------------------------------------------------------ compact / health
def test_compact_and_health(cli, ws, store_dir):
    ids = []
    for i in range(5):
        (ws / "a.txt").write_text(f"{i}\n")
        ids.append(ok(cli("snapshot", *W(ws)))["checkpoint"])
    settings = {"max_checkpoints": 2, "compact_grace_s": 0}
    dry = ok(cli("compact", "--dry-run", "--json", settings=settings))
    assert [c["id"] for c in dry["dropped"][0]["checkpoints"]] == [ids[2], ids[1], ids[0]]
    assert len(ok(cli("log", *W(ws)))["checkpoints"]) == 5
    rep = ok(cli("compact", "--json", settings=settings))
    assert [c["id"] for c in rep["dropped"][0]["checkpoints"]] == [ids[2], ids[1], ids[0]]
    assert rep["dropped"][0]["workspace"] == str(ws)
    assert isinstance(rep["size_before"], int) and isinstance(rep["size_after"], int)
    assert [c["id"] for c in ok(cli("log", *W(ws)))["checkpoints"]] == [ids[4], ids[3]]
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0
    # the survivors are restorable
    ok(cli("restore", ids[3], *W(ws)))
    assert (ws / "a.txt").read_text() == "3\n"

    h = ok(cli("health", *W(ws)))
    assert isinstance(h["store_bytes"], int) and h["store_bytes"] > 0
    # the safety checkpoint reused the unchanged tip; the restore's own checkpoint after it is new
    assert h["workspace"]["checkpoints"] == 3
    assert h["workspace"]["latest"]["role"] == "restored" and h["workspace"]["latest"]["restored_from"] == ids[3]
    assert h["store"] == str(store_dir)


# ------------------------------------------------------------------ the user's repository
def test_user_git_is_byte_identical_across_commands(cli, ws, store_dir):
    git("init", "-q", cwd=ws)
    git("add", "-A", cwd=ws)
    git(*GIT_ID, "commit", "-q", "-m", "user commit", cwd=ws)
    (ws / "a.txt").write_text("uncommitted edit\n")
    (ws / "untracked.txt").write_text("u\n")
    before = tree_fingerprint(ws / ".git")
    status = git("status", "--porcelain", cwd=ws).stdout

    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    tree = pygit2.Repository(str(store_dir))[c1].tree
    assert ".git" not in tree and "untracked.txt" in tree
    (ws / "b.txt").write_text("b\n")
    ok(cli("snapshot", *W(ws)))
    ok(cli("diff", *W(ws)))
    ok(cli("diff", "2", "1", *W(ws)))
    ok(cli("log", *W(ws)))
    ok(cli("restore", c1, "--dry-run", *W(ws)))
    ok(cli("restore", c1, *W(ws)))
    ok(cli("restore", "2", "--path", "b.txt", *W(ws)))      # 2: the safety checkpoint (1: the restore's own)
    assert (ws / "b.txt").read_text() == "b\n"
    ok(cli("compact", "--json", settings={"max_checkpoints": 1, "compact_grace_s": 0}))
    ok(cli("health", *W(ws)))
    assert tree_fingerprint(ws / ".git") == before
    (ws / "b.txt").unlink()
    assert git("status", "--porcelain", cwd=ws).stdout == status


def test_nothing_written_into_a_non_git_workspace(cli, ws):
    before = tree_fingerprint(ws)
    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    ok(cli("diff", *W(ws)))
    ok(cli("restore", c1, "--dry-run", *W(ws)))
    ok(cli("restore", c1, *W(ws)))
    ok(cli("compact", "--json"))
    ok(cli("health", *W(ws)))
    assert not (ws / ".git").exists()
    assert tree_fingerprint(ws) == before


# ------------------------------------------------------------------ ignores / settings
def test_settings_ignored_patterns_and_size_cap(cli, ws, store_dir):
    (ws / ".gitignore").write_text("*.log\n!important.log\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("local/\n")
    (ws / "sub" / "local").mkdir()
    (ws / "sub" / "local" / "x.txt").write_text("x")
    (ws / "debug.log").write_text("d")
    (ws / "important.log").write_text("i")
    (ws / "scratch.tmp").write_text("t")
    (ws / "big.bin").write_bytes(b"b" * 3000)
    settings = {"ignored_patterns": ["*.tmp"], "max_file_size_mb": 0.001}
    r = ok(cli("snapshot", *W(ws), settings=settings))
    assert r["skipped"] == [{"path": "big.bin", "reason": "too_large", "size": 3000}]
    out = subprocess.run(["git", "--git-dir", str(store_dir), "ls-tree", "-r", "--name-only", r["checkpoint"]],
                         capture_output=True, text=True, check=True).stdout.split()
    assert sorted(out) == [".gitignore", "a.txt", "important.log", "src/main.py", "sub/.gitignore"]
    row = ok(cli("log", *W(ws), settings=settings))["checkpoints"][0]
    assert row["skipped"] == r["skipped"]


def test_store_inside_the_workspace(cli, ws):
    store = ws / ".chronos"
    a = ok(cli("--store", store, "snapshot", *W(ws)))
    b = ok(cli("--store", store, "snapshot", *W(ws)))
    assert b["created"] is False and b["checkpoint"] == a["checkpoint"]
    tree = pygit2.Repository(str(store))[a["checkpoint"]].tree
    assert sorted(e.name for e in tree) == ["a.txt", "src"]
    (ws / "a.txt").write_text("x\n")
    ok(cli("--store", store, "restore", a["checkpoint"], *W(ws)))     # journals: witness file beside the store
    c = ok(cli("--store", store, "snapshot", *W(ws)))
    tree = pygit2.Repository(str(store))[c["checkpoint"]].tree
    assert sorted(e.name for e in tree) == ["a.txt", "src"]
    assert (store / "HEAD").exists()
    assert git("--git-dir", store, "fsck", "--strict", check=False).returncode == 0


# ------------------------------------------------------------------ survival
def test_store_survives_rm_rf_and_git_clean(cli, ws, store_dir):
    (ws / "notes.md").write_text("notes\n")
    c1 = ok(cli("snapshot", *W(ws)))["checkpoint"]
    shutil.rmtree(ws)
    rows = ok(cli("log", *W(ws)))["checkpoints"]
    assert [r["id"] for r in rows] == [c1]
    r = ok(cli("restore", c1, *W(ws)))
    assert r["files_changed"] == 3
    assert (ws / "notes.md").read_text() == "notes\n" and (ws / "src" / "main.py").exists()

    git("init", "-q", cwd=ws)
    git("add", "a.txt", cwd=ws)
    git(*GIT_ID, "commit", "-q", "-m", "x", cwd=ws)
    git("clean", "-fdxq", cwd=ws)
    assert not (ws / "notes.md").exists()
    ok(cli("restore", c1, *W(ws)))
    assert (ws / "notes.md").read_text() == "notes\n"
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0


# ------------------------------------------------------------------ concurrency and a mixed session
@pytest.mark.process
def test_concurrent_cli_processes(cli, ws, tmp_path, store_dir):
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    (ws2 / "x.txt").write_text("x\n")
    env = dict(os.environ, CHRONOS_GIT_STORE=str(store_dir))
    env.pop("CHRONOS_GIT_SETTINGS", None)
    procs = []
    for k in range(6):
        target = ws if k % 2 else ws2
        (target / f"p{k}.txt").write_text(f"{k}\n")
        procs.append(subprocess.Popen([sys.executable, "-m", "chronos_git.cli", "snapshot", "-m", f"p{k}",
                                       "--workspace", str(target), "--json"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        assert p.returncode == 0 and "Traceback" not in e, e
        outs.append(json.loads(o))
    assert all(o["status"] == "ok" for o in outs)
    for target in (ws, ws2):
        rows = ok(cli("log", "--limit", "100", *W(target)))["checkpoints"]
        created = {o["checkpoint"] for o in outs if o["workspace"] == str(target) and o["created"]}
        assert created <= {r["id"] for r in rows}
        final = ok(cli("snapshot", *W(target)))
        assert final["created"] is False            # the last process captured everything
    assert git("--git-dir", store_dir, "fsck", "--strict", check=False).returncode == 0


def test_mixed_session_leaves_a_clean_git_store(cli, ws, store_dir):
    (ws / ".gitignore").write_text("*.log\n")
    ok(cli("snapshot", "-m", "start", *W(ws)))
    (ws / "a.txt").write_text("edit 1\n")
    os.symlink("a.txt", ws / "link")
    (ws / "x.log").write_text("ignored")
    ok(cli("snapshot", *W(ws)))
    ok(cli("diff", "2", "1", *W(ws)))
    r = ok(cli("restore", "2", *W(ws)))
    ok(cli("restore", r["safety_checkpoint"], *W(ws)))
    ok(cli("compact", "--json", settings={"max_checkpoints": 2, "compact_grace_s": 0}))
    (ws / "a.txt").write_text("edit 2\n")
    ok(cli("snapshot", *W(ws)))
    ok(cli("health", *W(ws)))
    lg = git("--git-dir", store_dir, "log", "--all", check=False)
    assert lg.returncode == 0 and "chronos checkpoint:" in lg.stdout
    fs = git("--git-dir", store_dir, "fsck", "--strict", check=False)
    assert fs.returncode == 0, fs.stdout + fs.stderr
    assert "error" not in fs.stderr.lower()
