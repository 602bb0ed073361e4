"""`chronos-git git …`: the documented way to read the store with stock git (issue 32, "the
store is examined, never obeyed"): refused while the store holds anything chronos-git never
writes; otherwise git with no pager, hooks, replace objects, global config or GIT_* of the
caller's; and libgit2 itself never reads the user's ~/.gitconfig for the store."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from support.gitservers import bare


def _gitc(store: Path, *args) -> None:
    subprocess.run(["git", "--git-dir", str(store), *map(str, args)], check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})


@pytest.fixture
def recorded(cli, ws):
    for i in range(3):
        r = cli("write", "a.txt", "--content", f"v{i}\n", "--workspace", ws)
        assert r.rc == 0, r.stdout + r.stderr
    return ws


def test_git_log_of_a_clean_store_is_git_s_own_output_and_exit_code(cli, recorded, store_dir):
    r = cli("git", "log", "--format=%s", "refs/chronos/journal")
    assert r.rc == 0, r.stdout + r.stderr
    assert "journal #0 genesis" in r.stdout and "started write_file" in r.stdout
    assert not r.stdout.lstrip().startswith("{")           # git's text, not a JSON document
    bad = cli("git", "rev-parse", "--verify", "refs/chronos/nothing-here")
    assert bad.rc == 128                                   # git's exit code
    assert cli("git").rc == 1                              # no arguments: a clear error


def test_a_replace_ref_is_refused_and_never_shown(cli, recorded, store_dir):
    repo = pygit2.Repository(str(store_dir))
    head = repo.references["refs/chronos/journal"].target
    forged = repo.create_commit(None, repo[head].author, repo[head].committer, "journal #2 FORGED event",
                                repo[head].tree_id, [repo[head].parents[0].id])
    _gitc(store_dir, "replace", str(head), str(forged))
    stock = subprocess.run(["git", "--git-dir", str(store_dir), "log", "--format=%s", "refs/chronos/journal"],
                           capture_output=True, text=True, env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})
    assert "FORGED" in stock.stdout                        # what plain stock git shows (finding 5)
    r = cli("git", "log", "--format=%s", "refs/chronos/journal")
    assert r.rc == 1 and "FORGED" not in r.stdout
    assert f"refs/replace/{head}" in r.stderr and "refused" in r.stderr, r.stderr
    v = cli("journal", "verify", "--json")
    assert v.rc == 1 and v.json["code"] == "store_tampered"
    assert any(f["what"] == f"refs/replace/{head}" for f in v.json["tampering"])
    h = cli("health", "--json")
    assert h.json["protection"]["state"] == "degraded" and h.json["tampering"][0]["kind"] == "ref"


def test_a_pager_planted_in_the_store_config_is_refused_and_never_runs(cli, recorded, store_dir, tmp_path):
    marker = tmp_path / "pager-ran"
    _gitc(store_dir, "config", "core.pager", f"touch {marker}; cat")
    r = cli("git", "log", "--oneline", "refs/chronos/journal")
    assert r.rc == 1 and "core.pager" in r.stderr, r.stdout + r.stderr
    assert not marker.exists()
    v = cli("journal", "verify")
    assert v.rc == 1 and "core.pager" in v.stdout
    h = cli("health")
    assert h.rc == 0 and "DEGRADED" in h.stdout and "core.pager" in h.stdout
    assert not marker.exists()


def test_journal_status_says_why_the_gate_is_closed_by_a_planted_hook(cli, recorded, store_dir):
    hook = store_dir / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    assert cli("journal", "verify").rc == 1                 # found (as the next start would)
    out = cli("journal", "status")
    assert "recovery gate CLOSED" in out.stdout and "hooks/pre-commit" in out.stdout, out.stdout
    assert "journal verify" in out.stdout                   # and what reopens it
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "closed" and "hooks/pre-commit" in st["gate_reason"]
    assert st["protection"]["state"] == "degraded" and "hooks/pre-commit" in st["protection"]["reason"]
    hook.unlink()
    assert cli("journal", "verify").rc == 0
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "open" and st.get("gate_reason") is None


def test_a_hook_is_reported_and_refused(cli, recorded, store_dir):
    hook = store_dir / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    r = cli("git", "log", "--oneline", "refs/chronos/journal")
    assert r.rc == 1 and "hooks/reference-transaction" in r.stderr
    hook.unlink()
    assert cli("git", "log", "--oneline", "refs/chronos/journal").rc == 0


@pytest.mark.parametrize("argv", [
    ["config", "core.hooksPath", "/tmp/x"], ["config", "--unset", "core.bare"], ["update-ref", "-d", "HEAD"],
    ["reflog", "expire", "--all"], ["gc"], ["fsck", "--lost-found"], ["fsck", "--lost"],
    ["log", "--output=/tmp/x"], ["grep", "-O", "x", "HEAD"],
    # red team (round 6): git 2.39's config takes "list" and "get" as a key or value, and other files
    ["config", "redteam.x", "list"], ["config", "--rename-section", "gc", "list"], ["config", "--worktree", "x.y", "-l"],
    ["config", "--file", "/tmp/chronos-redteam.cfg", "--list"], ["config", "--get", "a.b", "c", "d"],
    ["diff", "-Oorder", "HEAD"], ["diff", "--no-index", "a", "b"], ["blame", "--contents", "x", "HEAD", "--", "a.txt"],
    ["verify-commit", "HEAD"], ["log", "--show-sig", "-1"], ["log", "--format=%G?", "-1"]])
def test_a_git_command_that_writes_is_refused_and_the_store_is_untouched(cli, recorded, store_dir, argv):
    config = (store_dir / "config").read_bytes()
    refs = sorted(str(p) for p in store_dir.rglob("*") if "refs" in p.parts)
    r = cli("git", *argv)
    assert r.rc == 1 and "only reads the store" in r.stderr, r.stdout + r.stderr
    assert (store_dir / "config").read_bytes() == config
    assert sorted(str(p) for p in store_dir.rglob("*") if "refs" in p.parts) == refs
    assert cli("health", "--json").json["protection"]["state"] != "degraded"


def test_no_signature_program_editor_or_pager_of_the_callers_can_run(tmp_path):
    """A signed commit planted in the store made `log --show-signature` run a `gpg` from PATH."""
    from chronos_git.service.storecheck import git_command
    cmd, env = git_command(tmp_path, ["log", "--show-signature"])
    for kv in ("gpg.program=false", "gpg.ssh.program=false", "gpg.x509.program=false", "core.editor=false",
               "core.pager=cat"):
        assert kv in cmd
    assert cmd.index("log") > max(i for i, a in enumerate(cmd) if a == "-c")    # the overrides come first
    with pytest.MonkeyPatch.context() as mp:
        for k in ("EDITOR", "VISUAL", "BROWSER", "PAGER"):
            mp.setenv(k, "touch /tmp/ran")
        _, env = git_command(tmp_path, ["log"])
    assert not {"EDITOR", "VISUAL", "BROWSER", "PAGER"} & set(env)


def test_options_before_the_git_command_are_refused_by_the_service_too():
    from chronos_git.service.storecheck import refuse_writing
    with pytest.raises(ValueError, match="options before the git command"):
        refuse_writing(["-c", "core.hooksPath=/tmp/x", "log"])     # the CLI's parser refuses it first


def test_reading_forms_of_config_and_reflog_pass(cli, recorded, store_dir):
    r = cli("git", "config", "--get", "core.bare")
    assert r.rc == 0 and r.stdout.strip() == "true"
    assert cli("git", "config", "--list").rc == 0
    assert cli("git", "config", "--list", "--show-origin", "--name-only").rc == 0
    r = cli("git", "log", "-1", "--output-indicator-new=>", "--format=%s", "refs/chronos/journal")
    assert r.rc == 0 and "journal #" in r.stdout                   # not taken for --output
    assert cli("git", "reflog", "show", "refs/chronos/journal").rc in (0, 128)    # git's answer, not a refusal


def test_the_callers_git_environment_is_not_honoured(cli, recorded, store_dir, tmp_path):
    marker = tmp_path / "ran"
    evil = {"GIT_PAGER": f"touch {marker}; cat", "PAGER": f"touch {marker}; cat",
            "GIT_EXTERNAL_DIFF": f"sh -c 'touch {marker}'", "GIT_DIR": str(tmp_path / "elsewhere"),
            "GIT_CONFIG_PARAMETERS": f"'core.pager'='touch {marker}'"}
    r = cli("git", "log", "-p", "-2", "refs/chronos/snapshots/" + next((store_dir / "worktrees").iterdir()).name,
            env=evil)
    assert r.rc == 0, r.stderr
    assert "diff --git" in r.stdout and not marker.exists()


@pytest.mark.process
def test_the_users_gitconfig_does_not_reach_the_store(cli, ws, tmp_path, store_dir):
    """libgit2 reads no ~/.gitconfig for the store: neither its url rewriting (a push would go
    to a fake remote), nor an [include], nor a core.excludesFile (a narrowing of snapshots)."""
    home = tmp_path / "home"
    home.mkdir()
    real, fake = bare(tmp_path / "real.git"), bare(tmp_path / "fake.git")
    (home / "ignore").write_text("a.txt\n")
    (home / "more").write_text(f'[url "{fake}"]\n\tpushInsteadOf = {real}\n')
    (home / ".gitconfig").write_text(f'[url "{fake}"]\n\tinsteadOf = {real}\n'
                                     f"[core]\n\texcludesFile = {home / 'ignore'}\n"
                                     f"[include]\n\tpath = {home / 'more'}\n")
    env = {"HOME": str(home), "CHRONOS_GIT_HOST_ID": "h1"}
    assert cli("snapshot", "--workspace", ws, env=env).rc == 0
    assert cli("remote", "add", "r", str(real), env=env).rc == 0
    p = cli("push", "r", "--json", env=env)
    assert p.rc == 0, p.stdout + p.stderr
    refs = subprocess.run(["git", "--git-dir", str(real), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, text=True).stdout.split()
    assert "refs/chronos/hosts/h1/journal" in refs
    assert subprocess.run(["git", "--git-dir", str(fake), "for-each-ref"], capture_output=True,
                          text=True).stdout == ""
    repo = pygit2.Repository(str(store_dir))
    (wt,) = (store_dir / "worktrees").iterdir()
    tree = repo[repo.references[f"refs/chronos/snapshots/{wt.name}"].target].tree
    assert "a.txt" in tree                                 # not narrowed by the global excludes file
    h = cli("health", "--json", env=env)
    assert h.json["protection"]["state"] == "on" and "tampering" not in h.json
